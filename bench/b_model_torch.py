#!/usr/bin/env python3
"""PyTorch / Hugging Face peer for bench/b_model.sh: the same Llama shapes in float32.

  b_model_torch.py THREADS train L C NH NKV F V B T
  b_model_torch.py THREADS decode L C NH NKV F V B P D
train: logits -> log_softmax -> gathered log-probs of the next tokens -> weighted sum ->
backward (what skpo_model_train_forward/backward compute); decode: model.generate,
greedy, KV cache, prefill included, exactly D new tokens per sequence.
"""
import sys, time
import torch
import transformers

threads, mode = int(sys.argv[1]), sys.argv[2]
L, C, NH, NKV, F, V, B = (int(x) for x in sys.argv[3:10])
torch.set_num_threads(threads)
torch.manual_seed(0)
cfg = transformers.LlamaConfig(vocab_size=V, hidden_size=C, intermediate_size=F, num_hidden_layers=L,
                               num_attention_heads=NH, num_key_value_heads=NKV, max_position_embeddings=4096,
                               rms_norm_eps=1e-5, tie_word_embeddings=False)
model = transformers.LlamaForCausalLM(cfg).float()
if mode == "train":
    T = int(sys.argv[10])
    model.train()
    ids = torch.randint(0, V, (B, T))
    w = torch.full((B, T - 1), 1.0 / (B * (T - 1)))
    best = 1e9
    for r in range(3):
        t = time.perf_counter()
        logits = model(ids).logits[:, :-1]
        lp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]
        (lp * w).sum().backward()
        model.zero_grad(set_to_none=False)
        t = time.perf_counter() - t
        if r:
            best = min(best, t)
    print("train_tok_s %.1f" % (B * T / best))
else:
    P, D = int(sys.argv[10]), int(sys.argv[11])
    model.eval()
    ids = torch.tensor([[(b * 131 + t * 17) % V for t in range(P)] for b in range(B)])
    best = 1e9
    with torch.no_grad():
        for r in range(2):
            t = time.perf_counter()
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=D, min_new_tokens=D,
                                 do_sample=False, use_cache=True, pad_token_id=0)
            t = time.perf_counter() - t
            assert out.shape[1] == P + D
            best = min(best, t)
    print("decode_tok_s %.1f" % (B * D / best))
