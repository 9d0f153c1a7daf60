#!/usr/bin/env bash
# pipelines/spo.sh RUN_DIR - one SPO step from the same tools:
#   skpo-sample --n 1 (PROMPTS*G prompts) | tee | $REWARD_CMD | skpo-advantage --mode spo | skpo-update
# One response per prompt with the persistent per-prompt value tracker as the
# baseline and batch-normalized advantages; PROMPTS*G prompts so the sample
# budget equals GRPO's and SKPO's (the paper: 1024 prompts x 1 response).
. "$(dirname "$0")/common.sh"
[ $# = 1 ] || { echo "usage: pipelines/spo.sh RUN_DIR" >&2; exit 2; }
begin_step "$1"
L=$TMPD/logs
stage_sample_n 1 "$((PROMPTS * G))" 2>"$L/sample.err" \
  | tee "$TMPD/rollouts.msgpack.zst" 2>"$L/tee.err" \
  | stage_reward 2>"$L/reward.err" \
  | stage_advantage spo 2>"$L/advantage.err" \
  | stage_update --minibatch "$((MINIBATCH * G))" 2>"$L/update.err"
check_pipe sample tee reward advantage update -- "${PIPESTATUS[@]}" || exit 1
commit_step
