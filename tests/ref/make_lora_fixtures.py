#!/usr/bin/env python3
"""LoRA fixtures: adapters in Hugging Face PEFT's folder format, both ways.

Base: tests/fixtures/update/model (tiny Qwen2, float32, q/k/v biases, tied).
Sequences: prompt ++ tokens of every up/down record of its records.msgpack.zst.

  lora/peft_adapter/         written by peft.PeftModel.save_pretrained: r=4,
                             lora_alpha=8, all seven projections, A and B
                             random (init_lora_weights=False, so B != 0)
  lora/peft_expected.safetensors
                             PEFT's log-probs of every scored token of those
                             sequences (seq.<i>.ids, seq.<i>.start, seq.<i>.logp;
                             ids and start stored as F32)
  lora/skpo_adapter/         written by skpo-update (two LoRA steps, rank 4,
                             alpha 32, all targets) on the same records
  lora/skpo_expected.safetensors
                             the same log-probs, by PEFT, with skpo's adapter
                             loaded through peft.PeftModel.from_pretrained

base_model_name_or_path in both folders is "../../update/model" (relative to
the adapter folder; skpo resolves it there). tests/unit/test_lora.c compares
skpo's log-probs (merged and low-rank) with these: max abs error 1e-4 (fp32).

Run from the repository root after `make all`:  python3 tests/ref/make_lora_fixtures.py
"""
import json, os, shutil, subprocess, sys, tempfile
import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM
from peft import LoraConfig, PeftModel, get_peft_model

TOP = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BASE = os.path.join(TOP, "tests", "fixtures", "update", "model")
OUT = os.path.join(TOP, "tests", "fixtures", "lora")
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
REL_BASE = "../../update/model"
torch.manual_seed(2024)


def sequences():
    out = []
    txt = subprocess.run([os.path.join(TOP, "bin", "skpo-cat"), os.path.join(BASE, "records.msgpack.zst")],
                         check=True, capture_output=True, text=True).stdout
    for r in map(json.loads, txt.splitlines()):
        if r.get("kind") in ("up", "down") and r.get("tokens"):
            out.append((list(r["prompt"]) + list(r["tokens"]), len(r["prompt"])))
    return out


def logps(model, seqs):
    res = {}
    with torch.no_grad():
        for i, (ids, start) in enumerate(seqs):
            x = torch.tensor([ids])
            lp = torch.log_softmax(model(input_ids=x).logits[0].float(), -1)
            tgt = torch.tensor(ids[start:])
            res[f"seq.{i}.ids"] = torch.tensor(ids, dtype=torch.float32)
            res[f"seq.{i}.start"] = torch.tensor([float(start)])
            res[f"seq.{i}.logp"] = lp[start - 1:len(ids) - 1].gather(1, tgt[:, None])[:, 0].contiguous()
    return res


def fix_base(folder):
    p = os.path.join(folder, "adapter_config.json")
    c = json.load(open(p))
    c["base_model_name_or_path"] = REL_BASE
    json.dump(c, open(p, "w"), indent=2)


def base_model():
    return AutoModelForCausalLM.from_pretrained(BASE, torch_dtype=torch.float32).eval()


def main():
    os.makedirs(OUT, exist_ok=True)
    seqs = sequences()
    # PEFT -> skpo
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, lora_dropout=0.0, init_lora_weights=False,
                     task_type="CAUSAL_LM")
    pm = get_peft_model(base_model(), cfg).eval()
    with torch.no_grad():   # B random too, at a scale where the adapter visibly moves log-probs
        for n, p in pm.named_parameters():
            if "lora_" in n:
                p.copy_(torch.randn_like(p) * 0.2)
    d = os.path.join(OUT, "peft_adapter")
    shutil.rmtree(d, ignore_errors=True)
    pm.save_pretrained(d)
    os.remove(os.path.join(d, "README.md"))   # PEFT's model card: not needed
    fix_base(d)
    save_file(logps(pm, seqs), os.path.join(OUT, "peft_expected.safetensors"))
    # skpo -> PEFT
    upd = os.path.join(TOP, "bin", "skpo-update")
    d = os.path.join(OUT, "skpo_adapter")
    flags = ["--lora-rank", "4", "--minibatch", "2", "--lr", "5e-2", "--warmup-steps", "1", "--micro-tokens", "24"]
    rec = os.path.join(BASE, "records.msgpack.zst")
    env = dict(os.environ, SKPO_DEVICE="cpu")
    with tempfile.TemporaryDirectory() as t:
        subprocess.run([upd, "--model", BASE, "--out", t + "/s1"] + flags + [rec], check=True, env=env)
        subprocess.run([upd, "--model", t + "/s1", "--out", t + "/s2"] + flags + [rec], check=True, env=env)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        for f in ("adapter_config.json", "adapter_model.safetensors"):
            shutil.copy(os.path.join(t, "s2", f), d)
    fix_base(d)
    pm2 = PeftModel.from_pretrained(base_model(), d).eval()
    save_file(logps(pm2, seqs), os.path.join(OUT, "skpo_expected.safetensors"))
    print("wrote", OUT)


if __name__ == "__main__":
    main()
