#!/bin/sh
# t_faults.sh - fault injection across the stages that write checkpoints and
# state, on tiny models (tests/fixtures/update/model, tests/fixtures/demo):
#   - the disk fills while a checkpoint or state is written (RLIMIT_FSIZE with
#     SIGXFSZ ignored, so writes fail with EFBIG) at several sizes;
#   - the stage is SIGKILLed at every file-system event of its run (fwrite,
#     write, fflush, fclose, fsync, rename(at2), mkdir: tests/fault/killshim.c,
#     a torn half write first);
#   - the input stream is cut at every record boundary (the stream as a killed
#     upstream stage leaves it: flushed after each record, frame never ended)
#     and in the middle of records;
#   - a checkpoint's safetensors file is truncated;
#   - a NaN in the weights, non-finite logits, a non-finite gradient.
# Each must end with exit 1 (or the kill), one line "skpo-TOOL: ..." on
# stderr, the previous checkpoint/state byte-identical, and a re-run that
# completes.
. "$(dirname "$0")/lib.sh"
BUILD=${SKPO_BUILD:-build}
M=$UPD_MODEL
R=$UPD_RECORDS
A=$UPD_FLAGS
ADV="$FIX/adv"
DEMO="$FIX/demo/config.json"
CUT="$BUILD/tests/test_fault_stream"
# One thread: these runs are tiny and the machine may be shared.
export OMP_NUM_THREADS=1
for b in skpo-init skpo-update skpo-advantage skpo-score skpo-reward skpo-cat; do
  [ -x "$TOP/bin/$b" ] || { skip "fault tests" "bin/$b not built"; exit 0; }
done

# The kill shim, built here (it is a test fixture, not part of skpo). ASan
# wants its runtime first in the library order; the shim goes first instead.
SHIM="$TMP/killshim.so"
${CC:-cc} -shared -fPIC -O1 -o "$SHIM" "$TOP/tests/fault/killshim.c" -ldl 2>"$TMP/shim.err" || SHIM=
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"

# --- helpers ---------------------------------------------------------------------

# limited BLOCKS OUT CMD...: run CMD with files capped at BLOCKS (512 bytes in
# dash, 1024 in bash) and SIGXFSZ ignored; stdout to OUT, stderr to $TMP/err
# (through a pipe, so the cap does not apply to it); returns CMD's status.
limited() {
  lim=$1 out=$2; shift 2
  ( ( trap '' XFSZ; ulimit -f "$lim"; exec "$@" 2>&3 >"$out" ); echo $? >"$TMP/rc" ) 3>&1 | cat >"$TMP/err"
  return "$(cat "$TMP/rc")"
}
# killed_at N OUT CMD...: run CMD, SIGKILLed at its Nth file-system event.
killed_at() {
  k=$1 out=$2; shift 2
  SKPO_FAULT_KILL_AT=$k LD_PRELOAD="$SHIM" "$@" >"$out" 2>"$TMP/err"
}
# events OUT CMD...: how many file-system events CMD has (run to completion).
events() {
  out=$1; shift
  SKPO_FAULT_COUNT="$TMP/count" LD_PRELOAD="$SHIM" "$@" >"$out" 2>"$TMP/err" || { cat "$TMP/err"; return 1; }
  cat "$TMP/count"
}
# one_line TOOL RC: exit status RC is 1 and $TMP/err is one "TOOL: " line.
one_line() {
  [ "$2" = 1 ] || { echo "exit $2, want 1"; cat "$TMP/err"; return 1; }
  [ "$(wc -l <"$TMP/err")" = 1 ] && grep -q "^$1: ." "$TMP/err" ||
    { echo "want one '$1:' line on stderr, got:"; cat "$TMP/err"; return 1; }
}
no_temp() { # DIR: no temp folders of an atomic write left next to DIR
  left=$(ls -d "$1".tmp.* "$1".old.* 2>/dev/null)
  [ -z "$left" ] || { echo "left behind: $left"; return 1; }
}
# same OLD NEW: the folders hold the same files, temp files of killed writers aside.
same() { diff -r -x '*.tmp.*' "$1" "$2" >/dev/null || { echo "'$2' changed"; diff -r -x '*.tmp.*' "$1" "$2" | head -n 5; return 1; }; }
records() { skpo-cat "$1" | grep -v '"kind":"meta"'; } # a stream's records, provenance aside

