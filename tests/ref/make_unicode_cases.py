#!/usr/bin/env python3
"""Random strings over awkward Unicode (spaces Oniguruma and PCRE2 disagree on,
letters and digits newer than PCRE2's tables, contractions with odd case,
astral planes) with Hugging Face ids from the Qwen2.5 tokenizer.

Writes tests/fixtures/tokenizer/unicode_cases.jsonl ({"text", "ids"}).
Combining marks outside U+0300..U+036F are left out: HF's NFC tables and
utf8proc's order a few recent marks differently (docs/tokenizer.md).

Run: SKPO_SHARED=/work/shared python3 tests/ref/make_unicode_cases.py
"""
import json
import os
import random
import unicodedata

from tokenizers import Tokenizer

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("SKPO_SHARED", os.path.join(TOP, "..", "shared"))
# letters / digits Oniguruma knows and PCRE2 10.42 does not (a sample of each range)
NEW = [0x1C89, 0xA7CB, 0x105C0, 0x10D4A, 0x11380, 0x11F04, 0x13460, 0x16100, 0x16D40, 0x1E030, 0x2EBF0,
       0x31350, 0x10D40, 0x116D0, 0x1CCF0, 0x1D2C0, 0x1E5F1]
SPACES = " \t\n\r\u00a0\u3000\u2028\u2029\u180e\u200b\x1c\x1d\x1e\x1f\x85\u1680\u2007\u202f\u205f\x0b\x0c"


def ok(c):
    cp = ord(c)
    if 0xD800 <= cp <= 0xDFFF:
        return False
    cat = unicodedata.category(c)
    return cat not in ("Cn", "Mn", "Mc", "Me") or 0x300 <= cp <= 0x36F


def rc(rng):
    r = rng.random()
    if r < 0.3:
        return chr(rng.randint(0x20, 0x7E))
    if r < 0.45:
        return rng.choice(SPACES)
    if r < 0.55:
        return chr(rng.choice(NEW) + rng.randint(0, 3))
    if r < 0.65:
        return rng.choice(["'s", "'T", "'Re", "'VE", "'m", "'LL", "'d", "\u017fs", "'\u017f"])
    if r < 0.7:
        return chr(rng.randint(0x300, 0x36F))
    while True:
        c = chr(rng.randint(0x80, 0x2FFFF))
        if ok(c):
            return c


def main():
    rng = random.Random(20261130)
    tok = Tokenizer.from_file(os.path.join(SHARED, "data", "tokenizer", "qwen2.5", "tokenizer.json"))
    with open(os.path.join(TOP, "tests", "fixtures", "tokenizer", "unicode_cases.jsonl"), "w") as f:
        for _ in range(600):
            t = "".join(rc(rng) for _ in range(rng.randint(1, 24)))
            f.write(json.dumps({"text": t, "ids": tok.encode(t, add_special_tokens=False).ids}) + "\n")


if __name__ == "__main__":
    main()
