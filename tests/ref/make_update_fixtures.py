#!/usr/bin/env python3
"""Reference fixtures for skpo-update, computed with PyTorch.

  loss.json   per-token policy losses (verl's vanilla PPO with dual clip, CISPO,
              SFT, k3 KL, entropy bonus) aggregated per phase with the three
              aggregation modes; expected objective, per-phase losses, clip
              counts and d(objective)/d(logp), d(objective)/d(entropy) by autograd.
  adamw.json  torch.optim.AdamW + clip_grad_norm_ over a few tensors for several
              training steps with linear warmup (lr of step s = lr*min(1, s/W)).
  model/      (with --model) a tiny Qwen2 checkpoint, records of both phases, and
              the loss, parameter gradients and one AdamW step (see model_case()).

Run from the repository root:  python3 tests/ref/make_update_fixtures.py
The formulas are written out here on purpose (not imported from verl) and
follow verl core_algos.py: compute_policy_loss_vanilla, compute_policy_loss_cispo,
kl_penalty(low_var_kl), agg_loss.
"""
import json, math, os, sys
import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "update")
torch.manual_seed(1234)


def f32list(t):
    return [float(x) for x in t.detach().to(torch.float32).reshape(-1).tolist()]


# --- per-token losses (verl) ---------------------------------------------------------

def ppo_token(logp, old, A, lo, hi, dual):
    d = torch.clamp(logp - old, -20.0, 20.0)
    r = torch.exp(d)
    l1 = -A * r
    l2 = -A * torch.clamp(r, 1 - lo, 1 + hi)
    c1 = torch.maximum(l1, l2)
    clipped = torch.gt(l2, l1)
    low = clipped & (r < 1)
    high = clipped & (r > 1)
    dualm = torch.zeros_like(low)
    if dual > 0 and A < 0:
        l3 = -A * dual
        dualm = torch.gt(c1, l3)
        c1 = torch.minimum(c1, l3 * torch.ones_like(c1))
    return c1, low, high, dualm, -d


def cispo_token(logp, old, A, lo, hi):
    d = torch.clamp(logp - old, -20.0, 20.0)
    r = torch.exp(d)
    w = torch.clamp(r, 1 - lo, 1 + hi).detach()
    return -w * A * logp, r < 1 - lo, r > 1 + hi, torch.zeros_like(r, dtype=torch.bool), -d


def k3(ref, logp):
    k = torch.clamp(ref - logp, -20.0, 20.0)
    return torch.clamp(torch.exp(k) - k - 1, -10.0, 10.0)


def phase_scale(agg, norm, tokens, seqs, n):
    if n == 0 or tokens == 0:
        return 0.0
    if agg == "token-mean":
        return 1.0 / tokens
    if agg == "seq-mean-token-mean":
        return 1.0 / (seqs * n)
    return 1.0 / (seqs * norm)


def loss_case(name, phases, agg, norm=3072.0, kl=0.0, ent=0.0, sft=False, seqspec=None):
    seqs = []
    for (ph, n, adv, w) in seqspec:
        old = -torch.rand(n, dtype=torch.float32) * 3 - 0.05
        logp = (old + torch.randn(n) * 0.35).clamp(max=-1e-3)
        if n > 4:  # a few extreme ratios: beyond the log-ratio clamp and the dual clip
            logp[1] = old[1] + 25.0 if ph == 0 else old[1] + 1.5
            logp[2] = old[2] - 22.0
        ref = logp.detach() + torch.randn(n) * 0.3
        entv = torch.rand(n, dtype=torch.float32) * 2
        seqs.append(dict(phase=ph, adv=adv, weight=w, logp=logp.float(), old=old.float(), ref=ref.float(),
                         ent=entv.float()))
    cnt = [[0, 0] for _ in range(3)]
    for s in seqs:
        cnt[s["phase"]][0] += len(s["logp"])
        cnt[s["phase"]][1] += 1
    objective = torch.zeros((), dtype=torch.float64)
    ph_loss = [0.0] * 3
    stats = {k: [0.0] * 3 for k in ("clip_low", "clip_high", "clip_dual", "approx_kl", "kl_ref", "entropy")}
    for s in seqs:
        s["lp"] = s["logp"].clone().double().requires_grad_(True)
        s["en"] = s["ent"].clone().double().requires_grad_(True)
        p = s["phase"]
        kind, lo, hi, dual = phases[p] if not sft else ("sft", 0, 0, 0)
        old = s["old"].double()
        if kind == "sft":
            tl = -s["lp"]
            low = high = dm = torch.zeros_like(tl, dtype=torch.bool)
            akl = torch.zeros_like(tl)
        elif kind == "ppo":
            tl, low, high, dm, akl = ppo_token(s["lp"], old, s["adv"], lo, hi, dual)
        else:
            tl, low, high, dm, akl = cispo_token(s["lp"], old, s["adv"], lo, hi)
        if kl:
            kv = k3(s["ref"].double(), s["lp"])
            tl = tl + kl * kv
            stats["kl_ref"][p] += float(kv.sum())
        tl = tl - ent * s["en"]
        scale = phase_scale(agg, norm, cnt[p][0], cnt[p][1], len(tl))
        L = scale * tl.sum()
        w = 1.0 if sft else s["weight"]
        objective = objective + w * L
        ph_loss[p] += float(L.detach())
        stats["clip_low"][p] += float(low.sum())
        stats["clip_high"][p] += float(high.sum())
        stats["clip_dual"][p] += float(dm.sum())
        stats["approx_kl"][p] += float(akl.sum()) if kind != "sft" else 0.0
        stats["entropy"][p] += float(s["ent"].sum())
    objective.backward()
    out = dict(name=name, agg=agg, agg_norm=norm, kl_coef=kl, entropy_coef=ent, sft=int(sft),
               phases=[dict(kind=k, eps_low=lo, eps_high=hi, dual=d) for (k, lo, hi, d) in phases],
               objective=float(objective), phase_loss=ph_loss, **stats, seqs=[])
    for s in seqs:
        out["seqs"].append(dict(phase=s["phase"], adv=s["adv"], weight=s["weight"], logp=f32list(s["logp"]),
                                old=f32list(s["old"]), ref=f32list(s["ref"]), ent=f32list(s["ent"]),
                                dlogp=[float(x) for x in s["lp"].grad.tolist()],
                                dent=[float(x) for x in s["en"].grad.tolist()]))
    return out


