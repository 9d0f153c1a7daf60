#!/bin/sh
# Model throughput on CPU: forward+backward tokens/s and batched decode tokens/s
# for two Llama shapes (vocab 32000), skpo vs PyTorch/transformers measured in
# this run with the same thread count and shapes; GFLOP/s against a measured
# sgemm peak. Prints our number, the peer's, and the ratio.
set -u
top=${SKPO_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$top" || exit 1
BUILD=${SKPO_BUILD:-build}
threads=${SKPO_BENCH_THREADS:-$(nproc)}
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
mkdir -p "$BUILD/bench"
cc -O2 -std=gnu11 -fopenmp -Icore -I/usr/include/x86_64-linux-gnu/openblas-pthread -o "$BUILD/bench/b_model" \
  bench/b_model.c "$BUILD/libskpo.a" -lmsgpackc -lzstd -lopenblas -lpcre2-8 -lutf8proc -ljansson -lm -lpthread || exit 1
B="$BUILD/bench/b_model"
have_torch=1
python3 -c 'import torch, transformers' 2>/dev/null || have_torch=0
get() { awk -v k="$1" '$1 == k { print $2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

peak=$("$B" peak | get sgemm_gflops)
echo "threads $threads, sgemm peak (2048^3) $peak GFLOP/s, load average $(cut -d" " -f1-3 /proc/loadavg) (a shared machine makes every number noisy)"
# name L C NH NKV F V | train B T | decode B P D
for cfg in "small 4 256 4 2 688 32000 8 256 16 32 64" "base 12 768 12 4 2048 32000 4 256 8 32 32"; do
  set -- $cfg
  name=$1 shape="$2 $3 $4 $5 $6 $7"
  out=$("$B" train $shape $8 $9) || exit 1
  ours=$(echo "$out" | get train_tok_s); gf=$(echo "$out" | get train_gflops)
  peer=n/a; [ $have_torch = 1 ] && peer=$(python3 bench/b_model_torch.py "$threads" train $shape $8 $9 2>/dev/null | get train_tok_s)
  echo "$name (L$2 C$3 V$7) fwd+bwd B=$8 T=$9: skpo $ours tok/s ($gf GFLOP/s, $(ratio "$gf" "$peak")x of sgemm peak), torch $peer tok/s, ratio $(ratio "$ours" "$peer")"
  shift 9
  out=$("$B" decode $shape $1 $2 $3) || exit 1
  ours=$(echo "$out" | get decode_tok_s)
  peer=n/a; [ $have_torch = 1 ] && peer=$(python3 bench/b_model_torch.py "$threads" decode $shape $1 $2 $3 2>/dev/null | get decode_tok_s)
  echo "$name decode B=$1 prompt=$2 new=$3: skpo $ours tok/s, HF generate $peer tok/s, ratio $(ratio "$ours" "$peer")"
done