# --- the disk fills while a checkpoint or the state is written ---------------------

init_disk_full() {
  skpo-init --config "$DEMO" --out "$TMP/i" --seed 1 2>/dev/null && cp -r "$TMP/i" "$TMP/i.keep" || return 1
  for lim in 0 1 16 400 1100; do
    limited "$lim" /dev/null skpo-init --config "$DEMO" --out "$TMP/i" --seed 2; rc=$?
    one_line skpo-init "$rc" && same "$TMP/i.keep" "$TMP/i" && no_temp "$TMP/i" || { echo "at $lim blocks"; return 1; }
  done
  skpo-init --config "$DEMO" --out "$TMP/i" --seed 2 2>/dev/null && ! diff -r "$TMP/i.keep" "$TMP/i" >/dev/null
}
t "skpo-init: disk full mid-checkpoint fails in one line, keeps the old folder, re-run completes" init_disk_full

update_disk_full() {
  skpo-update --model "$M" --out "$TMP/u1" $A "$R" 2>/dev/null && cp -r "$TMP/u1" "$TMP/u1.keep" || return 1
  for round in new existing; do
    [ "$round" = existing ] && cp -r "$TMP/u2" "$TMP/u2.keep"
    for lim in 0 1 64 200; do
      limited "$lim" /dev/null skpo-update --model "$TMP/u1" --out "$TMP/u2" $A "$R"; rc=$?
      one_line skpo-update "$rc" && same "$TMP/u1.keep" "$TMP/u1" && no_temp "$TMP/u2" || { echo "$round, $lim blocks"; return 1; }
      if [ "$round" = new ]; then [ ! -e "$TMP/u2" ] || { echo "partial $TMP/u2"; return 1; }
      else same "$TMP/u2.keep" "$TMP/u2" || return 1; fi
    done
    skpo-update --model "$TMP/u1" --out "$TMP/u2" $A "$R" 2>/dev/null && grep -q '"step": 2' "$TMP/u2/trainer_state.json" || return 1
  done
}
t "skpo-update: disk full mid-checkpoint fails in one line, keeps model and output, re-run completes" update_disk_full

advantage_disk_full() {
  skpo-advantage --mode skpo --state "$TMP/s" "$ADV/skpo_step1.msgpack.zst" >/dev/null 2>&1 &&
  cp -r "$TMP/s" "$TMP/s.keep" && cp -r "$TMP/s" "$TMP/s.ref" &&
  skpo-advantage --mode skpo --state "$TMP/s.ref" "$ADV/skpo_step2.msgpack.zst" >"$TMP/ref.zst" 2>/dev/null || return 1
  for out in /dev/null "$TMP/out.zst"; do
    for lim in 0 $([ "$out" = /dev/null ] || echo 1); do
      limited "$lim" "$out" skpo-advantage --mode skpo --state "$TMP/s" "$ADV/skpo_step2.msgpack.zst"; rc=$?
      one_line skpo-advantage "$rc" && same "$TMP/s.keep" "$TMP/s" || { echo "stdout $out, $lim blocks"; return 1; }
    done
  done
  skpo-advantage --mode skpo --state "$TMP/s" "$ADV/skpo_step2.msgpack.zst" >"$TMP/out.zst" 2>/dev/null &&
  [ "$(records "$TMP/out.zst")" = "$(records "$TMP/ref.zst")" ] && same "$TMP/s.ref" "$TMP/s"
}
t "skpo-advantage: disk full on state or stdout fails in one line, keeps the state, re-run gives the same step" advantage_disk_full

