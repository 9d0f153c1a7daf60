#!/usr/bin/env python3
"""Peer for bench/b_sample.sh: Hugging Face generate (PyTorch, CPU) on the same
checkpoint folder, the same prompt ids and the same lengths.

  hf_generate.py prompts OUT N PLEN VOCAB SEED
      write N prompt records of PLEN random ids (kind, pid, prompt) to OUT
      (.msgpack.zst, via the zstd command) and the ids to OUT.ids (text)
  hf_generate.py generate MODEL_DIR IDS_FILE G NEW_TOKENS THREADS
      generate G samples per prompt, exactly NEW_TOKENS each
      (min_new_tokens = max_new_tokens), T = 1, top-p 1, top-k off; prints
      "hf_tokens N hf_seconds S hf_tokens_per_s X hf_cpu_seconds C
      hf_tokens_per_cpu_s Y" (model load and one warm-up call are not timed)
"""
import random
import struct
import subprocess
import sys
import time


def pack_str(s):
    b = s.encode()
    return b"\xda" + struct.pack(">H", len(b)) + b


def prompt_record(pid, ids):
    blob = struct.pack("<%di" % len(ids), *ids)
    items = [("kind", pack_str("prompt")), ("pid", pack_str(pid)),
             ("prompt", b"\xc6" + struct.pack(">I", len(blob)) + blob)]
    out = b"\xde" + struct.pack(">H", len(items))
    for k, v in items:
        out += pack_str(k) + v
    return out


def write_prompts(out, n, plen, vocab, seed):
    rng = random.Random(seed)
    prompts = [[rng.randrange(3, vocab) for _ in range(plen)] for _ in range(n)]
    raw = b"".join(prompt_record("b%d" % i, p) for i, p in enumerate(prompts))
    z = subprocess.run(["zstd", "-q", "-c", "--check"], input=raw, stdout=subprocess.PIPE, check=True).stdout
    with open(out, "wb") as f:
        f.write(z)
    with open(out + ".ids", "w") as f:
        for p in prompts:
            f.write(" ".join(map(str, p)) + "\n")


def generate(model_dir, ids_file, G, new, threads):
    import torch
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    with open(ids_file) as f:
        ids = torch.tensor([[int(x) for x in line.split()] for line in f if line.strip()])
    attn = torch.ones_like(ids)
    kw = dict(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, pad_token_id=0)
    with torch.inference_mode():
        model.generate(ids[:1], attention_mask=attn[:1], max_new_tokens=4, min_new_tokens=4, **kw)  # warm-up
        t0, c0 = time.perf_counter(), time.process_time()
        out = model.generate(ids, attention_mask=attn, num_return_sequences=G, max_new_tokens=new,
                             min_new_tokens=new, **kw)
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
    tokens = (out.shape[1] - ids.shape[1]) * out.shape[0]
    print("hf_tokens %d hf_seconds %.3f hf_tokens_per_s %.1f hf_cpu_seconds %.3f hf_tokens_per_cpu_s %.1f"
          % (tokens, dt, tokens / dt, dc, tokens / dc))


def main():
    if sys.argv[1] == "prompts":
        write_prompts(sys.argv[2], *map(int, sys.argv[3:7]))
    else:
        generate(sys.argv[2], sys.argv[3], *map(int, sys.argv[4:7]))


if __name__ == "__main__":
    main()
