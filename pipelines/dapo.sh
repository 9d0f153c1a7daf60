#!/usr/bin/env bash
# pipelines/dapo.sh RUN_DIR - one DAPO step from the same tools:
#   skpo-sample --n G | tee | $REWARD_CMD --overlong | skpo-advantage --mode grpo --dynamic | skpo-update
# GRPO plus the soft overlong penalty (window OVERLONG_CACHE before MAX_TOKENS),
# dynamic sampling (groups whose G rewards are all equal carry no signal and are
# dropped; the sampler over-draws prompts to make up for them) and Clip-Higher.
. "$(dirname "$0")/common.sh"
[ $# = 1 ] || { echo "usage: pipelines/dapo.sh RUN_DIR" >&2; exit 2; }
begin_step "$1"
L=$TMPD/logs
stage_sample_n "$G" "$PROMPTS" 2>"$L/sample.err" \
  | tee "$TMPD/rollouts.msgpack.zst" 2>"$L/tee.err" \
  | stage_reward --overlong-max "$MAX_TOKENS" --overlong-cache "$OVERLONG_CACHE" 2>"$L/reward.err" \
  | stage_advantage grpo --drop-uniform 2>"$L/advantage.err" \
  | stage_update 2>"$L/update.err"
check_pipe sample tee reward advantage update -- "${PIPESTATUS[@]}" || exit 1
commit_step
