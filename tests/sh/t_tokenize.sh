#!/bin/sh
# t_tokenize.sh - skpo-tokenize and skpo-prep as black boxes: ids, decode, chat,
# flags, and the errors a user sees for broken tokenizers and inputs.
. "$(dirname "$0")/lib.sh"
Q="$FIX/tokenizer/qwen2.5"

# a plain (uncompressed) copy, as a downloaded model folder has it
mkdir -p "$TMP/qwen" && zstd -q -dc "$Q/tokenizer.json.zst" >"$TMP/qwen/tokenizer.json" &&
  cp "$Q/tokenizer_config.json" "$TMP/qwen/"

t "encode adds hf ids and keeps other keys in order" sh -c '
  printf "%s\n" "{\"id\":3,\"text\":\"Find the value of \$x\$ such that \$\\\\frac{2x+3}{5} = 7\$.\",\"z\":null}" |
    skpo-tokenize --tokenizer "$1/qwen" >"$1/o" &&
  grep -qx "{\"id\":3,\"text\":\"Find the value of \$x\$ such that \$\\\\\\\\frac{2x+3}{5} = 7\$.\",\"z\":null,\"ids\":\[9885,279,897,315,400,87,3,1741,429,57960,37018,90,17,87,10,18,15170,20,92,284,220,22,12947\]}" "$1/o"' _ "$TMP"

t "compressed tokenizer.json.zst loads like the plain file" sh -c '
  head -n 40 "$2/tokenizer/cases.jsonl" | skpo-tokenize --tokenizer "$1/qwen" >"$1/a" &&
  head -n 40 "$2/tokenizer/cases.jsonl" | skpo-tokenize --tokenizer "$2/tokenizer/qwen2.5" >"$1/b" && cmp "$1/a" "$1/b"' _ "$TMP" "$FIX"

t "every fixture case round-trips through encode and decode" sh -c '
  skpo-tokenize --tokenizer "$1/qwen" "$2/tokenizer/cases.jsonl" | skpo-tokenize --tokenizer "$1/qwen" --decode >"$1/rt" &&
  [ "$(wc -l <"$1/rt")" = "$(wc -l <"$2/tokenizer/cases.jsonl")" ]' _ "$TMP" "$FIX"

t "decode skips special tokens on request" sh -c '
  echo "{\"ids\":[151644,872,198,6023,151645]}" | skpo-tokenize --tokenizer "$1/qwen" --decode --skip-special |
    grep -qx "{\"ids\":\[151644,872,198,6023,151645\],\"text\":\"user\\\\nhi\"}"' _ "$TMP"

t "no-special encodes special-token text as plain text" sh -c '
  echo "{\"text\":\"<|im_end|>\"}" | skpo-tokenize --tokenizer "$1/qwen" --no-special | grep -q "\"ids\":\[27,91,318,6213,91,29\]"' _ "$TMP"

t "chat renders messages with the template and encodes them" sh -c '
  echo "{\"messages\":[{\"role\":\"user\",\"content\":\"1+1?\"}]}" |
    skpo-tokenize --tokenizer "$1/qwen" --chat --template qwen2.5-math >"$1/c" &&
  grep -q "\"text\":\"<|im_start|>system\\\\nPlease reason step by step" "$1/c" &&
  grep -q "\"ids\":\[151644,8948,198,5501" "$1/c" && grep -q "151644,77091,198\]}$" "$1/c"' _ "$TMP"

t "help goes to stdout with exit 0 and nothing on stderr" sh -c '
  skpo-tokenize --help >"$1/h" 2>"$1/e" && grep -q "^usage: skpo-tokenize" "$1/h" && [ ! -s "$1/e" ] &&
  skpo-prep --help >"$1/h" 2>"$1/e" && grep -q "^usage: skpo-prep" "$1/h" && [ ! -s "$1/e" ]' _ "$TMP"

t "missing --tokenizer is a usage error (exit 2)" sh -c '
  echo "{}" | skpo-tokenize >/dev/null 2>"$1/e"; [ $? = 2 ] && grep -q "^skpo-tokenize: --tokenizer is required" "$1/e"' _ "$TMP"

