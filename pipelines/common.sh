# pipelines/common.sh - shared by step.sh, grpo.sh, spo.sh, dapo.sh, train.sh (sourced, bash).
#
# A training step N+1 reads the committed step N (RUN/ckpt/N, RUN/state/N) and
# builds everything in RUN/tmp/N+1; only when every stage of the pipeline exited
# 0 is it committed: ckpt, state, rollouts and metrics are renamed into place and
# RUN/last is rewritten atomically (the commit marker). A failed or killed step
# leaves RUN/last, the previous checkpoint and the previous state untouched, and
# its RUN/tmp/N+1 (with one stderr log per stage) for inspection; the next run
# removes it and redoes the step.
#
# Run folder:
#   config                     KEY=VALUE (pipelines/config/defaults.conf + overrides)
#   last                       number of the last committed step (commit marker)
#   ckpt/N/                    checkpoint after step N (ckpt/0 = the initial model)
#   state/N/                   tracker state folder after step N (skpo-advantage --state)
#   rollouts/N.msgpack.zst     what step N sampled, with rewards (teed after the reward stage)
#   metrics/N.msgpack.zst      metrics records of step N (skpo-update) and evals
#   eval/N.msgpack.zst         rewarded eval samples at step N
#   logs/                      per-stage stderr of the committed steps
set -o pipefail
PIPE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TOP=$(cd "$PIPE/.." && pwd)
PATH="$TOP/bin:$PATH"
SKPO_SHARED=${SKPO_SHARED:-$TOP/../shared}

die() { echo "skpo-pipeline: $*" >&2; exit 1; }

# load_config RUN: defaults, then the run's config (later lines win).
# REWARD_CMD from the environment wins over the config (a one-off reward swap).
load_config() {
  local env_reward=${REWARD_CMD-}
  # shellcheck disable=SC1091
  . "$PIPE/config/defaults.conf"
  [ -f "$1/config" ] || die "no config in run folder '$1' (start it with pipelines/train.sh)"
  # shellcheck disable=SC1090,SC1091
  . "$1/config"
  REWARD_CMD=${env_reward:-${REWARD_CMD:-skpo-reward}}
}

last_step() { if [ -f "$1/last" ]; then cat "$1/last"; else echo 0; fi; }

# commit_file SRC DST: rename into place (same filesystem), creating DST's folder.
commit_file() { mkdir -p "$(dirname "$2")" && mv -f "$1" "$2"; }

# write_marker RUN N: atomically record N as the last complete step.
write_marker() {
  printf '%s\n' "$2" >"$1/last.tmp.$$" && sync "$1/last.tmp.$$" 2>/dev/null; mv -f "$1/last.tmp.$$" "$1/last"
}

# --- stage commands (the only place tool flags appear) -------------------------------
# Each reads the variables of the config plus: CK (checkpoint dir), OUT (next
# checkpoint dir), ST (tracker state folder of this step), TMPD (the step's work
# folder), STEP.

seed_of_step() { echo $((SEED * 100003 + STEP)); }

