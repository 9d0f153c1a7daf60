#!/bin/sh
# The one GPU script (issues #9, #10): on a machine with an NVIDIA GPU it
# builds with CUDA, runs every CUDA test against the CPU backend, then the GPU
# benchmarks and their PyTorch peers, in under 6 minutes on one H200. Every
# result is one line starting with PASS, FAIL, SKIP or BENCH; the last lines are
# a table (ours / torch) and the issues' targets. Without a GPU it prints a
# visible "skipped: no GPU" line per part and exits 0 (CI, `make gpu-test`).
#
# On the lent GPU machine (bare image: CUDA toolkit + PyTorch, no network):
# run tests/gpu/prepare.sh here first, then the device call
#   command: sh tests/gpu/run.sh   carry: [".gpudeps"]   timeout_s: 480
# The .deb files in .gpudeps/ are unpacked into /tmp/gpudeps (never into /)
# and the build is pointed at them. A copy of the log goes to $OUT/gpu.log.
#
# Environment: SKPO_GPU_BUDGET total seconds (330), SKPO_GPU_MODELS ("0.5b 1.5b").
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1

# Tee everything into $OUT/gpu.log (written line by line, so a kill keeps it).
if [ -n "${OUT:-}" ] && [ -z "${SKPO_GPU_TEED:-}" ]; then
  mkdir -p "$OUT"
  rcf=$(mktemp)
  { SKPO_GPU_TEED=1 sh "$0" "$@"; echo $? >"$rcf"; } 2>&1 | tee "$OUT/gpu.log"
  rc=$(cat "$rcf"); rm -f "$rcf"
  exit "${rc:-1}"
fi

t0=$(date +%s)
budget=${SKPO_GPU_BUDGET:-330}
models=${SKPO_GPU_MODELS:-0.5b 1.5b}
parts="build cuda-unit-tests greedy-cpu-vs-cuda sampler-statistics bench-decode bench-prefill bench-update peer-torch"
elapsed() { echo $(( $(date +%s) - t0 )); }
left() { echo $(( budget - $(date +%s) + t0 )); }

gpu=""
if command -v nvidia-smi >/dev/null 2>&1; then
  gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
fi
if [ -z "$gpu" ]; then
  for p in $parts; do echo "SKIP gpu $p: skipped: no GPU"; done
  exit 0
fi
if ! command -v nvcc >/dev/null 2>&1; then
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [ -x "$d/nvcc" ] && PATH="$d:$PATH" && break; done
fi
export PATH
echo "gpu: $gpu"
echo "host: $(uname -m), $(nproc) cpus, nvcc $(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p'), $(python3 -c 'import torch; print("torch", torch.__version__)' 2>/dev/null || echo 'no torch')"

