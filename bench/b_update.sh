#!/bin/sh
# b_update.sh - skpo-update training throughput (response tokens/s of one step:
# forward, backward, loss, AdamW) vs the same step in PyTorch on the same CPU
# threads. Model: Qwen2-shaped, 4 layers, hidden 256, vocab 2048 (3.7M params),
# 8 prompts x (1 up of 96 + 3 downs of 160 tokens), 2 mini-batches.
top=${SKPO_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$top" || exit 1
if ! python3 -c 'import torch, transformers' 2>/dev/null; then
  echo "b_update: skipped (no python3 torch/transformers for the peer)"; exit 0
fi
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
python3 bench/b_update_peer.py make "$d/m" 2>/dev/null || { echo "b_update: cannot build the bench model" >&2; exit 1; }
best_ours=0
for i in 1 2; do
  bin/skpo-update --model "$d/m" --out "$d/out" --minibatch 4 "$d/m/records.msgpack.zst" 2>"$d/err" || {
    cat "$d/err" >&2; exit 1; }
  tps=$(sed -n 's/.*(\([0-9.]*\) tok\/s.*/\1/p' "$d/err")
  best_ours=$(echo "$tps $best_ours" | awk '{print ($1 > $2) ? $1 : $2}')
done
best_peer=0
for i in 1 2; do
  tps=$(python3 bench/b_update_peer.py run "$d/m" 2>/dev/null)
  best_peer=$(echo "$tps $best_peer" | awk '{print ($1 > $2) ? $1 : $2}')
done
echo "skpo-update   $best_ours tokens/s (whole step incl. load + checkpoint write, best of 2)"
echo "pytorch       $best_peer tokens/s (forward/backward/AdamW only, best of 2)"
echo "ratio         $(echo "$best_ours $best_peer" | awk '{printf "%.2f", $1 / $2}') (ours / pytorch)"
