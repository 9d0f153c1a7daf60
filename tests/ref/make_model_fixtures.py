#!/usr/bin/env python3
"""Reference fixtures for the C model (tests/unit/test_model_ref.c), from Hugging Face itself.

Builds three tiny random checkpoints with transformers and writes, per model, into
tests/fixtures/model/<name>/:
  config.json, model.safetensors   the checkpoint (qwen2_bf16 is stored in bfloat16)
  expected.safetensors             ids.<i> (F32 ids), start (F32), logits.<i> (n, V) for every
                                   position, logp / entropy of scored tokens at TEMPERATURE,
                                   w / u (loss weights) and grad.<param> = d/dparam of
                                   loss = sum(w * logp) + sum(u * entropy)
Models: qwen2_bf16 (q/k/v bias, tied embeddings, bf16 on disk), qwen2_untied (bias,
separate lm_head), llama3 (llama3 rope scaling that matters at these positions, GQA 4:1,
untied). Weights are drawn larger than the HF init (norms and biases too) so every
parameter matters. Run from the repository root:  python3 tests/ref/make_model_fixtures.py
With --check-init DIR it instead loads a checkpoint written by skpo-init with
AutoModelForCausalLM.from_pretrained and compares its logits with skpo's (skpo-score).
"""
import copy, json, os, sys
import torch
import transformers
from safetensors.torch import save_file

TEMPERATURE = 0.7
OUT = os.path.join(os.path.dirname(__file__), "..", "fixtures", "model")

BASE = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=128, rms_norm_eps=1e-6, hidden_act="silu",
            bos_token_id=1, eos_token_id=2)
MODELS = {
    "qwen2_bf16": dict(model_type="qwen2", vocab_size=256, num_key_value_heads=2, tie_word_embeddings=True,
                       rope_theta=10000.0, _dtype="bf16"),
    "qwen2_untied": dict(model_type="qwen2", vocab_size=300, num_key_value_heads=2, tie_word_embeddings=False,
                         rope_theta=1000.0, _dtype="f32"),
    "llama3": dict(model_type="llama", vocab_size=320, num_key_value_heads=1, head_dim=16,
                   tie_word_embeddings=False, rope_theta=500000.0, rms_norm_eps=1e-5,
                   rope_scaling=dict(rope_type="llama3", factor=4.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                     original_max_position_embeddings=16), _dtype="f32"),
}


def build(name, spec):
    spec = dict(spec)
    dtype = spec.pop("_dtype")
    d = dict(BASE, **spec)
    cfg = transformers.AutoConfig.for_model(**d)
    torch.manual_seed(1234 + len(name))
    model = transformers.AutoModelForCausalLM.from_config(cfg).float().eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif n.endswith(".bias"):
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(0.08 * torch.randn_like(p))
            if dtype == "bf16":  # the reference sees exactly what the bf16 file holds
                p.copy_(p.to(torch.bfloat16).float())
    return cfg, model, dtype


def save_checkpoint(model, cfg, dtype, outdir):
    os.makedirs(outdir, exist_ok=True)
    if dtype == "bf16":
        # a copy: .to(bfloat16) would also round the rotary inv_freq buffer of the reference
        copy.deepcopy(model).to(torch.bfloat16).save_pretrained(outdir, safe_serialization=True)
    else:
        model.save_pretrained(outdir, safe_serialization=True)
    for f in os.listdir(outdir):
        if f == "generation_config.json":
            os.remove(os.path.join(outdir, f))


def reference(model, vocab):
    g = torch.Generator().manual_seed(7)
    lens, starts = [11, 7, 20], [4, 2, 1]
    seqs = [torch.randint(0, vocab, (n,), generator=g) for n in lens]
    out = {"start": torch.tensor(starts, dtype=torch.float32)}
    logps, ents = [], []
    for i, ids in enumerate(seqs):
        logits = model(ids[None]).logits[0]  # (n, V)
        out[f"ids.{i}"] = ids.float()
        out[f"logits.{i}"] = logits.detach().clone()
        z = torch.log_softmax(logits[:-1] / TEMPERATURE, dim=-1)  # row t-1 predicts token t
        lp = z.gather(1, ids[1:, None])[:, 0]
        ent = -(z.exp() * z).sum(-1)
        logps.append(lp[starts[i] - 1:])
        ents.append(ent[starts[i] - 1:])
    logp, ent = torch.cat(logps), torch.cat(ents)
    w = torch.randn(logp.shape, generator=g)
    u = 0.5 * torch.randn(ent.shape, generator=g)
    loss = (w * logp).sum() + (u * ent).sum()
    model.zero_grad()
    loss.backward()
    out.update(logp=logp.detach(), entropy=ent.detach(), w=w, u=u)
    for n, p in model.named_parameters():
        out["grad." + n] = p.grad.detach().clone()
    return out


def main():
    torch.set_num_threads(1)
    for name, spec in MODELS.items():
        cfg, model, dtype = build(name, spec)
        d = os.path.join(OUT, name)
        save_checkpoint(model, cfg, dtype, d)
        ref = reference(model, cfg.vocab_size)
        save_file({k: v.contiguous() for k, v in ref.items()}, os.path.join(d, "expected.safetensors"))
        print(name, "params", sum(p.numel() for p in model.parameters()), "->", d)


def check_init(ckpt):
    """The checkpoint skpo-init wrote loads in transformers and has the configured shapes."""
    model, info = transformers.AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32,
                                                                     output_loading_info=True)
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    assert not bad, bad
    cfg = json.load(open(os.path.join(ckpt, "config.json")))
    n = sum(p.numel() for p in model.parameters())
    for name, p in model.named_parameters():  # the init skpo-init promises
        if name.endswith("norm.weight"):
            assert torch.all(p == 1), name
        elif name.endswith(".bias"):
            assert torch.all(p == 0), name
        else:
            std = p.float().std().item()
            assert abs(std - cfg.get("initializer_range", 0.02)) < 0.1 * std, (name, std)
    ids = torch.arange(8)[None] % cfg["vocab_size"]
    logits = model(ids).logits
    assert torch.isfinite(logits).all()
    print("ok", ckpt, "params", n, "logits[0,-1,:4]", logits[0, -1, :4].tolist())


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check-init":
        check_init(sys.argv[2])
    else:
        main()