# --- the build's libraries: .gpudeps/*.deb unpacked into /tmp/gpudeps -------------
deps=/tmp/gpudeps
if ls .gpudeps/*.deb >/dev/null 2>&1; then
  rm -rf "$deps" && mkdir -p "$deps"
  for f in .gpudeps/*.deb; do dpkg -x "$f" "$deps" || echo "FAIL gpu deps: dpkg -x $f"; done
  echo "deps: $(ls .gpudeps/*.deb | wc -l) packages unpacked into $deps"
else
  echo "deps: no .gpudeps/ (run tests/gpu/prepare.sh before the device call); using the system's libraries"
fi
lib=$deps/usr/lib/x86_64-linux-gnu
export CFLAGS="${CFLAGS:-} -I$deps/usr/include -I$deps/usr/include/x86_64-linux-gnu/openblas-pthread"
export LDFLAGS="${LDFLAGS:-} -L$lib -L$lib/openblas-pthread -Wl,-rpath-link,$lib:$lib/openblas-pthread"
export PKG_CONFIG_PATH="$lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LD_LIBRARY_PATH="$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# CUDA and NCCL: CUDA_HOME from nvcc; NCCL from CUDA_HOME, else the pip package
# nvidia-nccl-cu13 next to PyTorch (it ships libnccl.so.2 only: link it through
# a folder with the libnccl.so name).
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
export CUDA_HOME
nccl_home=""
if [ -f "$CUDA_HOME/include/nccl.h" ] || [ -f /usr/include/nccl.h ]; then
  echo "nccl: system ($CUDA_HOME or /usr)"
else
  pyn=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null ||
        python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
  if [ -n "$pyn" ] && [ -f "$pyn/include/nccl.h" ]; then
    nccl_home=$deps/nccl
    mkdir -p "$nccl_home/lib"
    ln -sfn "$pyn/include" "$nccl_home/include"
    so=$(ls "$pyn"/lib/libnccl.so* | head -1)
    ln -sf "$so" "$nccl_home/lib/libnccl.so"
    ln -sf "$so" "$nccl_home/lib/$(basename "$so")"
    export LD_LIBRARY_PATH="$nccl_home/lib:$LD_LIBRARY_PATH"
    echo "nccl: pip package at $pyn"
  else
    echo "nccl: not found (the build will fail at nccl.h)"
  fi
fi
# cuBLAS and the runtime: the toolkit's lib64 (the linker needs libcublas.so);
# else the pip nvidia-cublas / cuda-runtime libraries next to PyTorch (they ship
# only the .so.N names: link them through a folder with the plain names).
export LD_LIBRARY_PATH="$CUDA_HOME/lib64:$LD_LIBRARY_PATH"
if [ ! -e "$CUDA_HOME/lib64/libcublas.so" ]; then
  pyc=$(python3 -c 'import nvidia, os
for p in nvidia.__path__:
    for d in ("cu13/lib", "cublas/lib"):
        if os.path.isdir(os.path.join(p, d)): print(os.path.join(p, d))' 2>/dev/null)
  mkdir -p "$deps/cudalib"
  for d in $pyc; do
    for l in cublas cublasLt cudart; do
      so=$(ls "$d"/lib$l.so.* 2>/dev/null | head -1)
      [ -n "$so" ] && [ ! -e "$deps/cudalib/lib$l.so" ] && ln -sf "$so" "$deps/cudalib/lib$l.so"
    done
    export LD_LIBRARY_PATH="$d:$LD_LIBRARY_PATH"
  done
  export LDFLAGS="$LDFLAGS -L$deps/cudalib"
  echo "cublas: not in $CUDA_HOME/lib64; using $(ls "$deps/cudalib" | tr '\n' ' ')from ${pyc:-nowhere}"
fi

# --- build (only what this script runs: CUDA tests and the GPU programs) ----------
bs=$(date +%s)
targets=$(ls tests/unit/test_cuda_*.c 2>/dev/null | sed 's#tests/unit/\(.*\)\.c#build/tests/\1#')
gtargets=$(ls tests/gpu/*.c 2>/dev/null | sed 's#tests/gpu/\(.*\)\.c#build/gpu/\1#')
mkdir -p build
if timeout 200 make -j"$(nproc)" CUDA=1 ${nccl_home:+NCCL_HOME=$nccl_home} CUDA_HOME="$CUDA_HOME" \
     $targets $gtargets >build/gpu-build.log 2>&1; then
  echo "PASS gpu build ($(( $(date +%s) - bs ))s)"
else
  echo "FAIL gpu build ($(( $(date +%s) - bs ))s): last lines of build/gpu-build.log:"
  grep -E 'error|Error|undefined' build/gpu-build.log | head -20
  tail -n 15 build/gpu-build.log
  [ -n "${OUT:-}" ] && cp build/gpu-build.log "$OUT/gpu-build.log"
  exit 1
fi
nvidia-smi --query-gpu=index,name,memory.used,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv 2>/dev/null

rc=0
# part NAME SECONDS cmd...: runs cmd under a time limit (capped by what is
# left of the budget); its PASS/FAIL/SKIP/BENCH lines go through, prefixed
# with the part name, stderr lines only when it fails.
part() {
  name=$1; want=$2; shift 2
  l=$(left)
  if [ "$l" -lt 10 ]; then echo "SKIP $name: skipped: time budget spent ($(elapsed)s)"; return; fi
  [ "$want" -gt "$l" ] && want=$l
  ps=$(date +%s)
  timeout -k 5 "$want" "$@" >build/gpu-part.out 2>build/gpu-part.err
  prc=$?
  grep -E '^(PASS|FAIL|SKIP|BENCH|PEAK|INFO) ' build/gpu-part.out | sed "s/^\([A-Z]*\) /\1 $name: /"
  nf=$(grep -c '^FAIL ' build/gpu-part.out)
  dt=$(( $(date +%s) - ps ))
  if [ "$prc" = 124 ] || [ "$prc" = 137 ]; then
    echo "FAIL $name: timed out after ${want}s (results above are partial)"; rc=1
  elif [ "$prc" != 0 ] || [ "$nf" != 0 ]; then
    echo "FAIL $name: exit $prc, ${dt}s; stderr:"; tail -n 12 build/gpu-part.err | sed 's/^/    /'; rc=1
  else
    echo "INFO $name: done in ${dt}s"
  fi
  cat build/gpu-part.out >>build/gpu-bench.log
}
: >build/gpu-bench.log

for t in build/tests/test_cuda_*; do
  [ -x "$t" ] || continue
  case "$t" in *.d) continue;; esac
  part "$(basename "$t")" 60 "$t"
done
have_torch=0
python3 -c 'import torch, transformers; assert torch.cuda.is_available()' 2>/dev/null && have_torch=1
[ "$have_torch" = 1 ] || echo "SKIP peer-torch: skipped: python3 has no torch with CUDA or no transformers"
# One model size at a time, ours then the peer, so a spent budget still leaves
# complete comparisons for the sizes that ran.
for m in $models; do
  part "bench-decode-$m" 75 build/gpu/bench_decode "$m"
  part "bench-prefill-$m" 30 build/gpu/bench_prefill "$m"
  part "bench-update-$m" 50 build/gpu/bench_update "$m"
  [ "$have_torch" = 1 ] && part "peer-torch-$m" 90 env PYTHONUNBUFFERED=1 python3 tests/gpu/peer_torch.py "$m"
done

# --- summary: ours / torch, and the issues' targets --------------------------------
echo "== summary (ours vs PyTorch eager, same GPU, same run)"
awk -f tests/gpu/summary.awk build/gpu-bench.log
[ "$(grep -c '^FAIL' build/gpu-bench.log)" = 0 ] || rc=1
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader 2>/dev/null | sed 's/^/INFO gpu after: /'
echo "INFO total: $(elapsed)s of the ${budget}s budget; exit $rc"
[ -n "${OUT:-}" ] && cp build/gpu-bench.log build/gpu-build.log "$OUT/" 2>/dev/null
exit $rc
