#!/usr/bin/env python3
"""PyTorch 2.x peer for bench/b_torch.sh: the same Qwen2/Llama model written
plainly in torch (eager, float32 activations, scaled_dot_product_attention),
on the same checkpoint folder and the same token ids as skpo's tools.

  torch_peer.py make DIR KIND N PLEN RLEN VOCAB SEED
      DIR/KIND.msgpack.zst (records for skpo: kind full, pid, uid, prompt,
      tokens, adv, logp placeholder) and DIR/KIND.json (the same ids for us);
      KIND is score or update (update records alternate adv +1/-1), or
      prompts (kind prompt, pid, prompt; RLEN unused)
  torch_peer.py score MODEL INPUT.json THREADS
  torch_peer.py update MODEL INPUT.json THREADS MINIBATCH
  torch_peer.py sample MODEL PROMPTS.json THREADS G NEW

Each prints "torch_compute S cpu C" (seconds of the compute phase, timed in
this process after the model is loaded and one untimed 8-token warm-up pass):
  score   log-probs of every response token (no_grad forward, log_softmax on
          the response rows only, as skpo-score);
  update  skpo-update's step: pi_old recomputed (no_grad), then per
          mini-batch forward, log-probs, the `full` phase's PPO loss (clip
          0.2/0.28, dual clip 3) with truncated IS weights min(exp(pi_old -
          rollout), 2), token-mean, backward, clip_grad_norm_(1.0), AdamW
          (lr 1e-6, wd 0.1, betas 0.9/0.999, eps 1e-8);
  sample  G samples per prompt, exactly NEW tokens each at temperature 1 (the
          prompt prefilled once per sample, a static KV cache, softmax +
          multinomial per step).
"""
import json, math, os, struct, subprocess, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "ref"))


def make(d, kind, n, plen, rlen, vocab, seed):
    import random
    from mpk import write_stream, i32s, f32s
    rng = random.Random(seed)
    recs, js = [], []
    for i in range(n):
        p = [rng.randrange(3, vocab) for _ in range(plen)]
        if kind == "prompts":
            recs.append({"kind": "prompt", "pid": "p%d" % i, "prompt": i32s(p)})
            js.append(p)
            continue
        t = [rng.randrange(3, vocab) for _ in range(rlen)]
        adv = 1.0 if i % 2 == 0 else -1.0
        recs.append({"kind": "full", "pid": "p%d" % i, "uid": "p%d-0" % i, "prompt": i32s(p), "tokens": i32s(t),
                     "adv": adv, "logp": f32s([-7.0] * rlen)})
        js.append({"prompt": p, "tokens": t, "adv": adv})
    write_stream(os.path.join(d, kind + ".msgpack.zst"), recs, tool="torch_peer.py")
    with open(os.path.join(d, kind + ".json"), "w") as f:
        json.dump(js, f)


# --- the model -----------------------------------------------------------------------------

def load_safetensors(path, torch):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        dt = {"F32": torch.float32, "BF16": torch.bfloat16}[t["dtype"]]
        out[name] = torch.frombuffer(bytearray(data[a:b]), dtype=dt).reshape(t["shape"]).float()
    return out


