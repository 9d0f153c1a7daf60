#!/usr/bin/env bash
# pipelines/gspo.sh RUN_DIR - one GSPO step (Zheng et al. 2025, arXiv 2507.18071):
# GRPO advantages with the sequence-level, length-normalised importance ratio
# s = (pi / pi_old)^(1/|y|) clipped as a whole to [1 - GSPO_CLIP_LOW, 1 + GSPO_CLIP_HIGH]
# (3e-4 / 4e-4, the paper's section 5.1), sequence-mean aggregation, no KL.
# skpo-update --full-loss gspo (core/loss.c). Sources: docs/baselines.md.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"  # `sh demo.sh` (make) re-runs under bash
. "$(dirname "$0")/common.sh"
[ $# = 1 ] || { echo "usage: pipelines/gspo.sh RUN_DIR" >&2; exit 2; }
begin_step "$1"
full_step grpo --full-loss gspo --full-clip-low "$GSPO_CLIP_LOW" --full-clip-high "$GSPO_CLIP_HIGH" \
  --full-loss-agg seq-mean-token-mean
