#!/bin/sh
# b_signsim.sh - skpo-signsim (G = 8, N = 8 ... 8192 plus the GRPO row, T trials,
# uniform rates) against the peer: the same simulation vectorised in NumPy
# (Generator.binomial over a (T, G) array per N, signs on G X - sum X). Both
# use the machine's cores (OpenMP for ours; NumPy's binomial is single-threaded,
# so the peer also runs once per core count reported). Also checks that the two
# agree on the all-signs-right fraction within 5 standard errors.
top=${SKPO_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
T=${T:-200000}
PATH="$top/bin:$PATH"
NS=8,16,32,64,128,256,512,1024,2048,4096,8192
start=$(date +%s.%N)
skpo-signsim --trials "$T" --n "$NS" >"${TMPDIR:-/tmp}/b_signsim.$$" || exit 1
end=$(date +%s.%N)
ours=$(printf "%.4f" "$(echo "$end - $start" | bc -l)")
peer=$(python3 - "$T" "$NS" "${TMPDIR:-/tmp}/b_signsim.$$" <<'PY'
import sys, time
import numpy as np
T, ns, table = int(sys.argv[1]), [int(x) for x in sys.argv[2].split(",")], sys.argv[3]
G = 8
rng = np.random.default_rng(0)
t0 = time.perf_counter()
p = rng.random((T, G))
true = np.sign(G * p - p.sum(1, keepdims=True))
fr = {}
for n in ns + [1]:
    x = rng.binomial(n, p)
    est = np.sign(G * x - x.sum(1, keepdims=True))
    fr[n] = float((est == true).all(1).mean())
dt = time.perf_counter() - t0
ours = {}
for line in open(table):
    f = line.split()
    if f and f[0].isdigit():
        ours[int(f[0])] = float(f[1])
bad = [n for n in fr if abs(fr[n] - ours[n]) > 5 * np.sqrt(max(fr[n] * (1 - fr[n]), 1e-12) / T * 2)]
if bad:
    print("disagree at N =", bad, file=sys.stderr); sys.exit(1)
print("%.4f" % dt)
PY
) || { rm -f "${TMPDIR:-/tmp}/b_signsim.$$"; exit 1; }
rm -f "${TMPDIR:-/tmp}/b_signsim.$$"
echo "skpo-signsim, G=8, $T trials x 12 N values: ours ${ours}s (whole tool, $(nproc) cores), peer ${peer}s (NumPy vectorised, arithmetic only); results agree"
printf "ratio ours/peer: %.3f (below 1: ours is faster)\n" "$(echo "$ours / $peer" | bc -l)"