stage_sample_segment() {
  skpo-sample --model "$CK" --prompts "$TRAIN_DATA" --state "$ST" --segment --group "$G" \
    --prompts-per-step "$PROMPTS" --temperature "$TEMPERATURE" --top-p "$TOP_P" \
    --max-tokens "$MAX_TOKENS" --seed "$(seed_of_step)" --step "$STEP" ${THREADS:+--threads "$THREADS"}
}
# stage_sample_n K: K whole responses for every prompt of the step's draw (draw_prompts).
stage_sample_n() {
  skpo-sample --model "$CK" --prompts "$TMPD/prompts.msgpack.zst" --n "$1" \
    --temperature "$TEMPERATURE" --top-p "$TOP_P" --max-tokens "$MAX_TOKENS" --seed "$(seed_of_step)" \
    --step "$STEP" ${THREADS:+--threads "$THREADS"}
}
stage_splice() {
  skpo-splice --model "$CK" --group "$G" --layout "${LAYOUT:-skip}" --temperature "$TEMPERATURE" --top-p "$TOP_P" \
    --max-tokens "$MAX_TOKENS" --seed "$(seed_of_step)" ${THREADS:+--threads "$THREADS"}
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
stage_advantage() {
  local mode=$1; shift
  skpo-advantage --mode "$mode" --state "$ST" --step "$STEP" --group "$G" \
    ${RHO_RESCORE:+--model "$CK" --temperature "$TEMPERATURE"} \
    --rho-min "$RHO_MIN" --rho-max "$RHO_MAX" --tau "$TAU_HALF" --eps "$PRIO_EPS" --len-init "$LQ_INIT" \
    --metrics "$TMPD/metrics.msgpack.zst" "$@"
}
stage_update() { # [extra flags]
  skpo-update --model "$CK" --out "$OUT" --metrics "$TMPD/metrics.msgpack.zst" --step "$STEP" \
    --minibatch "$MINIBATCH" --lr "$LR" --warmup "$WARMUP" --weight-decay "$WEIGHT_DECAY" \
    --beta1 "$BETA1" --beta2 "$BETA2" --eps "$ADAM_EPS" --grad-clip "$GRAD_CLIP" --epochs "$EPOCHS" \
    --temperature "$TEMPERATURE" --kl-coef "$KL_BETA" --entropy-coef "$ENT_COEF" \
    --old-logp "${OLD_LOGP:-recompute}" --mismatch "${MISMATCH:-tis}" ${MISMATCH_CAP:+--mismatch-cap "$MISMATCH_CAP"} \
    ${MISMATCH_LOW:+--mismatch-low "$MISMATCH_LOW"} ${MISMATCH_HIGH:+--mismatch-high "$MISMATCH_HIGH"} \
    ${THREADS:+--threads "$THREADS"} $([ "$CK" = "$RUN/ckpt/0" ] && echo --fresh-optimizer) "$@"
}

# draw_prompts B [ROUND]: the step's B prompts for the --n pipelines into
# $TMPD/prompts.msgpack.zst, uniformly without replacement from TRAIN_DATA: one
# shuffle per step seeded by (SEED, STEP), of which ROUND r (default 0) takes
# slice r, so DAPO's extra rounds never repeat a prompt within a step. Empty when
# the data is used up.
draw_prompts() {
  local all="$RUN/prompts.jsonl" r=${2:-0}
  if [ ! -s "$all" ]; then
    skpo-cat --where kind=prompt "$TRAIN_DATA" >"$all.tmp" && mv "$all.tmp" "$all" || die "cannot read TRAIN_DATA '$TRAIN_DATA'"
  fi
  shuf --random-source=<(yes "$(seed_of_step)") "$all" | awk -v a="$((r * $1))" -v b="$(((r + 1) * $1))" 'NR > a && NR <= b' \
    | skpo-cat --pack >"$TMPD/prompts.msgpack.zst" || die "step $STEP: cannot draw prompts"
}
# stage_sample_n_prio K B: K whole responses for each of B prompts drawn by the
# tracker's prioritized sampling (SPO's prompt selection, as SKPO's sampler does).
stage_sample_n_prio() {
  skpo-sample --model "$CK" --prompts "$TRAIN_DATA" --state "$ST" --n "$1" --prompts-per-step "$2" \
    --temperature "$TEMPERATURE" --top-p "$TOP_P" --max-tokens "$MAX_TOKENS" --seed "$(seed_of_step)" \
    --step "$STEP" ${THREADS:+--threads "$THREADS"}
}
# GROUP_AWK: awk that tracks, for each pid of a "full" record (JSON line), the
# lowest and highest reward (lo, hi; pids in first-seen order in order[1..n]);
# informative(p) says whether p's rewards are not all equal.
GROUP_AWK='
  function pid_of(l) { sub(/.*"pid":"/, "", l); sub(/".*/, "", l); return l }
  function track(l,   p, r) { p = pid_of(l); r = l; sub(/.*"reward":/, "", r); sub(/[,}].*/, "", r)
    if (!(p in lo)) { lo[p] = r; hi[p] = r; order[++n] = p }
    if (r + 0 < lo[p] + 0) lo[p] = r; if (r + 0 > hi[p] + 0) hi[p] = r }
  function informative(p) { return lo[p] + 0 != hi[p] + 0 }'
# informative_groups FILE: how many prompts of FILE's full records have rewards
# that are not all equal (the groups DAPO's dynamic sampling keeps).
informative_groups() {
  skpo-cat --where kind=full --fields pid,reward "$1" | awk "$GROUP_AWK"'
    { track($0) } END { k = 0; for (i = 1; i <= n; i++) if (informative(order[i])) k++; print k }'
}
# keep_groups N: stdin to stdout, dropping the informative groups after the first N
# (records and meta pass through; all-equal groups pass for skpo-advantage to count).
keep_groups() {
  skpo-cat | awk -v N="$1" "$GROUP_AWK"'
    { line[NR] = $0; if ($0 ~ /"kind":"full"/) track($0) }
    END { k = 0
      for (i = 1; i <= n; i++) if (informative(order[i]) && ++k > N) drop[order[i]] = 1
      for (j = 1; j <= NR; j++) if (!(line[j] ~ /"kind":"full"/ && pid_of(line[j]) in drop)) print line[j] }' \
    | skpo-cat --pack --no-meta
}

