#!/bin/sh
# Every tool in bin/: --help prints usage to stdout (exit 0, stderr empty);
# an unknown flag exits 2 with a "skpo-TOOL:" message; a numeric flag given
# junk or an out-of-range value is rejected (exit 2), never clamped.
. "$(dirname "$0")/lib.sh"
found=0
for b in "$TOP"/bin/skpo-*; do
  [ -x "$b" ] || continue
  found=1
  name=$(basename "$b")
  help_ok() {
    "$b" --help >"$TMP/h.out" 2>"$TMP/h.err" || { echo "--help exit $?"; return 1; }
    [ ! -s "$TMP/h.err" ] || { echo "stderr not empty:"; cat "$TMP/h.err"; return 1; }
    grep -q "^usage: $name" "$TMP/h.out" || { echo "no usage line"; return 1; }
  }
  t "$name --help prints usage on stdout and exits 0" help_ok
  badflag() {
    "$b" --no-such-flag </dev/null >"$TMP/b.out" 2>"$TMP/b.err"; rc=$?
    [ "$rc" = 2 ] || { echo "exit $rc, want 2"; return 1; }
    grep -q "^$name: " "$TMP/b.err" || { echo "no '$name:' message"; cat "$TMP/b.err"; return 1; }
    [ ! -s "$TMP/b.out" ] || { echo "stdout not empty"; return 1; }
  }
  t "$name rejects an unknown flag with exit 2 and a $name: message" badflag
  # First integer option listed in --help (a "--name N" line) gets junk and a huge value.
  opt=$("$b" --help | sed -n 's/^ *\(-., \)\{0,1\}--\([a-z0-9-]*\) \(N\|K\|G\|SEED\|STEP\|COUNT\)\b.*/\2/p' | head -n 1)
  if [ -n "$opt" ]; then
    badnum() {
      for v in abc 1e999 -99999999999999999999 99999999999999999999; do
        "$b" --"$opt" "$v" </dev/null >/dev/null 2>"$TMP/n.err"; rc=$?
        [ "$rc" = 2 ] || { echo "--$opt $v: exit $rc, want 2"; return 1; }
      done
    }
    t "$name rejects junk and out-of-range numbers for --$opt" badnum
  fi
done
[ "$found" = 1 ] || skip "help loop" "no tools built"