SKPO = [("ppo", 0.2, 0.2, 3.0), ("cispo", 0.2, 0.28, 0.0), ("ppo", 0.2, 0.28, 3.0)]
SPEC = [(0, 7, 1.3, 0.5), (0, 5, -1.7, 0.5), (1, 9, 2.47, 0.5), (1, 6, -0.35, 0.5), (1, 8, -0.35, 0.5),
        (1, 3, 0.0, 0.5), (0, 2, 0.0, 0.0)]
FULL = [(2, 8, 0.93, 1.0), (2, 6, -0.93, 1.0), (2, 11, -2.1, 1.0), (2, 4, 0.5, 1.0)]


def loss_fixtures():
    cases = [
        loss_case("skpo_defaults_token_mean", SKPO, "token-mean", seqspec=SPEC),
        loss_case("skpo_seq_mean_token_mean", SKPO, "seq-mean-token-mean", seqspec=SPEC),
        loss_case("skpo_dr_grpo_norm", SKPO, "seq-mean-token-sum-norm", norm=16.0, seqspec=SPEC),
        loss_case("skpo_kl_and_entropy", SKPO, "token-mean", kl=0.1, ent=0.01, seqspec=SPEC),
        loss_case("grpo_full_ppo_clip_higher_no_dual", [("ppo", 0.2, 0.2, 0.0), ("cispo", 0.2, 0.28, 0.0),
                                                        ("ppo", 0.2, 0.28, 0.0)], "token-mean", seqspec=FULL),
        loss_case("cispo_upstream", [("cispo", 0.2, 0.2, 0.0), ("ppo", 0.2, 0.28, 10.0), ("ppo", 0.2, 0.28, 3.0)],
                  "token-mean", seqspec=SPEC),
        loss_case("sft", SKPO, "token-mean", sft=True, seqspec=FULL),
    ]
    return dict(cases=cases)


# --- AdamW ---------------------------------------------------------------------------------

def adamw_case(name, decay_matrices_only):
    torch.manual_seed(7)
    shapes = [(4, 5), (5,), (3, 3)]
    params = [torch.nn.Parameter(torch.randn(s, dtype=torch.float32)) for s in shapes]
    init = [f32list(p) for p in params]
    lr, wd, W = 1e-2, 0.1, 3
    if decay_matrices_only:
        groups = [dict(params=[p for p in params if p.dim() >= 2], weight_decay=wd),
                  dict(params=[p for p in params if p.dim() < 2], weight_decay=0.0)]
    else:
        groups = [dict(params=params, weight_decay=wd)]
    opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=1e-8, foreach=False)
    updates = []
    for step in (1, 2, 3, 4):
        for u in range(2):
            grads = [torch.randn(p.shape, dtype=torch.float32) * (0.1 if (step + u) % 2 else 1.0) for p in params]
            for p, g in zip(params, grads):
                p.grad = g.clone()
            norm = torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=False)
            step_lr = lr * min(1.0, step / W)
            for gr in opt.param_groups:
                gr["lr"] = step_lr
            opt.step()
            updates.append(dict(step=step, lr=step_lr, grads=[f32list(g) for g in grads], norm=float(norm),
                                params=[f32list(p) for p in params]))
    return dict(name=name, lr=lr, weight_decay=wd, warmup=W, decay_matrices_only=int(decay_matrices_only),
                shapes=[list(s) for s in shapes], init=init, updates=updates)


def adamw_fixtures():
    return dict(cases=[adamw_case("decay_all", False), adamw_case("decay_matrices_only", True)])


def dump(name, obj):
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, name), "w") as f:
        json.dump(obj, f, separators=(",", ":"))
    print("wrote", os.path.join(OUT, name), file=sys.stderr)


if __name__ == "__main__":
    dump("loss.json", loss_fixtures())
    dump("adamw.json", adamw_fixtures())
    if "--model" in sys.argv:
        import make_update_model  # noqa: F401  (the model fixture, see below)
