#!/usr/bin/env bash
# pipelines/drgrpo.sh RUN_DIR - one Dr. GRPO step (Liu et al. 2025, "Understanding
# R1-Zero-Like Training"): GRPO without the two length/difficulty biases:
#   advantages A = R - mean(group) (no std division: skpo-advantage --mode drgrpo),
#   loss = token sum of each response over a constant (the generation budget
#   MAX_TOKENS, or DRGRPO_NORM), averaged over responses (seq-mean-token-sum-norm).
# PPO clip [1 - CLIP_LOW, 1 + GRPO_CLIP_HIGH] as GRPO. Sources: docs/baselines.md.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"  # `sh demo.sh` (make) re-runs under bash
. "$(dirname "$0")/common.sh"
[ $# = 1 ] || { echo "usage: pipelines/drgrpo.sh RUN_DIR" >&2; exit 2; }
begin_step "$1"
full_step drgrpo --full-clip-low "$CLIP_LOW" --full-clip-high "$GRPO_CLIP_HIGH" \
  --full-loss-agg seq-mean-token-sum-norm --loss-norm "${DRGRPO_NORM:-$MAX_TOKENS}"
