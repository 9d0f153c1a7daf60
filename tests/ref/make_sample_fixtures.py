#!/usr/bin/env python3
"""Build the fixtures of the sampling tests (tests/fixtures/sample/).

- tiny-qwen2/tokenizer.json, tokenizer_config.json: a byte-level BPE tokenizer
  with 300 ids (256 bytes, one special token, merges) trained on a few math
  sentences, so the tiny random checkpoint (vocab 300) decodes to text and stop
  strings can be tested without the 7 MB Qwen tokenizer.
- prompts.msgpack.zst: 6 prompt records (pid, prompt ids, problem, answer,
  source, text and an unknown field that must pass through).
- bad-*.msgpack.zst: prompt records that skpo-sample must refuse.
Records are written with a minimal msgpack encoder (no msgpack module needed)
and compressed with the zstd command. Run from the repository root:
    python3 tests/ref/make_sample_fixtures.py
"""
import json
import os
import struct
import subprocess

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


def pack(v):
    """msgpack encoding of str / bytes / int / float / dict (what records use)."""
    if isinstance(v, bool):
        return b"\xc3" if v else b"\xc2"
    if isinstance(v, int):
        if 0 <= v < 128:
            return bytes([v])
        return b"\xd3" + struct.pack(">q", v)
    if isinstance(v, float):
        return b"\xcb" + struct.pack(">d", v)
    if isinstance(v, str):
        b = v.encode()
        return b"\xda" + struct.pack(">H", len(b)) + b
    if isinstance(v, (bytes, bytearray)):
        return b"\xc5" + struct.pack(">H", len(v)) + bytes(v)
    if isinstance(v, dict):
        out = b"\xde" + struct.pack(">H", len(v))
        for k, x in v.items():
            out += pack(k) + pack(x)
        return out
    raise TypeError(type(v))


def i32s(ids):
    return struct.pack("<%di" % len(ids), *ids)


def write_stream(path, recs):
    raw = b"".join(pack(r) for r in recs)
    z = subprocess.run(["zstd", "-q", "-c", "--check"], input=raw, stdout=subprocess.PIPE, check=True).stdout
    with open(path, "wb") as f:
        f.write(z)


def main():
    os.makedirs(TOK_DIR, exist_ok=True)
    tok = train_tokenizer()
    problems = [("p1", "What is 2 + 3?", "5"), ("p2", "What is 7 times 8?", "56"),
                ("p3", "Compute the remainder when 2024 is divided by 7.", "1"),
                ("p4", "Let x be a real number such that x^2 = 16. Find the sum of all x.", "0"),
                ("p5", "What is 1 + 1?", "2"), ("p6", "Solve the following math problem step by step: 9 - 4.", "5")]
    recs = [{"kind": "meta", "schema": 1, "tool": "make_sample_fixtures.py"}]
    for pid, prob, ans in problems:
        text = "Problem: " + prob + "\nAnswer:"
        ids = tok.encode(text).ids
        recs.append({"kind": "prompt", "pid": pid, "prompt": i32s(ids), "problem": prob, "answer": ans,
                     "source": "fixture", "text": text, "x_custom": "kept"})
    write_stream(os.path.join(OUT, "prompts.msgpack.zst"), recs)
    good = recs[1]
    bad = {
        "missing": {k: v for k, v in good.items() if k != "prompt"},
        "empty": dict(good, prompt=b""),
        "vocab": dict(good, prompt=i32s([5, 17, 300])),
    }
    for name, r in bad.items():
        write_stream(os.path.join(OUT, "bad-%s.msgpack.zst" % name), [recs[2], dict(r, pid="bad-" + name)])


if __name__ == "__main__":
    main()
