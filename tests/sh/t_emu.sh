#!/bin/sh
# The real CUDA kernels and host code, run on the CPU emulator (tests/emu/):
# without a GPU this is the only place CI executes core/cuda/*.cu. Three of the
# CUDA tests: test_cuda_ops in make test, test_cuda_model and
# test_cuda_sample_exact (the sampler coin by coin) in make test-long; the rest
# take longer as fibers and are run by hand (sh tests/emu/run.sh). Not repeated
# under make asan.
. "$(dirname "$0")/lib.sh"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
case "${SKPO_BUILD:-build}" in *asan*) skip "CUDA tests on the emulator" "not repeated under make asan"; exit 0;; esac
command -v g++ >/dev/null || { skip "CUDA tests on the emulator" "g++ is not installed"; exit 0; }
[ -f "$CUDA_HOME/include/cuda_bf16.h" ] || { skip "CUDA tests on the emulator" "no CUDA headers in $CUDA_HOME"; exit 0; }
cd "$TOP" || exit 1
# test_cuda_model (graphs, tiled prefill, long prefixes) takes minutes as fibers:
# make test-long runs it, to keep make test within its 15 minutes on 2 cores.
EMU_TESTS=test_cuda_ops
if [ -n "${SKPO_TEST_LONG:-}" ]; then EMU_TESTS="test_cuda_ops test_cuda_model test_cuda_sample_exact"
else skip "test_cuda_model on the emulated GPU" "long test (make test-long)"; fi
for t in $EMU_TESTS; do
  sh tests/emu/run.sh "$t" >"$TMP/$t.log" 2>&1
  echo $? >"$TMP/$t.rc"
  t "$t passes with the real kernels on the emulated GPU" sh -c '
    [ "$(cat "$0.rc")" = 0 ] && grep -q " 0 failed" "$0.log" && ! grep -q "^SKIP.*no GPU" "$0.log" || { tail -n 30 "$0.log"; exit 1; }' \
    "$TMP/$t"
done
