#!/bin/sh
# skpo-sample / skpo-splice as black boxes: bad prompt records and flag
# combinations fail with clear messages, identical runs give identical bytes,
# and splice writes its first groups while its input is still open.
# Record contents are checked in tests/unit/test_sampler_tools.c.
. "$(dirname "$0")/lib.sh"
F="$FIX/sample"
M="$F/tiny-qwen2"
export OMP_NUM_THREADS=1

bad_record() { # fixture, expected message part
  skpo-sample --model "$M" --prompts "$F/bad-$1.msgpack.zst" --n 2 --max-tokens 4 >"$TMP/bad.out" 2>"$TMP/bad.err"
  rc=$?
  [ "$rc" = 1 ] || { echo "exit $rc, want 1"; cat "$TMP/bad.err"; return 1; }
  grep -q "^skpo-sample: prompt record .*bad-$1.*$2.*at record 2" "$TMP/bad.err" || { cat "$TMP/bad.err"; return 1; }
}
t "sample refuses a prompt record without prompt ids, naming its pid" bad_record missing "has no 'prompt'"
t "sample refuses an empty prompt, naming its pid" bad_record empty "field 'prompt' is empty"
t "sample refuses a token id outside the vocabulary, naming its pid" bad_record vocab "token 2 is id 300, outside the vocabulary"

usage() { # expected message, args...
  want=$1; shift
  "$@" </dev/null >"$TMP/u.out" 2>"$TMP/u.err"; rc=$?
  [ "$rc" = 2 ] || { echo "exit $rc, want 2"; cat "$TMP/u.err"; return 1; }
  grep -q "$want" "$TMP/u.err" || { cat "$TMP/u.err"; return 1; }
  [ ! -s "$TMP/u.out" ] || { echo "stdout not empty"; return 1; }
}
P="$F/prompts.msgpack.zst"
t "sample wants exactly one of --n and --segment" usage "exactly one of --n K and --segment" \
  skpo-sample --model "$M" --prompts "$P" --n 2 --segment
t "sample rejects a malformed --shard" usage "not I/N" skpo-sample --model "$M" --prompts "$P" --n 1 --shard 2/2
t "sample rejects top-p 0" usage "top-p" skpo-sample --model "$M" --prompts "$P" --n 1 --top-p 0
t "splice says --layout inside is not implemented" usage "not implemented" skpo-splice --model "$M" --layout inside
t "splice rejects an unknown layout" usage "not skip or continual" skpo-splice --model "$M" --layout sideways

missing_model() {
  skpo-sample --model "$TMP/nope" --prompts "$P" --n 1 >/dev/null 2>"$TMP/m.err"; rc=$?
  [ "$rc" = 1 ] && grep -q "^skpo-sample: " "$TMP/m.err"
}
t "sample fails with a message for a missing checkpoint" missing_model

drawing_more_than_exist() {
  skpo-sample --model "$M" --prompts "$P" --segment --prompts-per-step 7 >/dev/null 2>"$TMP/d.err"; rc=$?
  [ "$rc" = 1 ] && grep -q "more than the 6 prompts" "$TMP/d.err"
}
t "sample refuses to draw more prompts than the file holds" drawing_more_than_exist

same_bytes() {
  for i in 1 2; do
    skpo-sample --model "$M" --prompts "$P" --segment --all --group 3 --seed 4 >"$TMP/r$i.zst" || return 1
    # the meta record holds the start time: blank it, compare the rest
    zstd -dc "$TMP/r$i.zst" | LC_ALL=C sed 's/20[0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9:]*Z/TIME/' >"$TMP/r$i.raw" || return 1
  done
  [ -s "$TMP/r1.raw" ] && cmp -s "$TMP/r1.raw" "$TMP/r2.raw"
}
t "sample with the same seed writes the same records" same_bytes

# Held-out evals inside a run: --seed-step 0 keeps the draw when --step changes.
seed_step() {
  for s in 3 5; do
    skpo-sample --model "$M" --prompts "$P" --n 2 --max-tokens 6 --seed 4 --step $s --seed-step 0 >"$TMP/e$s.zst" || return 1
    skpo-sample --model "$M" --prompts "$P" --n 2 --max-tokens 6 --seed 4 --step $s >"$TMP/h$s.zst" || return 1
  done
  tok() { skpo-cat --where kind=full "$1" | sed 's/.*"tokens":\(\[[^]]*\]\).*/\1/'; }
  [ "$(tok "$TMP/e3.zst")" = "$(tok "$TMP/e5.zst")" ] || { echo "--seed-step 0 draws differ"; return 1; }
  [ "$(tok "$TMP/h3.zst")" != "$(tok "$TMP/h5.zst")" ] || { echo "without it the step does not change the draw"; return 1; }
  skpo-cat --where kind=full "$TMP/e5.zst" | head -1 | grep -q '"step":5'
}
if command -v skpo-cat >/dev/null; then
  t "--seed-step 0 gives the same draw at every --step (records still name the step)" seed_step
