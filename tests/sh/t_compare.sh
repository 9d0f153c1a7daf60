#!/bin/sh
# t_compare.sh - pipelines/compare.sh end to end on a tiny recipe
# (tests/fixtures/compare/tiny.conf): the prompt pool of the revisit rate,
# METHOD@KEY=VAL variants, the table with revisit shares, the paired statistics,
# COMPARE_NAME; and splitpoint.sh's table on the same runs.
. "$(dirname "$0")/lib.sh"
need_tools "compare.sh" skpo-synth skpo-init skpo-update skpo-sample skpo-splice skpo-reward skpo-advantage skpo-eval skpo-cat
export OMP_NUM_THREADS=1 TASK_CONF="$FIX/compare/tiny.conf" THREADS=1
D=$TMP/cmp
# 2 steps x 4 prompts / REVISITS 2 = a pool of 4: every prompt every step
SEEDS="1 2" METHODS="skpo skpo@W_UP=0 grpo" REVISITS=2 bash "$TOP/pipelines/compare.sh" "$D" >"$TMP/c.out" 2>"$TMP/c.err"
t "compare.sh trains every method and seed on a pool of STEPS x PROMPTS / REVISITS prompts" sh -c '
  [ "$(skpo-cat --count --where kind=prompt "$0/base/data/pool-4.msgpack.zst")" = 4 ] &&
  for r in skpo-1 skpo-2 skpo@W_UP=0-1 skpo@W_UP=0-2 grpo-1 grpo-2; do
    [ "$(cat "$0/$r/last" 2>/dev/null)" = 2 ] && grep -q "^TRAIN_DATA=.*pool-4.msgpack.zst" "$0/$r/config" || { echo "$r"; cat "$1"; exit 1; }
  done' "$D" "$TMP/c.err"
t "METHOD@KEY=VAL runs the method with the key overridden" sh -c '
  grep -qx "W_UP=0" "$0/skpo@W_UP=0-1/config" && ! grep -qx "W_UP=0" "$0/skpo-1/config"' "$D"
t "compare.txt: a row per method with its runs, revisit share and draws per prompt; paired lines against the first" sh -c '
  grep -Eq "^skpo@W_UP=0 +2 .* 0\.500 +2\.00$" "$0/compare.txt" && grep -Eq "^grpo +2 " "$0/compare.txt" &&
  grep -q "^skpo@W_UP=0 - skpo: mean [-+][0-9.]* sd [0-9.]* (paired t [-0-9.]*, p [0-9.]*, 2 seeds)" "$0/compare.txt" &&
  grep -q "^grpo - skpo: " "$0/compare.txt" || { cat "$0/compare.txt"; exit 1; }' "$D"
t "a pool smaller than a step is refused, naming REVISITS" sh -c '
  SEEDS=1 METHODS=skpo REVISITS=5 bash "$0/pipelines/compare.sh" "$1" >/dev/null 2>"$1.err"; [ $? = 1 ] &&
  grep -q "REVISITS=5 leaves 2 prompts, fewer than the 4 of a step" "$1.err"' "$TOP" "$D"
SEEDS="1 2" FRACTIONS="1/2" REVISITS=2 bash "$TOP/pipelines/splitpoint.sh" "$D" >"$TMP/s.out" 2>"$TMP/s.err"
t "splitpoint.sh: a row per cut with |s|, the gain and its paired difference; the comparison's report kept" sh -c '
  grep -Eq "^adaptive +2 " "$0/splitpoint.txt" && grep -Eq "^1/2 +2 +[0-9.]+ +[0-9.]+ .* [-+][0-9.]+ ± [0-9.]+ " "$0/splitpoint.txt" &&
  grep -q "^skpo@CUT=1/2 - skpo: " "$0/splitpoint.txt" && [ -f "$0/splitpoint-paired.tsv" ] && grep -q "^grpo - skpo" "$0/compare.txt" &&
  [ "$(cat "$0/skpo@CUT=1:2-1/last")" = 2 ] || { cat "$0/splitpoint.txt" "$1"; exit 1; }' "$D" "$TMP/s.err"
