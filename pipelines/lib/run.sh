# pipelines/lib/run.sh - the run folder and one step's life (sourced by common.sh):
# the config, the commit marker, the algorithms' step scripts, beginning a step,
# naming the stage that failed, committing the step, durable checkpoints and the
# rollback to the newest one. The layout of the run folder: common.sh.

# load_config RUN: defaults, then the run's config (later lines win).
# REWARD_CMD from the environment wins over the config (a one-off reward swap).
load_config() {
  local env_reward=${REWARD_CMD-}
  # shellcheck disable=SC1091
  . "$PIPE/config/defaults.conf"
  [ -f "$1/config" ] || die "no config in run folder '$1' (start it with pipelines/train.sh)"
  # shellcheck disable=SC1090,SC1091
  . "$1/config"
  REWARD_CMD=${env_reward:-${REWARD_CMD:-$(conf_default REWARD_CMD)}}
}

# step_script ALGO: the path of ALGO's step script (skpo: step.sh, else pipelines/ALGO.sh),
# or fail. A step script is a file that begins a step (a line `begin_step ...`), so
# a new algorithm is one new file here and nothing else lists the names.
step_script() {
  local f
  case "$1" in ''|step|*[!a-z0-9_-]*) return 1;; skpo) f=$PIPE/step.sh;; *) f=$PIPE/$1.sh;; esac
  [ -f "$f" ] && grep -q '^begin_step ' "$f" && echo "$f"
}

