#!/bin/sh
# Every tool in bin/: --help and -h print usage to stdout (exit 0, stderr
# empty); an unknown flag, a missing option value or a stray flag exits 2 with
# a "skpo-TOOL:" message and nothing on stdout; EVERY numeric option listed in
# --help (a "--name N|K|G|S|B|T|P|E|C|X|W|R|L" line) rejects junk, NaN,
# overflow and huge integers with exit 2 and a message naming the option; and
# a table of out-of-range values is rejected, never clamped.
. "$(dirname "$0")/lib.sh"
found=0
for b in "$TOP"/bin/skpo-*; do
  [ -x "$b" ] || continue
  found=1
  name=$(basename "$b")
  help_ok() {
    for h in --help -h; do
      "$b" "$h" >"$TMP/h.out" 2>"$TMP/h.err" || { echo "$h exit $?"; return 1; }
      [ ! -s "$TMP/h.err" ] || { echo "$h: stderr not empty:"; cat "$TMP/h.err"; return 1; }
      grep -q "^usage: $name" "$TMP/h.out" || { echo "$h: no usage line"; return 1; }
    done
  }
  t "$name --help and -h print usage on stdout and exit 0" help_ok
  # usage_error ARGS...: exit 2, a "$name: " line on stderr, stdout empty.
  usage_error() {
    "$b" "$@" </dev/null >"$TMP/b.out" 2>"$TMP/b.err"; rc=$?
    [ "$rc" = 2 ] || { echo "$*: exit $rc, want 2"; return 1; }
    grep -q "^$name: " "$TMP/b.err" || { echo "$*: no '$name:' message"; cat "$TMP/b.err"; return 1; }
    [ ! -s "$TMP/b.out" ] || { echo "$*: stdout not empty"; return 1; }
  }
  bad_flags() { usage_error --no-such-flag && usage_error -Z && usage_error --help=x; }
  t "$name rejects unknown flags with exit 2 and a $name: message" bad_flags
  opts=$("$b" --help | sed -n 's/^ *\(-., \)\{0,1\}--\([a-z0-9-]*\) \(N\|K\|G\|S\|B\|T\|P\|E\|C\|X\|W\|R\|L\) .*/\2:\3/p')
  # Options whose one-letter metavariable is a word, not a number.
  case "$name" in
    skpo-prep) opts=$(echo "$opts" | grep -vx 'wording:W') ;;
    skpo-splice) opts=$(echo "$opts" | grep -vx 'layout:L') ;;
    skpo-reward) opts=$(echo "$opts" | grep -vx 'reward:R') ;;
  esac
  if [ -n "$opts" ]; then
    last=$(echo "$opts" | tail -n 1 | cut -d: -f1)
    t "$name: an option missing its value is a usage error" usage_error --"$last"
    badnum() {
      n=0
      for om in $opts; do
        opt=${om%:*}
        # Integer counts (N K G S B L) also get integers past 64 bits; a
        # float option may legitimately take 1e20.
        case ${om#*:} in N|K|G|S|B|L) huge='99999999999999999999 -99999999999999999999 1.5' ;; *) huge= ;; esac
        case "$name:$opt" in skpo-update:loss-norm|skpo-signsim:b) huge= ;; esac  # real numbers despite N, B
        for v in abc 1x '' nan inf 1e999 0x $huge; do
          usage_error --"$opt" "$v" || return 1
          grep -q -- "--$opt" "$TMP/b.err" || { echo "--$opt '$v': message does not name the option"; cat "$TMP/b.err"; return 1; }
          n=$((n + 1))
        done
      done
      echo "$n values" >&2
    }
    t "$name: every numeric option rejects junk, NaN, overflow and huge values naming it ($(echo $opts | wc -w) options)" badnum
  fi
done
[ "$found" = 1 ] || { skip "help loop" "no tools built"; exit 0; }

# Values of the right type but outside the option's range: rejected with the
# option named, never clamped to the nearest allowed value.
out_of_range() {
  bad=0 n=0
  while read -r tool opt v; do
    [ -x "$TOP/bin/$tool" ] || continue
    "$TOP/bin/$tool" --"$opt" "$v" </dev/null >/dev/null 2>"$TMP/r.err"; rc=$?
    if [ "$rc" != 2 ] || ! grep -q -- "--$opt" "$TMP/r.err"; then
      echo "$tool --$opt $v: exit $rc: $(head -n 1 "$TMP/r.err")"; bad=1
    fi
    n=$((n + 1))
  done <<'EOF2'
skpo-sample top-p 1.5
skpo-sample top-p -0.1
skpo-sample temperature -1
skpo-sample top-k -1
skpo-sample n 0
skpo-sample group 0
skpo-sample max-tokens 0
skpo-sample shard 2/2
skpo-sample shard 0/0
skpo-splice top-p 1.01
skpo-splice temperature -0.5
skpo-splice group 0
skpo-splice group -8
skpo-score temperature 0
skpo-score temperature -1
skpo-score batch-tokens 0
skpo-advantage group 0
skpo-advantage rho-min -0.1
skpo-advantage rho-max 1.5
skpo-advantage tau 0
skpo-advantage tau -8
skpo-advantage prio-eps -0.05
skpo-advantage temperature 0
skpo-advantage lq-init 0
skpo-advantage w-up -0.5
skpo-update lr -1e-6
skpo-update beta1 1
skpo-update beta2 1.5
skpo-update adam-eps -1e-8
skpo-update refine-gamma 0
skpo-update weight-decay -0.1
skpo-update max-grad-norm -1
skpo-update up-clip-low -0.2
skpo-update down-clip-high -0.28
skpo-update temperature 0
skpo-update minibatch 0
skpo-update micro-tokens 0
skpo-init std -0.02
skpo-init std 0
skpo-cat head -1
skpo-reward overlong-max -1
skpo-reward overlong-cache -1
EOF2
  echo "$n values" >&2
  [ "$bad" = 0 ]
}
t "out-of-range numbers are rejected naming the option, never clamped" out_of_range
