#!/usr/bin/env python3
"""Build the fixtures of the sampling tests (tests/fixtures/sample/).

- tiny-qwen2/tokenizer.json, tokenizer_config.json: a byte-level BPE tokenizer
  with 300 ids (256 bytes, one special token, merges) trained on a few math
  sentences, so the tiny random checkpoint (vocab 300) decodes to text and stop
  strings can be tested without the 7 MB Qwen tokenizer.
- prompts.msgpack.zst: 6 prompt records (pid, prompt ids, problem, answer,
  source, text and an unknown field that must pass through).
- bad-*.msgpack.zst: prompt records that skpo-sample must refuse.
Records are written by tests/ref/mpk.py (no msgpack module needed; the zstd
command compresses). Run from the repository root:
    python3 tests/ref/make_sample_fixtures.py
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mpk  # noqa: E402  (the shared record-stream writer)

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

OUT = "tests/fixtures/sample"
TOK_DIR = os.path.join(OUT, "tiny-qwen2")

CORPUS = [
    "Solve the following math problem step by step.",
    "The last line of your response should be of the form Answer: $Answer",
    "Remember to put your answer on its own line after \"Answer:\".",
    "What is 2 + 3? The answer is 5. What is 7 times 8? It is 56.",
    "Let x be a real number such that x^2 = 16. Find the sum of all x.",
    "Compute the remainder when 2024 is divided by 7.",
] * 20


def train_tokenizer():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, tr)
    assert tok.get_vocab_size() <= 300, tok.get_vocab_size()
    tok.save(os.path.join(TOK_DIR, "tokenizer.json"))
    with open(os.path.join(TOK_DIR, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|endoftext|>", "bos_token": None}, f, indent=1)
    return tok


def main():
    os.makedirs(TOK_DIR, exist_ok=True)
    tok = train_tokenizer()
    problems = [("p1", "What is 2 + 3?", "5"), ("p2", "What is 7 times 8?", "56"),
                ("p3", "Compute the remainder when 2024 is divided by 7.", "1"),
                ("p4", "Let x be a real number such that x^2 = 16. Find the sum of all x.", "0"),
                ("p5", "What is 1 + 1?", "2"), ("p6", "Solve the following math problem step by step: 9 - 4.", "5")]
    recs = []
    for pid, prob, ans in problems:
        text = "Problem: " + prob + "\nAnswer:"
        ids = tok.encode(text).ids
        recs.append({"kind": "prompt", "pid": pid, "prompt": mpk.i32s(ids), "problem": prob, "answer": ans,
                     "source": "fixture", "text": text, "x_custom": "kept"})
    mpk.write_stream(os.path.join(OUT, "prompts.msgpack.zst"), recs, tool="make_sample_fixtures.py")
    good = recs[0]
    bad = {
        "missing": {k: v for k, v in good.items() if k != "prompt"},
        "empty": dict(good, prompt=b""),
        "vocab": dict(good, prompt=mpk.i32s([5, 17, 300])),
    }
    for name, r in bad.items():
        mpk.write_stream(os.path.join(OUT, "bad-%s.msgpack.zst" % name), [recs[1], dict(r, pid="bad-" + name)],
                         meta=False)


if __name__ == "__main__":
    main()
