#!/usr/bin/env python3
"""PyTorch prototype of the demo recipe (design aid, not used at run time).

Chooses task difficulty, model size, SFT and RL settings so that on 2 CPU cores
(a) SFT on worked solutions reaches partial held-out accuracy and (b) a GRPO-style
or SKPO-style objective raises it within minutes. Mirrors the C pipeline: prompt =
problem + "\\n", response = solution + <|endoftext|>, reward +1/-1 on "Answer: N",
token-mean clipped objective, AdamW. Prints accuracy before/after and timings.
  python3 pipelines/proto/proto.py --algo grpo --sft-steps 300 --rl-steps 40
"""
import argparse, json, math, os, random, re, subprocess, time

import torch
from tokenizers import Tokenizer
from transformers import Qwen2Config, Qwen2ForCausalLM

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def synth(split, count, seed, ops, min_ops, operand, kinds):
    out = subprocess.run([os.path.join(TOP, "bin/skpo-synth"), "--split", split, "--count", str(count), "--seed",
                          str(seed), "--ops", str(ops), "--min-ops", str(min_ops), "--max-operand", str(operand),
                          "--kinds", kinds], check=True, capture_output=True, text=True).stdout
    return [json.loads(l) for l in out.splitlines()]


def reward_of(text, gold):
    m = re.findall(r"Answer\s*:\s*([^\n]+)", text)
    return 1.0 if m and m[-1].strip() == gold else -1.0


class Env:
    def __init__(self, a):
        self.tok = Tokenizer.from_file(os.path.join(TOP, "tests/fixtures/demo/tokenizer/tokenizer.json"))
        self.eos = self.tok.token_to_id("<|endoftext|>")
        self.V = self.tok.get_vocab_size()
        cfg = Qwen2Config(vocab_size=self.V, hidden_size=a.hidden, intermediate_size=a.hidden * 4,
                          num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                          max_position_embeddings=256, rope_theta=10000.0, tie_word_embeddings=True,
                          bos_token_id=None, eos_token_id=self.eos, torch_dtype="float32")
        torch.manual_seed(a.seed)
        self.model = Qwen2ForCausalLM(cfg)
        self.a = a

    def enc(self, s):
        return self.tok.encode(s).ids

    def prompt_ids(self, r):
        return self.enc(r["problem"] + "\n")

    @torch.no_grad()
    def generate(self, prompts, max_new, temp, gen):
        """Sample from left-padded prompts; returns (list of token lists, list of per-token logp lists)."""
        m = self.model
        B = len(prompts)
        L = max(len(p) for p in prompts)
        ids = torch.full((B, L), self.eos, dtype=torch.long)
        att = torch.zeros((B, L), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, L - len(p):] = torch.tensor(p)
            att[i, L - len(p):] = 1
        pos = (att.cumsum(1) - 1).clamp(min=0)
        out = m(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True)
        past = out.past_key_values
        logits = out.logits[:, -1]
        toks = [[] for _ in range(B)]
        lps = [[] for _ in range(B)]
        done = torch.zeros(B, dtype=torch.bool)
        nextpos = pos[:, -1] + 1
        for t in range(max_new):
            lp = torch.log_softmax(logits / temp, -1)
            nxt = torch.multinomial(lp.exp(), 1, generator=gen).squeeze(1)
            for i in range(B):
                if not done[i]:
                    toks[i].append(int(nxt[i]))
                    lps[i].append(float(lp[i, nxt[i]]))
                    if int(nxt[i]) == self.eos:
                        done[i] = True
            if done.all():
                break
            att = torch.cat([att, torch.ones((B, 1), dtype=torch.long)], 1)
            out = m(input_ids=nxt[:, None], attention_mask=att, position_ids=nextpos[:, None], past_key_values=past,
                    use_cache=True)
            past = out.past_key_values
            logits = out.logits[:, -1]
            nextpos = nextpos + 1
        return toks, lps

    def seq_logp(self, prompts, resps, temp=1.0):
        """Per-token log-probs (list of 1-D tensors, with grad) of resps given prompts (right-padded batch)."""
        seqs = [p + r for p, r in zip(prompts, resps)]
        L = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), L), self.eos, dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, :len(s)] = torch.tensor(s)
        logits = self.model(input_ids=ids).logits / temp
        lp = torch.log_softmax(logits[:, :-1], -1).gather(2, ids[:, 1:, None]).squeeze(2)
        return [lp[i, len(p) - 1:len(p) - 1 + len(r)] for i, (p, r) in enumerate(zip(prompts, resps))]

    def evaluate(self, test, k, temp, gen):
        prompts = [self.prompt_ids(r) for r in test for _ in range(k)]
        golds = [r["answer"] for r in test for _ in range(k)]
        correct = 0
        lens = 0
        for i in range(0, len(prompts), 256):
            toks, _ = self.generate(prompts[i:i + 256], self.a.max_new, temp, gen)
            for t, g in zip(toks, golds[i:i + 256]):
                correct += reward_of(self.tok.decode(t), g) > 0
                lens += len(t)
        return correct / len(prompts), lens / len(prompts)


