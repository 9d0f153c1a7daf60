#!/usr/bin/env bash
# pipelines/dapo.sh RUN_DIR - one DAPO step from the same tools:
#   (skpo-sample --n G | $REWARD_CMD --overlong) per round, until PROMPTS groups
#   are informative | keep_groups | tee | skpo-advantage --mode dapo | skpo-update
# GRPO plus the soft overlong penalty (window OVERLONG_CACHE before MAX_TOKENS),
# dynamic sampling (groups whose G rewards are all equal carry no signal: more
# prompts are drawn, PROMPTS at a time, until PROMPTS groups have mixed rewards
# or DAPO_MAX_ROUNDS rounds ran, as verl's max_num_gen_batches; the informative
# groups beyond PROMPTS are dropped, the all-equal ones go on for skpo-advantage
# to count and drop) and Clip-Higher. Each round's sampler is sharded over RANKS /
# GPUS / NODES as the other steps (common.sh's sampled).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"  # `sh demo.sh` (make) re-runs under bash
. "$(dirname "$0")/common.sh"
[ $# = 1 ] || { echo "usage: pipelines/dapo.sh RUN_DIR" >&2; exit 2; }
begin_step "$1"
L=$TMPD/logs
POOL=$TMPD/pool.msgpack.zst
: >"$POOL"
round=0 have=0
while [ "$round" -lt "$DAPO_MAX_ROUNDS" ] && [ "$have" -lt "$PROMPTS" ]; do
  draw_prompts "$PROMPTS" "$round"
  [ "$(skpo-cat --count "$TMPD/prompts.msgpack.zst")" -gt 1 ] || break # only its meta: data used up
  sampled stage_sample_n "$G" 2>>"$L/sample.err" \
    | timed reward stage_reward --overlong "$MAX_TOKENS:$OVERLONG_CACHE" 2>>"$L/reward.err" >>"$POOL"
  check_pipe sample reward -- "${PIPESTATUS[@]}" || exit 1
  round=$((round + 1))
  have=$(informative_groups "$POOL") || die "step $STEP: cannot read the sampled groups"
done
[ "$round" -gt 1 ] && echo "skpo-pipeline: step $STEP: dynamic sampling drew $round rounds for $have informative groups (want $PROMPTS)" >>"$L/sample.err"
keep_groups "$PROMPTS" <"$POOL" 2>"$L/keep.err" \
  | tee "$TMPD/rollouts.msgpack.zst" 2>"$L/tee.err" \
  | timed advantage stage_advantage dapo 2>"$L/advantage.err" \
  | timed update stage_update --full-dual-clip "$FULL_DUAL_CLIP" --full-clip-low "$CLIP_LOW" --full-clip-high "$CLIP_HIGH" 2>"$L/update.err"
check_pipe keep tee advantage update -- "${PIPESTATUS[@]}" || exit 1
rm -f "$POOL"
commit_step