# --- the stage is killed while it writes ---------------------------------------------

# unfinished_refused DIR: the temp folder a killed save left is refused by a
# loader naming it, unless its completion marker was written (killed between
# the marker and the swap: then it is whole). Counts the refusals in $TMP/refused.
unfinished_refused() {
  for u in "$1".tmp.*; do
    [ -d "$u" ] || continue
    grep -q '"complete": true' "$u/skpo-checkpoint.json" 2>/dev/null && continue
    skpo-score --model "$u" </dev/null >/dev/null 2>"$TMP/err2"; urc=$?
    [ "$urc" = 1 ] && [ "$(wc -l <"$TMP/err2")" = 1 ] && grep -qF "'$u" "$TMP/err2" ||
      { echo "the unfinished '$u' was not refused naming it (exit $urc):"; cat "$TMP/err2"; ls -la "$u"; return 1; }
    echo x >>"$TMP/refused"
  done
}

# kill_every TOOL DIR KEEP REF STRIDE CMD...: for every STRIDE-th event N of CMD,
# SIGKILL it there; DIR must then equal KEEP (before) or REF (after), a temp
# folder left behind must be refused by a loader, and a plain re-run must
# complete to REF.
kill_every() {
  tool=$1 dir=$2 keep=$3 ref=$4 stride=$5; shift 5
  n=$(events /dev/null "$@") || return 1
  rm -rf "$dir" && cp -r "$keep" "$dir"
  [ "$n" -gt 3 ] || { echo "only $n events seen"; return 1; }
  : >"$TMP/refused"
  k=1
  while [ "$k" -le "$n" ]; do
    killed_at "$k" /dev/null "$@"; rc=$?
    [ "$rc" = 137 ] || { echo "event $k of $n: exit $rc, want 137 (SIGKILL)"; cat "$TMP/err"; return 1; }
    if ! same "$keep" "$dir" >/dev/null && ! same "$ref" "$dir" >/dev/null; then
      echo "killed at event $k of $n: '$dir' is neither the old nor the new one:"; ls -la "$dir" "$dir".* 2>&1 | head
      return 1
    fi
    unfinished_refused "$dir" || { echo "killed at event $k of $n"; return 1; }
    "$@" >/dev/null 2>"$TMP/err" || { echo "re-run after a kill at event $k failed:"; cat "$TMP/err"; return 1; }
    same "$ref" "$dir" || return 1
    rm -rf "$dir" "$dir".tmp.* "$dir".old.* && cp -r "$keep" "$dir"
    k=$((k + stride))
  done
  echo "$n events, killed at 1 in $stride; $(wc -l <"$TMP/refused") unfinished folders refused" >&2
  [ -s "$TMP/refused" ] || { echo "no kill left an unfinished folder to check"; return 1; }
}

