#!/usr/bin/env bash
# pipelines/train.sh RUN_DIR [KEY=VALUE...] - train, resumably.
#
# First call: creates RUN_DIR with `config` (pipelines/config/defaults.conf plus
# the KEY=VALUE overrides; MODEL and TRAIN_DATA are required) and ckpt/0 (a link
# to MODEL). Every call: runs steps of ALGO (step.sh for skpo, grpo.sh, spo.sh,
# dapo.sh) from the last committed step up to STEPS, evaluating every EVAL_EVERY
# steps on EVAL_DATA, keeping the newest KEEP checkpoints, and printing one
# summary line per step. Overrides on a later call are appended to the config.
# Interrupted (Ctrl-C, kill, crash, a stage failing)? Run the same command again:
# it resumes after the last committed step (RUN_DIR/last).
. "$(dirname "$0")/common.sh"
. "$PIPE/report.sh"
[ $# -ge 1 ] || { echo "usage: pipelines/train.sh RUN_DIR [KEY=VALUE...]" >&2; exit 2; }
RUN=$1; shift
for kv in "$@"; do
  case "$kv" in [A-Z_]*=*) ;; *) echo "train.sh: '$kv' is not KEY=VALUE" >&2; exit 2;; esac
done

init_run() {
  mkdir -p "$RUN" || die "cannot create '$RUN'"
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
  mkdir -p "$RUN/ckpt" "$RUN/metrics" "$RUN/eval" "$RUN/logs"
  [ -e "$RUN/ckpt/0" ] || ln -s "$(cd "$MODEL" && pwd)" "$RUN/ckpt/0"
}

# prune: keep ckpt/0 and the newest KEEP committed checkpoints.
prune() {
  local last; last=$(last_step "$RUN")
  for d in "$RUN"/ckpt/*; do
    local n; n=$(basename "$d")
    case "$n" in ''|*[!0-9]*) continue;; esac
    [ "$n" -gt 0 ] && [ "$n" -le $((last - KEEP)) ] && rm -rf "$d"
  done
}

exec 9>>"$RUN.lock" 2>/dev/null || exec 9>>/dev/null
command -v flock >/dev/null && { flock -n 9 || die "another train.sh is running on '$RUN'"; }
init_run "$@"
case "$ALGO" in
  skpo) STEP_SH=$PIPE/step.sh;;
  grpo|spo|dapo) STEP_SH=$PIPE/$ALGO.sh;;
  *) die "ALGO='$ALGO' is not skpo, grpo, spo or dapo";;
esac
rm -rf "$RUN/tmp"
if [ -n "$EVAL_DATA" ] && [ ! -f "$RUN/metrics/eval-0.msgpack.zst" ]; then
  run_eval "$RUN" 0 || exit 1
  print_eval "$RUN" 0
fi
while [ "$(last_step "$RUN")" -lt "$STEPS" ]; do
  bash "$STEP_SH" "$RUN" || exit 1
  n=$(last_step "$RUN")
  print_step "$RUN" "$n"
  if [ -n "$EVAL_DATA" ] && { { [ "$EVAL_EVERY" -gt 0 ] && [ $((n % EVAL_EVERY)) = 0 ]; } || [ "$n" = "$STEPS" ]; } \
     && [ ! -f "$RUN/metrics/eval-$n.msgpack.zst" ]; then
    run_eval "$RUN" "$n" || exit 1
    print_eval "$RUN" "$n"
  fi
  prune
done
