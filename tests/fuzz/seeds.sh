#!/bin/sh
# Fill a fuzz corpus folder with seeds from the test fixtures, plus every
# committed regression input tests/fixtures/fuzz/crash-TARGET-* (inputs that
# once crashed a target; they must keep passing).
# usage: seeds.sh TARGET DIR [FUZZ_BINARY]
# The verifier's seeds are exported by its fuzz binary from the JSON case
# files (SKPO_FUZZ_EXPORT_CASES), so no Python is needed.
t=$1; d=$2; bin=${3:-}
n=0
add() { [ -f "$1" ] || return 0; n=$((n + 1)); head -c 65536 "$1" >"$d/seed-$n"; }
lines() { # MODEBYTE FILE COUNT: each line of FILE, prefixed by the mode byte
  [ -f "$2" ] || return 0
  head -n "$3" "$2" | while IFS= read -r l; do n=$((n + 1)); { printf "$1"; printf '%s' "$l"; } >"$d/$t-line-$n"; done
}
case "$t" in
  record) for f in tests/fixtures/*/*.msgpack.zst; do add "$f"; done ;;
  record_json) for f in tests/fixtures/verify/*.msgpack.zst tests/fixtures/adv/*.msgpack.zst; do
                 [ -f "$f" ] || continue; n=$((n + 1)); zstd -qdc "$f" 2>/dev/null | head -c 4096 >"$d/seed-$n"; done
               printf '{"kind":"down","uid":"u1","tokens":[1,2,3],"logp":[-0.5,"NaN"],"reward":1.0,"x":{"$bin":"AAE="}}' >"$d/json-1"
               printf '{"kind":"meta","schema":1,"argv":["a","b"],"nested":{"a":[1,{"b":null}]}}' >"$d/json-2" ;;
  config) for f in tests/fixtures/model/*.json tests/fixtures/*/config.json tests/fixtures/*/*/config.json; do add "$f"; done ;;
  safetensors) for f in tests/fixtures/model/*/*.safetensors tests/fixtures/sample/*/*.safetensors; do add "$f"; done ;;
  tokenizer) lines '\000' tests/fixtures/tokenizer/cases.jsonl 40
             lines '\001' tests/fixtures/tokenizer/chat.jsonl 10
             lines '\002' tests/fixtures/tokenizer/unicode_cases.jsonl 40 ;;
  tokjson)   for f in tests/fixtures/demo/tokenizer/tokenizer.json tests/fixtures/tokenizer/tiny/*/tokenizer.json; do add "$f"; done ;;
  verify)    [ -n "$bin" ] && for f in tests/fixtures/verify/cases.jsonl tests/fixtures/verify/dapo_cases.jsonl \
               tests/fixtures/verify/extra_cases.jsonl; do
               [ -f "$f" ] && SKPO_FUZZ_EXPORT_CASES=$f SKPO_FUZZ_EXPORT_DIR=$d "$bin" >/dev/null 2>&1
             done ;;
  chat)      printf '\000user\001What is 2+2?' >"$d/seed-1"
             printf '\202system\001Be brief.\002user\001Solve x.\002assistant\001  x = 1 ' >"$d/seed-2"
             printf '\003user\001\xc2\xa0 \xe4\xb8\xad \xe3\x80\x80\002assistant\001' >"$d/seed-3"
             printf '\201tool\001no' >"$d/seed-4" ;;
esac
for f in tests/fixtures/fuzz/crash-"$t"-*; do
  [ -f "$f" ] && cp "$f" "$d/"
done
[ -n "$(ls "$d")" ] || printf '\x82\xa4kind\xa6prompt\xa3pid\xa1a' >"$d/seed-min"
exit 0
