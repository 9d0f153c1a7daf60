#!/bin/sh
# make demo, checked: on the fixed seed, SKPO raises held-out accuracy of the tiny
# model by at least MIN_GAIN (pipelines/config/demo.conf). Minutes of CPU, so it
# runs under `make test-long` (SKPO_TEST_LONG=1) only.
. "$(dirname "$0")/lib.sh"
if [ -z "${SKPO_TEST_LONG:-}" ]; then skip "demo raises held-out accuracy" "long test (make test-long)"; exit 0; fi
for tool in skpo-synth skpo-init skpo-sample skpo-splice skpo-reward skpo-advantage skpo-update skpo-eval skpo-cat; do
  command -v "$tool" >/dev/null || { skip "demo raises held-out accuracy" "$tool is not built yet"; exit 0; }
done
bash "$TOP/pipelines/demo.sh" "$TMP/demo" >"$TMP/demo.out" 2>&1
rc=$?
t "make demo finishes and raises held-out accuracy by the margin" sh -c '
  [ "$1" = 0 ] && grep -q "^demo: ok" "$0" || { tail -n 30 "$0"; exit 1; }' "$TMP/demo.out" "$rc"
t "the demo wrote its result and plots" sh -c '
  grep -q "^before=0" "$0/result" && grep -q "^after=0" "$0/result" && [ -s "$0/run/plots/heldout.png" ]' "$TMP/demo"
