# pipelines/lib/stages.sh - the stage commands (sourced by common.sh): the only place
# tool flags appear, the prompts a step draws, the group filters and the GRPO-family
# step. Each reads the variables of the config plus: CK (checkpoint dir), OUT (next
# checkpoint dir), ST (tracker state folder of this step), TMPD (the step's work
# folder), STEP.

seed_of_step() { echo $((SEED * 100003 + STEP)); }

# The ablation keys: CUT (adaptive|fixed), SELECT (median|extreme) and REWARD_UP
# (mc|self: self makes the sampler finish the candidates and write the kept one's
# whole generation, which the reward stage scores and skpo-advantage uses as R_I).
stage_sample_segment() {
  ${STAGE_EXEC:-} skpo-sample --model "$CK" --prompts "$TRAIN_DATA" --state "$ST" --segment --group "$G" \
    --cut "$CUT" --select "$SELECT" $([ "$REWARD_UP" = self ] && echo --self) \
    --prompts-per-step "$PROMPTS" --temperature "$TEMPERATURE" --top-p "$TOP_P" \
    --max-tokens "$MAX_TOKENS" --seed "$(seed_of_step)" --step "$STEP" ${THREADS:+--threads "$THREADS"} \
    ${RHO_RESCORE:+--rescore} ${SHARE_WEIGHTS:+--export-weights "$(weights_ipc)"} "$@"
}

# weights_ipc: with SHARE_WEIGHTS, the handle file through which this shard's
# sampler lends its device weights to its splice (one weights load per GPU).
weights_ipc() { echo "$TMPD/weights.${SHARD_I:-0}.ipc"; }

# stage_sample_n K [FLAGS]: K whole responses for every prompt of the step's draw (draw_prompts).
stage_sample_n() {
  skpo-sample --model "$CK" --prompts "$TMPD/prompts.msgpack.zst" --n "$1" \
    --temperature "$TEMPERATURE" --top-p "$TOP_P" --max-tokens "$MAX_TOKENS" --seed "$(seed_of_step)" \
    --step "$STEP" ${THREADS:+--threads "$THREADS"} "${@:2}"
}

stage_splice() {
  skpo-splice --model "$CK" --group "$G" --layout "$LAYOUT" --temperature "$TEMPERATURE" --top-p "$TOP_P" \
    --max-tokens "$MAX_TOKENS" --seed "$(seed_of_step)" ${THREADS:+--threads "$THREADS"} ${SHARE_WEIGHTS:+--import-weights "$(weights_ipc)"}
}

# stage_reward [flags]: the flags (DAPO's --overlong) go to skpo-reward only; a
# swapped-in REWARD_CMD runs as given (it owns its shaping) and a note says so.
stage_reward() {
  case "$REWARD_CMD" in
    skpo-reward|skpo-reward\ *) eval "$REWARD_CMD \"\$@\"";;
    *) [ $# -gt 0 ] && echo "skpo-pipeline: note: custom REWARD_CMD, not adding: $*" >&2; eval "$REWARD_CMD";;
  esac
}

# stage_advantage MODE [flags]: advantages + tracker update (into $ST) + metrics.
# L_q observes the mean response length, capped at MAX_TOKENS; under LAYOUT=continual
# the downstream response continues s, so |s| counts too (docs/algorithm.md Q6).
stage_advantage() {
  local mode=$1; shift
  skpo-advantage --mode "$mode" --state "$ST" --step "$STEP" --group "$G" --max-tokens "$MAX_TOKENS" \
    $([ "$mode" = skpo ] && echo --reward-up "$REWARD_UP" --layout "$LAYOUT" --up-warmup "$UP_WARMUP") \
    ${RHO_RESCORE:+--rescored} \
    --rho-min "$RHO_MIN" --rho-max "$RHO_MAX" --tau "$TAU_HALF" --prio-eps "$PRIO_EPS" --lq-init "$LQ_INIT" \
    --max-reward-failures "$MAX_REWARD_FAILURES" \
    --metrics "$TMPD/metrics.msgpack.zst" "$@"
}

