#!/usr/bin/env python3
"""PyTorch reference for PRIME's advantages (skpo-advantage --mode prime,
core/rl/prime.c): tests/fixtures/adv/prime.json.

Written out here on purpose (not imported) after the PRIME authors' code in verl's
recipe/prime: the PRM's token scores (prime_dp_rm.py _forward_micro_batch with
prime_granularity=token: r = beta * (log pi_phi - log pi_ref) on every response
token but the last; prime_norm=batch_norm: r / (max |reverse cumsum| + 1e-6)) and
prime_core_algos.py compute_rloo_advantage_return (masked_rloo of the process
rewards and of the outcome on the last token, weighted by reward_dpo_coef and
reward_gt_coef, returns by reverse cumsum, verl's masked_whiten with the unbiased
variance). Responses are padded into one [B, T] tensor with a mask, as verl holds them.

Run from the repository root:  python3 tests/ref/make_prime_fixtures.py
"""
import json, os, sys
import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "adv", "prime.json")


def masked_mean(x, m):
    return (x * m).sum() / m.sum()


def masked_whiten(x, m):
    mean = masked_mean(x, m)
    var = masked_mean((x - mean) ** 2, m)
    var = var * m.sum() / (m.sum() - 1)
    return (x - mean) * torch.rsqrt(var + 1e-8)


def token_scores(prm, ref, mask, lens, beta, batch_norm):
    q = (prm - ref) * mask
    r = q * beta
    score = torch.zeros_like(q)
    for i in range(q.shape[0]):
        score[i, : lens[i] - 1] = r[i, : lens[i] - 1]
    if batch_norm:
        rc = torch.cumsum(score.flip(dims=[1]), dim=-1).flip(dims=[1])
        score = score / (rc.abs().max() + 1e-6)
    return score


def masked_rloo(x, mask, k):
    x = x.clone()
    x[~mask] = 0
    for s in range(0, x.shape[0], k):
        means = torch.cat([x[p:p + 1][mask[p:p + 1]].mean(dim=0, keepdim=True) for p in range(s, s + k)])
        base = means.sum() / (k - 1)
        x[s:s + k][mask[s:s + k]] = x[s:s + k][mask[s:s + k]] * (k / (k - 1)) - base
    return x


def advantages(prm, ref, lens, acc, k, beta, cp, co, batch_norm):
    B, T = len(lens), max(lens)
    P = torch.zeros(B, T, dtype=torch.float64)
    R = torch.zeros(B, T, dtype=torch.float64)
    mask = torch.zeros(B, T, dtype=torch.bool)
    for i in range(B):
        P[i, : lens[i]] = torch.tensor(prm[i], dtype=torch.float32).double()
        R[i, : lens[i]] = torch.tensor(ref[i], dtype=torch.float32).double()
        mask[i, : lens[i]] = True
    m = mask.double()
    parts = []
    score = token_scores(P, R, m, lens, beta, batch_norm)
    if cp != 0:
        parts.append(masked_rloo(score, mask, k) * cp)
    if co != 0:
        gt = torch.zeros(B, T, dtype=torch.float64)
        gm = torch.zeros(B, T, dtype=torch.bool)
        for i in range(B):
            gt[i, lens[i] - 1] = acc[i]
            gm[i, lens[i] - 1] = True
        parts.append(masked_rloo(gt, gm, k) * co)
    final = sum(parts)
    returns = (final * m).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])
    adv = masked_whiten(returns, m)
    return [[float(adv[i, t]) for t in range(lens[i])] for i in range(B)]


def case(name, groups, k, beta=0.05, cp=5.0, co=5.0, batch_norm=1, spread=1.0):
    prm, ref, lens, acc = [], [], [], []
    for g in range(groups):
        for j in range(k):
            n = int(torch.randint(1, 9, (1,)))
            rf = -torch.rand(n) * 3 - 0.05
            pm = rf + torch.randn(n) * spread
            prm.append([float(x) for x in pm.float()])
            ref.append([float(x) for x in rf.float()])
            lens.append(n)
            acc.append(float(torch.rand(1) < 0.5))
    adv = advantages(prm, ref, lens, acc, k, beta, cp, co, batch_norm)
    return dict(name=name, k=k, beta=beta, coef_process=cp, coef_outcome=co, batch_norm=batch_norm,
                seqs=[dict(prm=prm[i], ref=ref[i], acc=acc[i], adv=adv[i]) for i in range(len(lens))])


def main():
    torch.manual_seed(2502)
    cases = [
        case("recipe_defaults_k4", 3, 4),
        case("no_batch_norm_beta_0_5", 2, 4, beta=0.5, batch_norm=0),
        case("k2_outcome_only", 3, 2, cp=0.0),
        case("k3_process_only_wide", 2, 3, co=0.0, spread=5.0),
    ]
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(dict(cases=cases), f, separators=(",", ":"))
    print("wrote", OUT, file=sys.stderr)


if __name__ == "__main__":
    main()
