#!/usr/bin/env bash
# pipelines/spo.sh RUN_DIR - one SPO step from the same tools:
#   skpo-sample --n 1 (PROMPTS*G prompts) | $REWARD_CMD | tee | skpo-advantage --mode spo | skpo-update
# One response per prompt with the persistent per-prompt value tracker as the
# baseline and batch-normalized advantages; PROMPTS*G prompts so the sample
# budget equals GRPO's and SKPO's (the paper: 1024 prompts x 1 response), drawn
# by the tracker's prioritized sampling, as SPO does. Sharded over RANKS / GPUS /
# NODES as the other steps (common.sh's sampled).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"  # `sh demo.sh` (make) re-runs under bash
. "$(dirname "$0")/common.sh"
[ $# = 1 ] || { echo "usage: pipelines/spo.sh RUN_DIR" >&2; exit 2; }
begin_step "$1"
L=$TMPD/logs
sampled stage_sample_n_prio 1 "$((PROMPTS * G))" 2>"$L/sample.err" \
  | timed reward stage_reward 2>"$L/reward.err" \
  | tee "$TMPD/rollouts.msgpack.zst" 2>"$L/tee.err" \
  | timed advantage stage_advantage spo 2>"$L/advantage.err" \
  | timed update stage_update --full-dual-clip "$FULL_DUAL_CLIP" --full-clip-low "$CLIP_LOW" --full-clip-high "$CLIP_HIGH" --minibatch "$((MINIBATCH * G))" 2>"$L/update.err"
check_pipe sample reward tee advantage update -- "${PIPESTATUS[@]}" || exit 1
commit_step
