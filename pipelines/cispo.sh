#!/usr/bin/env bash
# pipelines/cispo.sh RUN_DIR - one CISPO step (MiniMax-M1, arXiv 2506.13585):
# GRPO advantages; loss -sg(clip(r, 1 - eps_low, 1 + eps_high)) A log pi per token,
# token-mean over the batch; no lower bound on the IS weight (eps_low "large":
# 0.999999) and the upper bound CISPO_CLIP_HIGH; no KL. Sources: docs/baselines.md.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"  # `sh demo.sh` (make) re-runs under bash
. "$(dirname "$0")/common.sh"
[ $# = 1 ] || { echo "usage: pipelines/cispo.sh RUN_DIR" >&2; exit 2; }
begin_step "$1"
full_step grpo --full-loss cispo --full-clip-low 0.999999 --full-clip-high "$CISPO_CLIP_HIGH" \
  --full-loss-agg token-mean