if [ -n "$SHIM" ]; then
  init_killed() {
    skpo-init --config "$DEMO" --out "$TMP/ki.keep" --seed 1 2>/dev/null &&
    skpo-init --config "$DEMO" --out "$TMP/ki.ref" --seed 2 2>/dev/null &&
    kill_every skpo-init "$TMP/ki" "$TMP/ki.keep" "$TMP/ki.ref" 1 skpo-init --config "$DEMO" --out "$TMP/ki" --seed 2
  }
  t "skpo-init: SIGKILL at every write, sync and rename leaves the old or the new checkpoint whole" init_killed

  update_killed() {
    skpo-update --model "$M" --out "$TMP/ku.model" $A "$R" 2>/dev/null &&
    cp -r "$TMP/ku.model" "$TMP/ku.keep" &&
    skpo-update --model "$TMP/ku.model" --out "$TMP/ku.ref" $A "$R" 2>/dev/null &&
    kill_every skpo-update "$TMP/ku" "$TMP/ku.keep" "$TMP/ku.ref" 3 skpo-update --model "$TMP/ku.model" --out "$TMP/ku" $A "$R"
  }
  t "skpo-update: SIGKILL at every 3rd write, sync and rename leaves the old or the new checkpoint whole" update_killed

  # The state folder after a kill: CURRENT names the old state (then a re-run
  # gives the reference step, stdout included) or the new one (the step is
  # done), and the state it names is byte-identical to that one.
  state_consistent() { # DIR KEEP REF
    cur=$(cat "$1/CURRENT") || return 1
    for d in "$2" "$3"; do
      [ "$cur" = "$(cat "$d/CURRENT")" ] && cmp -s "$1/$cur" "$d/$cur" && return 0
    done
    echo "CURRENT -> '$cur' matches neither state"; return 1
  }
  advantage_killed() {
    in="$ADV/skpo_step2.msgpack.zst"
    skpo-advantage --mode skpo --state "$TMP/ka.keep" --metrics "$TMP/km.keep" "$ADV/skpo_step1.msgpack.zst" >/dev/null 2>&1 &&
    cp -r "$TMP/ka.keep" "$TMP/ka.ref" && skpo-advantage --mode skpo --state "$TMP/ka.ref" "$in" >"$TMP/ka.out" 2>/dev/null &&
    cp -r "$TMP/ka.keep" "$TMP/ka" && cp "$TMP/km.keep" "$TMP/km" || return 1
    n=$(events /dev/null skpo-advantage --mode skpo --state "$TMP/ka" --metrics "$TMP/km" "$in") || return 1
    k=1
    while [ "$k" -le "$n" ]; do
      rm -rf "$TMP/ka" && cp -r "$TMP/ka.keep" "$TMP/ka" && cp "$TMP/km.keep" "$TMP/km"
      killed_at "$k" /dev/null skpo-advantage --mode skpo --state "$TMP/ka" --metrics "$TMP/km" "$in"; rc=$?
      [ "$rc" = 137 ] || { echo "event $k of $n: exit $rc, want 137"; return 1; }
      state_consistent "$TMP/ka" "$TMP/ka.keep" "$TMP/ka.ref" || { echo "killed at event $k of $n"; return 1; }
      if [ "$(cat "$TMP/ka/CURRENT")" = "$(cat "$TMP/ka.keep/CURRENT")" ]; then
        skpo-advantage --mode skpo --state "$TMP/ka" --metrics "$TMP/km" "$in" >"$TMP/ka.out2" 2>"$TMP/err" &&
        [ "$(records "$TMP/ka.out2")" = "$(records "$TMP/ka.out")" ] && same "$TMP/ka.ref" "$TMP/ka" ||
          { echo "re-run after a kill at event $k"; cat "$TMP/err"; return 1; }
      fi
      # The metrics log (appended, not atomic) stays readable and holds step 2.
      skpo-cat "$TMP/km" >"$TMP/km.json" 2>"$TMP/err" && [ "$(grep -c '"kind":"metrics"' "$TMP/km.json")" -ge 2 ] ||
        { echo "metrics log after a kill at event $k:"; cat "$TMP/err"; return 1; }
      k=$((k + 1))
    done
    echo "$n events" >&2
  }
  t "skpo-advantage: SIGKILL at every write, sync and rename leaves the old or the new state and a readable metrics log" advantage_killed
else
  skip "kill tests" "cannot build tests/fault/killshim.c: $(head -n 1 "$TMP/shim.err")"
fi

# --- a checkpoint that is not whole is never loaded ----------------------------------

