#!/usr/bin/env bash
# pipelines/grpo.sh RUN_DIR - one GRPO step from the same tools:
#   skpo-sample --n G | tee rollouts | $REWARD_CMD | skpo-advantage --mode grpo | skpo-update
# G whole responses per prompt, group-normalized advantages, clipped update.
. "$(dirname "$0")/common.sh"
[ $# = 1 ] || { echo "usage: pipelines/grpo.sh RUN_DIR" >&2; exit 2; }
begin_step "$1"
L=$TMPD/logs
stage_sample_n "$G" "$PROMPTS" 2>"$L/sample.err" \
  | tee "$TMPD/rollouts.msgpack.zst" 2>"$L/tee.err" \
  | stage_reward 2>"$L/reward.err" \
  | stage_advantage grpo 2>"$L/advantage.err" \
  | stage_update 2>"$L/update.err"
check_pipe sample tee reward advantage update -- "${PIPESTATUS[@]}" || exit 1
commit_step
