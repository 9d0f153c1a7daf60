#!/usr/bin/env python3
"""b_verify_peer.py CASES TIMEOUT - Hugging Face math-verify on a verifier case
file, configured as verl wraps it (verl/utils/reward_score/math_verify.py):
gold "\\boxed{gold}" parsed with LatexExtractionConfig, the response with
ExprExtractionConfig + LatexExtractionConfig, math_metric; exceptions and
timeouts score 0. The per-case TIMEOUT is CPU seconds of this process
(ITIMER_VIRTUAL), so a loaded machine does not turn slow cases into timeouts;
math-verify's own internal timeouts stay as it sets them. Prints one line per kind ("kind K right total fp fn") and a
summary ("total right n fp fn checks_per_s timeouts")."""
import json
import signal
import sys
import time

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
    signal.signal(signal.SIGVTALRM, alarm)
    kinds = {}
    right = fp = fn = timeouts = 0
    t0 = time.perf_counter()
    for c in cases:
        score = 0.0
        signal.setitimer(signal.ITIMER_VIRTUAL, limit)
        try:
            score, _ = verify_func(["\\boxed{" + c["gold"] + "}"], [c["response"]])
        except Timeout:
            timeouts += 1
        except Exception:
            pass
        finally:
            signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        got = score > 0
        k = kinds.setdefault(c["kind"], [0, 0, 0, 0])
        k[1] += 1
        if got == c["expect"]:
            k[0] += 1
            right += 1
        elif got:
            k[2] += 1
            fp += 1
        else:
            k[3] += 1
            fn += 1
    el = time.perf_counter() - t0
    for name, (r, n, p, q) in kinds.items():
        print("kind %s %d %d %d %d" % (name, r, n, p, q))
    print("total %d %d %d %d %.1f %d" % (right, len(cases), fp, fn, len(cases) / el, timeouts))


main()
