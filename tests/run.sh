#!/bin/sh
# The test runner behind `make test`: every unit-test binary in $BUILD/tests and
# every shell test tests/sh/t_*.sh. Each prints PASS/FAIL/SKIP lines; this adds
# them up and ends with "N passed, N failed, N skipped". Exit 1 on any failure.
# SKPO_TEST_ONLY=pattern runs the matching tests only.
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
BUILD=${SKPO_BUILD:-build}
export SKPO_BUILD=$BUILD SKPO_TOP=$top PATH="$top/bin:$PATH"
# Pipelines run several OpenMP programs at once; spinning idle threads would
# steal the cores from the stage doing the work.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
# The suite checks the CPU reference; GPU tests choose the device themselves.
export SKPO_DEVICE=${SKPO_DEVICE:-cpu}
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
passed=0; failed=0; skipped=0
run_one() { # name cmd...
  name=$1; shift
  start=$(date +%s)
  "$@" >"$log/out" 2>"$log/err"
  rc=$?
  p=$(grep -c '^PASS ' "$log/out"); f=$(grep -c '^FAIL ' "$log/out"); s=$(grep -c '^SKIP ' "$log/out")
  if [ "$rc" != 0 ] && [ "$f" = 0 ]; then f=1; echo "FAIL $name (exit $rc, no FAIL line)" >>"$log/out"; fi
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
  t=$(( $(date +%s) - start ))
  if [ "$f" != 0 ]; then
    echo "== $name: $p passed, $f failed (${t}s)"
    grep -E '^(FAIL|SKIP) ' "$log/out"; sed 's/^/    /' "$log/err" | tail -n 40
  else
    echo "== $name: $p passed, $s skipped (${t}s)"
    grep '^SKIP ' "$log/out"
  fi
}
for t in "$BUILD"/tests/test_*; do
  [ -x "$t" ] || continue
  case "$t" in *.d|*.o) continue;; esac
  [ -n "$SKPO_TEST_ONLY" ] && case "$t" in *$SKPO_TEST_ONLY*) ;; *) continue;; esac
  run_one "$(basename "$t")" "$t"
done
for t in tests/sh/t_*.sh; do
  [ -f "$t" ] || continue
  [ -n "$SKPO_TEST_ONLY" ] && case "$t" in *$SKPO_TEST_ONLY*) ;; *) continue;; esac
  run_one "$(basename "$t")" sh "$t"
done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
