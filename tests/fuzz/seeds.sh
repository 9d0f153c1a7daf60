#!/bin/sh
# Fill a fuzz corpus folder with seeds from the test fixtures.
# usage: seeds.sh TARGET DIR
t=$1; d=$2
n=0
add() { [ -f "$1" ] || return 0; n=$((n + 1)); head -c 65536 "$1" >"$d/seed-$n"; }
case "$t" in
  record) for f in tests/fixtures/records/*.zst tests/fixtures/*/*.msgpack.zst; do add "$f"; done ;;
  config) for f in tests/fixtures/model/*.json tests/fixtures/*/config.json tests/fixtures/*/*/config.json; do add "$f"; done ;;
  safetensors) for f in tests/fixtures/model/*.safetensors tests/fixtures/*/*/*.safetensors; do add "$f"; done ;;
  tokenizer) for f in tests/fixtures/demo/tokenizer/tokenizer.json; do add "$f"; done
             head -n 50 tests/fixtures/tokenizer/cases.jsonl 2>/dev/null | while read -r l; do n=$((n + 1)); printf '%s' "$l" >"$d/line-$n"; done ;;
  verify)    head -n 300 tests/fixtures/verify/cases.jsonl 2>/dev/null | while read -r l; do n=$((n + 1)); printf '%s' "$l" >"$d/line-$n"; done ;;
  chat)      printf 'user\001What is 2+2?' >"$d/seed-1"; printf 'system\001Be brief.\002user\001Solve x.' >"$d/seed-2" ;;
esac
[ -n "$(ls "$d")" ] || printf '\x82\xa4kind\xa6prompt\xa3pid\xa1a' >"$d/seed-min"
exit 0
