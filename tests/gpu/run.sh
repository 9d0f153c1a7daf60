#!/bin/sh
# tests/gpu/run.sh - the one GPU run, ordered by what each part tells.
#
# On the lent GPU machine (a bare image: driver, CUDA toolkit, PyTorch and its
# pip packages; no apt, no network, no Debian libraries) it runs the binaries of
# the bundle built here (`make gpu-bundle` -> .gpu-bundle/, carried by the device
# call), in this order, each phase under its own share of an internal budget:
#
#   1 facts      the machine: GPU, driver, CUDA, torch, CPUs (nothing can fail)
#   2 load       unpack the bundle; every carried binary's libraries resolve
#                (ldd) and each tool answers --help. Only when the bundle is
#                missing or does not load: build here (the fallback; make, nvcc
#                and dpkg are checked only then)
#   3 tests      the CUDA unit tests: ops, model, greedy, sample, train, lora,
#                share, then any other test_cuda_*
#   4 bench      0.5B: decode at batch 1/8/64/256, prefill, and the update once
#                per attention path (SKPO_ATTN)
#   5 sanitizer  compute-sanitizer memcheck, racecheck, synccheck on the
#                attention, flash and sampler tests (filtered by SKPO_TEST_CASE)
#   6 peer       PyTorch eager on the same shapes (tests/gpu/peer_torch.py)
#   7 step       one real SKPO step at the Qwen2.5-0.5B shape (tests/gpu/skpo_step.sh)
#   8 1.5b       the 1.5B benchmarks and peer, last
#
# Every line goes to $OUT/gpu.log as it is produced (a cut run keeps what came
# before the cut); raw program output to $OUT/gpu-bench.log, stderr to
# $OUT/gpu-stderr.log, sanitizer reports to $OUT/gpu-sanitizer.log. Result
# lines: PASS|FAIL|SKIP|BENCH|PEAK|INFO <part>: ...; the end is the summary
# table (ours vs torch) and the targets. Exit 1 when a test or sanitizer run
# failed; missed speed targets do not change it.
#
# Without a GPU: one SKIP line per phase, exit 0 (CI's `make gpu-test`), unless
# SKPO_GPU_REHEARSAL=1 (`make gpu-rehearsal`): then every phase runs in its
# skip mode (the tests and benchmarks print their "skipped: no GPU"; the SKPO
# step runs on the CPU at a tiny shape), which checks paths, the parser and
# the budgets here.
#
# Device call (tests/gpu/README.md): command `sh tests/gpu/run.sh`, carry
# [".gpu-bundle"], timeout_s 540. The internal budget (SKPO_GPU_BUDGET, 450 s)
# leaves room for the machine's start within about 12 minutes.
#
# Environment: SKPO_GPU_BUDGET (450), SKPO_GPU_PHASES (all: "facts load tests
# bench sanitizer peer step 1.5b"), SKPO_GPU_WORK (/tmp/skpo-gpu),
# SKPO_GPU_BUILD=1 (the fallback build even where the bundle loads).
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1

if [ -n "${OUT:-}" ] && [ -z "${SKPO_GPU_TEED:-}" ]; then
  mkdir -p "$OUT"
  rcf=$(mktemp)
  { SKPO_GPU_TEED=1 sh "$0" "$@"; echo $? >"$rcf"; } 2>&1 | tee "$OUT/gpu.log"
  rc=$(cat "$rcf"); rm -f "$rcf"
  exit "${rc:-1}"
fi

