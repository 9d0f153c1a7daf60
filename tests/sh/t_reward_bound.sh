#!/bin/sh
# t_reward_bound.sh - rewards are bounded and counted: a record the verifier
# cannot judge within its wall-clock bound (math: --math-timeout; code:
# --code-record-timeout) gets a wrong answer's reward and reward_status
# timeout, never silently; skpo-advantage and skpo-eval count such records
# (reward_timeouts, reward_errors) and fail above --max-reward-failures,
# leaving the tracker state as it was.
. "$(dirname "$0")/lib.sh"
need_tools "reward bounds" skpo-cat skpo-reward skpo-advantage skpo-eval
export OMP_NUM_THREADS=1

# A set of 12 costly items (3^{99999}+k) against the same set reversed: 144
# exact comparisons, about 0.1 s unbounded, equal.
set12=$(awk 'BEGIN { for (i = 0; i < 12; i++) printf "%s3^{99999}+%d", i ? "," : "", i }')
rev12=$(awk 'BEGIN { for (i = 11; i >= 0; i--) printf "3^{99999}+%d%s", i, i ? "," : "" }')
printf '{"kind":"full","uid":"a","pid":"p","answer":"%s","text":"so \\\\boxed{%s}"}\n' "$set12" "$rev12" >"$TMP/slow.jsonl"
printf '{"kind":"full","uid":"b","pid":"p","answer":"4","text":"\\\\boxed{4}","reward_status":"timeout"}\n' >"$TMP/fast.jsonl"

t "a rollout the math verifier cannot judge in --math-timeout is marked timeout, rewarded as wrong, with a reason" sh -c '
  skpo-cat --pack "$0/slow.jsonl" | skpo-reward --math-timeout 0.001 | skpo-cat --where kind=full >"$0/o.json" &&
  grep -q "\"reward\":-1.0" "$0/o.json" && grep -q "\"correct\":false" "$0/o.json" &&
  grep -q "\"reward_status\":\"timeout\"" "$0/o.json" && grep -q "\"reason\":\"verifier timed out after 0.001 s" "$0/o.json" ||
  { cat "$0/o.json"; exit 1; }' "$TMP"
t "the same rollout with the default bound is judged (correct, no reward_status); a stale reward_status is dropped" sh -c '
  cat "$0/slow.jsonl" "$0/fast.jsonl" | skpo-cat --pack | skpo-reward | skpo-cat --where kind=full >"$0/o2.json" &&
  [ "$(grep -c "\"correct\":true" "$0/o2.json")" = 2 ] && ! grep -q reward_status "$0/o2.json" || { cat "$0/o2.json"; exit 1; }' "$TMP"

# A grpo step of 2 groups x 4 records; ST of them carry reward_status.
step() { # FILE NTIMEOUT NERROR
  awk -v nt="$2" -v ne="$3" 'BEGIN { for (i = 0; i < 8; i++) {
      st = i < nt ? ",\"reward_status\":\"timeout\"" : i < nt + ne ? ",\"reward_status\":\"error\"" : ""
      printf "{\"kind\":\"full\",\"pid\":\"p%d\",\"uid\":\"u%d\",\"source\":\"s\",\"prompt\":[1,2],\"tokens\":[3,4],\"reward\":%s,\"correct\":%s%s}\n",
        i % 2, i, i % 3 ? "1.0" : "-1.0", i % 3 ? "true" : "false", st } }' | skpo-cat --pack >"$1"
}
step "$TMP/s0.zst" 0 0
step "$TMP/s1.zst" 1 0
step "$TMP/s2.zst" 1 1
adv() { skpo-advantage --mode grpo --group 4 --state "$TMP/st" "$@"; }

