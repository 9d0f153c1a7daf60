#!/usr/bin/env python3
"""Reference fixtures for skpo-update, computed with PyTorch.

  loss.json   per-token policy losses (verl's vanilla PPO with dual clip, CISPO,
              SFT, k3 KL, entropy bonus) aggregated per phase with the three
              aggregation modes; expected objective, per-phase losses, clip
              counts and d(objective)/d(logp), d(objective)/d(entropy) by autograd.
  adamw.json  torch.optim.AdamW + clip_grad_norm_ over a few tensors for several
              training steps with linear warmup (lr of step s = lr*min(1, s/W)).
  model/      a tiny Qwen2 checkpoint (float32, tied embeddings) with stand-in
              tokenizer files, and records.msgpack.zst: 4 prompts x (1 up + 3 down)
              records with behaviour logp = model logp + noise, plus ignored kinds
  model_expected.safetensors
              one skpo-update step over those records with 2 mini-batches of 2
              prompts (SKPO defaults: up PPO [0.8,1.2] without dual clip (eq. 6), down CISPO
              [0.8,1.28], token-mean per phase, weights 0.5; pi_old recomputed
              with the starting weights before the first update, rollout `logp`
              vs pi_old corrected by truncated IS, cap 2): grad1.<p> (first
              mini-batch gradient), final.<p> (weights after both AdamW updates);
              metadata holds losses and grad norms (see MODEL_ARGS for the flags)

  prime_loss.json  the same format for PRIME: the implicit PRM's prm-ce loss and
              per-token advantages (adv_tok) in the PPO and CISPO forms

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
    if torch.is_tensor(A) and dual > 0:  # per-token advantages (PRIME's adv_tok): the dual clip where A_t < 0
        l3 = -A * dual
        dualm = (A < 0) & torch.gt(c1, l3)
        c1 = torch.where(A < 0, torch.minimum(c1, l3), c1)
    elif dual > 0 and A < 0:
        l3 = -A * dual
        dualm = torch.gt(c1, l3)
        c1 = torch.minimum(c1, l3 * torch.ones_like(c1))
    return c1, low, high, dualm, -d


def cispo_token(logp, old, A, lo, hi):
    d = torch.clamp(logp - old, -20.0, 20.0)
    r = torch.exp(d)
    w = torch.clamp(r, 1 - lo, 1 + hi).detach()
    return -w * A * logp, r < 1 - lo, r > 1 + hi, torch.zeros_like(r, dtype=torch.bool), -d


def gspo_seq(logp, old, A, lo, hi):
    """verl compute_policy_loss_gspo: s_i,t = exp(logp - sg(logp) + sg(mean_t(logp - old))), capped at log 10."""
    seq = (logp - old).mean()
    lr = torch.clamp(logp - logp.detach() + seq.detach(), max=10.0)
    r = torch.exp(lr)
    l1 = -A * r
    l2 = -A * torch.clamp(r, 1 - lo, 1 + hi)
    clipped = torch.gt(l2, l1)
    return torch.maximum(l1, l2), clipped & (r < 1), clipped & (r > 1), torch.zeros_like(clipped), -torch.clamp(logp - old, -20.0, 20.0)


def sapo_token(logp, old, A, tau_pos, tau_neg):
    """SAPO (arXiv 2511.20347): -A (4/tau) sigmoid(tau (r - 1)), tau by the sign of A."""
    d = torch.clamp(logp - old, -20.0, 20.0)
    r = torch.exp(d)
    tau = tau_pos if A > 0 else tau_neg
    g = torch.sigmoid(tau * (r - 1))
    w = 4 * g * (1 - g)
    return -A * (4.0 / tau) * g, (w < 0.5) & (r < 1), (w < 0.5) & (r > 1), torch.zeros_like(r, dtype=torch.bool), -d


def prm_ce_seq(logp, ref, label, beta):
    """PRIME's implicit PRM loss (verl recipe/prime compute_ce_dpo_loss_rm): BCE of
    sigmoid(beta sum_t (logp - ref)) against the 0/1 label; every token carries it."""
    z = beta * (logp - ref).sum()
    l = torch.nn.functional.binary_cross_entropy(torch.sigmoid(z), torch.tensor(float(label), dtype=z.dtype))
    none = torch.zeros(len(logp), dtype=torch.bool)
    return l * torch.ones_like(logp), none, none, none, torch.zeros_like(logp)


def k3(ref, logp):
    k = torch.clamp(ref - logp, -20.0, 20.0)
    return torch.clamp(torch.exp(k) - k - 1, -10.0, 10.0)


# --- rollout/train mismatch correction (core/loss.c skpo_mismatch_weights) ----------------
# rho_t = exp(clamp(old - rollout, -20, 20)) = pi_old / pi_rollout
#   tis:        min(rho, cap)                          (verl rollout_is = token)
#   mask-token: rho inside [low, high], else 0         (TRL token_mask)
#   mask-seq:   g = exp(mean log rho) for every token if inside [low, high], else 0
#   icepop:     rho inside [low, high], else 0
def mismatch_weights(mode, cap, low, high, rollout, old):
    d = torch.clamp(old.double() - rollout.double(), -20.0, 20.0)
    rho = torch.exp(d)
    if mode == "off":
        w = torch.ones_like(rho)
    elif mode == "tis":
        w = torch.clamp(rho, max=cap)
    elif mode in ("mask-token", "icepop"):
        w = torch.where((rho >= low) & (rho <= high), rho, torch.zeros_like(rho))
    elif mode == "mask-seq":
        g = torch.exp(d.mean())
        w = (g if low <= float(g) <= high else torch.zeros(())) * torch.ones_like(rho)
    else:
        raise ValueError(mode)
    w = w.float().double()   # the trainer keeps the weights in float32
    absd = (old.double() - rollout.double()).abs()
    stats = dict(tokens=len(rho), k3=float((rho - 1 - d).sum()), abs_dlogp=float(absd.sum()),
                 max_abs_dlogp=float(absd.max()) if len(rho) else 0.0,
                 truncated=float((rho > cap).sum()) if mode == "tis" else 0.0, masked=float((w == 0).sum()))
    return w, stats


def phase_scale(agg, norm, tokens, seqs, n):
    if n == 0 or tokens == 0:
        return 0.0
    if agg == "token-mean":
        return 1.0 / tokens
    if agg == "seq-mean-token-mean":
        return 1.0 / (seqs * n)
    return 1.0 / (seqs * norm)


def shape_token(logp, A, gamma):
    """Critique-GRPO refinement tokens (authors' off_policy_reshape p_div_p_0.1): -A p/(p + gamma), no ratio, no clip."""
    p = torch.exp(logp)
    z = torch.zeros_like(logp, dtype=torch.bool)
    return -A * p / (p + gamma), z, z, z, torch.zeros_like(logp)


def loss_case(name, phases, agg, norm=3072.0, kl=0.0, ent=0.0, sft=False, seqspec=None, tau=(1.0, 1.05), noise=0.35,
              mismatch=None, refine=(), gamma=0.1, prm_beta=0.05):
    seqs = []
    for (ph, n, adv, w) in seqspec:
        old = -torch.rand(n, dtype=torch.float32) * 3 - 0.05
        logp = (old + torch.randn(n) * noise).clamp(max=-1e-3)
        if n > 4:  # a few extreme ratios: beyond the log-ratio clamp and the dual clip
            logp[1] = old[1] + 25.0 if ph == 0 else old[1] + 1.5
            logp[2] = old[2] - 22.0
        ref = logp.detach() + torch.randn(n) * 0.3
        entv = torch.rand(n, dtype=torch.float32) * 2
        rollout = (old + torch.randn(n) * 0.5).clamp(max=-1e-3)
        if n > 5:  # one token far off in each direction
            rollout[3] = old[3] - 1.6
            rollout[4] = old[4] + 1.2
        if isinstance(adv, list):  # per-token advantages (adv_tok)
            adv = torch.tensor(adv, dtype=torch.float32).double()
        seqs.append(dict(phase=ph, adv=adv, weight=w, logp=logp.float(), old=old.float(), ref=ref.float(),
                         ent=entv.float(), rollout=rollout.float()))
    mstats = dict(tokens=0.0, k3=0.0, abs_dlogp=0.0, max_abs_dlogp=0.0, truncated=0.0, masked=0.0)
    for i, s in enumerate(seqs):
        s["refine"] = i in refine
        if mismatch and not s["refine"]:   # a refinement gets no mismatch weight (skpo-update)
            s["isw"], st = mismatch_weights(mismatch["mode"], mismatch["cap"], mismatch["low"], mismatch["high"],
                                            s["rollout"], s["old"])
            for k, v in st.items():
                mstats[k] = max(mstats[k], v) if k == "max_abs_dlogp" else mstats[k] + v
        else:
            s["isw"] = torch.ones(len(s["logp"]), dtype=torch.float64)
    cnt = [[0, 0] for _ in range(3)]
    for s in seqs:  # masked tokens (weight 0) leave the normalisers
        kept = int((s["isw"] != 0).sum())
        cnt[s["phase"]][0] += kept
        cnt[s["phase"]][1] += kept > 0
    objective = torch.zeros((), dtype=torch.float64)
    ph_loss = [0.0] * 3
    stats = {k: [0.0] * 3 for k in ("clip_low", "clip_high", "clip_dual", "approx_kl", "kl_ref", "entropy")}
    for s in seqs:
        s["lp"] = s["logp"].clone().double().requires_grad_(True)
        s["en"] = s["ent"].clone().double().requires_grad_(True)
        p = s["phase"]
        kind, lo, hi, dual = phases[p] if not sft else ("sft", 0, 0, 0)
        old = s["old"].double()
        if s["refine"]:
            tl, low, high, dm, akl = shape_token(s["lp"], s["adv"], gamma)
        elif kind == "sft":
            tl = -s["lp"]
            low = high = dm = torch.zeros_like(tl, dtype=torch.bool)
            akl = torch.zeros_like(tl)
        elif kind == "ppo":
            tl, low, high, dm, akl = ppo_token(s["lp"], old, s["adv"], lo, hi, dual)
        elif kind == "gspo":
            tl, low, high, dm, akl = gspo_seq(s["lp"], old, s["adv"], lo, hi)
        elif kind == "sapo":
            tl, low, high, dm, akl = sapo_token(s["lp"], old, s["adv"], tau[0], tau[1])
        elif kind == "prm-ce":  # the spec's advantage sign is the label
            tl, low, high, dm, akl = prm_ce_seq(s["lp"], s["ref"].double(), 1 if s["adv"] > 0 else 0, prm_beta)
        else:
            tl, low, high, dm, akl = cispo_token(s["lp"], old, s["adv"], lo, hi)
        keep = s["isw"] != 0
        tl = tl * s["isw"]  # the mismatch weight scales the policy term of every form
        if kl:
            kv = k3(s["ref"].double(), s["lp"])
            tl = tl + kl * kv
            stats["kl_ref"][p] += float((kv.detach() * keep).sum())
        tl = tl - ent * s["en"]
        tl = torch.where(keep, tl, torch.zeros_like(tl))  # a masked token is not part of the loss
        low, high, dm = low & keep, high & keep, dm & keep
        scale = phase_scale(agg, norm, cnt[p][0], cnt[p][1], int(keep.sum()))
        L = scale * tl.sum()
        w = 1.0 if sft else s["weight"]
        objective = objective + w * L
        ph_loss[p] += float(L.detach())
        stats["clip_low"][p] += float(low.sum())
        stats["clip_high"][p] += float(high.sum())
        stats["clip_dual"][p] += float(dm.sum())
        stats["approx_kl"][p] += float((akl.detach() * keep).sum()) if kind != "sft" and not s["refine"] else 0.0
        stats["entropy"][p] += float((s["ent"] * keep).sum())
    objective.backward()
    out = dict(name=name, agg=agg, agg_norm=norm, kl_coef=kl, entropy_coef=ent, sft=int(sft), sapo_tau=list(tau), prm_beta=prm_beta,
               **(dict(shape_gamma=gamma) if refine else {}),
               phases=[dict(kind=k, eps_low=lo, eps_high=hi, dual=d) for (k, lo, hi, d) in phases],
               objective=float(objective.detach()), phase_loss=ph_loss, **stats, seqs=[])
    if mismatch:
        out["mismatch"] = dict(mismatch, **mstats)
    for s in seqs:
        tok = torch.is_tensor(s["adv"])
        extra = dict(adv_tok=f32list(s["adv"])) if tok else {}
        if phases[s["phase"]][0] == "prm-ce":
            extra["label"] = 1 if s["adv"] > 0 else 0
        out["seqs"].append(dict(phase=s["phase"], adv=0.0 if tok else s["adv"], weight=s["weight"], logp=f32list(s["logp"]), **extra,
                                old=f32list(s["old"]), ref=f32list(s["ref"]), ent=f32list(s["ent"]),
                                rollout=f32list(s["rollout"]), isw=[float(x) for x in s["isw"].tolist()],
                                dlogp=[float(x) for x in s["lp"].grad.tolist()],
                                dent=[float(x) for x in s["en"].grad.tolist()], **(dict(refine=1) if s["refine"] else {})))
    return out


SKPO = [("ppo", 0.2, 0.2, 3.0), ("cispo", 0.2, 0.28, 0.0), ("ppo", 0.2, 0.28, 3.0)]
SPEC = [(0, 7, 1.3, 0.5), (0, 5, -1.7, 0.5), (1, 9, 2.47, 0.5), (1, 6, -0.35, 0.5), (1, 8, -0.35, 0.5),
        (1, 3, 0.0, 0.5), (0, 2, 0.0, 0.0)]
FULL = [(2, 8, 0.93, 1.0), (2, 6, -0.93, 1.0), (2, 11, -2.1, 1.0), (2, 4, 0.5, 1.0)]
# short sequences (no extreme ratios) so that some sequence ratios fall inside GSPO's narrow band
GSPO_FULL = [(2, 3, 1.1, 1.0), (2, 4, -0.8, 1.0), (2, 2, 0.6, 1.0), (2, 3, -1.4, 1.0)]


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
        # Table 1 baselines (appended so the earlier cases keep their random draws)
        loss_case("gspo_full_seq_mean", [("ppo", 0.2, 0.2, 3.0), ("cispo", 0.2, 0.28, 0.0), ("gspo", 3e-4, 4e-4, 0.0)],
                  "seq-mean-token-mean", seqspec=GSPO_FULL, noise=3e-4),
        loss_case("gspo_wide_clip_token_mean", [("gspo", 0.2, 0.2, 0.0), ("cispo", 0.2, 0.28, 0.0), ("gspo", 0.2, 0.28, 0.0)],
                  "token-mean", seqspec=SPEC + FULL),
        loss_case("sapo_full_default_tau", [("ppo", 0.2, 0.2, 3.0), ("cispo", 0.2, 0.28, 0.0), ("sapo", 0.2, 0.28, 0.0)],
                  "seq-mean-token-mean", seqspec=FULL + GSPO_FULL),
        loss_case("sapo_all_phases_tau_0_5_2", [("sapo", 0, 0, 0), ("sapo", 0, 0, 0), ("sapo", 0, 0, 0)],
                  "token-mean", seqspec=SPEC + FULL, tau=(0.5, 2.0)),
        loss_case("cispo_baseline_no_lower_bound", [("ppo", 0.2, 0.2, 3.0), ("cispo", 0.2, 0.28, 0.0),
                                                    ("cispo", 0.999999, 0.28, 0.0)], "token-mean", seqspec=FULL),
        # Rollout/train mismatch corrections, each on every loss form of SKPO (PPO up, CISPO down).
        loss_case("mismatch_tis_cap2", SKPO, "token-mean", seqspec=SPEC,
                  mismatch=dict(mode="tis", cap=2.0, low=0.0, high=0.0)),
        loss_case("mismatch_mask_token_trl_cap3", SKPO, "token-mean", seqspec=SPEC,
                  mismatch=dict(mode="mask-token", cap=2.0, low=0.0, high=3.0)),
        loss_case("mismatch_mask_seq_geometric", SKPO, "seq-mean-token-mean", seqspec=SPEC,
                  mismatch=dict(mode="mask-seq", cap=2.0, low=0.8, high=1.25)),
        loss_case("mismatch_icepop_kl_entropy", SKPO, "token-mean", kl=0.1, ent=0.01, seqspec=SPEC,
                  mismatch=dict(mode="icepop", cap=2.0, low=0.5, high=5.0)),
        loss_case("mismatch_off_metrics_only_full", [("ppo", 0.2, 0.2, 0.0), ("cispo", 0.2, 0.28, 0.0),
                                                     ("ppo", 0.2, 0.28, 0.0)], "seq-mean-token-sum-norm", norm=16.0,
                  seqspec=FULL, mismatch=dict(mode="off", cap=2.0, low=0.0, high=0.0)),
        # Critique-GRPO: a group of 7 direct responses + 1 refinement (the last), the direct ones unclipped
        # (band [1e-6, 1 + 1e9], no dual clip), seq-mean-token-sum-norm, entropy 0.001, tis on the direct ones.
        loss_case("critique_refinement_shaped_gamma_0_1", [("ppo", 0.2, 0.2, 3.0), ("cispo", 0.2, 0.28, 0.0),
                                                           ("ppo", 0.999999, 1e9, 0.0)], "seq-mean-token-sum-norm",
                  norm=16.0, ent=0.001, seqspec=FULL + GSPO_FULL[:3] + [(2, 9, 0.875, 1.0)], refine=(7,),
                  mismatch=dict(mode="tis", cap=2.0, low=0.0, high=0.0)),
        loss_case("critique_refinement_negative_gamma_0_5", [("ppo", 0.2, 0.2, 3.0), ("cispo", 0.2, 0.28, 0.0),
                                                             ("ppo", 0.2, 0.2, 3.0)], "token-mean",
                  seqspec=FULL + [(2, 7, -0.5, 1.0), (2, 5, 1.5, 1.0)], refine=(4, 5), gamma=0.5),
    ]
    return dict(cases=cases)


