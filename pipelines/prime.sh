#!/usr/bin/env bash
# pipelines/prime.sh RUN_DIR - one PRIME step (Cui et al. 2025, "Process Reinforcement
# through Implicit Rewards", arXiv 2502.01456; the authors' code: verl recipe/prime):
#
#   draw PROMPTS x PRIME_OVERSAMPLE prompts | skpo-sample --n PRIME_K | $REWARD_CMD
#     | keep PROMPTS prompts, those with accuracy in [PRIME_ACC_LOW, PRIME_ACC_HIGH] first
#     | skpo-score --model ckpt/0 --field ref_logp
#     | tee >(skpo-update the implicit PRM: --full-loss prm-ce, prm/N-1 -> prm/N)
#     | skpo-score --model prm/N --field prm_logp            (the PRM updated first: "before")
#     | tee rollouts | skpo-advantage --mode prime (adv_tok) | skpo-update the policy
#
# The implicit PRM pi_phi is a second checkpoint in the run folder, RUN/prm/N (prm/0 is
# the initial model ckpt/0, which is also the frozen reference pi_ref). It is trained
# every step by a one-shot skpo-update with the cross-entropy of
# sigmoid(beta sum_t log pi_phi/pi_ref) against the outcome `correct`, at PRM_LR, its
# metrics in RUN/prm-metrics/N.msgpack.zst. The process rewards of the updated PRM,
# r_t = beta log pi_phi(y_t)/pi_ref(y_t), and the outcomes are combined by
# skpo-advantage --mode prime into per-token advantages (core/rl/advantage.h); the
# policy takes the PPO clip with them. Sources of every setting: docs/baselines.md.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"  # `sh demo.sh` (make) re-runs under bash
. "$(dirname "$0")/common.sh"
[ $# = 1 ] || { echo "usage: pipelines/prime.sh RUN_DIR" >&2; exit 2; }
begin_step "$1"
L=$TMPD/logs
PRM_IN=$RUN/prm/$((STEP - 1))
[ "$STEP" = 1 ] && PRM_IN=$RUN/ckpt/0
[ -f "$PRM_IN/config.json" ] || die "step $STEP: the implicit PRM of step $((STEP - 1)) ('$PRM_IN') is missing"
PRM_OUT=$TMPD/prm

# prime_filter N LOW HIGH: stdin to stdout keeping the full records of N prompts: first
# those whose mean `correct` lies in [LOW, HIGH] (draw order), then the others (verl's
# filter_and_downsample: prompts passing the filter are preferred, the batch keeps its size;
# core/rl/groups.h).
prime_filter() { skpo-cut --keep-accuracy "$1" --accuracy "$2:$3"; }
# stage_prm_update: the implicit PRM's step on the scored records (stdin): sequence
# cross-entropy (prm-ce, the mean over responses), no old log-probs or mismatch weights.
stage_prm_update() {
  launch skpo-update --model "$PRM_IN" --out "$PRM_OUT" --metrics "$TMPD/prm-metrics.msgpack.zst" --step "$STEP" \
    --full-loss prm-ce --full-loss-agg seq-mean-token-mean --prm-beta "$PRIME_BETA" \
    --old-logp rollout --mismatch off --minibatch "$MINIBATCH" --lr "$PRM_LR" --warmup-steps 0 \
    --weight-decay 0 --max-grad-norm "$GRAD_CLIP" --beta1 "$BETA1" --beta2 "$BETA2" --adam-eps "$ADAM_EPS" \
    --temperature "$TEMPERATURE" $([ "$PRM_IN" = "$RUN/ckpt/0" ] && echo --fresh-optimizer) ${THREADS:+--threads "$THREADS"}
}

draw_prompts $((PROMPTS * PRIME_OVERSAMPLE))
timed sample stage_sample_n "$PRIME_K" 2>"$L/sample.err" \
  | timed reward stage_reward 2>"$L/reward.err" \
  | timed filter prime_filter "$PROMPTS" "$PRIME_ACC_LOW" "$PRIME_ACC_HIGH" 2>"$L/filter.err" \
  | timed ref skpo-score --model "$RUN/ckpt/0" --field ref_logp --temperature "$TEMPERATURE" ${THREADS:+--threads "$THREADS"} \
      2>"$L/ref.err" >"$TMPD/scored.msgpack.zst"
check_pipe sample reward filter ref -- "${PIPESTATUS[@]}" || exit 1
timed prm stage_prm_update <"$TMPD/scored.msgpack.zst" 2>"$L/prm.err" || check_pipe prm -- 1 || exit 1
G=$PRIME_K   # the advantage's groups are the PRIME_K responses of a prompt
timed score skpo-score --model "$PRM_OUT" --field prm_logp --temperature "$TEMPERATURE" ${THREADS:+--threads "$THREADS"} \
    <"$TMPD/scored.msgpack.zst" 2>"$L/score.err" \
  | tee "$TMPD/rollouts.msgpack.zst" 2>"$L/tee.err" \
  | timed advantage stage_advantage prime --prime-beta "$PRIME_BETA" --prime-coef-process "$PRIME_COEF_PROCESS" \
      --prime-coef-outcome "$PRIME_COEF_OUTCOME" --prime-norm "$PRIME_NORM" 2>"$L/advantage.err" \
  | timed update stage_update --full-dual-clip "$FULL_DUAL_CLIP" --full-clip-low "$CLIP_LOW" \
      --full-clip-high "$GRPO_CLIP_HIGH" 2>"$L/update.err"
check_pipe score tee advantage update -- "${PIPESTATUS[@]}" || exit 1
rm -f "$TMPD/scored.msgpack.zst"
# the PRM goes into place first: a step that fails to commit after this is redone and
# rewrites prm/STEP from prm/STEP-1
rm -rf "$RUN/prm/$STEP" && commit_file "$PRM_OUT" "$RUN/prm/$STEP" &&
  commit_file "$TMPD/prm-metrics.msgpack.zst" "$RUN/prm-metrics/$STEP.msgpack.zst" || die "step $STEP: cannot commit the PRM"
commit_step
