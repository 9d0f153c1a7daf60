#!/usr/bin/env bash
# pipelines/dapo.sh RUN_DIR - one DAPO step from the same tools:
#   skpo-sample --n G | $REWARD_CMD | tee --overlong | skpo-advantage --mode grpo --dynamic | skpo-update
# GRPO plus the soft overlong penalty (window OVERLONG_CACHE before MAX_TOKENS),
# dynamic sampling (groups whose G rewards are all equal carry no signal and are
# dropped; the sampler over-draws prompts to make up for them) and Clip-Higher.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"  # `sh demo.sh` (make) re-runs under bash
. "$(dirname "$0")/common.sh"
[ $# = 1 ] || { echo "usage: pipelines/dapo.sh RUN_DIR" >&2; exit 2; }
begin_step "$1"
L=$TMPD/logs
draw_prompts "$PROMPTS"
stage_sample_n "$G" 2>"$L/sample.err" \
  | stage_reward --overlong "$MAX_TOKENS:$OVERLONG_CACHE" 2>"$L/reward.err" \
  | tee "$TMPD/rollouts.msgpack.zst" 2>"$L/tee.err" \
  | stage_advantage dapo 2>"$L/advantage.err" \
  | stage_update --full-clip-low "$CLIP_LOW" --full-clip-high "$CLIP_HIGH" 2>"$L/update.err"
check_pipe sample reward tee advantage update -- "${PIPESTATUS[@]}" || exit 1
commit_step
