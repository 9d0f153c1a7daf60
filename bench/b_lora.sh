#!/bin/sh
# b_lora.sh - skpo-update with and without LoRA at the Qwen2.5-0.5B shape on
# the CPU (24 layers, hidden 896, FFN 4864, 14/2 heads, vocab 151936, tied;
# random bf16 weights): response tokens/s of one step (2 prompts x (1 up of 64
# + 1 down of 64 tokens), one mini-batch) and peak resident memory. The peer
# is the same tool doing full fine-tuning in the same run: ratios are LoRA /
# full. LoRA: rank 8, alpha 32, all seven projections.
# SKPO_BENCH_LORA_RANKS overrides the ranks (default "8").
top=${SKPO_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$top" || exit 1
[ -x /usr/bin/time ] || { echo "b_lora: skipped (no /usr/bin/time for peak memory)"; exit 0; }
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
cat >"$d/config.json" <<'J'
{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
 "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
 "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": true,
 "bos_token_id": 151643, "eos_token_id": 151643, "torch_dtype": "bfloat16"}
J
bin/skpo-init --config "$d/config.json" --dtype bf16 --seed 1 --out "$d/m" 2>/dev/null || { echo "b_lora: skpo-init failed" >&2; exit 1; }
# Records: 2 prompts of 32 tokens, one up and one down of 64 tokens each, logp -2, adv +-1.
python3 - "$d/recs.msgpack.zst" <<'PY' || { echo "b_lora: cannot write records" >&2; exit 1; }
import os, sys
sys.path.insert(0, os.path.join(os.getcwd(), "tests", "ref"))
import mpk
recs = []
for q in range(2):
    p = [(q * 977 + 31 * i) % 151000 for i in range(32)]
    for kind, k in (("up", 0), ("down", 1)):
        t = [(q * 131 + 17 * i + k) % 151000 for i in range(64)]
        r = dict(kind=kind, pid="q%d" % q, uid="q%d-%s" % (q, kind), prompt=mpk.i32s(p), tokens=mpk.i32s(t),
                 logp=mpk.f32s([-2.0] * 64), adv=1.0 if q else -1.0, weight=0.5)
        recs.append(r)
mpk.write_stream(sys.argv[1], recs, tool="b_lora.sh")
PY
run() { # run NAME FLAGS...: one step, "tok/s maxrss_kib"
  name=$1; shift
  /usr/bin/time -f '%M' -o "$d/$name.mem" bin/skpo-update --device cpu --model "$d/m" --out "$d/$name" --minibatch 2 \
    --micro-tokens 4096 "$@" "$d/recs.msgpack.zst" 2>"$d/$name.err" || { cat "$d/$name.err" >&2; exit 1; }
  # tokens / seconds of the summary line (its own tok/s is rounded to an integer)
  tps=$(sed -n 's/.* \([0-9.]*\) tokens in \([0-9.]*\) s .*/\1 \2/p' "$d/$name.err" | awk '{printf "%.3g", $1 / $2}')
  echo "$tps $(tail -n 1 "$d/$name.mem")"
}
full=$(run full) || exit 1
echo "full FT      $(echo "$full" | awk '{printf "%s tokens/s, peak RSS %.2f GiB", $1, $2 / 1048576}')"
for r in ${SKPO_BENCH_LORA_RANKS:-8}; do
  lo=$(run "lora$r" --lora-rank "$r") || exit 1
  echo "LoRA r=$r     $(echo "$lo" | awk '{printf "%s tokens/s, peak RSS %.2f GiB", $1, $2 / 1048576}')"
  echo "ratio r=$r    $(echo "$lo $full" | awk '{printf "%.2fx tokens/s, %.2fx memory (LoRA / full)", $1 / $3, $2 / $4}')"
  echo "checkpoint   $(du -sk "$d/lora$r" | cut -f1) KiB adapter folder vs $(du -sk "$d/full" | cut -f1) KiB full"
done