def sft(env, train, a):
    opt = torch.optim.AdamW(env.model.parameters(), lr=a.sft_lr, weight_decay=0.0, betas=(0.9, 0.95))
    rng = random.Random(a.seed)
    t0 = time.time()
    for step in range(a.sft_steps):
        batch = rng.sample(train, a.sft_batch)
        prompts = [env.prompt_ids(r) for r in batch]
        resps = [env.enc(r["solution"]) + [env.eos] for r in batch]
        for i, rs in enumerate(resps):  # skip-connected examples: [s, q] -> the full solution
            if rng.random() < a.skip:
                n = len(rs) - 1
                t = rng.randint(max(1, math.ceil(n / 6)), max(1, n // 2))
                prompts[i] = rs[:t] + prompts[i]
        lps = env.seq_logp(prompts, resps)
        loss = -torch.cat(lps).mean()
        lr = a.sft_lr * min(1.0, (step + 1) / 20)
        if not a.sft_const:
            lr *= 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / a.sft_steps))
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(env.model.parameters(), 1.0)
        opt.step()
        if step % 100 == 0 or step == a.sft_steps - 1:
            print(f"sft {step} loss {loss.item():.3f} {time.time() - t0:.0f}s", flush=True)


def grpo_adv(rs):
    m = sum(rs) / len(rs)
    sd = math.sqrt(sum((r - m) ** 2 for r in rs) / max(1, len(rs) - 1))
    return [(r - m) / (sd + 1e-6) for r in rs]


def clip_loss(lp_new, lp_old, adv, lo, hi):
    ratio = torch.exp(lp_new - lp_old)
    return torch.max(-adv * ratio, -adv * ratio.clamp(1 - lo, 1 + hi))


