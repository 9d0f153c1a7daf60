#!/usr/bin/env python3
"""Small tokenizer.json files that exercise the loader's options, with Hugging
Face `tokenizers` encodings of a fixed set of texts as the reference.

Writes tests/fixtures/tokenizer/tiny/<name>/tokenizer.json (+ a tokenizer_config.json
for two of them) and
tests/fixtures/tokenizer/tiny/<name>/cases.jsonl ({"text", "ids", "decoded"}),
with "decoded" = HF decode(ids) (special tokens kept).
  bytelevel-min   256 byte tokens + a few merges + <|endoftext|>/<|im_start|>/<|im_end|>,
                  no normalizer, only a ByteLevel pre-tokenizer (GPT-2 regex): the
                  shape of the demo's tiny tokenizer
  llama-like      Split (Llama 3 regex) + ByteLevel(use_regex false), merges as
                  [a, b] arrays, ignore_merges, Llama 3 special tokens
  prefix-space    ByteLevel with add_prefix_space, NFC, added tokens with
                  lstrip/rstrip, a normalized added token, a non-special one
  bytefallback    char-level BPE with byte_fallback and unk, Split on a literal
                  " " (MergedWithNext), ByteFallback + Fuse decoder
  split-*         one Split per behaviour (Removed, MergedWithPrevious, Contiguous,
                  invert) in front of ByteLevel

Run: python3 tests/ref/make_tiny_tokenizers.py  (needs tokenizers)
"""
import json
import os

from tokenizers import Tokenizer

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(TOP, "tests", "fixtures", "tokenizer", "tiny")

LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")

TEXTS = [
    "", "a", "Hello world", "hello  world\n\nfoo\tbar ", "  leading and trailing  ", "The answer is 12345.",
    "don't STOP, we'll see", "x+y=z; f(x)=x^2", "中文 emoji 🤗 ÿþ €", "e\u0301 (decomposed é)",
    "<|im_start|>user\nhi<|im_end|>\n", "<|endoftext|><|endoftext|>abc", "a <mask> b<mask>c", "[X] and [X]x",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nQ?<|eot_id|>", "abcabc abc", "aaaaaaaaaaaaaaaaaaaa",
    "new\r\nlines\r\n", "tab\tsep\tvalues", "1234567 89", "<tool>call</tool>", "zzzz qqqq",
]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = bytes_to_unicode()


def byte_vocab():
    return {B2U[b]: b for b in range(256)}


def with_merges(vocab, pairs):
    merges = []
    for a, b in pairs:
        for t in (a, b):
            if t not in vocab:
                raise ValueError(t)
        vocab.setdefault(a + b, len(vocab))
        merges.append((a, b))
    return merges


def bl(s):
    return "".join(B2U[b] for b in s.encode())


