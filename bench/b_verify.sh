#!/bin/sh
# b_verify.sh - the math verifier on the verifier case set
# (tests/fixtures/verify/cases.jsonl, 488 judged gold/response pairs): accuracy,
# false positives and verifications per second on one core, for skpo-reward's
# math verifier (C, via its --verify-cases report mode) and, in the same run,
# for the peer: Hugging Face math-verify configured as verl wraps it
# (verl/utils/reward_score/math_verify.py: gold "\boxed{gold}" parsed with
# LatexExtractionConfig, the response with ExprExtractionConfig +
# LatexExtractionConfig, math_metric, exceptions and timeouts score 0), with a
# per-case timeout of MV_TIMEOUT seconds (default 10). Needs python3 with
# math-verify; without it only our numbers are printed.
top=${SKPO_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
PATH="$top/bin:$PATH"
cd "$top" || exit 1
cases=tests/fixtures/verify/cases.jsonl
pin=""
command -v taskset >/dev/null 2>&1 && taskset -c 0 true 2>/dev/null && pin="taskset -c 0"
ours=$(OMP_NUM_THREADS=1 $pin skpo-reward --verify-cases "$cases") || exit 1
acc=$(echo "$ours" | awk '/^accuracy/ {print $2, $3}')
fp=$(echo "$ours" | awk '/^accuracy/ {print $5}')
speed=$(echo "$ours" | awk '/^speed/ {print $2}')
echo "skpo math verifier: accuracy $acc, false positives $fp, $speed verifications/s (1 core)"
if ! python3 -c "import math_verify" 2>/dev/null; then
  echo "math-verify: not installed (pip install math-verify); no peer measured"
  exit 0
fi
peer=$($pin python3 - "$cases" "${MV_TIMEOUT:-10}" <<'PY' 2>/dev/null
import json, signal, sys, time
from math_verify.metric import math_metric
from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig

class Timeout(Exception):
    pass

def alarm(signum, frame):
    raise Timeout()

def main():
    cases = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
    limit = int(sys.argv[2])
    verify_func = math_metric(gold_extraction_target=(LatexExtractionConfig(),),
                              pred_extraction_target=(ExprExtractionConfig(), LatexExtractionConfig()))
    signal.signal(signal.SIGALRM, alarm)
    right = fp = timeouts = 0
    t0 = time.perf_counter()
    for c in cases:
        score = 0.0
        signal.alarm(limit)
        try:
            score, _ = verify_func(["\\boxed{" + c["gold"] + "}"], [c["response"]])
        except Timeout:
            timeouts += 1
        except Exception:
            pass
        finally:
            signal.alarm(0)
        got = score > 0
        right += got == c["expect"]
        fp += got and not c["expect"]
    el = time.perf_counter() - t0
    print("%d/%d %.2f%% %d %.1f %d" % (right, len(cases), 100.0 * right / len(cases), fp, len(cases) / el, timeouts))

main()
PY
)
[ -n "$peer" ] || { echo "math-verify: failed to run" >&2; exit 1; }
set -- $peer
echo "math-verify (verl config): accuracy $1 $2, false positives $3, $4 verifications/s (1 core, $5 timeouts)"
awk -v a="$speed" -v b="$4" 'BEGIN { if (b > 0) printf "speed ratio (skpo / math-verify): %.0fx\n", a / b }'
