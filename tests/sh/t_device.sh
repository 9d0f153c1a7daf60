#!/bin/sh
# --device on the model tools (skpo-sample, skpo-splice, skpo-score): a value
# other than cuda|cpu is a usage error (exit 2); cuda where the build or the
# machine has no GPU is one clear line and exit 1, also when asked through
# $SKPO_DEVICE; cpu runs. The GPU side itself is tested by tests/gpu/run.sh.
. "$(dirname "$0")/lib.sh"
F="$FIX/sample"
M="$F/tiny-qwen2"
P="$F/prompts.msgpack.zst"
export OMP_NUM_THREADS=1

bad_value() {
  "$@" --device tpu </dev/null >"$TMP/o" 2>"$TMP/e"; rc=$?
  [ "$rc" = 2 ] || { echo "exit $rc, want 2"; cat "$TMP/e"; return 1; }
  grep -q "device: 'tpu' is not cpu or cuda" "$TMP/e" || { cat "$TMP/e"; return 1; }
  [ ! -s "$TMP/o" ]
}
t "sample rejects --device tpu as a usage error" bad_value skpo-sample --model "$M" --prompts "$P" --n 1
t "splice rejects --device tpu as a usage error" bad_value skpo-splice --model "$M"
t "score rejects --device tpu as a usage error" bad_value skpo-score --model "$M"

no_gpu() { # tool, args... (stdin empty)
  tool=$1
  "$@" </dev/null >"$TMP/o" 2>"$TMP/e"; rc=$?
  [ "$rc" = 1 ] || { echo "exit $rc, want 1"; cat "$TMP/e"; return 1; }
  [ "$(wc -l <"$TMP/e")" = 1 ] || { echo "want one line:"; cat "$TMP/e"; return 1; }
  grep -Eq "^$tool: device cuda: (this build has no CUDA|no CUDA device visible)" "$TMP/e" || { cat "$TMP/e"; return 1; }
  [ ! -s "$TMP/o" ]
}
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then
  skip "--device cuda without a GPU fails clearly" "a GPU is visible"
else
  t "sample --device cuda without a GPU: one line, exit 1" no_gpu skpo-sample --model "$M" --prompts "$P" --n 1 --device cuda
  t "splice --device cuda without a GPU: one line, exit 1" no_gpu skpo-splice --model "$M" --device cuda
  t "score --device cuda without a GPU: one line, exit 1" no_gpu skpo-score --model "$M" --device cuda
  t "SKPO_DEVICE=cuda is the default --device" env SKPO_DEVICE=cuda sh -c '
    skpo-sample --model "$1" --prompts "$2" --n 1 </dev/null >/dev/null 2>"$3"; [ $? = 1 ] &&
    grep -q "device cuda" "$3"' _ "$M" "$P" "$TMP/env.err"
fi

cpu_runs() {
  skpo-sample --model "$M" --prompts "$P" --n 1 --max-tokens 3 --device cpu >"$TMP/s.out" 2>"$TMP/s.err" &&
  skpo-score --model "$M" --device cpu <"$TMP/s.out" >"$TMP/sc.out" 2>>"$TMP/s.err" &&
  skpo-cat --head 1 "$TMP/sc.out" >/dev/null 2>>"$TMP/s.err" || { cat "$TMP/s.err"; return 1; }
}
t "sample and score run with --device cpu" cpu_runs

# cuBLAS, cuDNN and NVRTC are loaded by the CUDA backend on first use
# (core/cuda/cublas_load.c, sdpa_cudnn.cpp), so a CPU run never maps them
# (linked, they cost every start ~65 ms).
no_cublas() {
  LD_DEBUG=files skpo-score --model "$M" --device cpu <"$TMP/s.out" >/dev/null 2>"$TMP/ld.err" || { tail -n 3 "$TMP/ld.err"; return 1; }
  ! grep -Eq "file=lib(cublas|cudnn|nvrtc)" "$TMP/ld.err" || { grep -E "file=lib(cublas|cudnn|nvrtc)" "$TMP/ld.err" | head -n 2; return 1; }
}
t "a CPU run loads neither cuBLAS nor cuDNN" no_cublas