# Variants of a finished checkpoint: as a copy cut short before its marker
# leaves it, a marker still pending, a weight or optimizer file cut short or
# missing under a complete marker. Every loader refuses each in one line naming
# the folder; skpo-update writes nothing.
not_whole_refused() {
  skpo-update --model "$M" --out "$TMP/w0" $A "$R" 2>/dev/null || return 1
  grep -q '"complete": true' "$TMP/w0/skpo-checkpoint.json" || { echo "no complete marker"; return 1; }
  for how in nomarker pending cut-weights cut-optim no-optim; do
    rm -rf "$TMP/w1" && cp -r "$TMP/w0" "$TMP/w1"
    case $how in
      nomarker) rm "$TMP/w1/skpo-checkpoint.json"; want="has no completion marker";;
      pending) printf '{"format": "skpo-checkpoint-1", "complete": false}\n' >"$TMP/w1/skpo-checkpoint.json"; want="is incomplete";;
      cut-weights) truncate -s -1 "$TMP/w1/model.safetensors"; want="is not whole: 'model.safetensors' has";;
      cut-optim) truncate -s -100 "$TMP/w1/optim.safetensors"; want="is not whole: 'optim.safetensors' has";;
      no-optim) rm "$TMP/w1/optim.safetensors"; want="is not whole: 'optim.safetensors' is missing";;
    esac
    for tool in skpo-score skpo-update; do
      rm -rf "$TMP/w2"
      if [ "$tool" = skpo-score ]; then skpo-score --model "$TMP/w1" "$R" >/dev/null 2>"$TMP/err"; rc=$?
      else skpo-update --model "$TMP/w1" --out "$TMP/w2" $A "$R" 2>"$TMP/err"; rc=$?; fi
      one_line "$tool" "$rc" && grep -qF "checkpoint '$TMP/w1' $want" "$TMP/err" && [ ! -e "$TMP/w2" ] ||
        { echo "$tool on $how: want '$want'"; cat "$TMP/err"; return 1; }
    done
  done
  # a LoRA adapter folder: the same marker, checked by the adapter loader
  skpo-update --model "$M" --out "$TMP/la" --lora-rank 2 $A "$R" 2>/dev/null && rm "$TMP/la/skpo-checkpoint.json" &&
  skpo-score --model "$M" --adapter "$TMP/la" "$R" >/dev/null 2>"$TMP/err"; rc=$?
  one_line skpo-score "$rc" && grep -qF "checkpoint '$TMP/la' has no completion marker" "$TMP/err" || { cat "$TMP/err"; return 1; }
}
t "a checkpoint that is not whole (no marker, marker pending, a file cut short or missing) is never loaded, and named" not_whole_refused

# --- the input stream is cut --------------------------------------------------------

# cut_every TOOL IN STRIDE CHECK CMD...: IN re-written with a flush after each
# record, then cut at every record boundary and, every STRIDE-th record, in its
# middle; CMD (which reads the file $TMP/cut.zst) must fail in one line naming
# the truncation, and the CHECK command must hold after each run.
cut_every() {
  tool=$1 in=$2 stride=$3 check=$4; shift 4
  "$CUT" --reframe "$in" "$TMP/full.zst" >"$TMP/ends" || return 1
  prev=0 i=0 runs=0
  for end in $(cat "$TMP/ends"); do
    offs=$end
    [ $((i % stride)) = 0 ] && offs="$offs $(( (prev + end) / 2 ))"
    for off in $offs; do
      head -c "$off" "$TMP/full.zst" >"$TMP/cut.zst"
      "$@" >/dev/null 2>"$TMP/err"; rc=$?
      one_line "$tool" "$rc" && grep -q "truncated\|empty input" "$TMP/err" && $check ||
        { echo "cut at byte $off (record $((i + 1)))"; return 1; }
      runs=$((runs + 1))
    done
    prev=$end i=$((i + 1))
  done
  echo "$runs cuts" >&2
}
true_check() { true; }

