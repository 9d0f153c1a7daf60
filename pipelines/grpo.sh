#!/usr/bin/env bash
# pipelines/grpo.sh RUN_DIR - one GRPO step from the same tools:
#   skpo-sample --n G | $REWARD_CMD | tee rollouts | skpo-advantage --mode grpo | skpo-update
# G whole responses per prompt, group-normalized advantages, clipped update.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"  # `sh demo.sh` (make) re-runs under bash
. "$(dirname "$0")/common.sh"
[ $# = 1 ] || { echo "usage: pipelines/grpo.sh RUN_DIR" >&2; exit 2; }
begin_step "$1"
L=$TMPD/logs
draw_prompts "$PROMPTS"
stage_sample_n "$G" 2>"$L/sample.err" \
  | stage_reward 2>"$L/reward.err" \
  | tee "$TMPD/rollouts.msgpack.zst" 2>"$L/tee.err" \
  | stage_advantage grpo 2>"$L/advantage.err" \
  | stage_update --full-dual-clip "${FULL_DUAL_CLIP:-3}" --full-clip-low "$CLIP_LOW" --full-clip-high "$GRPO_CLIP_HIGH" 2>"$L/update.err"
check_pipe sample reward tee advantage update -- "${PIPESTATUS[@]}" || exit 1
commit_step
