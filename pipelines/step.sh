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
# the advantage and update flags of both branches (one list: the sharded branch once lost --up-dual-clip)
ADV_FLAGS=(--w-up "$W_UP" --w-down "$W_DOWN")
UPD_FLAGS=(--up-clip-low "$CLIP_LOW" --up-clip-high "$CLIP_HIGH_UP" --up-dual-clip "${UP_DUAL_CLIP:-0}"
  --down-clip-low "$CLIP_LOW" --down-clip-high "$CLIP_HIGH")
if sharded; then  # RANKS / GPUS / NODES > 1: sample and splice sharded (common.sh)
  shard_segments "$TMPD/spliced.msgpack.zst" || exit 1
  timed reward stage_reward <"$TMPD/spliced.msgpack.zst" 2>"$L/reward.err" \
    | tee "$TMPD/rollouts.msgpack.zst" 2>"$L/tee.err" \
    | timed advantage stage_advantage skpo "${ADV_FLAGS[@]}" 2>"$L/advantage.err" \
    | timed update stage_update "${UPD_FLAGS[@]}" 2>"$L/update.err"
  check_pipe reward tee advantage update -- "${PIPESTATUS[@]}" || exit 1
  rm -f "$TMPD/spliced.msgpack.zst"
  commit_step
  exit 0
fi
timed_head sample stage_sample_segment 2>"$L/sample.err" \
  | timed splice stage_splice 2>"$L/splice.err" \
  | timed reward stage_reward 2>"$L/reward.err" \
  | tee "$TMPD/rollouts.msgpack.zst" 2>"$L/tee.err" \
  | timed advantage stage_advantage skpo "${ADV_FLAGS[@]}" 2>"$L/advantage.err" \
  | timed update stage_update "${UPD_FLAGS[@]}" 2>"$L/update.err"
check_pipe sample splice reward tee advantage update -- "${PIPESTATUS[@]}" || exit 1
commit_step
