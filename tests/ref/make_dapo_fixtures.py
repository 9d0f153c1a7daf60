#!/usr/bin/env python3
"""Reference fixtures for skpo's `dapo` verifier (core/verify/verify_dapo.c).

A Python port of verl's math_dapo.compute_score (default, non-strict mode),
written from docs/algorithm.md section 5 and verl's recipe: last 300 characters,
findall of (?i)Answer\\s*:\\s*([^\\n]+) (last match, else "[INVALID]"),
normalize_final_answer on prediction and gold, exact string match, +1/-1.

Writes tests/fixtures/verify/dapo_cases.jsonl: one JSON object per line with
id, response, gold, pred (the normalized prediction) and expect (correct).
Inputs: every response of tests/fixtures/verify/cases.jsonl (the last 1000
characters; responses with lone surrogates are skipped since records hold
valid UTF-8) and generated responses around the "Answer:" line.
Run from the repository root: python3 tests/ref/make_dapo_fixtures.py
"""
import json
import random
import re

SUBSTITUTIONS = [
    ("an ", ""), ("a ", ""), (".$", "$"), ("\\$", ""), ("\\ ", ""), (" ", ""), ("mbox", "text"),
    (",\\text{and}", ","), ("\\text{and}", ","), ("\\text{m}", "\\text{}"),
]
REMOVED_EXPRESSIONS = [
    "square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units", "\\ldots", "sue",
    "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds", "meters", "meals",
    "edges", "students", "childrentickets", "multiples", "\\text{s}", "\\text{.}", "\\text{\ns}",
    "\\text{}^2", "\\text{}^3", "\\text{\n}", "\\text{}", r"\mathrm{th}", r"^\circ", r"^{\circ}", r"\;",
    r",\!", "{,}", '"', "\\dots",
]


def normalize_final_answer(final_answer: str) -> str:
    final_answer = final_answer.split("=")[-1]
    for before, after in SUBSTITUTIONS:
        final_answer = final_answer.replace(before, after)
    for expr in REMOVED_EXPRESSIONS:
        final_answer = final_answer.replace(expr, "")
    final_answer = re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$", final_answer)
    final_answer = re.sub(r"(\\text\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\textbf\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\overline\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\boxed\{)(.*)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(frac)([^{])(.)", "frac{\\2}{\\3}", final_answer)
    final_answer = re.sub(r"(sqrt)([^{])", "sqrt{\\2}", final_answer)
    final_answer = final_answer.replace("$", "")
    if final_answer.replace(",", "").isdigit():
        final_answer = final_answer.replace(",", "")
    return final_answer.strip()


def is_correct_minerva(solution_str, gt, answer_pattern=r"(?i)Answer\s*:\s*([^\n]+)"):
    match = re.findall(answer_pattern, solution_str)
    extracted_answer = match[-1] if match else "[INVALID]"
    pred = normalize_final_answer(extracted_answer)
    gt = normalize_final_answer(gt)
    return (pred == gt), pred


def compute_score(solution_str, ground_truth):
    solution_str = solution_str[-300:]
    correct, pred = is_correct_minerva(solution_str, ground_truth)
    return {"score": 1.0 if correct else -1.0, "acc": correct, "pred": pred}


def has_lone_surrogate(s):
    return any(0xD800 <= ord(ch) <= 0xDFFF for ch in s)


ANSWERS = [
    "34", "$34$", "\\boxed{34}", "34.", "34 ways", "1,000", "1{,}000", "10,\\!000", "\\frac12", "\\frac{1}{2}",
    "\\dfrac{3}{4}", "\\sqrt2", "\\sqrt{2}", "x = 5", "y=2x+1", "$\\text{east}$", "3 dollars", "10^\\circ",
    "10^{\\circ}", "an apple", "a 5", "\\$18.90", "18.90", "\\text{(C)}", "\\textbf{B}", "\\overline{3}",
    "0.\\overline{3}", "5 \\text{ cm}", "5\\mbox{ m}", "7 \\text{and} 8", "1,\\text{and} 2", "42 students",
    "12 \"units\"", "$12$ or $13$", "$a$ and $b$", "\\boxed{\\frac{1}{2}}.", "\\fracab", "\\sqrtab", "frac1",
    "\u00b2", "\u0663\u0664", "\uff13\uff14", "34\u00a0", "\u2212 3", "\u03c0", "\\pi", "2\\pi", "-7", "  8  ",
    "\\left(1,2\\right)", "(1, 2)", "[0, 1)", "9.", "100\\%", "\\text{m}", "5 km", "3 hours", "e", "I",
    "\\ldots", "\\dots 4", "12\\;", "\\text{.}", "x=", "=", "==3", "$$", "$5$ $6$", "\\boxed{5", "5}",
]
GOLDS = ["34", "1000", "\\frac{1}{2}", "5", "east", "18.90", "C", "B", "3", "12", "7", "2x+1", "0.3",
         "(1,2)", "-7", "8", "\\pi", "10", "100\\%", "42", "\u00b2", "9", ""]
PREFIXES = ["", "Let me think.\n", "So the total is 34.\n\n", "Answer: 12\n", "answer: 99\nmore work\n",
            "The final answer is 3.\n", "x" * 400 + "\n", "Step 1: ...\nStep 2: ...\n"]
KEYS = ["Answer:", "Answer: ", "answer:", "ANSWER :", "Answer\t:\t", "Answer :\n", "Final Answer: ",
        "**Answer:** ", "Answer:\n\n", "Answer", "Ans: ", "Answer\u00a0: ", "\u017fanswer: "]
SUFFIXES = ["", "\n", "\nDone.", "  ", "\n\nAnswer: 7", " (approximately)", "\n" + "y" * 320, "\u3000"]


def main():
    rng = random.Random(20250603)
    rows = []
    for line in open("tests/fixtures/verify/cases.jsonl", encoding="utf-8"):
        c = json.loads(line)
        if has_lone_surrogate(c["response"]) or has_lone_surrogate(c["gold"]):
            continue
        rows.append((c["id"], c["response"][-1000:], c["gold"]))
    for i in range(1500):
        ans = rng.choice(ANSWERS)
        gold = ans if rng.random() < 0.5 else rng.choice(GOLDS)
        resp = rng.choice(PREFIXES) + rng.choice(KEYS) + ans + rng.choice(SUFFIXES)
        rows.append(("gen-%04d" % i, resp, gold))
    with open("tests/fixtures/verify/dapo_cases.jsonl", "w", encoding="ascii") as f:
        for rid, resp, gold in rows:
            r = compute_score(resp, gold)
            f.write(json.dumps({"id": rid, "response": resp, "gold": gold, "pred": r["pred"],
                                "expect": r["acc"], "kind": "dapo"}) + "\n")
    print("wrote %d fixtures" % len(rows))


if __name__ == "__main__":
    main()
