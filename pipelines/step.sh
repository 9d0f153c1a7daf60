#!/usr/bin/env bash
# pipelines/step.sh RUN_DIR - one SKPO training step as a pipeline:
#
#   skpo-sample --segment | skpo-splice | $REWARD_CMD | tee rollouts | skpo-advantage | skpo-update
#
# upstream segments (median-NLL of G candidates cut at t_q), G skip-connected
# downstream rollouts each, rewards, GRPO (downstream) + SPO-tracker (upstream)
# advantages, and the clipped update that writes the next checkpoint. The
# rollouts are teed after the reward so `skpo-cat --view` shows what was rewarded. Reads the
# last committed step of RUN_DIR and commits the next one only if every stage
# succeeded (see common.sh); on failure it names the stage and exits 1.
# With RANKS or GPUS > 1 (or NODES > 1) sample | splice run as that many shards in
# parallel (shard_segments) and the rest of the pipeline reads their concatenation.
# Swap the reward stage with REWARD_CMD (config or environment), e.g.
#   REWARD_CMD='skpo-reward --verifier dapo' pipelines/step.sh run/
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"  # `sh demo.sh` (make) re-runs under bash
. "$(dirname "$0")/common.sh"
[ $# = 1 ] || { echo "usage: pipelines/step.sh RUN_DIR" >&2; exit 2; }
begin_step "$1"
L=$TMPD/logs
# the advantage and update flags (docs/algorithm.md 4.5: the paper's clip per phase)
ADV_FLAGS=(--w-up "$W_UP" --w-down "$W_DOWN")
UPD_FLAGS=(--up-clip-low "$CLIP_LOW" --up-clip-high "$CLIP_HIGH_UP" --up-dual-clip "$UP_DUAL_CLIP"
  --down-clip-low "$CLIP_LOW" --down-clip-high "$CLIP_HIGH")
# The step's tail, written once for both branches (the sharded one once lost
# --up-dual-clip): reward | tee rollouts | advantage | update on stdin. It runs
# as the last element of its pipeline in this shell (lastpipe), so its stages'
# statuses come back in TAIL_STATUS for check_pipe.
shopt -s lastpipe
step_tail() {
  timed reward stage_reward 2>"$L/reward.err" \
    | tee "$TMPD/rollouts.msgpack.zst" 2>"$L/tee.err" \
    | timed advantage stage_advantage skpo "${ADV_FLAGS[@]}" 2>"$L/advantage.err" \
    | timed update stage_update "${UPD_FLAGS[@]}" 2>"$L/update.err"
  TAIL_STATUS=("${PIPESTATUS[@]}")
}
if sharded; then  # RANKS / GPUS / NODES > 1: sample and splice sharded (common.sh)
  shard_segments "$TMPD/spliced.msgpack.zst" || exit 1
  step_tail <"$TMPD/spliced.msgpack.zst"
  check_pipe reward tee advantage update -- "${TAIL_STATUS[@]}" || exit 1
  rm -f "$TMPD/spliced.msgpack.zst"
else
  timed_head sample stage_sample_segment 2>"$L/sample.err" \
    | timed splice stage_splice 2>"$L/splice.err" \
    | step_tail
  HEAD_STATUS=("${PIPESTATUS[@]:0:2}")
  check_pipe sample splice reward tee advantage update -- "${HEAD_STATUS[@]}" "${TAIL_STATUS[@]}" || exit 1
fi
commit_step