t0=$(date +%s)
budget=${SKPO_GPU_BUDGET:-450}
phases=${SKPO_GPU_PHASES:-facts load tests bench sanitizer peer step 1.5b}
W=${SKPO_GPU_WORK:-/tmp/skpo-gpu}
L=${OUT:-$W/out}
mkdir -p "$W" "$L"
: >"$L/gpu-bench.log"; : >"$L/gpu-stderr.log"; : >"$L/gpu-sanitizer.log"
rc=0
elapsed() { echo $(( $(date +%s) - t0 )); }
left() { echo $(( budget - $(date +%s) + t0 )); }
want() { case " $phases " in *" $1 "*) return 0;; esac; return 1; }
# phase NAME SHARE: starts a phase; its end is at most SHARE seconds from now
# (and never past the whole budget). phase_left: what is left of it.
phase() {
  pname=$1; pend=$(( $(date +%s) + $2 ))
  [ "$pend" -gt $((t0 + budget)) ] && pend=$((t0 + budget))
  echo "== $pname (at $(elapsed)s, ${2}s at most; $(left)s of the budget left)"
}
phase_left() { echo $(( pend - $(date +%s) )); }

# part NAME SECONDS CMD...: CMD under a time limit (capped by the phase); its
# result lines stream through prefixed with NAME, all of its stdout goes to
# gpu-bench.log and its stderr to gpu-stderr.log as they come.
part() {
  name=$1; lim=$2; shift 2
  l=$(phase_left)
  if [ "$l" -lt 5 ]; then echo "SKIP $name: skipped: phase $pname out of time ($(elapsed)s)"; return; fi
  [ "$lim" -gt "$l" ] && lim=$l
  ps=$(date +%s)
  echo "== $name" >>"$L/gpu-stderr.log"
  { timeout -k 5 "$lim" "$@" 2>>"$L/gpu-stderr.log"; echo "EXIT $?"; } | awk -v p="$name" -v lf="$L/gpu-bench.log" '
    /^EXIT [0-9]+$/ { print > (lf ".rc"); close(lf ".rc"); next }
    { print >> lf; fflush(lf) }
    /^FAIL / { nf++ }
    /^(PASS|FAIL|SKIP|BENCH|PEAK|INFO) / { sub(/^[A-Z]+ /, "&" p ": "); print; fflush() }
    END { print nf + 0 > (lf ".nf"); close(lf ".nf") }'
  prc=$(cat "$L/gpu-bench.log.rc" 2>/dev/null | sed 's/EXIT //'); nf=$(cat "$L/gpu-bench.log.nf" 2>/dev/null)
  rm -f "$L/gpu-bench.log.rc" "$L/gpu-bench.log.nf"
  dt=$(( $(date +%s) - ps ))
  if [ "${prc:-1}" = 124 ] || [ "${prc:-1}" = 137 ]; then
    echo "FAIL $name: timed out after ${lim}s (results above are partial)"; rc=1
  elif [ "${prc:-1}" != 0 ] || [ "${nf:-0}" != 0 ]; then
    echo "FAIL $name: exit ${prc:-?}, ${dt}s; stderr:"
    awk -v p="== $name" '$0 == p { on = 1; n = 0; next } /^== / { on = 0 } on { a[n++ % 12] = $0 }
      END { for (i = (n > 12 ? n - 12 : 0); i < n; i++) print "    " a[i % 12] }' "$L/gpu-stderr.log"
    rc=1
  else
    echo "INFO $name: done in ${dt}s"
  fi
}

# --- 1. facts ---------------------------------------------------------------------
gpu=""
command -v nvidia-smi >/dev/null 2>&1 &&
  gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
if [ -z "$gpu" ] && [ -z "${SKPO_GPU_REHEARSAL:-}" ]; then
  for p in $phases; do echo "SKIP gpu $p: skipped: no GPU"; done
  exit 0
fi
if ! command -v nvcc >/dev/null 2>&1; then
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [ -x "$d/nvcc" ] && PATH="$d:$PATH" && break; done
fi
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")")}
export PATH CUDA_HOME
phase facts 15
echo "INFO facts: date $(date -u +%FT%TZ); gpu ${gpu:-none (rehearsal)}"
echo "INFO facts: host $(uname -srm), $(nproc) cpus, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo) memory"
echo "INFO facts: nvcc $(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p'), CUDA_HOME $CUDA_HOME"
echo "INFO facts: $(python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>/dev/null || echo 'no torch')"
[ -n "$gpu" ] && nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,power.limit --format=csv,noheader 2>/dev/null |
  sed 's/^/INFO facts: clocks sm, max sm, mem, temp, power, limit: /'