# PRIME (docs/baselines.md): the implicit PRM's loss and per-token advantages, in their
# own file so that loss.json keeps its draws. Labels: the sign of the spec's advantage.
PRM_FULL = [(2, 5, 1.0, 1.0), (2, 3, -1.0, 1.0), (2, 7, 1.0, 1.0), (2, 4, -1.0, 1.0)]
TOK_FULL = [(2, 4, [0.9, -0.4, 1.7, -2.2], 1.0), (2, 6, [-1.1, -0.3, 0.2, 0.8, -0.05, 1.4], 1.0),
            (2, 3, [0.0, 0.5, -0.5], 1.0)]


def prime_fixtures():
    torch.manual_seed(2502)
    cases = [
        loss_case("prm_ce_seq_mean_beta_0_05", [("ppo", 0.2, 0.2, 3.0), ("cispo", 0.2, 0.28, 0.0), ("prm-ce", 0.2, 0.2, 0.0)],
                  "seq-mean-token-mean", seqspec=PRM_FULL, noise=2.0),
        loss_case("prm_ce_token_mean_beta_0_5_kl", [("ppo", 0.2, 0.2, 3.0), ("cispo", 0.2, 0.28, 0.0), ("prm-ce", 0.2, 0.2, 0.0)],
                  "token-mean", seqspec=PRM_FULL, kl=0.1, prm_beta=0.5, noise=2.0),
        loss_case("adv_tok_ppo_dual_clip", [("ppo", 0.2, 0.2, 3.0), ("cispo", 0.2, 0.28, 0.0), ("ppo", 0.2, 0.2, 3.0)],
                  "token-mean", seqspec=TOK_FULL + FULL),
        loss_case("adv_tok_cispo_seq_mean", [("ppo", 0.2, 0.2, 3.0), ("cispo", 0.2, 0.28, 0.0), ("cispo", 0.2, 0.28, 0.0)],
                  "seq-mean-token-mean", seqspec=TOK_FULL),
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


# --- the model step ---------------------------------------------------------------------

# skpo-update flags the model fixture was computed for (the C test uses the same).
# eps (AdamW) is raised from 1e-8 so that elements with |grad| ~ float noise do not
# flip the sign of a full-size Adam step between two correct implementations.
MODEL_ARGS = dict(minibatch=2, lr=1e-2, warmup_steps=2, step=1, weight_decay=0.1, adam_eps=1e-4, max_grad_norm=1.0)


def msgpack(obj):
    """Just enough msgpack for records: dict, str, int, float, bytes."""
    import struct
    if isinstance(obj, dict):
        out = bytes([0x80 | len(obj)]) if len(obj) < 16 else b"\xde" + struct.pack(">H", len(obj))
        for k, v in obj.items():
            out += msgpack(k) + msgpack(v)
        return out
    if isinstance(obj, str):
        b = obj.encode()
        return (bytes([0xa0 | len(b)]) if len(b) < 32 else b"\xd9" + bytes([len(b)])) + b
    if isinstance(obj, bool):
        return b"\xc3" if obj else b"\xc2"
    if isinstance(obj, int):
        return bytes([obj]) if 0 <= obj < 128 else b"\xd3" + struct.pack(">q", obj)
    if isinstance(obj, float):
        return b"\xcb" + struct.pack(">d", obj)
    if isinstance(obj, (bytes, bytearray)):
        return (b"\xc4" + bytes([len(obj)]) if len(obj) < 256 else b"\xc5" + struct.pack(">H", len(obj))) + obj
    raise TypeError(type(obj))


def i32(xs):
    import struct
    return struct.pack("<%di" % len(xs), *xs)


def f32(xs):
    import struct
    return struct.pack("<%df" % len(xs), *xs)


def token_logp(model, prompt, tokens):
    ids = torch.tensor(prompt + tokens)[None]
    logits = model(ids).logits[0].float()
    lp = torch.log_softmax(logits, -1)
    n = len(prompt)
    return lp[n - 1:-1].gather(-1, torch.tensor(tokens)[:, None])[:, 0]


def model_fixture():
    import subprocess
    import transformers
    from safetensors.torch import save_file
    torch.manual_seed(99)
    cfg = transformers.AutoConfig.for_model(
        model_type="qwen2", vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6,
        rope_theta=10000.0, tie_word_embeddings=True, hidden_act="silu", bos_token_id=1, eos_token_id=2)
    model = transformers.AutoModelForCausalLM.from_config(cfg).float()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif n.endswith(".bias"):
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(0.15 * torch.randn_like(p))
    outdir = os.path.join(OUT, "model")
    os.makedirs(outdir, exist_ok=True)
    model.save_pretrained(outdir, safe_serialization=True)
    gc = os.path.join(outdir, "generation_config.json")
    if os.path.exists(gc):
        os.remove(gc)
    with open(os.path.join(outdir, "tokenizer.json"), "w") as f:
        f.write('{"version": "1.0", "note": "stand-in: skpo-update copies tokenizer files verbatim"}\n')
    with open(os.path.join(outdir, "tokenizer_config.json"), "w") as f:
        f.write('{"model_max_length": 64}\n')
    # Records: SKPO shape, 4 prompts x (1 up + 3 down); down prefix = up tokens ++ prompt.
    g = torch.Generator().manual_seed(5)
    rint = lambda lo, hi: int(torch.randint(lo, hi + 1, (1,), generator=g))
    recs, seqs = [dict(kind="meta", schema=1, tool="make_update_fixtures.py")], []
    up_adv = [1.2, -0.4, 0.9, -1.7]
    for q in range(4):
        prompt = [rint(3, 63) for _ in range(rint(3, 6))]
        recs.append(dict(kind="prompt", pid="q%d" % q, prompt=i32(prompt)))
        up = [rint(3, 63) for _ in range(rint(3, 6))]
        seqs.append(("up", "q%d" % q, "q%d-up" % q, "q%d" % q, prompt, up, up_adv[q]))
        for d in range(3):
            toks = [rint(3, 63) for _ in range(rint(4, 9))]
            adv = [1.0, -0.5, 0.35][(d + q) % 3] * (1 if q % 2 == 0 else -1)
            seqs.append(("down", "q%d" % q, "q%d-d%d" % (q, d), "q%d-up" % q, up + prompt, toks, adv))
    with torch.no_grad():
        for (kind, pid, uid, gid, prompt, toks, adv) in seqs:
            lp = token_logp(model, prompt, toks) + 0.3 * torch.randn(len(toks), generator=g)
            recs.append(dict(kind=kind, pid=pid, uid=uid, gid=gid, prompt=i32(prompt), tokens=i32(toks),
                             logp=f32(lp.tolist()), adv=float(adv), weight=0.5))
    def write(name, rs):
        raw = b"".join(msgpack(r) for r in rs)
        with open(os.path.join(outdir, name), "wb") as f:
            f.write(subprocess.run(["zstd", "-q", "-c", "--check"], input=raw, stdout=subprocess.PIPE,
                                   check=True).stdout)
    write("records.msgpack.zst", recs)
    # The same with a NaN behaviour log-prob in record q3-d1 (mini-batch 2): the
    # tool must stop naming it and write nothing.
    bad = [dict(r) for r in recs]
    for r in bad:
        if r.get("uid") == "q3-d1":
            lp = list(__import__("struct").unpack("<%df" % (len(r["logp"]) // 4), r["logp"]))
            lp[2] = float("nan")
            r["logp"] = f32(lp)
    write("records_nan.msgpack.zst", bad)
    # Reference step: mini-batches of 2 prompts in order; the C side must agree.
    byname = {r["uid"]: r for r in recs if "uid" in r}
    A = MODEL_ARGS
    params = [p for _, p in model.named_parameters()]
    names = [n for n, _ in model.named_parameters()]
    opt = torch.optim.AdamW(params, lr=A["lr"] * min(1.0, A["step"] / A["warmup_steps"]), betas=(0.9, 0.999),
                            eps=A["adam_eps"], weight_decay=A["weight_decay"], foreach=False)
    phases = {"up": ("ppo", 0.2, 0.2, 0.0), "down": ("cispo", 0.2, 0.28, 0.0)}  # up: eq. 6, no dual clip
    meta, out = {}, {}
    # pi_old: the starting weights' log-probs of every record, before the first update.
    with torch.no_grad():
        pi_old = {s[2]: token_logp(model, s[4], s[5]).float().double() for s in seqs}
    for mb in range(2):
        group = [s for s in seqs if int(s[1][1:]) // A["minibatch"] == mb]
        cnt = {k: sum(len(s[5]) for s in group if s[0] == k) for k in phases}
        opt.zero_grad()
        total = torch.zeros(())
        for (kind, pid, uid, gid, prompt, toks, adv) in group:
            lp = token_logp(model, prompt, toks).double()
            rollout = torch.tensor(list(__import__("struct").unpack("<%df" % len(toks), byname[uid]["logp"])),
                                   dtype=torch.float32)
            old = pi_old[uid]
            isw, _ = mismatch_weights("tis", 2.0, 0.0, 0.0, rollout, old.float())
            k, lo, hi, dual = phases[kind]
            tl = ppo_token(lp, old, adv, lo, hi, dual)[0] if k == "ppo" else cispo_token(lp, old, adv, lo, hi)[0]
            total = total + 0.5 * (tl * isw).sum() / cnt[kind]
        total.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, A["max_grad_norm"], foreach=False)
        meta["loss%d" % (mb + 1)] = repr(float(total))
        meta["grad_norm%d" % (mb + 1)] = repr(float(norm))
        if mb == 0:  # the unclipped gradient: clip_grad_norm_ scaled p.grad in place
            coef = min(1.0, A["max_grad_norm"] / (float(norm) + 1e-6))
            for n, p in zip(names, params):
                out["grad1." + n] = (p.grad / coef).detach().clone().contiguous()
        opt.step()
    for n, p in zip(names, params):
        out["final." + n] = p.detach().clone().contiguous()
    meta.update({k: repr(v) for k, v in A.items()})
    save_file(out, os.path.join(OUT, "model_expected.safetensors"), metadata=meta)
    print("wrote", outdir, "and model_expected.safetensors", file=sys.stderr)


def dump(name, obj):
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, name), "w") as f:
        json.dump(obj, f, separators=(",", ":"))
    print("wrote", os.path.join(OUT, name), file=sys.stderr)


if __name__ == "__main__":
    only = sys.argv[1:]  # e.g. `loss`: regenerate just loss.json
    if not only or "loss" in only:
        dump("loss.json", loss_fixtures())
    if not only or "prime" in only:
        dump("prime_loss.json", prime_fixtures())
    if not only or "adamw" in only:
        dump("adamw.json", adamw_fixtures())
    if not only or "model" in only:
        model_fixture()
