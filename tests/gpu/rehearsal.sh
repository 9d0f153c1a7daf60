#!/bin/sh
# tests/gpu/rehearsal.sh - `make gpu-rehearsal`: tests/gpu/run.sh end to end
# here, from the bundle (.gpu-bundle/), as the device call runs it. Without a
# GPU every phase runs in its skip mode (the SKPO step on the CPU at a tiny
# shape). It fails on what would waste a GPU run: a missing file or path, a
# phase that overruns its share of the budget, a summary the parser cannot
# read, a FAIL line. Writes the log to build-gpu/rehearsal/gpu.log.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1
out=build-gpu/rehearsal
rm -rf "$out" && mkdir -p "$out"
start=$(date +%s)
OUT=$top/$out SKPO_GPU_REHEARSAL=1 SKPO_GPU_WORK=/tmp/skpo-rehearsal.$$ sh tests/gpu/run.sh >/dev/null 2>&1
rc=$?
dt=$(( $(date +%s) - start ))
log=$out/gpu.log
bad=0
complain() { echo "gpu-rehearsal: $*"; bad=1; }
[ -s "$log" ] || complain "run.sh wrote no log"
grep -q '^PASS load: .* carried binaries' "$log" || complain "the bundle did not load (see $log)"
for p in facts load tests bench sanitizer peer step 1.5b summary; do
  grep -q "^== $p" "$log" || complain "phase $p did not start"
done
grep -q '^FAIL' "$log" && { grep '^FAIL' "$log" | head -5; complain "FAIL lines above"; }
grep -q 'phase .* out of time' "$log" && complain "a phase ran out of its share of the budget"
grep -q '^PASS skpo-step: ' "$log" || complain "the SKPO step did not pass on the CPU"
# every test binary and benchmark ran and said why it skipped
n_skip=$(grep -c '^SKIP .*: skipped: no GPU' "$log")
[ "$n_skip" -ge 3 ] || complain "only $n_skip 'skipped: no GPU' lines"
# the parser reads a summary: feed it the lines a GPU run prints
printf 'BENCH ours decode model=0.5b batch=64 tok_s=1 frac=0.1\nBENCH torch decode model=0.5b batch=64 tok_s=2 frac=0.2\nBENCH ours update model=0.5b tokens=8 attn=custom tok_s=1 mfu=0.1 ms=3 fwd_ms=1 bwd_ms=1\n' |
  awk -f tests/gpu/summary.awk | grep -q '^FAIL target decode 0.5b batch 64' || complain "summary.awk cannot read BENCH lines"
[ "$rc" = 0 ] || complain "run.sh exit $rc"
echo "gpu-rehearsal: run.sh from the bundle in ${dt}s, $(grep -c '^PASS' "$log") PASS, $n_skip skipped (no GPU), $(grep -c '^FAIL' "$log") FAIL; log: $log"
exit $bad
