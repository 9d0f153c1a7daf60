#!/usr/bin/env bash
# pipelines/train.sh RUN_DIR [KEY=VALUE...] - train, resumably.
#
# First call: creates RUN_DIR with `config` (pipelines/config/defaults.conf plus
# the KEY=VALUE overrides; MODEL and TRAIN_DATA are required) and ckpt/0 (a link
# to MODEL). Every call: runs steps of ALGO (step.sh for skpo, else any
# pipelines/ALGO.sh step script: common.sh step_script; docs/baselines.md) from the last committed step up to STEPS, evaluating every EVAL_EVERY
# steps on EVAL_DATA, keeping the newest KEEP durable checkpoints, and printing one
# summary line per step. With SERVE (default) one `skpo-update --serve` (under
# the MPI launcher for RANKS / GPUS / NODES > 1) trains every step, keeping the
# optimizer state in memory; durable checkpoints every SAVE_EVERY steps. Overrides on a later call are appended to the config.
# Interrupted (Ctrl-C, kill, crash, a stage failing)? Run the same command again:
# it resumes after the last committed step (RUN_DIR/last).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"  # `sh demo.sh` (make) re-runs under bash
. "$(dirname "$0")/common.sh"
. "$PIPE/report.sh"
[ $# -ge 1 ] || { echo "usage: pipelines/train.sh RUN_DIR [KEY=VALUE...]" >&2; exit 2; }
RUN=$1; shift
# known_keys: every KEY of defaults.conf plus the optional keys without a default
# (OPTIONAL_KEYS there); a KEY=VALUE naming anything else is a typo and refused,
# so that a misspelt ablation key never passes for a default run.
known_keys() {
  { grep -oE '^[A-Z_][A-Z0-9_]*=' "$PIPE/config/defaults.conf" | tr -d '='
    sed -n 's/^# OPTIONAL_KEYS: *//p' "$PIPE/config/defaults.conf" | tr ' ' '\n'; } | grep .
}
KNOWN=" $(known_keys | tr '\n' ' ') "
for kv in "$@"; do
  case "$kv" in [A-Z_]*=*) ;; *) echo "train.sh: '$kv' is not KEY=VALUE" >&2; exit 2;; esac
  key=${kv%%=*}
  case "$KNOWN" in *" $key "*) ;;
    *) echo "train.sh: unknown config key '$key' (in '$kv'; the keys are those of pipelines/config/defaults.conf)" >&2; exit 2;;
  esac
done

init_run() {
  if [ ! -f "$RUN/config" ]; then
    { echo "# skpo run created $(date -u +%Y-%m-%dT%H:%M:%SZ) by pipelines/train.sh"
      cat "$PIPE/config/defaults.conf"
      echo "# --- overrides"; } >"$RUN/config.tmp"
    mv "$RUN/config.tmp" "$RUN/config"
  fi
  if [ $# -gt 0 ]; then
    { echo "# --- overrides $(date -u +%Y-%m-%dT%H:%M:%SZ)"; printf '%q\n' "$@" | sed 's/\\=/=/'; } >>"$RUN/config"
  fi
  load_config "$RUN"
  [ -n "$MODEL" ] && [ -f "$MODEL/config.json" ] || die "MODEL='$MODEL' is not a checkpoint folder (set MODEL=DIR)"
  [ -n "$TRAIN_DATA" ] && [ -f "$TRAIN_DATA" ] || die "TRAIN_DATA='$TRAIN_DATA' is not a file (set TRAIN_DATA=FILE)"
  mkdir -p "$RUN/ckpt" "$RUN/metrics" "$RUN/eval" "$RUN/logs" "$RUN/state"
  [ -e "$RUN/ckpt/0" ] || ln -s "$(cd "$MODEL" && pwd)" "$RUN/ckpt/0"
}

# prune: keep ckpt/0, the last step's checkpoint (the next step samples it) and
# the newest KEEP durable checkpoints (with optimizer state; with their tracker
# states, which a resume rolls back to).
prune() {
  local last kept=0 n; last=$(last_step "$RUN")
  has_optim "$RUN/ckpt/$last" && kept=1
  for ((n = last - 1; n > 0; n--)); do
    [ -e "$RUN/ckpt/$n" ] || [ -e "$RUN/state/$n" ] || continue
    if has_optim "$RUN/ckpt/$n" && complete "$RUN/ckpt/$n" && [ "$kept" -lt "$KEEP" ]; then kept=$((kept + 1)); continue; fi
    rm -rf "$RUN/ckpt/$n" "$RUN/state/$n" "$RUN/prm/$n"   # prm/: PRIME's implicit PRM of the step
  done
  return 0
}

mkdir -p "$RUN" || die "cannot create '$RUN'"
exec 9>>"$RUN/lock"
if command -v flock >/dev/null; then flock -n 9 || die "another train.sh is running on '$RUN'"; fi
init_run "$@"
# the ablation keys' values, checked before any step runs (the tools check them too)
enum_key() { # KEY VALUE ALLOWED...
  local k=$1 v=$2; shift 2
  for a in "$@"; do [ "$v" = "$a" ] && return 0; done
  die "$k='$v' is not one of: $*"
}
enum_key LAYOUT "$LAYOUT" skip continual
enum_key REWARD_UP "$REWARD_UP" mc self
case "$CUT" in  # adaptive, fixed, or a fraction of L_q (F or A/B, 0 < F <= 1)
  adaptive|fixed) ;;
  *) awk -v c="$CUT" 'BEGIN { n = split(c, p, "/"); f = n == 2 && p[2] + 0 > 0 ? p[1] / p[2] : c + 0
       exit !(c ~ /^[0-9.]+(\/[0-9.]+)?$/ && n <= 2 && f > 0 && f <= 1) }' ||
     die "CUT='$CUT' is not adaptive, fixed or a fraction F of L_q (0 < F <= 1, e.g. 1/3)";;