class Model:
    def __init__(self, d, torch, train=False):
        self.t = torch
        with open(os.path.join(d, "config.json")) as f:
            c = json.load(f)
        self.c = c
        w = load_safetensors(os.path.join(d, "model.safetensors"), torch)
        self.L, self.C = c["num_hidden_layers"], c["hidden_size"]
        self.NH, self.NKV = c["num_attention_heads"], c["num_key_value_heads"]
        self.HS = c.get("head_dim") or self.C // self.NH
        self.eps = c["rms_norm_eps"]
        pre = "model."
        self.p = {k: v.requires_grad_(train) for k, v in w.items()}
        self.wte = self.p[pre + "embed_tokens.weight"]
        self.head = self.p.get("lm_head.weight", self.wte)
        theta = c.get("rope_theta", 10000.0)
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, self.HS, 2, dtype=torch.float32) / self.HS))

    def params(self):
        return list(self.p.values())

    def rope(self, x, pos):  # x (B, H, T, HS)
        t = self.t
        f = pos[:, None].float() * self.inv_freq[None, :]
        emb = t.cat([f, f], -1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        h = self.HS // 2
        rot = t.cat([-x[..., h:], x[..., :h]], -1)
        return x * cos + rot * sin

    def norm(self, x, w):
        return x * self.t.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w

    def layer(self, l, x, pos, cache=None, start=0):
        t, F = self.t, self.t.nn.functional
        p = lambda n: self.p.get("model.layers.%d.%s" % (l, n))
        B, T, _ = x.shape
        h = self.norm(x, p("input_layernorm.weight"))
        q = F.linear(h, p("self_attn.q_proj.weight"), p("self_attn.q_proj.bias"))
        k = F.linear(h, p("self_attn.k_proj.weight"), p("self_attn.k_proj.bias"))
        v = F.linear(h, p("self_attn.v_proj.weight"), p("self_attn.v_proj.bias"))
        q = self.rope(q.view(B, T, self.NH, self.HS).transpose(1, 2), pos)
        k = self.rope(k.view(B, T, self.NKV, self.HS).transpose(1, 2), pos)
        v = v.view(B, T, self.NKV, self.HS).transpose(1, 2)
        if cache is not None:  # static KV cache: write positions start .. start+T, attend to 0 .. start+T
            ck, cv = cache[l]
            ck[:, :, start:start + T] = k
            cv[:, :, start:start + T] = v
            k, v = ck[:, :, :start + T], cv[:, :, :start + T]
        a = F.scaled_dot_product_attention(q, k, v, is_causal=(T > 1), enable_gqa=self.NH != self.NKV)
        x = x + F.linear(a.transpose(1, 2).reshape(B, T, -1), p("self_attn.o_proj.weight"), p("self_attn.o_proj.bias"))
        h = self.norm(x, p("post_attention_layernorm.weight"))
        g = F.linear(h, p("mlp.gate_proj.weight"))
        u = F.linear(h, p("mlp.up_proj.weight"))
        return x + F.linear(F.silu(g) * u, p("mlp.down_proj.weight"))

    def hidden(self, ids, cache=None, start=0):
        t = self.t
        x = self.wte[ids]
        pos = t.arange(start, start + ids.shape[1])
        for l in range(self.L):
            x = self.layer(l, x, pos, cache, start)
        return self.norm(x, self.p["model.norm.weight"])

    def logp(self, ids, start):
        """log-probs of ids[:, start:] given the rest: the lm_head on the response rows only."""
        F = self.t.nn.functional
        h = self.hidden(ids)[:, start - 1:-1]
        lp = F.log_softmax(F.linear(h, self.head), -1)
        return lp.gather(-1, ids[:, start:, None])[..., 0]


# --- workloads --------------------------------------------------------------------------------

def batch(recs, torch):
    ids = torch.tensor([r["prompt"] + r["tokens"] for r in recs])
    return ids, len(recs[0]["prompt"])


def score(m, recs, torch):
    with torch.no_grad():
        ids, start = batch(recs, torch)
        return m.logp(ids, start)


def update(m, recs, torch, mb):
    ids_all, start = batch(recs, torch)
    opt = torch.optim.AdamW(m.params(), lr=1e-6, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
    with torch.no_grad():
        old_all = m.logp(ids_all, start)
    rollout = torch.full_like(old_all, -7.0)
    isw_all = torch.exp(torch.clamp(old_all - rollout, -20, 20)).clamp(max=2.0)
    adv_all = torch.tensor([r["adv"] for r in recs])
    for k in range(0, len(recs), mb):
        ids, old, isw, adv = ids_all[k:k + mb], old_all[k:k + mb], isw_all[k:k + mb], adv_all[k:k + mb, None]
        opt.zero_grad()
        lp = m.logp(ids, start)
        r = torch.exp(torch.clamp(lp - old, -20, 20))
        l1, l2 = -adv * r, -adv * torch.clamp(r, 0.8, 1.28)
        loss = torch.maximum(l1, l2)
        loss = torch.where(adv < 0, torch.minimum(loss, -adv * 3.0), loss)
        (loss * isw).sum().div(lp.numel()).backward()
        torch.nn.utils.clip_grad_norm_(m.params(), 1.0)
        opt.step()


def sample(m, prompts, torch, G, new):
    F = torch.nn.functional
    with torch.no_grad():
        ids = torch.tensor([p for p in prompts for _ in range(G)])
        B, P = ids.shape
        cache = [(torch.empty(B, m.NKV, P + new, m.HS), torch.empty(B, m.NKV, P + new, m.HS)) for _ in range(m.L)]
        h = m.hidden(ids, cache, 0)[:, -1]
        out = []
        for i in range(new):
            logits = F.linear(h, m.head)
            tok = torch.multinomial(torch.softmax(logits, -1), 1)
            out.append(tok)
            if i + 1 < new:
                h = m.hidden(tok, cache, P + i)[:, -1]
        return torch.cat(out, 1)


def main():
    mode = sys.argv[1]
    if mode == "make":
        d, kind = sys.argv[2], sys.argv[3]
        make(d, kind, *(int(x) for x in sys.argv[4:9]))
        return
    import torch
    model_dir, inp, threads = sys.argv[2], sys.argv[3], int(sys.argv[4])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    with open(inp) as f:
        data = json.load(f)
    m = Model(model_dir, torch, train=(mode == "update"))
    with torch.no_grad():  # warm-up, untimed: thread pool and allocator
        m.hidden(torch.arange(3, 11)[None])
    t0, c0 = time.perf_counter(), time.process_time()
    extra = ""
    if mode == "score":  # the sum of every log-prob: the bench checks that both sides computed the same thing
        extra = " logp_sum %.6g" % score(m, data, torch).double().sum().item()
    elif mode == "update":
        update(m, data, torch, int(sys.argv[5]))
    elif mode == "sample":
        sample(m, data, torch, int(sys.argv[5]), int(sys.argv[6]))
    else:
        sys.exit("torch_peer.py: unknown mode " + mode)
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    print("torch_compute %.4f cpu %.4f%s" % (dt, dc, extra))


if __name__ == "__main__":
    main()
