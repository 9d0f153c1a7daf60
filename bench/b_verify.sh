#!/bin/sh
# b_verify.sh - the math verifier against math-verify on every verifier case set:
#   visible   tests/fixtures/verify/cases.jsonl (488 judged gold/response pairs)
#   dev       tests/fixtures/verify/gen_dev.jsonl (generated, labelled by construction)
#   held-out  tests/fixtures/verify/gen_heldout.jsonl (same generator; not looked at
#             case by case while rules were changed)
# For each set, in one run: accuracy, false positives, false negatives per kind
# (class) and checks per second on one core, for skpo-reward's math verifier (C,
# via --verify-cases) and for the peer, Hugging Face math-verify configured as
# verl wraps it (bench/b_verify_peer.py), with a per-case timeout of MV_TIMEOUT
# seconds (default 10). VERIFY_SETS="visible dev heldout" picks sets. Needs
# python3 with math-verify for the peer; without it only our numbers are printed.
top=${SKPO_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
PATH="$top/bin:$PATH"
cd "$top" || exit 1
pin=""
command -v taskset >/dev/null 2>&1 && taskset -c 0 true 2>/dev/null && pin="taskset -c 0"
peer=1
python3 -c "import math_verify" 2>/dev/null || { peer=0; echo "math-verify: not installed (pip install math-verify); no peer measured"; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
for set in ${VERIFY_SETS:-visible dev heldout}; do
  case $set in
    visible) cases=tests/fixtures/verify/cases.jsonl ;;
    dev) cases=tests/fixtures/verify/gen_dev.jsonl ;;
    heldout) cases=tests/fixtures/verify/gen_heldout.jsonl ;;
    *) echo "b_verify.sh: unknown case set '$set' (visible, dev, heldout)" >&2; exit 1 ;;
  esac
  OMP_NUM_THREADS=1 $pin skpo-reward --verify-cases "$cases" >"$tmp/ours" || exit 1
  echo "== $set ($cases)"
  if [ $peer = 1 ]; then
    $pin python3 bench/b_verify_peer.py "$cases" "${MV_TIMEOUT:-10}" >"$tmp/peer" 2>/dev/null ||
      { echo "math-verify: failed to run on $cases" >&2; exit 1; }
  else
    : >"$tmp/peer"
  fi
  awk -v set="$set" -f bench/b_verify_table.awk "$tmp/ours" "$tmp/peer"
done