# broken tokenizer folders: each must fail with exit 1 and a message naming the problem
bad() { # name json want
  mkdir -p "$TMP/$1" && printf "%s" "$2" >"$TMP/$1/tokenizer.json"
  echo '{"text":"x"}' | skpo-tokenize --tokenizer "$TMP/$1" >"$TMP/$1.out" 2>"$TMP/$1.err"
  rc=$?
  [ $rc = 1 ] && [ ! -s "$TMP/$1.out" ] && grep -q "^skpo-tokenize: '.*$1/tokenizer.json': .*$3" "$TMP/$1.err" ||
    { echo "exit $rc, stderr: $(cat "$TMP/$1.err")" >&2; return 1; }
}
t "tokenizer.json that is not JSON fails with exit 1" bad notjson '{"model": ' "not JSON"
t "tokenizer.json without a model fails with exit 1" bad nomodel '{"added_tokens": []}' 'missing "model"'
t "merge with a token outside the vocab fails with exit 1" bad badmerge \
  '{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a c"]}}' "merge 1"
t "merge that is not two tokens fails with exit 1" bad badmerge2 \
  '{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["ab"]}}' "two tokens"
t "missing tokenizer folder fails with exit 1" sh -c '
  echo "{}" | skpo-tokenize --tokenizer "$1/nope" 2>"$1/e"; [ $? = 1 ] && grep -q "^skpo-tokenize: cannot open" "$1/e"' _ "$TMP"

t "input line that is not JSON names file and line" sh -c '
  printf "{\"text\":\"a\"}\n{oops\n" >"$1/in" && skpo-tokenize --tokenizer "$1/qwen" "$1/in" >/dev/null 2>"$1/e"
  [ $? = 1 ] && grep -q "^skpo-tokenize: .*/in:2: not JSON" "$1/e"' _ "$TMP"

t "input without text is an error" sh -c '
  echo "{\"txt\":\"a\"}" | skpo-tokenize --tokenizer "$1/qwen" >/dev/null 2>"$1/e"
  [ $? = 1 ] && grep -q "stdin:1: no \"text\" string" "$1/e"' _ "$TMP"

t "decode rejects ids outside the vocab" sh -c '
  echo "{\"ids\":[1,999999]}" | skpo-tokenize --tokenizer "$1/qwen" --decode >/dev/null 2>"$1/e"
  [ $? = 1 ] && grep -q "not a token id" "$1/e"' _ "$TMP"

t "prep rejects an unknown template as a usage error" sh -c '
  skpo-prep --tokenizer "$1/qwen" --template jinja "$2/tokenizer/prep/aime25.jsonl" >/dev/null 2>"$1/e"
  [ $? = 2 ] && grep -q "unknown chat template" "$1/e"' _ "$TMP" "$FIX"

t "prep row without an answer fails naming file and line" sh -c '
  echo "{\"problem\":\"p\"}" >"$1/noans.jsonl" &&
  skpo-prep --tokenizer "$1/qwen" --template plain "$1/noans.jsonl" >/dev/null 2>"$1/e"
  [ $? = 1 ] && grep -q "noans.jsonl:1: no answer" "$1/e"' _ "$TMP"

t "prep warns about pids repeated across files" sh -c '
  skpo-prep --tokenizer "$1/qwen" --template qwen2.5 "$2/tokenizer/prep/aime25.jsonl" "$2/tokenizer/prep/amc23.jsonl" \
    >/dev/null 2>"$1/e" && grep -q "warning: 2 records repeat a pid written before (0, 1)" "$1/e" &&
  grep -q "wrote 4 prompt records" "$1/e"' _ "$TMP" "$FIX"

t "prep that fails half way leaves no --out file behind" sh -c '
  mkdir -p "$1/outdir" && echo "{\"problem\":\"p\"}" >"$1/noans2.jsonl" &&
  skpo-prep --tokenizer "$1/qwen" --template plain --out "$1/outdir/p.zst" "$2/tokenizer/prep/aime25.jsonl" "$1/noans2.jsonl" 2>/dev/null
  [ $? = 1 ] && [ -z "$(ls "$1/outdir")" ]' _ "$TMP" "$FIX"

t "prep --dedup keeps the first of rows with the same prompt" sh -c '
  cat "$2/tokenizer/prep/gsm8k.jsonl" "$2/tokenizer/prep/gsm8k.jsonl" >"$1/dup.jsonl" &&
  skpo-prep --tokenizer "$1/qwen" --template plain --dedup "$1/dup.jsonl" >/dev/null 2>"$1/e" &&
  grep -q "dedup skipped 3 rows" "$1/e" && grep -q "wrote 3 prompt records" "$1/e" && ! grep -q "repeat a pid" "$1/e"' _ "$TMP" "$FIX"