fi

pass_through() {
  skpo-sample --model "$M" --prompts "$P" --n 1 --max-tokens 3 >"$TMP/full.zst" || return 1
  skpo-splice --model "$M" --group 2 <"$TMP/full.zst" >"$TMP/pt.zst" || return 1
  # no up records: splice writes its meta, then the input records byte for byte
  zstd -dc "$TMP/full.zst" >"$TMP/in.raw" && zstd -dc "$TMP/pt.zst" >"$TMP/out.raw" || return 1
  a=$(wc -c <"$TMP/in.raw"); b=$(wc -c <"$TMP/out.raw")
  [ "$b" -gt "$a" ] && tail -c "$a" "$TMP/out.raw" | cmp -s - "$TMP/in.raw"
}
t "splice passes records other than up through unchanged" pass_through

overlap() {
  skpo-sample --model "$M" --prompts "$P" --segment --all --group 2 >"$TMP/up.zst" || return 1
  # input stays open for 4 s after the up records: output must appear before that
  { cat "$TMP/up.zst"; sleep 4; } | skpo-splice --model "$M" --group 2 --max-tokens 4 >"$TMP/ov.zst" &
  pid=$!
  sleep 2.5
  early=$(zstd -dc "$TMP/ov.zst" 2>/dev/null | grep -c "down" || true)
  wait $pid || return 1
  [ "$early" -gt 0 ] || { echo "no down records before the input ended"; return 1; }
}
t "splice writes down records before its input ends" overlap

corrupt() {
  head -c 150 "$TMP/up.zst" | skpo-splice --model "$M" --group 2 >/dev/null 2>"$TMP/c.err"; rc=$?
  [ "$rc" = 1 ] && grep -q "^skpo-splice: " "$TMP/c.err"
}
t "splice fails on a truncated input stream" corrupt

edge_segments() {
  # an up record whose [s,q] fills the 128-position context, one with an empty segment, a metrics record
  cat >"$TMP/ups.jsonl" <<JSON
{"kind":"up","pid":"x1","uid":"x1:0:up","step":0,"prompt":[48,82,79,66],"tokens":[$(seq -s, 3 127)],"answer":"5"}
{"kind":"up","pid":"x2","uid":"x2:0:up","step":0,"prompt":[48,82,79,66],"tokens":[],"answer":"5"}
{"kind":"metrics","note":"passes"}
JSON
  skpo-cat --pack <"$TMP/ups.jsonl" >"$TMP/ups.zst" || return 1
  skpo-splice --model "$M" --group 2 --max-tokens 5 <"$TMP/ups.zst" >"$TMP/edge.zst" 2>"$TMP/edge.err" || return 1
  grep -q "fills the context of 128: 2 empty responses (pid x1)" "$TMP/edge.err" || { cat "$TMP/edge.err"; return 1; }
  skpo-cat --fields kind,gid,finish,tokens "$TMP/edge.zst" | tail -n 7 >"$TMP/edge.txt"
  [ "$(sed -n 2p "$TMP/edge.txt")" = '{"kind":"down","gid":"x1:0:up","finish":"length","tokens":[]}' ] || { cat "$TMP/edge.txt"; return 1; }
  [ "$(grep -c '"gid":"x2:0:up","finish":"length","tokens":\[[0-9]*,[0-9]*,[0-9]*,[0-9]*,[0-9]*\]' "$TMP/edge.txt")" = 2 ] &&
    [ "$(tail -n 1 "$TMP/edge.txt")" = '{"kind":"metrics"}' ]
}
t "splice gives empty length responses when [s,q] fills the context, handles an empty segment, keeps order" edge_segments

# --stats: the tokens the engine generated (x2's two 5-token responses; x1 had no room)
splice_stats() {
  skpo-splice --model "$M" --group 2 --max-tokens 5 --stats <"$TMP/ups.zst" >/dev/null 2>"$TMP/st.err" &&
  grep -q "^skpo-splice: generated 10 tokens in .*peak KV [0-9]* blocks" "$TMP/st.err" || { cat "$TMP/st.err"; return 1; }
}
t "splice --stats says how many tokens it generated and the peak KV" splice_stats
