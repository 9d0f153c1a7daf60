#!/bin/sh
# t_damaged.sh - damaged input that used to pass: each file of
# tests/fixtures/damaged (tests/ref/make_damaged_fixtures.py) holds one defect
# a consuming tool must refuse with one line `skpo-TOOL: what (where)` and exit 1.
. "$(dirname "$0")/lib.sh"
D="$FIX/damaged"
M="$FIX/update/model"
export SKPO_DEVICE=cpu OMP_NUM_THREADS=1

# refuse TOOL FILE PATTERN [ARGS...]: exit 1, one "skpo-TOOL: " line matching PATTERN, no output written.
refuse() {
  tool=$1 f=$2 pat=$3; shift 3
  "$tool" "$@" "$D/$f.msgpack.zst" >"$TMP/out" 2>"$TMP/err"; rc=$?
  [ "$rc" = 1 ] || { echo "$tool $f: exit $rc, want 1"; cat "$TMP/err"; return 1; }
  [ "$(wc -l <"$TMP/err")" -le 2 ] || { echo "more than one error line"; cat "$TMP/err"; return 1; }
  grep -q "^$tool: .*$pat" "$TMP/err" || { echo "want '$pat':"; cat "$TMP/err"; return 1; }
}

t "a NaN reward reaching skpo-eval is refused, naming the record and the file" \
  refuse skpo-eval nan-reward "full record 'p0:1:1': reward is nan, not a finite number (.*nan-reward.msgpack.zst)"
t "an infinite adv reaching skpo-update is refused" \
  refuse skpo-update inf-adv "record 'p0:1:1': advantage is not finite" --model "$M" --out "$TMP/o1"
t "a NaN weight reaching skpo-update is refused" \
  refuse skpo-update nan-weight "record 'p0:1:1': 'weight' is not a finite number" --model "$M" --out "$TMP/o2"
t "a record whose kind is nil is refused (skpo-update)" \
  refuse skpo-update nil-kind "field 'kind' is nil" --model "$M" --out "$TMP/o3"
t "a record whose kind is nil is refused (skpo-eval)" \
  refuse skpo-eval nil-kind "field 'kind' is nil"
t "a full record without tokens is refused by skpo-update, naming it" \
  refuse skpo-update full-no-tokens "full record 'p0:1:1' has no 'tokens' (in '.*full-no-tokens.msgpack.zst' at record 3)" --model "$M" --out "$TMP/o4"
t "a full record without prompt is refused by skpo-update, naming it" \
  refuse skpo-update full-no-prompt "full record 'p0:1:1' has no 'prompt' (in '.*' at record 3)" --model "$M" --out "$TMP/o5"
t "a spliced down record without tokens is refused by skpo-update, naming it" \
  refuse skpo-update down-no-tokens "down record 'p0:1:1' has no 'tokens'" --model "$M" --out "$TMP/o6"
t "a full record without tokens is refused by skpo-advantage" \
  refuse skpo-advantage full-no-tokens "full record 'p0:1:1' has no 'tokens'" --mode grpo --group 2 --state "$TMP/st"
t "nothing was written by the refused updates" sh -c "! ls -d '$TMP'/o? 2>/dev/null"
