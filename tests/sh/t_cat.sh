#!/bin/sh
# skpo-cat: JSON lines out and back (--pack), filters, --view, --stats,
# several inputs, every bad-input case (one-line error naming record and byte
# offset, exit 1, good records already printed), usage errors, and printing
# as records arrive at the end of a live pipeline.
. "$(dirname "$0")/lib.sh"
R=$FIX/records
command -v zstd >/dev/null || { skip "t_cat" "zstd command not found (make deps)"; exit 0; }

# --- output and round trips ------------------------------------------------------

t "committed stream prints as the committed JSON lines" \
  sh -c "skpo-cat '$R/rollouts.msgpack.zst' | cmp - '$R/rollouts.jsonl'"

pack_roundtrip() {
  skpo-cat --pack --no-meta "$R/rollouts.jsonl" >"$TMP/a.zst" || return 1
  skpo-cat "$TMP/a.zst" | cmp - "$R/rollouts.jsonl" || return 1
  # and records -> JSON -> records is byte-exact on the msgpack level
  skpo-cat "$TMP/a.zst" | skpo-cat --pack --no-meta >"$TMP/b.zst" || return 1
  zstd -dc "$TMP/a.zst" >"$TMP/a.mp" && zstd -dc "$TMP/b.zst" >"$TMP/b.mp" && cmp "$TMP/a.mp" "$TMP/b.mp"
}
t "pack then cat gives back the same JSON and the same msgpack bytes" pack_roundtrip

pack_types() {
  skpo-cat --pack --no-meta "$R/rollouts.jsonl" | zstd -dc >"$TMP/p.mp" || return 1
  # tokens are a bin of 4 x int32 (c4 10), reward a float64 (cb), step a fixint
  grep -c "$(printf 'tokens\304\020')" "$TMP/p.mp" >/dev/null || { echo "tokens not bin8 of 16 bytes"; return 1; }
  grep -c "$(printf 'reward\313')" "$TMP/p.mp" >/dev/null || { echo "reward not float64"; return 1; }
  grep -c "$(printf 'step\003')" "$TMP/p.mp" >/dev/null || { echo "step not an int"; return 1; }
}
t "pack converts schema fields to their binary types and keeps ints ints" pack_types

pack_meta() {
  echo '{"kind":"up","uid":"a"}' | skpo-cat --pack >"$TMP/m.zst" || return 1
  skpo-cat --head 1 "$TMP/m.zst" | grep -q '^{"kind":"meta","schema":1,"tool":"skpo-cat","argv":\["skpo-cat","--pack"\],"time":"' || {
    skpo-cat "$TMP/m.zst"; return 1; }
  [ "$(skpo-cat --count "$TMP/m.zst")" = 2 ]
}
t "pack starts its stream with a meta record (schema, tool, argv, time)" pack_meta

nonfinite() {
  printf '%s\n' '{"kind":"down","logp":[-0.5,"-Infinity","NaN","Infinity"],"reward":"NaN","weird":1.5}' \
    | skpo-cat --pack --no-meta | skpo-cat >"$TMP/nf.json" || return 1
  want='{"kind":"down","logp":[-0.5,"-Infinity","NaN","Infinity"],"reward":"NaN","weird":1.5}'
  [ "$(cat "$TMP/nf.json")" = "$want" ] || { echo "got: $(cat "$TMP/nf.json")"; return 1; }
}
t "non-finite floats print as the strings NaN/Infinity/-Infinity and pack back" nonfinite

# --- filters ---------------------------------------------------------------------------

where_and() {
  out=$(skpo-cat --where kind=down --where reward=1 --fields uid,reward,tokens "$R/rollouts.msgpack.zst")
  [ "$out" = '{"uid":"p1.s0.d0","reward":1.0,"tokens":[1378,5109,13,576]}' ] || { echo "got: $out"; return 1; }
}
t "--where is an AND of FIELD=VALUE, --fields picks and orders fields" where_and

