#!/bin/sh
# Build the CUDA backend for the CPU emulator (tests/emu/README.md) into
# build-emu/ and run the CUDA unit tests on it: the real kernels, host code
# and tests, with CPU fibers standing in for the GPU. Slow (every CUDA thread
# is a fiber): minutes. Usage: sh tests/emu/run.sh [test names...]
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
b=build-emu
mkdir -p $b/emu
g++ -std=c++17 -O2 -g -fPIC -Wall -Wno-unused-parameter -Wno-unused-function -I"$CUDA_HOME/include" -Itests/emu \
  -I/usr/include/x86_64-linux-gnu/openblas-pthread \
  -c tests/emu/cuda_emu_rt.cpp -o $b/emu/cuda_emu_rt.o
mpi=$(pkg-config --libs ompi-c 2>/dev/null || true)
# Default: every CUDA test but test_cuda_sample, whose 80k-draw statistics take
# hours as fibers (name it to run it anyway).
tests=${*:-$(ls tests/unit/test_cuda_*.c | sed 's#.*/\(test_cuda_[a-z_]*\)\.c#\1#' | grep -v -e fake -e "^test_cuda_sample$")}
targets=""
for t in $tests; do targets="$targets $b/tests/$t"; done
make -s -j"$(nproc)" BUILD=$b CUDA=1 CUDNN=0 NVCC="$top/tests/emu/nvcc-emu" NVCCFLAGS="-Icore" CUDA_HOME="$CUDA_HOME" \
  LDLIBS="$top/$b/emu/cuda_emu_rt.o -lmsgpackc -lzstd -lopenblas -lpcre2-8 -lutf8proc -ljansson -lm -lpthread $mpi -lstdc++" \
  $targets
rc=0
for t in $tests; do
  echo "== $t (emulated GPU)"
  "$b/tests/$t" || rc=1
done
exit $rc
