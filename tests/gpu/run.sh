#!/bin/sh
# The one GPU script: build with CUDA, run every CUDA test against the CPU
# reference, then the GPU benchmarks. Designed to finish in a few minutes on one
# H200. Without a GPU every test prints a visible "skipped: no GPU" line.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1
command -v nvcc >/dev/null 2>&1 || { echo "SKIP gpu: skipped: nvcc not found"; exit 0; }
make -j"$(nproc)" CUDA=1 all >/dev/null || { echo "FAIL gpu build"; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no GPU visible"
rc=0
for t in build/tests/test_cuda_*; do
  [ -x "$t" ] || continue
  echo "== $t"
  "$t" || rc=1
done
exit $rc
