#!/usr/bin/env python3
"""Peer for bench/b_sample.sh: Hugging Face generate (PyTorch, CPU) on the same
checkpoint folder, the same prompt ids and the same lengths.
usage: hf_generate.py MODEL_DIR N_PROMPTS PROMPT_LEN G NEW_TOKENS THREADS SEED
Prompts are the ids bench/b_sample.sh wrote (same generator, see gen_prompts).
min_new_tokens = max_new_tokens forces every sequence to NEW_TOKENS tokens.
Prints: hf_tokens_per_s <float> and the generated token count."""
import sys
import time

import torch
from transformers import AutoModelForCausalLM


def gen_prompts(n, plen, vocab, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (n, plen), generator=g)


def main():
    model_dir, n, plen, G, new, threads, seed = sys.argv[1], *map(int, sys.argv[2:8])
    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    model.eval()
    ids = gen_prompts(n, plen, model.config.vocab_size, seed)
    attn = torch.ones_like(ids)
    with torch.inference_mode():
        model.generate(ids[:1], attention_mask=attn[:1], do_sample=True, max_new_tokens=4, min_new_tokens=4,
                       pad_token_id=0)  # warm-up
        t0 = time.perf_counter()
        out = model.generate(ids, attention_mask=attn, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                             num_return_sequences=G, max_new_tokens=new, min_new_tokens=new, pad_token_id=0)
        dt = time.perf_counter() - t0
    tokens = (out.shape[1] - plen) * out.shape[0]
    print("hf_tokens %d hf_seconds %.3f hf_tokens_per_s %.1f" % (tokens, dt, tokens / dt))


if __name__ == "__main__":
    main()
