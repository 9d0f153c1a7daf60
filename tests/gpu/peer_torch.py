#!/usr/bin/env python3
"""PyTorch eager peer of the GPU benchmarks (tests/gpu/bench_*.c), same shapes,
same GPU, same run: Hugging Face transformers' Qwen2ForCausalLM with random
weights from a config.

  decode   a greedy loop over the model's forward with a DynamicCache (static
           batch) of 128 tokens after a 512-token prompt at batch 1, 8, 64,
           256; only the 128 decode steps are timed; roofline as in
           bench_decode.c (bf16 weights + KV bytes per step over the copy
           bandwidth measured here);
  prefill  forward of 16 x 1024 tokens, logits of the last position only;
  update   bf16 autocast over fp32 weights, mean NLL of every next token,
           backward, torch.optim.AdamW (foreach) step; 8 x 1024 tokens.

Prints `BENCH torch <kind> model=... key=value` lines (tests/gpu/summary.awk).
Usage: peer_torch.py [0.5b|1.5b] [--cpu-smoke] (a tiny model on the CPU, to
check this script without a GPU).
"""
import statistics
import sys
import time
import warnings

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

SHAPES = {
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, tie_word_embeddings=True),
    "1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, tie_word_embeddings=False),
    "smoke": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, tie_word_embeddings=True),
}


def config(name, vocab):
    return Qwen2Config(vocab_size=vocab, max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1e6,
                       attn_implementation="sdpa", use_cache=True, **SHAPES[name])


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, dev, warm=1, reps=5):
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(reps):
        sync(dev)
        t0 = time.perf_counter()
        fn()
        sync(dev)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def peaks(dev):
    if dev.type != "cuda":
        return 50e9, 1e12
    n = 1 << 29  # 1 GiB of bf16
    a = torch.rand(n, device=dev, dtype=torch.bfloat16)
    b = torch.empty_like(a)
    t = timed(lambda: b.copy_(a), dev, 3, 10)
    copy = 2 * a.numel() * 2 / t
    del a, b
    x = torch.rand(8192, 8192, device=dev, dtype=torch.bfloat16) * 2 - 1
    y = torch.rand(8192, 8192, device=dev, dtype=torch.bfloat16) * 2 - 1
    t = timed(lambda: x @ y, dev, 3, 10)
    gemm = 2 * 8192 ** 3 / t
    del x, y
    print(f"PEAK torch copy_tbs={copy / 1e12:.3f} gemm_tflops={gemm / 1e12:.1f}", flush=True)
    return copy, gemm


def counts(cfg):
    C, F, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    hs = C // cfg.num_attention_heads
    q, kv = cfg.num_attention_heads * hs, cfg.num_key_value_heads * hs
    lin = L * (C * q + 2 * C * kv + q * C + 3 * C * F)
    kv_pos = 2 * 2 * L * kv  # bytes of K and V (bf16) of one position, all layers
    attn = lambda T: 2 * 2 * L * cfg.num_attention_heads * hs * T * (T + 1) / 2
    return lin, kv_pos, attn


def weight_bytes(model, cfg):
    n = sum(p.numel() for p in model.parameters())  # tied embedding counted once
    if not cfg.tie_word_embeddings:
        n -= cfg.vocab_size * cfg.hidden_size
    return 2 * n


def bench_decode(name, model, cfg, dev, copy_bps, batches, prompt, gen):
    """Manual greedy loop, static batch: prefill (logits of the last position
    only, not timed), then `gen` steps of one token per sequence through the
    DynamicCache, timed from the first decode step to the last."""
    _, kv_pos, _ = counts(cfg)
    wb = weight_bytes(model, cfg)
    g = torch.Generator(device="cpu").manual_seed(1)
    for B in batches:
        ids = torch.randint(0, cfg.vocab_size, (B, prompt), generator=g).to(dev)

        def run(steps, timed_part):
            with torch.no_grad():
                out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
                pkv, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
                sync(dev)
                t0 = time.perf_counter()
                for _ in range(steps):
                    out = model(input_ids=tok, past_key_values=pkv, use_cache=True)
                    pkv, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
                sync(dev)
                timed_part.append(time.perf_counter() - t0)
                assert pkv.get_seq_length() == prompt + steps
        warm = []
        run(2, warm)
        t = []
        run(gen, t)
        t = t[0]
        pos = sum(B * (prompt + k + 1) for k in range(gen))
        roof = (gen * wb + pos * kv_pos) / copy_bps
        print(f"BENCH torch decode model={name} batch={B} tok_s={B * gen / t:.1f} frac={roof / t:.3f} "
              f"ms_step={1e3 * t / gen:.3f} (eager, greedy, DynamicCache)", flush=True)
        del ids
        if dev.type == "cuda":
            torch.cuda.empty_cache()