if [ -x "$CUT" ]; then
  t "skpo-cat: a stream cut at any record boundary or mid-record fails in one line" \
    cut_every skpo-cat "$FIX/verify/rollouts.msgpack.zst" 1 true_check skpo-cat "$TMP/cut.zst"
  t "skpo-reward: a stream cut at any record boundary or mid-record fails in one line" \
    cut_every skpo-reward "$FIX/verify/rollouts.msgpack.zst" 2 true_check skpo-reward "$TMP/cut.zst"
  reward_stdin() { skpo-reward <"$TMP/cut.zst"; }
  t "skpo-reward: a cut stream on stdin fails in one line" \
    cut_every skpo-reward "$FIX/verify/rollouts.msgpack.zst" 4 true_check reward_stdin
  skpo-advantage --mode skpo --state "$TMP/cs" "$ADV/skpo_step1.msgpack.zst" >/dev/null 2>&1
  cp -r "$TMP/cs" "$TMP/cs.keep"
  state_kept() { same "$TMP/cs.keep" "$TMP/cs"; }
  t "skpo-advantage: a cut stream fails in one line and leaves the state alone" \
    cut_every skpo-advantage "$ADV/skpo_step2.msgpack.zst" 2 state_kept \
    skpo-advantage --mode skpo --state "$TMP/cs" "$TMP/cut.zst"
  t "skpo-score: a cut stream fails in one line" \
    cut_every skpo-score "$R" 3 true_check skpo-score --model "$M" "$TMP/cut.zst"
  no_update_out() { [ ! -e "$TMP/cu" ] && no_temp "$TMP/cu"; }
  t "skpo-update: a cut stream fails in one line and writes no checkpoint" \
    cut_every skpo-update "$R" 3 no_update_out skpo-update --model "$M" --out "$TMP/cu" $A "$TMP/cut.zst"
else
  skip "cut stream tests" "$CUT not built"
fi

# --- a checkpoint file is truncated -------------------------------------------------

truncated_checkpoint() {
  cp -r "$M" "$TMP/tr" || return 1
  size=$(wc -c <"$M/model.safetensors")
  for keep in 0 5 100 3000 $((size / 2)) $((size - 1)); do
    head -c "$keep" "$M/model.safetensors" >"$TMP/tr/model.safetensors"
    skpo-score --model "$TMP/tr" "$R" >/dev/null 2>"$TMP/err"; rc=$?
    one_line skpo-score "$rc" || { echo "score, $keep bytes kept"; return 1; }
    skpo-update --model "$TMP/tr" --out "$TMP/tro" $A "$R" 2>"$TMP/err"; rc=$?
    one_line skpo-update "$rc" && [ ! -e "$TMP/tro" ] || { echo "update, $keep bytes kept"; return 1; }
  done
}
t "a truncated model.safetensors fails score and update in one line" truncated_checkpoint

# --- NaN in weights, logits and gradients ---------------------------------------------

# poke FILE TENSOR BYTES COUNT: overwrite the first COUNT float32 of TENSOR in a
# safetensors file with the 4 bytes BYTES (printf escapes).
poke() {
  hl=$(od -An -tu8 -N8 "$1" | tr -d ' ')
  off=$(head -c $((8 + hl)) "$1" | tail -c "$hl" | grep -o "\"$2\":{[^}]*}" | sed 's/.*"data_offsets":\[\([0-9]*\),.*/\1/')
  [ -n "$off" ] || { echo "no tensor $2"; return 1; }
  j=0
  while [ "$j" -lt "$4" ]; do
    printf "$3" | dd of="$1" bs=1 seek=$((8 + hl + off + 4 * j)) conv=notrunc 2>/dev/null; j=$((j + 1))
  done
}

nan_weights() {
  cp -r "$M" "$TMP/nw" && poke "$TMP/nw/model.safetensors" model.norm.weight '\000\000\300\177' 1 || return 1
  skpo-score --model "$TMP/nw" "$R" >/dev/null 2>"$TMP/err"; one_line skpo-score $? && grep -q "non-finite" "$TMP/err" || return 1
  skpo-update --model "$TMP/nw" --out "$TMP/nwo" $A "$R" 2>"$TMP/err"; one_line skpo-update $? && grep -q "non-finite" "$TMP/err" &&
  [ ! -e "$TMP/nwo" ]
}
t "a NaN weight is refused at load by score and update, no checkpoint written" nan_weights