def rl(env, train, test, a, gen):
    opt = torch.optim.AdamW(env.model.parameters(), lr=a.rl_lr, weight_decay=0.0)
    rng = random.Random(a.seed + 1)
    V = {}
    t0 = time.time()
    for step in range(a.rl_steps):
        batch = rng.sample(train, a.prompts)
        env.model.eval()
        if a.algo == "grpo":
            prompts = [env.prompt_ids(r) for r in batch for _ in range(a.G)]
            toks, lps = env.generate(prompts, a.max_new, a.temp, gen)
            rewards = [reward_of(env.tok.decode(t), r["answer"]) for t, r in zip(toks, [b for b in batch for _ in range(a.G)])]
            advs = []
            for i in range(a.prompts):
                advs += grpo_adv(rewards[i * a.G:(i + 1) * a.G])
            items = [(p, t, l, ad) for p, t, l, ad in zip(prompts, toks, lps, advs) if t]
            up_items = []
        else:  # skpo: upstream candidates, median-NLL selection, downstream from [s, q]
            qs = [env.prompt_ids(r) for r in batch]
            Lq = a.lq
            cut = [rng.randint(max(1, math.ceil(Lq / 6)), max(1, Lq // 2)) for _ in batch]
            cands, clps = env.generate([q for q in qs for _ in range(a.G)], max(cut), a.temp, gen)
            segs, seglps, prefixes = [], [], []
            for i, q in enumerate(qs):
                c = []
                for j in range(a.G):
                    t, l = cands[i * a.G + j], clps[i * a.G + j]
                    n = cut[i]
                    if len(t) < n or (t and t[-1] == env.eos and len(t) <= n):
                        n = len(t) // 2 if (t and t[-1] == env.eos) else min(n, len(t))
                    t, l = t[:n], l[:n]
                    c.append((t, l, -sum(l) / max(1, len(l))))
                nll = sorted(x[2] for x in c)
                med = (nll[a.G // 2 - 1] + nll[a.G // 2]) / 2
                best = min(range(a.G), key=lambda j: abs(c[j][2] - med))
                segs.append(c[best][0]); seglps.append(c[best][1])
                prefixes.append(c[best][0] + q)
            prompts = [p for p in prefixes for _ in range(a.G)]
            toks, lps = env.generate(prompts, a.max_new, a.temp, gen)
            rewards = [reward_of(env.tok.decode(t), r["answer"]) for t, r in zip(toks, [b for b in batch for _ in range(a.G)])]
            advs = []
            RI = []
            for i in range(a.prompts):
                rs = rewards[i * a.G:(i + 1) * a.G]
                advs += grpo_adv(rs)
                RI.append(sum(rs) / len(rs))
            items = [(p, t, l, ad) for p, t, l, ad in zip(prompts, toks, lps, advs) if t]
            raw = [RI[i] - V.get(batch[i]["id"], 0.0) for i in range(a.prompts)]
            mu = sum(raw) / len(raw)
            sd = math.sqrt(sum((x - mu) ** 2 for x in raw) / max(1, len(raw) - 1))
            up_items = [(qs[i], segs[i], seglps[i], (raw[i] - mu) / (sd + 1e-8)) for i in range(a.prompts) if segs[i]]
            for i, r in enumerate(batch):  # tracker (rho fixed at 0.96 for the prototype)
                n = V.get(r["id"] + "#n", 0.0)
                v = V.get(r["id"], 0.0)
                V[r["id"]] = v + (RI[i] - v) / (0.96 * n + 1)
                V[r["id"] + "#n"] = 0.96 * n + 1
        env.model.train()
        # one mini-batch per step (on-policy): ratio is 1, the clip matters only with --mb > 1
        mbs = a.mb
        order = list(range(len(items)))
        rng.shuffle(order)
        for k in range(mbs):
            sel = [items[i] for i in order[k::mbs]]
            lp_new = env.seq_logp([s[0] for s in sel], [s[1] for s in sel], a.temp)
            num = sum(clip_loss(n, torch.tensor(s[2]), s[3], 0.2, 0.28).sum() for n, s in zip(lp_new, sel))
            den = sum(len(s[1]) for s in sel)
            loss = num / den
            if up_items:
                us = up_items[k::mbs]
                if us:
                    lp_u = env.seq_logp([s[0] for s in us], [s[1] for s in us], a.temp)
                    lu = sum(clip_loss(n, torch.tensor(s[2]), s[3], 0.2, 0.2).sum() for n, s in zip(lp_u, us))
                    loss = 0.5 * loss + 0.5 * lu / sum(len(s[1]) for s in us)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(env.model.parameters(), 1.0)
            opt.step()
        acc = sum(r > 0 for r in rewards) / len(rewards)
        ml = sum(len(t) for t in toks) / len(toks)
        print(f"rl {step} train_acc {acc:.3f} len {ml:.1f} {time.time() - t0:.0f}s", flush=True)
        if a.eval_every and (step + 1) % a.eval_every == 0:
            env.model.eval()
            print("  eval", env.evaluate(test, a.k, a.temp, gen), flush=True)


def main():
    p = argparse.ArgumentParser()
    A = p.add_argument
    A("--algo", default="grpo"); A("--seed", type=int, default=1)
    A("--ops", type=int, default=2); A("--min-ops", type=int, default=1); A("--operand", type=int, default=20)
    A("--kinds", default="+-"); A("--ntrain", type=int, default=3000); A("--ntest", type=int, default=200)
    A("--hidden", type=int, default=64); A("--layers", type=int, default=2); A("--heads", type=int, default=4)
    A("--kv-heads", type=int, default=2)
    A("--sft-steps", type=int, default=300); A("--sft-batch", type=int, default=32); A("--sft-lr", type=float, default=3e-3)
    A("--rl-steps", type=int, default=40); A("--prompts", type=int, default=16); A("--G", type=int, default=8)
    A("--rl-lr", type=float, default=1e-3); A("--temp", type=float, default=1.0); A("--max-new", type=int, default=32)
    A("--mb", type=int, default=1); A("--k", type=int, default=4); A("--eval-every", type=int, default=10)
    A("--lq", type=float, default=24.0); A("--threads", type=int, default=2)
    A("--direct", type=float, default=0.0); A("--sft-const", type=int, default=0)
    A("--skip", type=float, default=0.0)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    gen = torch.Generator().manual_seed(a.seed)
    train = synth("train", a.ntrain, a.seed, a.ops, a.min_ops, a.operand, a.kinds)
    drng = random.Random(a.seed + 7)
    for r in train:  # a share of SFT solutions skip the worked steps (what skpo-synth --direct does)
        if drng.random() < a.direct:
            r["solution"] = "Answer: " + r["answer"]
    test = synth("test", a.ntest, a.seed + 1000, a.ops, a.min_ops, a.operand, a.kinds)
    env = Env(a)
    print("params", sum(x.numel() for x in env.model.parameters()))
    t0 = time.time()
    ck = f"/tmp/proto_sft_{a.seed}_{a.ops}_{a.min_ops}_{a.operand}_{a.kinds}_{a.hidden}_{a.layers}_{a.sft_steps}_{a.sft_lr}_{a.direct}_{a.sft_const}_{a.skip}.pt"
    if os.path.exists(ck):
        env.model.load_state_dict(torch.load(ck))
    else:
        sft(env, train, a)
        torch.save(env.model.state_dict(), ck)
    t1 = time.time()
    env.model.eval()
    before = env.evaluate(test, a.k, a.temp, gen)
    greedy = env.evaluate(test, 1, 1e-4, gen)
    print(f"after sft: acc@T {before} greedy {greedy} sft {t1 - t0:.0f}s", flush=True)
    rl(env, train, test, a, gen)
    t2 = time.time()
    env.model.eval()
    after = env.evaluate(test, a.k, a.temp, gen)
    print(f"after rl: acc@T {after} (before {before[0]:.3f}) rl {t2 - t1:.0f}s total {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