where_types() {
  [ "$(skpo-cat --count --where step=3 "$R/rollouts.msgpack.zst")" = 6 ] || return 1
  [ "$(skpo-cat --count --where correct=false "$R/rollouts.msgpack.zst")" = 1 ] || return 1
  [ "$(skpo-cat --count --where 'tokens=[1378]' "$R/rollouts.msgpack.zst")" = 1 ] || return 1
  [ "$(skpo-cat --count --where gid=p2/3 "$R/rollouts.msgpack.zst")" = 2 ] || return 1
  [ "$(skpo-cat --count --where nosuch=1 "$R/rollouts.msgpack.zst")" = 0 ] || return 1
  [ "$(skpo-cat --count --where 'x=-7' "$R/rollouts.msgpack.zst")" = 1 ]
}
t "--where compares ints, bools, arrays and strings by value; a missing field never matches" where_types

fields_pack() {
  skpo-cat --pack --no-meta --fields uid,kind --where kind=down "$R/rollouts.jsonl" | skpo-cat >"$TMP/fp.json" || return 1
  [ "$(cat "$TMP/fp.json")" = "$(printf '%s\n' '{"uid":"p1.s0.d0","kind":"down"}' '{"uid":"p1.s0.d1","kind":"down"}')" ] || {
    cat "$TMP/fp.json"; return 1; }
}
t "--pack applies --where and --fields too" fields_pack

head_count() {
  [ "$(skpo-cat --head 2 "$R/rollouts.msgpack.zst" | wc -l)" = 2 ] || return 1
  [ "$(skpo-cat --count "$R/rollouts.msgpack.zst")" = 8 ] || return 1
  [ "$(skpo-cat --count --head 3 "$R/rollouts.msgpack.zst")" = 3 ] || return 1
  [ "$(skpo-cat --head 0 "$R/rollouts.msgpack.zst" | wc -c)" = 0 ]
}
t "--head N stops after N records and --count counts" head_count

several_inputs() {
  n=$(skpo-cat --count "$R/rollouts.msgpack.zst" - "$R/rollouts.msgpack.zst" <"$R/rollouts.msgpack.zst")
  [ "$n" = 24 ] || { echo "count $n"; return 1; }
  cat "$R/rollouts.msgpack.zst" "$R/rollouts.msgpack.zst" >"$TMP/cc.zst"
  [ "$(skpo-cat --count "$TMP/cc.zst")" = 16 ] && [ "$(skpo-cat --count <"$TMP/cc.zst")" = 16 ]
}
t "files and - read one after another; concatenated streams read as one" several_inputs

view() {
  skpo-cat --view "$R/rollouts.msgpack.zst" >"$TMP/v.txt" || return 1
  cmp "$TMP/v.txt" "$R/rollouts.view.txt" || { diff "$TMP/v.txt" "$R/rollouts.view.txt"; return 1; }
}
t "--view shows down records grouped under their up segment" view

stats() {
  skpo-cat --stats "$R/rollouts.msgpack.zst" >"$TMP/s.txt" || return 1
  cmp "$TMP/s.txt" "$R/rollouts.stats.txt" || { diff "$TMP/s.txt" "$R/rollouts.stats.txt"; return 1; }
}
t "--stats gives counts per kind, mean reward, length percentiles, advantage mean/std" stats

# --- bad input ------------------------------------------------------------------------------

# bad_case NAME FILE WHAT N GOOD: exit 1, one stderr line
# "skpo-cat: WHAT... at record N (byte offset B)", GOOD records on stdout first.
bad_case() {
  skpo-cat "$2" >"$TMP/bad.out" 2>"$TMP/bad.err"; rc=$?
  [ "$rc" = 1 ] || { echo "exit $rc, want 1"; return 1; }
  [ "$(wc -l <"$TMP/bad.err")" = 1 ] || { echo "stderr is not one line:"; cat "$TMP/bad.err"; return 1; }
  grep -Eq "^skpo-cat: $3.* at record $4 \(byte offset [0-9]+\)$" "$TMP/bad.err" || { cat "$TMP/bad.err"; return 1; }
  [ "$(wc -l <"$TMP/bad.out")" = "$5" ] || { echo "$(wc -l <"$TMP/bad.out") records printed, want $5"; return 1; }
}