def added(i, content, special=True, **kw):
    d = {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": not special, "special": special}
    d.update(kw)
    return d


def base(model, pre, added_tokens, normalizer=None, decoder=None):
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added_tokens,
            "normalizer": normalizer, "pre_tokenizer": pre, "post_processor": None,
            "decoder": decoder or {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": model}


def bpe(vocab, merges, arrays=False, **kw):
    m = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
         "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
         "vocab": vocab, "merges": [[a, b] if arrays else a + " " + b for a, b in merges]}
    m.update(kw)
    return m


COMMON_PAIRS = [("Ġ", "w"), ("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("Ġw", "o"), ("r", "l"),
                ("Ġwo", "rl"), ("Ġworl", "d"), ("a", "b"), ("ab", "c"), ("Ġ", "a"), ("Ġa", "b"), ("Ġab", "c"),
                ("a", "a"), ("aa", "aa"), ("1", "2"), ("12", "3"), ("Ġ", "Ġ"), ("ĠĠ", "ĠĠ"), ("Ċ", "Ċ"),
                ("ä¸", "Ń"), ("t", "h"), ("th", "e"), ("Ġ", "the")]


def fix_pairs(vocab, pairs):
    out = []
    for a, b in pairs:
        if a in vocab and b in vocab:
            out.append((a, b))
            vocab.setdefault(a + b, len(vocab))
    return out


def bytelevel_min():
    v = byte_vocab()
    merges = fix_pairs(v, COMMON_PAIRS)
    n = len(v)
    toks = [added(n, "<|endoftext|>"), added(n + 1, "<|im_start|>"), added(n + 2, "<|im_end|>")]
    pre = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return base(bpe(v, merges), pre, toks)


def llama_like():
    v = byte_vocab()
    merges = fix_pairs(v, COMMON_PAIRS)
    v.setdefault("abcabc", len(v))  # reachable only through ignore_merges
    v.setdefault("zzzz", len(v))
    n = len(v)
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    toks = [added(n + i, s) for i, s in enumerate(names)]
    pre = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3_RE}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    tj = base(bpe(v, merges, arrays=True, ignore_merges=True), pre, toks)
    bos = n  # <|begin_of_text|>, as Llama 3's post-processor adds it
    tj["post_processor"] = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        {"type": "TemplateProcessing",
         "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                  {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [bos], "tokens": ["<|begin_of_text|>"]}}}]}
    return tj


def prefix_space():
    v = byte_vocab()
    merges = fix_pairs(v, COMMON_PAIRS)
    n = len(v)
    toks = [added(n, "<mask>", lstrip=True), added(n + 1, "[X]", rstrip=True), added(n + 2, "<|endoftext|>"),
            added(n + 3, "<tool>", special=False), added(n + 4, "é", special=False, normalized=True)]
    pre = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    return base(bpe(v, merges), pre, toks, normalizer={"type": "NFC"})


def bytefallback():
    v = {"<unk>": 0}
    for b in range(256):
        v["<0x%02X>" % b] = len(v)
    for c in "abcdefghijklmnopqrstuvwxyz ":
        v[c] = len(v)
    merges = fix_pairs(v, [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), (" ", "w"), ("a", "b"), ("ab", "c")])
    n = len(v)
    pre = {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithNext", "invert": False}
    dec = {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]}
    return base(bpe(v, merges, arrays=True, unk_token="<unk>", byte_fallback=True, fuse_unk=True), pre,
                [added(n, "<|endoftext|>")], decoder=dec)


def split_variant(behavior, invert=False, pattern=r"\s+"):
    v = byte_vocab()
    merges = fix_pairs(v, COMMON_PAIRS)
    pre = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pattern}, "behavior": behavior, "invert": invert},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    return base(bpe(v, merges), pre, [])


# tokenizer_config.json for eos/bos: the plain-string and the object form
CONFIGS = {
    "llama-like": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "bytelevel-min": {"bos_token": None, "eos_token": {"content": "<|im_end|>", "special": True}},
}


def main():
    made = {
        "bytelevel-min": bytelevel_min(), "llama-like": llama_like(), "prefix-space": prefix_space(),
        "bytefallback": bytefallback(), "split-removed": split_variant("Removed"),
        "split-mergedprev": split_variant("MergedWithPrevious"), "split-contiguous": split_variant("Contiguous", pattern=r"[a-z]"),
        "split-invert": split_variant("Isolated", invert=True, pattern=r"[0-9]+"),
        "split-mergednext": split_variant("MergedWithNext", pattern=r"[,.;= ]"),
    }
    for name, tj in made.items():
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        s = json.dumps(tj, ensure_ascii=False)
        tok = Tokenizer.from_str(s)
        with open(os.path.join(d, "tokenizer.json"), "w") as f:
            f.write(s)
        if name in CONFIGS:
            with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
                json.dump(CONFIGS[name], f, indent=1)
        with open(os.path.join(d, "cases.jsonl"), "w") as f:
            for t in TEXTS:
                ids = tok.encode(t, add_special_tokens=False).ids
                with_bos = tok.encode(t, add_special_tokens=True).ids
                assert with_bos in (ids, [tok.token_to_id("<|begin_of_text|>")] + ids), name
                f.write(json.dumps({"text": t, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)},
                                   ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
