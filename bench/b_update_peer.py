#!/usr/bin/env python3
"""Peer for bench/b_update.sh: builds the bench checkpoint + records (mode `make DIR`),
or runs the same update step in PyTorch on CPU (mode `run DIR`) and prints tokens/s.

The PyTorch step mirrors skpo-update's defaults: mini-batches of MB prompts, per-record
forward (no padding waste, same as skpo's packed micro-batches), up = PPO [0.8,1.2] dual 3,
down = CISPO [0.8,1.28], token-mean per phase with weights 0.5, clip_grad_norm_ 1.0, AdamW.
"""
import os, struct, subprocess, sys, time
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "ref"))
from make_update_fixtures import msgpack, i32, f32, ppo_token, cispo_token  # noqa: E402

PROMPTS, DOWNS, MB = 8, 3, 4
CFG = dict(model_type="qwen2", vocab_size=2048, hidden_size=256, intermediate_size=704, num_hidden_layers=4,
           num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=1024, rms_norm_eps=1e-6,
           rope_theta=10000.0, tie_word_embeddings=True, hidden_act="silu", bos_token_id=1, eos_token_id=2)


def make(d):
    import transformers
    torch.manual_seed(3)
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**CFG)).float()
    model.save_pretrained(d, safe_serialization=True)
    g = torch.Generator().manual_seed(4)
    recs = []
    for q in range(PROMPTS):
        prompt = torch.randint(3, 2048, (64,), generator=g).tolist()
        up = torch.randint(3, 2048, (96,), generator=g).tolist()
        recs.append(dict(kind="up", pid="q%d" % q, uid="q%d-up" % q, prompt=i32(prompt), tokens=i32(up),
                         logp=f32([-7.6] * len(up)), adv=0.5 if q % 2 else -0.5, weight=0.5))
        for k in range(DOWNS):
            toks = torch.randint(3, 2048, (160,), generator=g).tolist()
            recs.append(dict(kind="down", pid="q%d" % q, uid="q%d-d%d" % (q, k), gid="q%d-up" % q,
                             prompt=i32(up + prompt), tokens=i32(toks), logp=f32([-7.6] * len(toks)),
                             adv=[1.0, -0.5, 0.3][k], weight=0.5))
    raw = b"".join(msgpack(r) for r in recs)
    with open(os.path.join(d, "records.msgpack.zst"), "wb") as f:
        f.write(subprocess.run(["zstd", "-q", "-c"], input=raw, stdout=subprocess.PIPE, check=True).stdout)


def unpack_records(d):
    """The records again, from make()'s deterministic generator (no msgpack reader needed)."""
    g = torch.Generator().manual_seed(4)
    out = []
    for q in range(PROMPTS):
        prompt = torch.randint(3, 2048, (64,), generator=g).tolist()
        up = torch.randint(3, 2048, (96,), generator=g).tolist()
        out.append(("up", q, prompt, up, 0.5 if q % 2 else -0.5))
        for k in range(DOWNS):
            toks = torch.randint(3, 2048, (160,), generator=g).tolist()
            out.append(("down", q, up + prompt, toks, [1.0, -0.5, 0.3][k]))
    return out


def run(d):
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32)
    recs = unpack_records(d)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=1e-7, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1, foreach=False)
    t0 = time.time()
    ntok = 0
    for mb in range(PROMPTS // MB):
        group = [r for r in recs if r[1] // MB == mb]
        cnt = {k: sum(len(r[3]) for r in group if r[0] == k) for k in ("up", "down")}
        opt.zero_grad()
        for (kind, q, prompt, toks, adv) in group:
            ids = torch.tensor(prompt + toks)[None]
            lp = torch.log_softmax(model(ids).logits[0].float(), -1)[len(prompt) - 1:-1]
            lp = lp.gather(-1, torch.tensor(toks)[:, None])[:, 0]
            old = torch.full_like(lp, -7.6)
            tl = ppo_token(lp, old, adv, 0.2, 0.2, 3.0)[0] if kind == "up" else cispo_token(lp, old, adv, 0.2, 0.28)[0]
            (0.5 * tl.sum() / cnt[kind]).backward()
            ntok += len(toks)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
    dt = time.time() - t0
    print("%.1f" % (ntok / dt))


if __name__ == "__main__":
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1)))
    {"make": make, "run": run}[sys.argv[1]](sys.argv[2])
