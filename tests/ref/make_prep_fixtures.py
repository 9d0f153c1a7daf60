#!/usr/bin/env python3
"""Expected skpo-prep output for the fixture rows in tests/fixtures/tokenizer/prep/.

Independent of our C code: answers and pids follow the rules of docs/tokenizer.md
written again in Python (including verl/DAPO-Math-17k rows, rendered as stored), the prompt is rendered with transformers'
apply_chat_template (the Qwen2.5-Math template of tokenizer_config.json) around
the DAPO wording, and ids come from Hugging Face `tokenizers`.
Writes tests/fixtures/tokenizer/prep/expected.jsonl, one line per fixture row:
  {"file", "pid", "source", "problem", "answer", "text", "ids"}

Run: SKPO_SHARED=/work/shared python3 tests/ref/make_prep_fixtures.py
"""
import glob
import json
import os
import re

from transformers import AutoTokenizer

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("SKPO_SHARED", os.path.join(TOP, "..", "shared"))
FIX = os.path.join(TOP, "tests", "fixtures", "tokenizer", "prep")

DAPO = ("Solve the following math problem step by step. The last line of your response should be of the form "
        "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{}\n\n"
        "Remember to put your answer on its own line after \"Answer:\".")


def text_of(v):
    if isinstance(v, bool):
        raise ValueError(v)
    if isinstance(v, str):
        return v
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else repr(v)
    if isinstance(v, list):
        return ", ".join(text_of(x) for x in v)
    raise ValueError(v)


def last_boxed(s):
    i = s.rfind("\\boxed")
    j = s.index("{", i)
    depth = 0
    for k in range(j, len(s)):
        depth += {"{": 1, "}": -1}.get(s[k], 0)
        if depth == 0:
            return s[j + 1:k]


def answer_of(row):
    for k in ("answer", "final_answer", "reward_model"):
        if row.get(k) is not None:
            v = row[k]["ground_truth"] if k == "reward_model" else row[k]
            if isinstance(v, str) and "####" in v:
                return v.split("####")[-1].strip().replace(",", "")
            return text_of(v)
    return last_boxed(row["solution"])


def main():
    tok = AutoTokenizer.from_pretrained(os.path.join(SHARED, "data", "tokenizer", "qwen2.5"))
    with open(os.path.join(FIX, "expected.jsonl"), "w") as out:
        for path in sorted(glob.glob(os.path.join(FIX, "*.jsonl"))):
            name = os.path.basename(path)
            if name == "expected.jsonl":
                continue
            source = name[: -len(".jsonl")]
            for i, line in enumerate(l for l in open(path) if l.strip()):
                row = json.loads(line)
                problem = row.get("problem") or row.get("question")
                if "extra_info" in row:
                    row["id"] = row["extra_info"]["index"]
                pid = next((text_of(row[k]) for k in ("id", "idx", "unique_id") if row.get(k) is not None),
                           f"{source}/{i}")
                if problem is None:  # verl / DAPO-Math-17k: the worded conversation itself
                    msgs = row["prompt"]
                    problem = [m["content"] for m in msgs if m["role"] == "user"][-1]
                    head, tail = DAPO.split("{}")
                    if problem.startswith(head) and problem.endswith(tail):
                        problem = problem[len(head):-len(tail)]
                else:
                    msgs = [{"role": "user", "content": DAPO.format(problem)}]
                text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
                ids = tok.backend_tokenizer.encode(text, add_special_tokens=False).ids
                out.write(json.dumps({"file": name, "pid": pid, "source": source, "problem": problem,
                                      "answer": answer_of(row), "text": text, "ids": ids}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