good2='\202\244kind\242up\243uid\241a\202\244kind\242up\243uid\241b'
mk() { printf "$good2$1" | zstd -q -c >"$TMP/$2"; }
mk '\221\001' nonmap.zst
mk '\201\246reward\2431.0' wrongtype.zst
mk '\201\244text\242\300\257' badutf8.zst
mk '\201\246tokens\304\005abcde' oddbin.zst
mk '\201\244kind' cutrec.zst
cat "$R/rollouts.msgpack.zst" "$R/rollouts.msgpack.zst" >"$TMP/two.zst"
size=$(wc -c <"$TMP/two.zst")
head -c $((size - 5)) "$TMP/two.zst" >"$TMP/trunc.zst"
{ cat "$R/rollouts.msgpack.zst"; printf 'garbage!'; } >"$TMP/garbage.zst"
printf 'not a stream\n' >"$TMP/plain.txt"
: >"$TMP/empty.zst"

t "a value that is not a map is an error after the good records" bad_case x "$TMP/nonmap.zst" "record is not a msgpack map" 3 2
t "a schema field of the wrong type is an error" bad_case x "$TMP/wrongtype.zst" "field 'reward' is str, want float" 3 2
t "invalid UTF-8 in a text field is an error" bad_case x "$TMP/badutf8.zst" "field 'text' is not valid UTF-8" 3 2
t "an int32 array of 5 bytes is an error" bad_case x "$TMP/oddbin.zst" "field 'tokens' is a bin of 5 bytes" 3 2
t "a record cut short inside a whole frame is an error" bad_case x "$TMP/cutrec.zst" "truncated record" 3 2
t "a truncated zstd frame is an error after every whole record" bad_case x "$TMP/trunc.zst" "truncated zstd frame" 9 8
t "garbage after a stream is an error after every record" bad_case x "$TMP/garbage.zst" "corrupt zstd data" 9 8
t "input that is not zstd is an error at record 1" bad_case x "$TMP/plain.txt" "corrupt zstd data" 1 0
t "empty input is an error" bad_case x "$TMP/empty.zst" "empty input" 1 0

bad_json() {
  printf '%s\n' '{"kind":"up"}' '{"kind":"up","reward":"x"}' | skpo-cat --pack --no-meta >"$TMP/j.zst" 2>"$TMP/j.err"; rc=$?
  [ "$rc" = 1 ] && grep -q "^skpo-cat: field 'reward' must be a number at line 2 of 'stdin'$" "$TMP/j.err" || { cat "$TMP/j.err"; return 1; }
  printf '%s\n' '[1]' | skpo-cat --pack >/dev/null 2>"$TMP/j.err"; [ $? = 1 ] || return 1
  printf '%s\n' '{"tokens":[1.5]}' | skpo-cat --pack >/dev/null 2>"$TMP/j.err"; [ $? = 1 ] || return 1
  printf '%s\n' '{"tokens":[4294967296]}' | skpo-cat --pack >/dev/null 2>"$TMP/j.err"; [ $? = 1 ] || return 1
  printf '%s\n' '{"kind":"up",' | skpo-cat --pack >/dev/null 2>"$TMP/j.err"; [ $? = 1 ] && grep -q "bad JSON" "$TMP/j.err"
}
t "--pack rejects bad JSON, non-objects and wrong schema types with the line number" bad_json

missing() {
  skpo-cat "$TMP/nope.zst" >/dev/null 2>"$TMP/m.err"; rc=$?
  [ "$rc" = 1 ] && grep -q "^skpo-cat: cannot open '$TMP/nope.zst'" "$TMP/m.err"
}
t "a missing input file is an error naming it" missing

schema_documented() {
  skpo-cat --schema >"$TMP/schema.txt" || return 1
  [ "$(wc -l <"$TMP/schema.txt")" -ge 29 ] || return 1
  while read -r name type _; do
    grep -qF "| \`$name\` | $type |" "$TOP/docs/records.md" || { echo "'$name' ($type) is not in docs/records.md"; return 1; }
  done <"$TMP/schema.txt"
}
t "every schema field is documented in docs/records.md with its type" schema_documented

# --- usage -------------------------------------------------------------------------------------