# step_algos: the ALGO names that have a step script, space-separated (for messages).
step_algos() {
  local f a out=skpo
  for f in "$PIPE"/*.sh; do
    a=$(basename "$f" .sh)
    [ "$a" != step ] && step_script "$a" >/dev/null && out="$out $a"
  done
  echo "$out"
}

last_step() { if [ -f "$1/last" ]; then cat "$1/last"; else echo 0; fi; }

# commit_file SRC DST: rename into place (same filesystem), creating DST's folder.
commit_file() { mkdir -p "$(dirname "$2")" && mv -f "$1" "$2"; }

# write_marker RUN N: atomically record N as the last complete step.
write_marker() {
  printf '%s\n' "$2" >"$1/last.tmp.$$" && sync "$1/last.tmp.$$" 2>/dev/null; mv -f "$1/last.tmp.$$" "$1/last"
}

# init_state DIR [STEP]: an empty tracker at STEP (default 1) whose parameters come from
# the config (so the first visit of a prompt already uses LQ_INIT for the split position).
init_state() {
  skpo-advantage --init-state --state "$1" --step "${2:-1}" --rho-min "$RHO_MIN" --rho-max "$RHO_MAX" \
    --tau "$TAU_HALF" --prio-eps "$PRIO_EPS" --lq-init "$LQ_INIT"
}

# begin_step RUN: set STEP/CK/OUT/ST/TMPD for the step after the last committed one.
begin_step() {
  enter_step "$1" $(($(last_step "$1") + 1))
  rm -rf "$TMPD"
  mkdir -p "$TMPD/logs"
  if [ -d "$RUN/state/$((STEP - 1))" ]; then cp -r "$RUN/state/$((STEP - 1))" "$ST"; else init_state "$ST" || die "step $STEP: cannot write the first tracker state"; fi
  STEP_T0=$(date +%s.%N)
}

# enter_step RUN N: the config and STEP/CK/OUT/ST/TMPD of step N (begun: the shards' view).
enter_step() {
  RUN=$1 STEP=$2
  load_config "$RUN"
  CK="$RUN/ckpt/$((STEP - 1))"
  [ -f "$CK/config.json" ] || [ -f "$CK/adapter_config.json" ] || die "step $STEP: checkpoint '$CK' is missing"
  [ "$STEP" = 1 ] || complete "$CK" ||
    die "step $STEP: checkpoint '$CK' is not complete (skpo-checkpoint.json missing or not complete, or a file of another size; train.sh redoes that step)"
  TMPD="$RUN/tmp/$STEP"
  OUT="$TMPD/ckpt"
  ST="$TMPD/state"
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
  [ -f "$OUT/config.json" ] || [ -f "$OUT/adapter_config.json" ] || die "step $STEP: the update wrote no checkpoint in '$OUT'"
  complete "$OUT" || die "step $STEP: the checkpoint in '$OUT' is not complete (skpo-checkpoint.json)"
  mkdir -p "$RUN/ckpt" "$RUN/state" "$RUN/rollouts" "$RUN/metrics" "$RUN/logs"
  rm -rf "$RUN/ckpt/$STEP"
  mv "$OUT" "$RUN/ckpt/$STEP"
  rm -rf "$RUN/state/$STEP"
  [ -d "$ST" ] && mv "$ST" "$RUN/state/$STEP"
  [ -f "$TMPD/rollouts.msgpack.zst" ] && commit_file "$TMPD/rollouts.msgpack.zst" "$RUN/rollouts/$STEP.msgpack.zst"
  [ -f "$TMPD/metrics.msgpack.zst" ] && commit_file "$TMPD/metrics.msgpack.zst" "$RUN/metrics/$STEP.msgpack.zst"
  for f in "$TMPD"/logs/*.err; do [ -f "$f" ] && mv -f "$f" "$RUN/logs/$STEP.$(basename "$f")"; done
  write_times >"$RUN/logs/$STEP.time.tmp"
  sync 2>/dev/null
  write_marker "$RUN" "$STEP"
  mv -f "$RUN/logs/$STEP.time.tmp" "$RUN/logs/$STEP.time"
  rm -rf "$TMPD"
}

# durable_due N: does step N write a durable checkpoint (weights + optimizer +
# trainer state)? Every SAVE_EVERY steps and the last one; every step without a server.
durable_due() {
  [ -z "${SKPO_SERVE_DIR:-}" ] && return 0
  [ "$1" -ge "$STEPS" ] || [ $(($1 % $SAVE_EVERY)) = 0 ]
}

# has_optim CKPT: does the checkpoint hold optimizer state (one file, or one per rank)?
has_optim() { [ -f "$1/optim.safetensors" ] || [ -f "$1/optim.index.json" ]; }

# complete CKPT: does the checkpoint carry its completion marker, the file its
# save writes last (core/base/marker.c), and has every file it lists that size?
# (The marker is written with one file per line: "    "NAME": BYTES,".)
complete() {
  local m="$1/skpo-checkpoint.json" f s
  grep -q '"complete": true' "$m" 2>/dev/null || return 1
  awk -F'"' '/^    "/ { s = $3; gsub(/[^0-9]/, "", s); print $2, s }' "$m" | {
    while read -r f s; do [ "$(wc -c <"$1/$f" 2>/dev/null)" = "$s" ] || return 1; done
  }
}

# durable_step RUN: the newest committed step whose checkpoint is complete and holds
# the optimizer state (0: the start). A checkpoint without its completion marker
# is never resumed from, and named.
durable_step() {
  local n; n=$(last_step "$1")
  while [ "$n" -gt 0 ]; do
    if ! complete "$1/ckpt/$n"; then
      [ -e "$1/ckpt/$n" ] &&
        echo "skpo-pipeline: $1/ckpt/$n is not a complete checkpoint (its skpo-checkpoint.json is missing or not complete, or a file it lists has another size): not resuming from it" >&2
    elif has_optim "$1/ckpt/$n" && [ -d "$1/state/$n" ]; then
      break
    fi
    n=$((n - 1))
  done
  echo "$n"
}

# rollback_to_durable RUN: steps after the newest durable checkpoint are redone
# (their optimizer state lived only in a server that is gone): the commit marker
# goes back there and their checkpoints and states go. The redone steps draw,
# sample and train exactly what they did (same seeds, same tracker state).
rollback_to_durable() {
  local l d n; l=$(last_step "$1"); d=$(durable_step "$1")
  [ "$d" -lt "$l" ] || return 0
  echo "skpo-pipeline: step $l is the last committed step, $d the last durable one: redoing steps $((d + 1))..$l" >&2
  write_marker "$1" "$d"
  for ((n = d + 1; n <= l; n++)); do rm -rf "$1/ckpt/$n" "$1/state/$n" "$1/prm/$n"; done
}
