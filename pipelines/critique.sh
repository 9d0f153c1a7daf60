#!/usr/bin/env bash
# pipelines/critique.sh RUN_DIR - one Critique-GRPO step, self-critique variant
# (Zhang et al. 2025, arXiv 2506.03106), from the same tools, in two generation batches:
#   draw PROMPTS | skpo-sample --n G-1 | $REWARD_CMD > direct           (7 direct responses)
#   skpo-critique critique < direct | skpo-sample --n 1                 (the policy critiques the best one)
#     | skpo-critique refine --direct direct | skpo-sample --n 1        (and refines it)
#     | skpo-critique attach --direct direct | $REWARD_CMD > refined     (the 8th member of each group)
#   cat direct refined | tee rollouts | skpo-advantage --mode drgrpo --group G
#     | skpo-update (PPO form, no clip, on the direct responses; -A pi/(pi+gamma) on the refinements)
# Settings and their sources: docs/baselines.md (Critique-GRPO).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"  # `sh demo.sh` (make) re-runs under bash
. "$(dirname "$0")/common.sh"
[ $# = 1 ] || { echo "usage: pipelines/critique.sh RUN_DIR" >&2; exit 2; }
begin_step "$1"
[ "$G" -ge 2 ] || die "critique: G=$G leaves no direct response beside the refinement (G >= 2)"
L=$TMPD/logs
# The three generation calls draw distinct random streams: the critique and
# refinement prompts carry their own pids (<pid>#critique, <pid>#refine), from
# which the sampler derives every sequence's seed.
sample_one() {   # the critique or the refinement: one response per prompt record on stdin
  skpo-sample --model "$CK" --prompts - --n 1 --temperature "$TEMPERATURE" --top-p "$TOP_P" \
    --max-tokens "$MAX_TOKENS" --seed "$(seed_of_step)" --step "$STEP" ${THREADS:+--threads "$THREADS"}
}
crit_flags=(--tokenizer "$CK" --template "${CRITIQUE_TEMPLATE:-plain}")
[ -n "${CRITIQUE_WITH_ANSWER:-}" ] && crit_flags+=(--with-answer)
ENT_COEF=$CRITIQUE_ENT_COEF   # the authors' entropy bonus (stage_update passes ENT_COEF)
draw_prompts "$PROMPTS"
timed sample stage_sample_n "$((G - 1))" 2>"$L/sample.err" \
  | timed reward stage_reward 2>"$L/reward.err" >"$TMPD/direct.msgpack.zst"
check_pipe sample reward -- "${PIPESTATUS[@]}" || exit 1
timed critique skpo-critique critique "${crit_flags[@]}" "$TMPD/direct.msgpack.zst" 2>"$L/critique.err" \
  | timed sample_critique sample_one 2>"$L/sample_critique.err" \
  | timed refine skpo-critique refine --direct "$TMPD/direct.msgpack.zst" "${crit_flags[@]}" 2>"$L/refine.err" \
  | timed sample_refine sample_one 2>"$L/sample_refine.err" \
  | timed attach skpo-critique attach --direct "$TMPD/direct.msgpack.zst" 2>"$L/attach.err" \
  | timed reward_refine stage_reward 2>"$L/reward_refine.err" >"$TMPD/refined.msgpack.zst"
check_pipe critique sample_critique refine sample_refine attach reward_refine -- "${PIPESTATUS[@]}" || exit 1
cat "$TMPD/direct.msgpack.zst" "$TMPD/refined.msgpack.zst" \
  | tee "$TMPD/rollouts.msgpack.zst" 2>"$L/tee.err" \
  | timed advantage stage_advantage drgrpo 2>"$L/advantage.err" \
  | timed update stage_update --full-loss ppo --full-clip-low "$CRITIQUE_CLIP_LOW" --full-clip-high "$CRITIQUE_CLIP_HIGH" \
      --full-dual-clip 0 --full-loss-agg seq-mean-token-sum-norm --loss-norm "${CRITIQUE_NORM:-$MAX_TOKENS}" \
      --refine-gamma "$CRITIQUE_GAMMA" 2>"$L/update.err"
check_pipe cat tee advantage update -- "${PIPESTATUS[@]}" || exit 1
rm -f "$TMPD/direct.msgpack.zst" "$TMPD/refined.msgpack.zst"
commit_step