help_ok() {
  skpo-cat --help >"$TMP/h.out" 2>"$TMP/h.err" && [ ! -s "$TMP/h.err" ] && grep -q '^usage: skpo-cat ' "$TMP/h.out" &&
    grep -q -- '--where FIELD=VALUE' "$TMP/h.out"
}
t "--help prints usage on stdout and exits 0" help_ok

usage_errors() {
  for args in "--bogus" "--head -1" "--head x" "--where noequals" "--where =v" "--count --view" "--stats --pack" \
              "--fields a --count" "--no-meta" "--fields ,"; do
    # shellcheck disable=SC2086
    skpo-cat $args "$R/rollouts.msgpack.zst" >"$TMP/u.out" 2>"$TMP/u.err"; rc=$?
    [ "$rc" = 2 ] || { echo "'$args': exit $rc, want 2"; return 1; }
    [ ! -s "$TMP/u.out" ] || { echo "'$args': stdout not empty"; return 1; }
    grep -q '^skpo-cat: ' "$TMP/u.err" || { echo "'$args': no message"; return 1; }
  done
}
t "bad flags and conflicting modes exit 2 with a message" usage_errors

# --- live pipeline --------------------------------------------------------------------------------

# The producer writes record 1, then waits (up to 10 s) until it sees skpo-cat
# at the end of the pipeline has printed it, and only then writes record 2.
# The output goes through a pipe (cat), as in `... | skpo-cat | less`.
streaming() {
  out=$TMP/live.out
  : >"$out"
  rm -f "$TMP/timeout"
  {
    echo '{"kind":"up","uid":"first"}'
    i=0
    until grep -q '"first"' "$out"; do
      i=$((i + 1))
      [ "$i" -gt 100 ] && { : >"$TMP/timeout"; break; }
      sleep 0.1
    done
    echo '{"kind":"up","uid":"second"}'
  } | skpo-cat --pack | skpo-cat --fields uid | cat >"$out"
  [ ! -f "$TMP/timeout" ] || { echo "record 1 was not printed before record 2 was written"; return 1; }
  [ "$(cat "$out")" = "$(printf '{}\n{"uid":"first"}\n{"uid":"second"}')" ] || { cat "$out"; return 1; }
}
t "at the end of a live pipeline a record prints before the next one is written" streaming

streaming_view() {
  out=$TMP/live2.out
  : >"$out"
  rm -f "$TMP/timeout"
  {
    echo '{"kind":"up","uid":"u9","text":"hello"}'
    i=0
    until grep -q 'uid=u9' "$out"; do
      i=$((i + 1))
      [ "$i" -gt 100 ] && { : >"$TMP/timeout"; break; }
      sleep 0.1
    done
    echo '{"kind":"down","uid":"u9.0","gid":"u9","reward":1}'
  } | skpo-cat --pack --no-meta | skpo-cat --view | cat >"$out"
  [ ! -f "$TMP/timeout" ] && grep -q 'uid=u9.0' "$out"
}
t "--view also prints each record as it arrives" streaming_view

# --shuffle: a permutation of the selected records, fixed by the seed, changed by another
seq 1 50 | awk '{ print "{\"kind\":\"prompt\",\"pid\":\"p" $1 "\"}" }' | skpo-cat --pack >"$TMP/fifty.zst"
t "--shuffle SEED prints a permutation of the selected records, the same for a seed, another for another seed" sh -c '
  skpo-cat --where kind=prompt --shuffle 7 --fields pid "$0" >"$0.a" && skpo-cat --where kind=prompt --shuffle 7 --fields pid "$0" >"$0.b" &&
  skpo-cat --where kind=prompt --shuffle 8 --fields pid "$0" >"$0.c" && cmp -s "$0.a" "$0.b" && ! cmp -s "$0.a" "$0.c" &&
  [ "$(sort "$0.a" | md5sum)" = "$(skpo-cat --where kind=prompt --fields pid "$0" | sort | md5sum)" ] &&
  ! cmp -s "$0.a" "$(skpo-cat --where kind=prompt --fields pid "$0" >"$0.d"; echo "$0.d")" &&
  [ "$(skpo-cat --where kind=prompt --shuffle 7 --head 5 --fields pid "$0")" = "$(head -n 5 "$0.a")" ]' "$TMP/fifty.zst"