t "skpo-advantage counts rewards without a verdict in its metrics (0 when there are none)" sh -c '
  rm -rf "$0/st" && skpo-advantage --mode grpo --group 4 --state "$0/st" --metrics "$0/m0" "$0/s0.zst" >/dev/null &&
  skpo-cat --where kind=metrics "$0/m0" | grep -q "\"reward_timeouts\":0,\"reward_errors\":0" &&
  rm -rf "$0/st" && skpo-advantage --mode grpo --group 4 --state "$0/st" --metrics "$0/m2" --max-reward-failures 0.25 "$0/s2.zst" >/dev/null &&
  skpo-cat --where kind=metrics "$0/m2" | grep -q "\"reward_timeouts\":1,\"reward_errors\":1" || { skpo-cat "$0/m0" "$0/m2"; exit 1; }' "$TMP"
fails_over() {
  rm -rf "$TMP/st" && adv "$TMP/s0.zst" >/dev/null 2>&1 && cp -r "$TMP/st" "$TMP/st.keep" || return 1
  adv "$TMP/s1.zst" >"$TMP/out" 2>"$TMP/err"; rc=$?
  [ "$rc" = 1 ] && [ "$(wc -l <"$TMP/err")" = 1 ] &&
    grep -q "^skpo-advantage: step 1: 1 of 8 rewards have no verdict (1 timed out, 0 failed), over --max-reward-failures 0.05" "$TMP/err" &&
    diff -r "$TMP/st" "$TMP/st.keep" >/dev/null || { echo "exit $rc"; cat "$TMP/err"; return 1; }
  adv --max-reward-failures 0.125 "$TMP/s1.zst" >/dev/null 2>"$TMP/err" || { cat "$TMP/err"; return 1; }
}
t "skpo-advantage fails the step above --max-reward-failures (one line, state kept), passes at the fraction" fails_over

t "skpo-eval counts them per group, says so in the table, and fails above --max-reward-failures" sh -c '
  skpo-eval "$0/s1.zst" 2>&1 >/dev/null | grep -q "^skpo-eval: 1 of 8 samples. rewards have no verdict (1 timed out, 0 failed)" &&
  skpo-eval --max-reward-failures 0.5 "$0/s2.zst" 2>"$0/tab" >"$0/m.zst" && grep -q "no verdict, counted wrong: 1 timed out, 1 failed" "$0/tab" &&
  skpo-cat "$0/m.zst" | grep -q "\"reward_timeouts\":1,\"reward_errors\":1" || { cat "$0/tab"; exit 1; }' "$TMP"

if bwrap --unshare-all --ro-bind /usr /usr --symlink usr/lib /lib --symlink usr/lib64 /lib64 /usr/bin/true 2>/dev/null; then
  # 4 tests of 0.5 s each, under the 6 s per test, but over a 1.2 s record bound
  printf '{"kind":"full","uid":"c","pid":"p","task":"code","tests":"{\\"inputs\\": [\\"1\\\\n\\", \\"2\\\\n\\", \\"3\\\\n\\", \\"4\\\\n\\"], \\"outputs\\": [\\"1\\\\n\\", \\"2\\\\n\\", \\"3\\\\n\\", \\"4\\\\n\\"]}","text":"```python\\nimport time\\ntime.sleep(0.5)\\nprint(input())\\n```"}\n' >"$TMP/code.jsonl"
  t "a code rollout that reaches --code-record-timeout is marked timeout; without the bound it passes" sh -c '
    skpo-cat --pack "$0/code.jsonl" | skpo-reward --code-record-timeout 1.2 | skpo-cat --where kind=full >"$0/c1.json" &&
    grep -q "\"reward_status\":\"timeout\"" "$0/c1.json" && grep -q "\"correct\":false" "$0/c1.json" &&
    skpo-cat --pack "$0/code.jsonl" | skpo-reward | skpo-cat --where kind=full >"$0/c2.json" &&
    grep -q "\"correct\":true" "$0/c2.json" && ! grep -q reward_status "$0/c2.json" || { cat "$0/c1.json" "$0/c2.json"; exit 1; }' "$TMP"
else
  skip "a code rollout that reaches --code-record-timeout is marked timeout" "bubblewrap cannot create namespaces here"
fi