# stage_update [extra flags]: the step's update. With an update server running
# (train.sh with SERVE, SKPO_SERVE_DIR set) the same command line goes to it
# (serve_step) and only durable steps write optimizer state; otherwise a
# one-shot skpo-update, under the MPI launcher when there are several ranks.
stage_update() {
  local args=(--model "$CK" --out "$OUT" --metrics "$TMPD/metrics.msgpack.zst" --step "$STEP"
    --minibatch "$MINIBATCH" --lr "$LR" --warmup-steps "$WARMUP" --weight-decay "$WEIGHT_DECAY"
    --beta1 "$BETA1" --beta2 "$BETA2" --adam-eps "$ADAM_EPS" --max-grad-norm "$GRAD_CLIP" --epochs "$EPOCHS"
    --temperature "$TEMPERATURE" --kl-coef "$KL_BETA" --entropy-coef "$ENT_COEF"
    --old-logp "$OLD_LOGP" --mismatch "$MISMATCH")
  [ -n "${MISMATCH_CAP:-}" ] && args+=(--mismatch-cap "$MISMATCH_CAP")
  [ -n "${MISMATCH_LOW:-}" ] && args+=(--mismatch-low "$MISMATCH_LOW")
  [ -n "${MISMATCH_HIGH:-}" ] && args+=(--mismatch-high "$MISMATCH_HIGH")
  [ "$CK" = "$RUN/ckpt/0" ] && args+=(--fresh-optimizer)
  case "$PACK" in 1) ;; 0) args+=(--no-pack);; *) die "PACK='$PACK' is not 1 (pack shared prefixes) or 0 (--no-pack)";; esac
  [ -n "${LORA_RANK:-}" ] && args+=(--lora-rank "$LORA_RANK" --lora-alpha "$LORA_ALPHA" --lora-targets "$LORA_TARGETS" --lora-seed "$SEED")
  if [ -n "${SKPO_SERVE_DIR:-}" ]; then
    durable_due "$STEP" || args+=(--weights-only)
    serve_step "${args[@]}" "$@"
  else
    launch skpo-update "${args[@]}" ${THREADS:+--threads "$THREADS"} "$@"
  fi
}

# draw_prompts B [ROUND]: the step's B prompts for the --n pipelines into
# $TMPD/prompts.msgpack.zst, uniformly without replacement from TRAIN_DATA: one
# shuffle per step seeded by (SEED, STEP) (skpo-cat --shuffle: the project's seeded
# generator; `shuf --random-source=<(yes SEED)` drew nearly the same prompts at every
# step), of which ROUND r (default 0) takes slice r, so DAPO's extra rounds never
# repeat a prompt within a step. Empty when the data is used up.
draw_prompts() {
  local r=${2:-0}
  skpo-cat --where kind=prompt --shuffle "$(seed_of_step)" "$TRAIN_DATA" | awk -v a="$((r * $1))" -v b="$(((r + 1) * $1))" 'NR > a && NR <= b' \
    | skpo-cat --pack >"$TMPD/prompts.msgpack.zst" || die "step $STEP: cannot draw prompts from TRAIN_DATA '$TRAIN_DATA'"
}

# stage_sample_n_prio K B [FLAGS]: K whole responses for each of B prompts drawn by the
# tracker's prioritized sampling (SPO's prompt selection, as SKPO's sampler does).
stage_sample_n_prio() {
  skpo-sample --model "$CK" --prompts "$TRAIN_DATA" --state "$ST" --n "$1" --prompts-per-step "$2" \
    --temperature "$TEMPERATURE" --top-p "$TOP_P" --max-tokens "$MAX_TOKENS" --seed "$(seed_of_step)" \
    --step "$STEP" ${THREADS:+--threads "$THREADS"} ${RHO_RESCORE:+--rescore} "${@:3}"
}

# informative_groups FILE: how many prompts of FILE's full records have outcomes that
# are not all equal (the groups DAPO's dynamic sampling keeps; core/rl/groups.h).
informative_groups() { skpo-cut --count-informative "$1"; }

# keep_groups N: stdin to stdout, dropping the informative groups after the first N
# (records and meta pass through; all-equal groups pass for skpo-advantage to count and drop).
keep_groups() { skpo-cut --keep-informative "$1"; }

# full_step MODE [UPDATE FLAGS...]: the GRPO-family step (GRPO, Dr. GRPO, GSPO,
# CISPO, SAPO differ only in the advantage mode and the loss flags):
#   draw PROMPTS prompts | skpo-sample --n G | $REWARD_CMD | tee rollouts |
#   skpo-advantage --mode MODE | skpo-update FLAGS, then commit.
full_step() {
  local mode=$1; shift
  local L=$TMPD/logs
  draw_prompts "$PROMPTS"
  sampled stage_sample_n "$G" 2>"$L/sample.err" \
    | timed reward stage_reward 2>"$L/reward.err" \
    | tee "$TMPD/rollouts.msgpack.zst" 2>"$L/tee.err" \
    | timed advantage stage_advantage "$mode" 2>"$L/advantage.err" \
    | timed update stage_update "$@" 2>"$L/update.err"
  check_pipe sample reward tee advantage update -- "${PIPESTATUS[@]}" || exit 1
  commit_step
}