esac
case "$UP_WARMUP" in ''|*[!0-9]*) die "UP_WARMUP='$UP_WARMUP' is not a whole number >= 0";; esac
enum_key SELECT "$SELECT" median extreme
if [ "$ALGO" = prime ]; then  # PRIME's keys (the tools check the numbers' ranges)
  enum_key PRIME_NORM "$PRIME_NORM" batch none
  case "$PRIME_K" in ''|*[!0-9]*|0|1) die "PRIME_K='$PRIME_K' is not a whole number >= 2 (leave-one-out needs two)";; esac
  case "$PRIME_OVERSAMPLE" in ''|*[!0-9]*|0) die "PRIME_OVERSAMPLE='$PRIME_OVERSAMPLE' is not a whole number >= 1";; esac
  awk -v a="$PRIME_ACC_LOW" -v b="$PRIME_ACC_HIGH" 'BEGIN { exit !(a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && a + 0 <= b + 0 && b + 0 <= 1) }' ||
    die "PRIME_ACC_LOW='$PRIME_ACC_LOW' / PRIME_ACC_HIGH='$PRIME_ACC_HIGH' are not 0 <= LOW <= HIGH <= 1"
fi
STEP_SH=$(step_script "$ALGO") || die "ALGO='$ALGO' has no step script (one of: $(step_algos))"
rm -rf "$RUN/tmp"
check_devices
case "$SAVE_EVERY" in ''|*[!0-9]*|0) die "SAVE_EVERY='$SAVE_EVERY' is not a whole number >= 1";; esac
case "${OFFLOAD:-}" in
  '') ;;
  1) [ -n "$SERVE" ] && [ "$GPUS" -gt 0 ] || die "OFFLOAD=1 needs SERVE=1 and GPUS >= 1 (it offloads the update server's device state)";;
  *) die "OFFLOAD='$OFFLOAD' is not 1 or empty";;
esac
rollback_to_durable "$RUN"   # steps after the newest durable checkpoint are redone (docs/scaling.md)
if [ -n "$EVAL_DATA" ] && [ ! -f "$RUN/metrics/eval-0.msgpack.zst" ]; then
  run_eval "$RUN" 0 || exit 1
  print_eval "$RUN" 0
fi
# eval_due N: held-out evaluation after step N (every EVAL_EVERY and the last), not done yet.
eval_due() {
  [ -n "$EVAL_DATA" ] && [ ! -f "$RUN/metrics/eval-$1.msgpack.zst" ] &&
    { { [ "$EVAL_EVERY" -gt 0 ] && [ $(($1 % EVAL_EVERY)) = 0 ]; } || [ "$1" = "$STEPS" ]; }
}
n=$(last_step "$RUN")
if [ "$n" -gt 0 ] && eval_due "$n"; then run_eval "$RUN" "$n" && print_eval "$RUN" "$n" || exit 1; fi
# LoRA steps write only the adapter and its AdamW state (megabytes), so they run
# one-shot: the update server trains full weights only.
[ -n "$LORA_RANK" ] && SERVE=
if [ -n "$SERVE" ] && [ "$(last_step "$RUN")" -lt "$STEPS" ]; then
  trap stop_server EXIT
  start_server "$RUN"
fi
while [ "$(last_step "$RUN")" -lt "$STEPS" ]; do
  bash "$STEP_SH" "$RUN" || exit 1
  n=$(last_step "$RUN")
  print_step "$RUN" "$n"
  if eval_due "$n"; then run_eval "$RUN" "$n" && print_eval "$RUN" "$n" || exit 1; fi
  prune
done
exit 0
