#!/usr/bin/env python3
"""Build tests/fixtures/demo/tokenizer: a tiny byte-level BPE in Hugging Face format.

Same structure as Qwen2.5's tokenizer.json (NFC normalizer, the Qwen split regex then
ByteLevel, ByteLevel decoder) so the C tokenizer reads it through the same code path:
ids 0..255 are the 256 byte tokens (GPT-2 byte order), then the merges learned on
skpo-synth text, then <|endoftext|>, <|im_start|>, <|im_end|>.
Run once (needs `tokenizers` and bin/skpo-synth); outputs are committed.
  python3 pipelines/proto/make_tokenizer.py [NUM_MERGES]
"""
import json, os, subprocess, sys

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(TOP, "tests/fixtures/demo/tokenizer")
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
              r"\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def corpus():
    synth = os.path.join(TOP, "bin/skpo-synth")
    lines = subprocess.run([synth, "--count", "4000", "--seed", "99", "--kinds", "+-*", "--ops", "3", "--min-ops", "1"],
                           check=True, capture_output=True, text=True).stdout.splitlines()
    for ln in lines:
        r = json.loads(ln)
        yield r["problem"] + "\n" + r["solution"]


def main():
    nmerges = int(sys.argv[1]) if len(sys.argv) > 1 else 48
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t = Tokenizer(models.BPE())
    t.normalizer = normalizers.NFC()
    t.pre_tokenizer = pre
    trainer = trainers.BpeTrainer(vocab_size=256 + nmerges, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    t.train_from_iterator(corpus(), trainer)
    learned = json.loads(t.to_str())["model"]["merges"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in learned][:nmerges]

    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    for m in merges:
        a, b = m.split(" ")
        vocab[a + b] = len(vocab)
    added = [{"id": len(vocab) + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate(SPECIALS)]
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    doc = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN_SPLIT}, "behavior": "Isolated", "invert": False}, bl]},
        "post_processor": bl, "decoder": bl,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "tokenizer.json"), "w") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    cfg = {"add_bos_token": False, "add_prefix_space": False, "bos_token": None, "eos_token": "<|endoftext|>",
           "pad_token": "<|endoftext|>", "model_max_length": 512, "tokenizer_class": "Qwen2Tokenizer",
           "clean_up_tokenization_spaces": False, "errors": "replace", "split_special_tokens": False,
           "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added}}
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
        f.write("\n")

    # validate: HF loads it, round-trips, and agrees with the trained tokenizer on the corpus
    chk = Tokenizer.from_file(os.path.join(OUT, "tokenizer.json"))
    for text in list(corpus())[:500]:
        ids = chk.encode(text).ids
        assert chk.decode(ids) == text, text
        assert [chk.id_to_token(i) for i in ids] == t.encode(text).tokens, text
    s = "<|im_start|>user\nTom has 7 pens<|im_end|><|endoftext|>"
    assert chk.decode(chk.encode(s).ids, skip_special_tokens=False) == s
    print("vocab", chk.get_vocab_size(), "merges", len(merges), "example",
          chk.encode("Tom has 17 pens, gets 5. How many pens?\n17+5=22\nAnswer: 22").tokens)


if __name__ == "__main__":
    main()
