#!/bin/sh
# b_pack.sh - the update packed vs unpacked (model/pack.h) on a GRPO step's
# and an SKPO step's records, same shapes, CPU (bench/b_pack.c). The target
# (issue 33): the time ratio within 10% of the packed / raw token ratio; the
# FLOP ratio says how much of a miss is the attention and the lm_head, which
# packing shrinks less than the token count or not at all.
set -u
top=${SKPO_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$top" || exit 1
BUILD=${SKPO_BUILD:-build}
threads=${SKPO_BENCH_THREADS:-$(nproc)}
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
mkdir -p "$BUILD/bench"
mpi=$(pkg-config --cflags ompi-c 2>/dev/null)
cc -O2 -std=gnu11 -fopenmp -Icore -I/usr/include/x86_64-linux-gnu/openblas-pthread $mpi -o "$BUILD/bench/b_pack" \
  bench/b_pack.c "$BUILD/libskpo.a" -lmsgpackc -lzstd -lz -lopenblas -lpcre2-8 -lutf8proc -ljansson -lflint -lmpfr \
  -lgmp -lm -lpthread $(pkg-config --libs ompi-c 2>/dev/null) \
  $(ar t "$BUILD/libskpo.a" | grep -q '^attention.o$' && cu=${CUDA_HOME:-/usr/local/cuda}/lib64 &&
    echo "-L$cu -lnccl -lcudart -lstdc++ -ldl $(ar t "$BUILD/libskpo.a" | grep -q sdpa_cudnn && echo -lcudnn -lnvrtc)") ||
  exit 1
echo "load average $(cut -d" " -f1-3 /proc/loadavg) (a shared machine makes every number noisy)"
SKPO_DEVICE=cpu "$BUILD/bench/b_pack" "$threads"
