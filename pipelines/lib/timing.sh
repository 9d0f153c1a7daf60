# pipelines/lib/timing.sh - what a step took (sourced by common.sh): timed stages,
# the pipeline head that lets go of its output, and logs/N.time.

# timed NAME CMD...: CMD, appending "NAME START END" (epoch seconds) to $TMPD/times.
# Fault injection for tests (tests/sh/t_scale.sh): SKPO_FAULT_STAGE=NAME runs
# that stage (of step SKPO_FAULT_STEP, default every step; NAME=server: the
# update server) with LD_PRELOAD=$SKPO_FAULT_SHIM (tests/fault/killshim.c).
timed() {
  local n=$1 t0 rc; shift
  t0=$(date +%s.%N)
  if [ "${SKPO_FAULT_STAGE:-}" = "$n" ] && [ "${SKPO_FAULT_STEP:-$STEP}" = "$STEP" ]; then
    (export LD_PRELOAD=$SKPO_FAULT_SHIM; "$@"); rc=$?
  else
    "$@"; rc=$?
  fi
  echo "$n $t0 $(date +%s.%N)" >>"$TMPD/times"
  return $rc
}

# timed_head NAME CMD...: timed, as the first element of a pipeline (its own
# subshell) whose command ends its output before it exits: skpo-sample
# --export-weights (SHARE_WEIGHTS) ends its output, then waits until
# skpo-splice, which reads to EOF, is done with the lent weights. An element
# running CMD in the foreground would hold the pipe open until CMD exits: a
# deadlock. So CMD runs in the background, a stage function exec'ing its tool
# (STAGE_EXEC=exec), and the element lets go of its standard output; INT, TERM
# and HUP are passed on (a background command ignores INT).
timed_head() {
  local n=$1 t0 pid rc; shift
  t0=$(date +%s.%N)
  if [ "${SKPO_FAULT_STAGE:-}" = "$n" ] && [ "${SKPO_FAULT_STEP:-$STEP}" = "$STEP" ]; then
    (export LD_PRELOAD=$SKPO_FAULT_SHIM; STAGE_EXEC=exec; "$@") <&0 &
  else
    (STAGE_EXEC=exec; "$@") <&0 &
  fi
  pid=$!
  exec >/dev/null
  trap 'kill -TERM "$pid" 2>/dev/null' INT TERM HUP
  wait "$pid"; rc=$?
  while [ "$rc" -gt 128 ] && kill -0 "$pid" 2>/dev/null; do wait "$pid"; rc=$?; done
  echo "$n $t0 $(date +%s.%N)" >>"$TMPD/times"
  return $rc
}

# bytes_of PATH...: bytes of the files under PATHs (0 when none).
bytes_of() { du -sbc "$@" 2>/dev/null | tail -n 1 | cut -f1; }

# write_times: logs/N.time of the committed step: the wall seconds on the first
# line (what report.sh reads), then "seconds.STAGE S" for each timed stage (its
# process lifetime: piped stages overlap), the update server's split
# (seconds.update.load / .compute / .save), and "bytes.WHAT B" for what the step
# wrote: rollouts, metrics, tracker state, checkpoint (weights, optimizer), the
# records handed to the server, and their total.
write_times() {
  local c="$RUN/ckpt/$STEP" w o
  { echo "$(date +%s.%N) $STEP_T0" | awk '{printf "%.3f\n", $1 - $2}'
  # a stage run as several shards: the longest
  [ -f "$TMPD/times" ] && awk '{ d = $3 - $2; if (!($1 in m)) k[++n] = $1; if (!($1 in m) || d > m[$1]) m[$1] = d }
    END { for (i = 1; i <= n; i++) printf "seconds.%s %.3f\n", k[i], m[k[i]] }' "$TMPD/times"
  grep -h "^step=$STEP " "$RUN/logs/$STEP.update.err" 2>/dev/null | tail -n 1 | tr ' ' '\n' |
    awk -F= '$1 ~ /_s$/ { sub(/_s$/, "", $1); printf "seconds.update.%s %s\n", $1, $2 } $1 == "read_bytes" { printf "bytes.handoff %s\n", $2 }'
  o=$(bytes_of "$c"/optim*.safetensors "$c"/optim.index.json); w=$(($(bytes_of "$c") - o))
  printf 'bytes.rollouts %s\nbytes.metrics %s\nbytes.state %s\nbytes.weights %s\nbytes.optimizer %s\n' \
    "$(bytes_of "$RUN/rollouts/$STEP.msgpack.zst")" "$(bytes_of "$RUN/metrics/$STEP.msgpack.zst")" \
    "$(bytes_of "$RUN/state/$STEP")" "$w" "$o"
  } | awk '{ print } /^bytes\./ { t += $2 } END { printf "bytes.total %.0f\n", t }'
}
