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
  awk -v set="$set" '
    FNR == 1 { f++ }
    f == 1 && $1 == "kind" { split($3, a, "/"); o[$2] = a[1] " " a[2] " " $6 " " $8; if (!($2 in seen)) { seen[$2] = 1; order[++nk] = $2 } }
    f == 1 && $1 == "accuracy" { split($2, a, "/"); oacc = a[1] " " a[2] " " $5 " " $7 }
    f == 1 && $1 == "speed" { ospeed = $2 }
    f == 2 && $1 == "kind" { p[$2] = $3 " " $4 " " $5 " " $6 }
    f == 2 && $1 == "total" { pacc = $2 " " $3 " " $4 " " $5; pspeed = $6; pto = $7 }
    END {
      printf "%-22s %22s   %22s\n", "kind", "skpo: acc (fp/fn)", "math-verify: acc (fp/fn)"
      for (i = 1; i <= nk; i++) {
        k = order[i]; split(o[k], a, " "); line = sprintf("%-22s %5d/%-5d %5.1f%% (%d/%d)", k, a[1], a[2], 100 * a[1] / a[2], a[3], a[4])
        if (k in p) { split(p[k], b, " "); line = line sprintf("   %5d/%-5d %5.1f%% (%d/%d)", b[1], b[2], 100 * b[1] / b[2], b[3], b[4])
          if (a[1] < b[1]) line = line "  <- below math-verify" }
        print line
      }
      split(oacc, a, " ")
      printf "%s: skpo math verifier: accuracy %d/%d %.2f%%, false positives %d, false negatives %d, %s checks/s (1 core)\n", set, a[1], a[2], 100 * a[1] / a[2], a[3], a[4], ospeed
      if (pacc != "") {
        split(pacc, b, " ")
        printf "%s: math-verify (verl config): accuracy %d/%d %.2f%%, false positives %d, false negatives %d, %s checks/s (1 core, %d timeouts)\n", set, b[1], b[2], 100 * b[1] / b[2], b[3], b[4], pspeed, pto
        if (pspeed > 0) printf "%s: speed ratio (skpo / math-verify): %.0fx\n", set, ospeed / pspeed
      }
    }' "$tmp/ours" "$tmp/peer"
done
