#!/bin/sh
# b_sandbox.sh - the code reward: programs judged per second on the machine's
# cores (skpo-reward --task code, --code-jobs = online CPUs) for a small mixed
# batch of 24 stdin programs with 3 tests each: 6 correct, 6 wrong (fail on the
# 2nd test), 6 timeouts (1 s per-test limit), 6 crashes. The peer, in the same
# run, is the bare cost of running the same programs without any isolation:
# `timeout 1 python3 prog.py < input` per test, stopping at the first failure,
# the same number of programs at once (xargs -P). The ratio is the price of the
# sandbox (namespaces, mounts, limits, the driver) plus the comparison.
top=${SKPO_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
PATH="$top/bin:$PATH"
cd "$top" || exit 1
command -v bwrap >/dev/null 2>&1 || { echo "b_sandbox: bwrap not installed; skipped"; exit 0; }
jobs=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tests='{\"inputs\": [\"3\\n\", \"10\\n\", \"-4\\n\"], \"outputs\": [\"6\\n\", \"20\\n\", \"-8\\n\"]}'
prog_correct='n = int(input())\nprint(2 * n)\n'
prog_wrong='n = int(input())\nprint(n + 3)\n'
prog_timeout='while True:\n    pass\n'
prog_crash='n = int(input())\nprint(n // 0)\n'
i=0
for kind in correct wrong timeout crash; do
  eval "body=\$prog_$kind"
  for r in 1 2 3 4 5 6; do
    i=$((i + 1))
    printf '{"kind":"full","uid":"%s-%d","gid":"p%d","pid":"p%d","source":"bench","task":"code","tests":"%s","text":"```python\\n%s```\\n"}\n' \
      "$kind" "$r" "$i" "$i" "$tests" "$body" >>"$tmp/batch.jsonl"
    mkdir -p "$tmp/peer/$i"; printf "$body" >"$tmp/peer/$i/prog.py"
  done
done
n=$(wc -l <"$tmp/batch.jsonl")
skpo-cat --pack "$tmp/batch.jsonl" >"$tmp/batch.zst" || exit 1
t0=$(date +%s.%N)
skpo-reward --code-timeout 1 --code-jobs "$jobs" "$tmp/batch.zst" >"$tmp/out.zst" || exit 1
t1=$(date +%s.%N)
right=$(skpo-cat --where correct=true --count "$tmp/out.zst")
# the peer: no isolation at all
cat >"$tmp/peer.sh" <<'PEER'
d=$1
for t in "3 6" "10 20" "-4 -8"; do
  set -- $t
  out=$(printf '%s\n' "$1" | timeout 1 /usr/bin/python3 -S "$d/prog.py" 2>/dev/null) || exit 1
  [ "$out" = "$2" ] || exit 1
done
PEER
t2=$(date +%s.%N)
ls -d "$tmp"/peer/*/ | xargs -P "$jobs" -n 1 sh "$tmp/peer.sh" 2>/dev/null
t3=$(date +%s.%N)
awk -v n="$n" -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" -v r="$right" -v j="$jobs" 'BEGIN {
  ours = n / (b - a); peer = n / (d - c)
  printf "skpo code reward (bubblewrap sandbox): %d programs (6 correct, 6 wrong, 6 timeout, 6 crash; %d judged correct) in %.2f s: %.1f programs/s on %d cores\n", n, r, b - a, ours, j
  printf "peer, no isolation (timeout + python3 per test, xargs -P %d): %.2f s: %.1f programs/s\n", j, d - c, peer
  printf "ratio sandboxed/unsandboxed throughput: %.2f\n", ours / peer }'