# seed_state DIR: an empty tracker whose parameters come from the config (so the
# first visit of a prompt already uses LQ_INIT for the split position).
seed_state() {
  mkdir -p "$1"
  printf '{"kind":"meta","tool":"skpo-tracker","tracker_version":1,"step":1,"rho_min":%s,"rho_max":%s,"tau":%s,"eps":%s,"len_init":%s,"prompts":0}\n' \
    "$RHO_MIN" "$RHO_MAX" "$TAU_HALF" "$PRIO_EPS" "$LQ_INIT" | skpo-cat --pack --no-meta >"$1/state-000001.msgpack.zst" \
    && echo state-000001.msgpack.zst >"$1/CURRENT"
}

# --- running one step ------------------------------------------------------------------

# begin_step RUN: set STEP/CK/OUT/ST/TMPD for the step after the last committed one.
begin_step() {
  RUN=$1
  load_config "$RUN"
  local prev; prev=$(last_step "$RUN")
  STEP=$((prev + 1))
  CK="$RUN/ckpt/$prev"
  [ -f "$CK/config.json" ] || die "step $STEP: checkpoint '$CK' is missing"
  TMPD="$RUN/tmp/$STEP"
  rm -rf "$TMPD"
  mkdir -p "$TMPD/logs"
  OUT="$TMPD/ckpt"
  ST="$TMPD/state"
  if [ -d "$RUN/state/$prev" ]; then cp -r "$RUN/state/$prev" "$ST"; else seed_state "$ST"; fi
  STEP_T0=$(date +%s.%N)
}

# check_pipe NAMES... -- STATUSES...: after a pipeline, name the stage that failed
# first. A stage killed by SIGPIPE (141) or failing to write stdout only reacts to
# a later stage dying, and one reading a truncated stream reacts to an earlier one,
# so the culprit is the earliest stage with a status of its own.
check_pipe() {
  local names=() sts=() i culprit=-1 any=0
  while [ "$1" != "--" ]; do names+=("$1"); shift; done; shift
  sts=("$@")
  for i in "${!sts[@]}"; do
    [ "${sts[$i]}" = 0 ] && continue
    any=1
    [ "${sts[$i]}" = 141 ] && continue
    grep -qi "broken pipe\|cannot write standard output" "$TMPD/logs/${names[$i]}.err" 2>/dev/null && continue
    [ "$culprit" = -1 ] && culprit=$i
  done
  [ "$any" = 0 ] && return 0
  if [ "$culprit" = -1 ]; then for i in "${!sts[@]}"; do [ "${sts[$i]}" != 0 ] && { culprit=$i; break; }; done; fi
  local n=${names[$culprit]} s=${sts[$culprit]} why
  why="exit $s"; [ "$s" -gt 128 ] && why="killed by signal $((s - 128))"
  {
    echo "skpo-pipeline: step $STEP failed in stage '$n' ($why); step $((STEP - 1)) stays the last committed one"
    echo "skpo-pipeline: stage statuses: $(for i in "${!sts[@]}"; do printf '%s=%s ' "${names[$i]}" "${sts[$i]}"; done)"
    sed 's/^/  | /' "$TMPD/logs/$n.err" | tail -n 15
    echo "skpo-pipeline: logs in $TMPD/logs; rerun the same command to redo step $STEP"
  } >&2
  return 1
}

# commit_step: move the step's products into place, then write the marker.
commit_step() {
  [ -f "$OUT/config.json" ] || die "step $STEP: the update wrote no checkpoint in '$OUT'"
  mkdir -p "$RUN/ckpt" "$RUN/state" "$RUN/rollouts" "$RUN/metrics" "$RUN/logs"
  rm -rf "$RUN/ckpt/$STEP"
  mv "$OUT" "$RUN/ckpt/$STEP"
  rm -rf "$RUN/state/$STEP"
  [ -d "$ST" ] && mv "$ST" "$RUN/state/$STEP"
  [ -f "$TMPD/rollouts.msgpack.zst" ] && commit_file "$TMPD/rollouts.msgpack.zst" "$RUN/rollouts/$STEP.msgpack.zst"
  [ -f "$TMPD/metrics.msgpack.zst" ] && commit_file "$TMPD/metrics.msgpack.zst" "$RUN/metrics/$STEP.msgpack.zst"
  for f in "$TMPD"/logs/*.err; do [ -f "$f" ] && mv -f "$f" "$RUN/logs/$STEP.$(basename "$f")"; done
  sync 2>/dev/null
  write_marker "$RUN" "$STEP"
  rm -rf "$TMPD"
  echo "$(date +%s.%N) $STEP_T0" | awk '{printf "%.3f\n", $1 - $2}' >"$RUN/logs/$STEP.time"
}