command -v compute-sanitizer >/dev/null 2>&1 || [ -x "$CUDA_HOME/bin/compute-sanitizer" ] || echo "INFO facts: no compute-sanitizer"

# The CUDA libraries: the toolkit's, then PyTorch's pip packages (NCCL and
# cuDNN live only there on this image). NCCL for a one-host VM: loopback
# socket, no InfiniBand, no peer-to-peer probing of absent devices.
libpath="$CUDA_HOME/lib64"
for r in $(python3 -c 'import nvidia, sys; print(" ".join(nvidia.__path__))' 2>/dev/null); do
  for d in "$r"/*/lib; do [ -d "$d" ] && libpath="$libpath:$d"; done
done
export LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
for l in libcudart.so.13 libcublas.so.13 libnccl.so.2 libcudnn.so.9 libnvrtc.so.13; do
  where=$(echo "$libpath" | tr ':' '\n' | while read -r d; do [ -e "$d/$l" ] && echo "$d" && break; done)
  echo "INFO facts: $l ${where:-not found}"
done

# --- 2. load ----------------------------------------------------------------------
B=""
fallback_build() { # builds with the image's compilers and .gpudeps/ (tests/gpu/prepare.sh); sets B
  for t in make nvcc dpkg; do command -v $t >/dev/null || { echo "FAIL load: fallback build needs $t"; return 1; }; done
  deps=/tmp/gpudeps
  if ls .gpudeps/*.deb >/dev/null 2>&1; then
    rm -rf "$deps" && mkdir -p "$deps"
    for f in .gpudeps/*.deb; do dpkg -x "$f" "$deps" || echo "FAIL load: dpkg -x $f"; done
  else echo "INFO load: no .gpudeps/ (tests/gpu/prepare.sh): the image's own libraries"; fi
  lib=$deps/usr/lib/x86_64-linux-gnu
  nccl=$(echo "$libpath" | tr ':' '\n' | grep '/nccl/lib$' | head -1)
  # cuDNN: prepare.sh carries its headers and the frontend's; the library is
  # torch's libcudnn.so.9, linked by its plain name from a folder of our own
  dnn="CUDNN=0"
  cudnn=$(echo "$libpath" | tr ':' '\n' | grep '/cudnn/lib$' | head -1)
  if [ -d .gpudeps/cudnn/include ] && [ -n "$cudnn" ]; then
    mkdir -p "$W/dnnlib" && ln -sf "$cudnn/libcudnn.so.9" "$W/dnnlib/libcudnn.so"
    nvrtc=$(ls "$CUDA_HOME"/lib64/libnvrtc.so.* 2>/dev/null | head -1)
    [ -n "$nvrtc" ] && ln -sf "$nvrtc" "$W/dnnlib/libnvrtc.so"
    dnn="CUDNN_INCLUDE=$top/.gpudeps/cudnn/include CUDNN_FRONTEND=$top/.gpudeps/cudnn/include CUDNN_LIB=$W/dnnlib"
  fi
  bs=$(date +%s)
  # CFLAGS and LDFLAGS from the environment: the Makefile appends its own to them
  CFLAGS="-I$deps/usr/include -I$deps/usr/include/x86_64-linux-gnu/openblas-pthread" \
  LDFLAGS="-L$lib -L$lib/openblas-pthread -Wl,-rpath-link,$lib:$lib/openblas-pthread" \
  timeout 240 make -k -j"$(nproc)" BUNDLE=1 CUDA=1 BUILD=build-gpu BIN=build-gpu/bin MPI_CFLAGS= MPI_LIBS= \
    CUDA_HOME="$CUDA_HOME" ${nccl:+NCCL_HOME=$(dirname "$nccl")} $dnn \
    $(ls tests/unit/test_cuda_*.c | grep -v _fake | sed 's#tests/unit/\(.*\)\.c#build-gpu/tests/\1#') \
    $(ls tests/gpu/*.c | sed 's#tests/gpu/\(.*\)\.c#build-gpu/gpu/\1#') \
    $(ls -d tools/*/ | sed 's#tools/\(.*\)/#build-gpu/bin/skpo-\1#') >"$L/gpu-build.log" 2>&1 ||
    { echo "FAIL load: fallback build failed ($(( $(date +%s) - bs ))s; gpu-build.log):"
      grep -E 'error|undefined|cannot find' "$L/gpu-build.log" | head -12; return 1; }
  export LD_LIBRARY_PATH="$lib:$lib/openblas-pthread:$top/build-gpu:$LD_LIBRARY_PATH"
  mkdir -p build-gpu/lib && cp build-gpu/libskpo.so build-gpu/lib/
  B=$top/build-gpu
  echo "PASS load: fallback build in $(( $(date +%s) - bs ))s"
}
if want load; then
  phase load 40
  if [ -n "${SKPO_GPU_BUILD:-}" ]; then
    echo "INFO load: SKPO_GPU_BUILD set: building here instead of loading the bundle"
  elif [ -f .gpu-bundle/bundle.tar.xz ]; then
    rm -rf "$W/bundle" && mkdir -p "$W/bundle"
    if command -v xz >/dev/null 2>&1; then tar -C "$W/bundle" -xJf .gpu-bundle/bundle.tar.xz
    else python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' .gpu-bundle/bundle.tar.xz "$W/bundle"
    fi || echo "FAIL load: could not unpack .gpu-bundle/bundle.tar.xz"
    head -3 .gpu-bundle/MANIFEST 2>/dev/null | sed 's/^# /INFO load: bundle: /'
    nb=0; nbad=0
    for f in "$W"/bundle/bin/* "$W"/bundle/tests/* "$W"/bundle/gpu/* "$W/bundle/lib/libskpo.so"; do
      [ -f "$f" ] || continue
      nb=$((nb + 1))
      miss=$(ldd "$f" 2>&1 | awk '/not found/ {print $1}' | sort -u | tr '\n' ' ')
      if [ -n "$miss" ]; then nbad=$((nbad + 1)); echo "FAIL load: ${f#"$W"/bundle/} cannot find: $miss"; continue; fi
      case "$f" in */bin/*) "$f" --help >/dev/null 2>&1 || { nbad=$((nbad + 1)); echo "FAIL load: ${f#"$W"/bundle/} --help exits $?"; };; esac
    done
    if [ "$nb" -gt 0 ] && [ "$nbad" = 0 ]; then B=$W/bundle; echo "PASS load: $nb carried binaries resolve their libraries and start"
    else rc=1; echo "INFO load: the bundle does not load here: building instead"; fi
  else
    echo "INFO load: no .gpu-bundle/bundle.tar.xz (make gpu-bundle, then carry .gpu-bundle): building instead"
  fi
  [ -n "$B" ] || fallback_build || rc=1
fi
[ -n "$B" ] || B=$W/bundle
export PATH="$B/bin:$PATH"

# --- 3. tests ---------------------------------------------------------------------
first="ops model greedy sample sample_exact train lora share"
if want tests; then
  phase tests 160
  for t in $first; do part "test_cuda_$t" 60 "$B/tests/test_cuda_$t"; done
  for f in "$B"/tests/test_cuda_*; do
    t=$(basename "$f"); case "$t" in *.*) continue;; esac  # the fallback build's .d files
    case " $first " in *" ${t#test_cuda_} "*) continue;; esac
    part "$t" 60 "$f"
  done
fi

# --- 4. the 0.5B benchmarks ---------------------------------------------------------
# bench_prefill and bench_update run every attention path themselves (cudnn,
# flash, custom: one BENCH line each, attn=<path>), cuDNN last.
bench_size() { # MODEL
  m=$1
  part "bench-decode-$m" 90 "$B/gpu/bench_decode" "$m"
  part "bench-prefill-$m" 45 "$B/gpu/bench_prefill" "$m"
  part "bench-update-$m" 120 "$B/gpu/bench_update" "$m"
}
if want bench; then phase bench 200; bench_size 0.5b; fi

# --- 5. compute-sanitizer -----------------------------------------------------------
# memcheck (out-of-bounds and misaligned accesses), racecheck (shared-memory
# hazards, which the CPU emulator shows in one interleaving only) and
# synccheck (barriers under divergence), on the cases that exercise the
# attention, flash and sampler kernels: 10-100x slower, so filtered by name.
san=$(command -v compute-sanitizer 2>/dev/null || true)
[ -z "$san" ] && [ -x "$CUDA_HOME/bin/compute-sanitizer" ] && san="$CUDA_HOME/bin/compute-sanitizer"
if want sanitizer; then
  phase sanitizer 90
  if [ -z "$san" ] || [ -z "$gpu" ]; then
    echo "SKIP sanitizer: skipped: ${gpu:+no compute-sanitizer}${gpu:-no GPU}"
  else
    for st in memcheck:ops:attention memcheck:train:flash memcheck:sample: racecheck:ops:attention \
              racecheck:train:flash synccheck:ops:attention synccheck:sample:; do
      tool=${st%%:*}; rest=${st#*:}; t=test_cuda_${rest%%:*}; case_=${rest#*:}
      name="sanitizer-$tool-${t#test_cuda_}${case_:+-$case_}"
      l=$(phase_left); [ "$l" -gt 30 ] && l=30
      if [ "$l" -lt 8 ]; then echo "SKIP $name: skipped: phase out of time ($(elapsed)s)"; continue; fi
      ps=$(date +%s)
      echo "== $name" >>"$L/gpu-sanitizer.log"
      SKPO_TEST_CASE=$case_ timeout -k 5 "$l" "$san" --tool "$tool" --error-exitcode 99 --print-limit 20 \
        "$B/tests/$t" >>"$L/gpu-sanitizer.log" 2>&1
      src=$?; dt=$(( $(date +%s) - ps ))
      if [ "$src" = 124 ] || [ "$src" = 137 ]; then echo "SKIP $name: not finished in ${l}s (time allowing only)"
      elif [ "$src" = 99 ]; then
        rc=1; echo "FAIL $name: hazards reported (${dt}s):"
        awk -v p="== $name" '$0 == p { on = 1; next } /^== / { on = 0 } on && /^========= / { print "    " $0 }' "$L/gpu-sanitizer.log" | head -12
      elif [ "$src" != 0 ]; then rc=1; echo "FAIL $name: exit $src under the sanitizer (${dt}s)"
      else echo "PASS $name: no errors (${dt}s)"
      fi
    done
  fi
fi

# --- 6. the PyTorch peer ------------------------------------------------------------
have_torch=0
python3 -c 'import torch, transformers; assert torch.cuda.is_available()' 2>/dev/null && have_torch=1
if want peer; then
  phase peer 75
  if [ "$have_torch" = 1 ]; then part peer-torch-0.5b 75 env PYTHONUNBUFFERED=1 python3 tests/gpu/peer_torch.py 0.5b
  else echo "SKIP peer-torch: skipped: python3 has no torch with CUDA or no transformers"; fi
fi

# --- 7. one real SKPO step ----------------------------------------------------------
if want step; then
  phase step 70
  part skpo-step 70 sh tests/gpu/skpo_step.sh "$B" "$W/step" "${gpu:+0.5b}"
fi

# --- 8. 1.5B, last ------------------------------------------------------------------
if want 1.5b; then
  phase 1.5b "$(left)"
  bench_size 1.5b
  [ "$have_torch" = 1 ] && part peer-torch-1.5b 90 env PYTHONUNBUFFERED=1 python3 tests/gpu/peer_torch.py 1.5b
fi

# --- summary ------------------------------------------------------------------------
echo "== summary (ours vs PyTorch eager, same GPU, same run)"
awk -f tests/gpu/summary.awk "$L/gpu-bench.log"
[ -n "$gpu" ] && nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader 2>/dev/null | sed 's/^/INFO gpu after: /'
echo "INFO total: $(elapsed)s of the ${budget}s budget; exit $rc"
exit $rc
