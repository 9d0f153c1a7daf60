#!/usr/bin/env bash
# pipelines/sapo.sh RUN_DIR - one SAPO step (Gao et al. 2025, arXiv 2511.20347):
# GRPO advantages; instead of a hard clip every token's ratio goes through the soft
# gate (4/tau) sigmoid(tau (r - 1)) with tau = SAPO_TAU_POS for A > 0 and the
# larger SAPO_TAU_NEG for A < 0 (1.0 / 1.05); sequence-mean of token means, as the
# paper's objective; no KL. skpo-update --full-loss sapo. Sources: docs/baselines.md.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"  # `sh demo.sh` (make) re-runs under bash
. "$(dirname "$0")/common.sh"
[ $# = 1 ] || { echo "usage: pipelines/sapo.sh RUN_DIR" >&2; exit 2; }
begin_step "$1"
full_step grpo --full-loss sapo --sapo-tau-pos "$SAPO_TAU_POS" --sapo-tau-neg "$SAPO_TAU_NEG" \
  --full-loss-agg seq-mean-token-mean