Q="$FIX/sample/tiny-qwen2"
P="$FIX/sample/prompts.msgpack.zst"
sample_non_finite() {
  cp -r "$Q" "$TMP/sq" && poke "$TMP/sq/model.safetensors" model.norm.weight '\377\377\177\177' 8 || return 1
  skpo-sample --model "$TMP/sq" --prompts "$P" --n 2 --max-tokens 8 >/dev/null 2>"$TMP/err"
  one_line skpo-sample $? && grep -q "NaN/Inf logits" "$TMP/err" || return 1
  poke "$TMP/sq/model.safetensors" model.norm.weight '\000\000\300\177' 1 || return 1
  skpo-sample --model "$TMP/sq" --prompts "$P" --n 2 --max-tokens 8 >/dev/null 2>"$TMP/err"
  one_line skpo-sample $? && grep -q "non-finite weight" "$TMP/err"
}
if [ -x "$TOP/bin/skpo-sample" ]; then
  t "skpo-sample stops on non-finite logits and refuses a NaN weight, in one line" sample_non_finite
fi

inf_logits() {
  # Finite weights at FLT_MAX in the final norm: the logits overflow.
  cp -r "$M" "$TMP/nl" && poke "$TMP/nl/model.safetensors" model.norm.weight '\377\377\177\177' 8 || return 1
  skpo-score --model "$TMP/nl" "$R" >/dev/null 2>"$TMP/err"; one_line skpo-score $? && grep -q "non-finite log-prob" "$TMP/err" || return 1
  skpo-update --model "$TMP/u1" --out "$TMP/u2" $A "$R" 2>/dev/null && cp -r "$TMP/u2" "$TMP/nl.keep" || return 1
  skpo-update --model "$TMP/nl" --out "$TMP/u2" $A "$R" 2>"$TMP/err"; one_line skpo-update $? &&
  # pi_old is recomputed before the first update: the overflow is found there.
  grep -Eq "step 1, recomputing old log-probs: .*(non-finite log-prob|old log-prob of token [0-9]+ is (nan|inf|-inf))" "$TMP/err" &&
    same "$TMP/nl.keep" "$TMP/u2" && no_temp "$TMP/u2" || { cat "$TMP/err"; return 1; }
  # With the rollout as pi_old the first mini-batch's training forward finds it.
  skpo-update --model "$TMP/nl" --out "$TMP/u2" --old-logp rollout $A "$R" 2>"$TMP/err"; one_line skpo-update $? &&
  grep -q "step 1, mini-batch 1 of 2: non-finite log-prob" "$TMP/err" && same "$TMP/nl.keep" "$TMP/u2" && no_temp "$TMP/u2"
}
t "non-finite logits stop score and update naming the step, the old checkpoint stays" inf_logits

inf_gradient() {
  # An advantage of 3e38 overflows the gradient, not the forward pass.
  skpo-cat "$R" | sed 's/"adv":[-0-9.e]*/"adv":3e38/g' | skpo-cat --pack >"$TMP/bigadv.zst" || return 1
  cp -r "$TMP/u2" "$TMP/ng.keep" || return 1
  skpo-update --model "$TMP/u1" --out "$TMP/u2" $A "$TMP/bigadv.zst" 2>"$TMP/err"; one_line skpo-update $? &&
  grep -q "gradient is not finite" "$TMP/err" && same "$TMP/ng.keep" "$TMP/u2" && no_temp "$TMP/u2" &&
  skpo-update --model "$TMP/u1" --out "$TMP/u2" $A "$R" 2>/dev/null
}
t "a non-finite gradient stops update naming the records, the old checkpoint stays, re-run completes" inf_gradient
