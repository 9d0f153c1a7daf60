"""make_sharded_fixture.py - tests/fixtures/model/qwen2_hf_sharded: the
qwen2_untied fixture saved by transformers' save_pretrained as a sharded
checkpoint (max_shard_size 100KB: several model-0000k-of-0000N.safetensors
files + model.safetensors.index.json), so test_model_ref can check that
skpo_model_load reads what Hugging Face writes, tensor for tensor.

With --check DIR instead: load DIR (a checkpoint skpo wrote, e.g. in parts by
several ranks) with transformers and compare every tensor with the same
checkpoint loaded from REF (exits 1 on any difference)."""
import sys, os, torch
from transformers import AutoModelForCausalLM

here = os.path.dirname(os.path.abspath(__file__))
fix = os.path.join(here, "..", "fixtures", "model")

if len(sys.argv) > 1 and sys.argv[1] == "--check":
    got = AutoModelForCausalLM.from_pretrained(sys.argv[2], torch_dtype=torch.float32).state_dict()
    want = AutoModelForCausalLM.from_pretrained(sys.argv[3], torch_dtype=torch.float32).state_dict()
    bad = [k for k in want if not torch.equal(got[k], want[k])]
    print(f"{len(want)} tensors, {len(bad)} differ", bad[:5])
    sys.exit(1 if bad or set(got) != set(want) else 0)

m = AutoModelForCausalLM.from_pretrained(os.path.join(fix, "qwen2_untied"), torch_dtype=torch.float32)
out = os.path.join(fix, "qwen2_hf_sharded")
m.save_pretrained(out, max_shard_size="100KB", safe_serialization=True)
for f in os.listdir(out):
    if f == "generation_config.json":
        os.remove(os.path.join(out, f))