def bench_prefill(name, model, cfg, dev, gemm, nseq, length):
    lin, _, attn = counts(cfg)
    ids = torch.randint(0, cfg.vocab_size, (nseq, length), device=dev)

    def run():
        with torch.no_grad():
            return model(input_ids=ids, use_cache=False, logits_to_keep=1).logits
    t = timed(run, dev, 1, 5)
    T = nseq * length
    flops = 2 * lin * T + 2 * cfg.vocab_size * cfg.hidden_size * nseq + nseq * attn(length)
    print(f"BENCH torch prefill model={name} tokens={T} tflops={flops / t / 1e12:.1f} frac={flops / t / gemm:.3f} "
          f"ms={1e3 * t:.2f} tok_s={T / t:.0f}", flush=True)


def bench_update(name, cfg, dev, gemm, nseq, length):
    lin, _, attn = counts(cfg)
    torch.manual_seed(0)
    with torch.device(dev):
        model = Qwen2ForCausalLM(cfg)  # fp32 master weights, initialised on the device
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.0)
    ids = torch.randint(0, cfg.vocab_size, (nseq, length), device=dev)
    use_amp = dev.type == "cuda"

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=use_amp):
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        opt.step()
        return loss
    t = timed(step, dev, 1, 5)
    T = nseq * length
    scored = nseq * (length - 1)
    flops = 6 * lin * T + 6 * cfg.vocab_size * cfg.hidden_size * scored + 3 * nseq * attn(length)
    print(f"BENCH torch update model={name} tokens={T} tok_s={T / t:.0f} mfu={flops / t / gemm:.3f} "
          f"ms={1e3 * t:.1f} (fp32 weights, bf16 autocast, AdamW foreach)", flush=True)
    del model, opt


def main():
    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers renames past_key_values in 5.2x
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    smoke = "--cpu-smoke" in sys.argv
    name = "smoke" if smoke else (args[0] if args else "0.5b")
    if name not in SHAPES:
        print(f"FAIL peer torch: unknown model {name}")
        return 1
    dev = torch.device("cpu" if smoke else "cuda")
    if dev.type == "cuda" and not torch.cuda.is_available():
        print(f"SKIP peer torch {name}: skipped: no GPU")
        return 0
    vocab = 512 if smoke else 151936
    cfg = config(name, vocab)
    copy_bps, gemm = peaks(dev)
    t0 = time.perf_counter()
    torch.manual_seed(0)
    with torch.device(dev):
        model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    model.eval()
    print(f"INFO torch {name}: {sum(p.numel() for p in model.parameters()) / 1e9:.2f}B params, "
          f"random init in {time.perf_counter() - t0:.1f}s, torch {torch.__version__}", flush=True)
    if smoke:
        bench_decode(name, model, cfg, dev, copy_bps, [1, 2], 16, 4)
        bench_prefill(name, model, cfg, dev, gemm, 2, 32)
        del model
        bench_update(name, cfg, dev, gemm, 2, 32)
        return 0
    bench_decode(name, model, cfg, dev, copy_bps, [1, 8, 64, 256], 512, 128)
    bench_prefill(name, model, cfg, dev, gemm, 16, 1024)
    del model
    torch.cuda.empty_cache()
    bench_update(name, cfg, dev, gemm, 8, 1024)
    return 0


if __name__ == "__main__":
    sys.exit(main())
