#!/bin/sh
# bench/b_sample.sh - rollout throughput: generated tokens/s for G = 8 samples
# per prompt on two small random Qwen2 configs (skpo-init), skpo-sample with
# and without prefix sharing vs Hugging Face generate (transformers, PyTorch
# CPU) on the same checkpoint, prompts, lengths and thread count, measured in
# the same run. Both sides generate exactly NEW tokens per sequence (no EOS in
# the config; HF min_new_tokens = max_new_tokens). Model loading is not timed
# (skpo's one-time weight packing at its first step is).
# Each side runs SKPO_BENCH_REPEAT times (default 3), interleaved round by
# round. Printed: the best tokens/s of each side (wall clock and per
# CPU-second of the process), and the MEDIAN over rounds of the ratio
# skpo/HF within a round, which is what to quote on a shared machine: a
# round's two sides ran seconds apart under about the same load.
# Both sides get the same OpenMP wait policy, OMP_WAIT_POLICY =
# SKPO_BENCH_WAIT_POLICY (default passive; "unset" leaves it to the runtime).
# With the runtime default (spin, then sleep) on a busy 2-core machine every
# fork/join waits for a thread the scheduler parked while its partner spins:
# both skpo and PyTorch then run 4-8x slower than with passive waiting, and
# the ratio is noise. On an idle machine the policy changes little.
# Env: SKPO_BENCH_THREADS (default: nproc), SKPO_BENCH_QUICK=1 (small config only).
set -eu
top=${SKPO_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
PATH="$top/bin:$PATH"
T=${SKPO_BENCH_THREADS:-$(nproc)}
R=${SKPO_BENCH_REPEAT:-3}
WP=${SKPO_BENCH_WAIT_POLICY:-passive}
[ "$WP" = unset ] || export OMP_WAIT_POLICY="$WP"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -c "import torch, transformers" 2>/dev/null || { echo "b_sample: SKIP (no torch/transformers for the HF peer)"; exit 0; }

# name layers hidden heads kv_heads ffn prompts prompt_len new_tokens
run_cfg() {
  name=$1 L=$2 H=$3 NH=$4 NKV=$5 FF=$6 N=$7 PLEN=$8 NEW=$9 G=8
  cat >"$tmp/$name.json" <<JSON
{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 32000, "hidden_size": $H,
 "intermediate_size": $FF, "num_hidden_layers": $L, "num_attention_heads": $NH, "num_key_value_heads": $NKV,
 "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": true,
 "bos_token_id": 1, "torch_dtype": "float32", "hidden_act": "silu"}
JSON
  skpo-init --config "$tmp/$name.json" --out "$tmp/$name" >/dev/null 2>&1
  python3 "$top/bench/hf_generate.py" prompts "$tmp/p.msgpack.zst" "$N" "$PLEN" 32000 1
  # prints: tokens tok/s tok/CPU-s
  ours() {
    OMP_NUM_THREADS=$T skpo-sample --model "$tmp/$name" --prompts "$tmp/p.msgpack.zst" --n $G --max-tokens "$NEW" \
      --batch $((N * G)) --no-text --stats "$@" 2>&1 >/dev/null |
      sed -n 's/.*generated \([0-9]*\) tokens in .* (\([0-9.]*\) tok\/s; .* CPU, \([0-9.]*\) tok\/CPU-s).*/\1 \2 \3/p'
  }
  # prints: tok/s tok/CPU-s
  hf_run() {
    OMP_NUM_THREADS=$T python3 "$top/bench/hf_generate.py" generate "$tmp/$name" "$tmp/p.msgpack.zst.ids" $G "$NEW" "$T" \
      2>/dev/null | sed -n 's/.*hf_tokens_per_s \([0-9.]*\) .*hf_tokens_per_cpu_s \([0-9.]*\).*/\1 \2/p'
  }
  best() { awk -v a="$1" -v b="$2" 'BEGIN { print (a + 0 > b + 0) ? a : b }'; }
  median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { printf "%.2f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
  share=0 noshare=0 hf=0 share_c=0 noshare_c=0 hf_c=0 i=0 rs="" rn="" rsc="" rnc=""
  while [ "$i" -lt "$R" ]; do
    set -- $(ours); tok_s=$1; s_w=$2 s_c=$3
    set -- $(ours --no-share); n_w=$2 n_c=$3
    set -- $(hf_run); h_w=$1 h_c=$2
    share=$(best "$share" "$s_w"); share_c=$(best "$share_c" "$s_c")
    noshare=$(best "$noshare" "$n_w"); noshare_c=$(best "$noshare_c" "$n_c")
    hf=$(best "$hf" "$h_w"); hf_c=$(best "$hf_c" "$h_c")
    rs="$rs $(awk -v a="$s_w" -v h="$h_w" 'BEGIN { print a / h }')" rn="$rn $(awk -v a="$n_w" -v h="$h_w" 'BEGIN { print a / h }')"
    rsc="$rsc $(awk -v a="$s_c" -v h="$h_c" 'BEGIN { print a / h }')" rnc="$rnc $(awk -v a="$n_c" -v h="$h_c" 'BEGIN { print a / h }')"
    i=$((i + 1))
  done
  echo "sample $name (${L}x$H, vocab 32000): $N prompts x G=$G x $NEW new tokens (prompt $PLEN), $T threads, OMP_WAIT_POLICY=$WP, $tok_s tokens, $R rounds"
  echo "                              best wall tok/s   best tok per CPU-second"
  printf "  skpo-sample shared prefix   %10s        %10s\n" "$share" "$share_c"
  printf "  skpo-sample no sharing      %10s        %10s\n" "$noshare" "$noshare_c"
  printf "  HF generate (torch CPU)     %10s        %10s\n" "$hf" "$hf_c"
  echo "  ratio skpo/HF, median of rounds: wall $(echo "$rs" | median)x shared, $(echo "$rn" | median)x unshared;" \
    "per CPU-second $(echo "$rsc" | median)x shared, $(echo "$rnc" | median)x unshared (target >= 3x)"
}

run_cfg small 4 256 4 2 704 8 64 128
[ "${SKPO_BENCH_QUICK:-0}" = 1 ] || run_cfg medium 12 768 12 4 2048 4 64 64
