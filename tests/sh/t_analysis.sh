#!/bin/sh
# t_analysis.sh - the analysis tools (skpo-signsim, skpo-cut, skpo-analyze) and
# the pipelines/analysis scripts. The model-driven pipelines run only with
# SKPO_TEST_LONG=1 (make test-long); otherwise they print a visible SKIP.
. "$(dirname "$0")/lib.sh"
AFIX="$FIX/analysis"
export TMP TOP FIX AFIX # the sh -c bodies below need them

# --- skpo-signsim ---------------------------------------------------------------
t "signsim --help goes to stdout with an empty stderr" sh -c '
  skpo-signsim --help >"$TMP/h.out" 2>"$TMP/h.err" && grep -q "usage: skpo-signsim" "$TMP/h.out" && [ ! -s "$TMP/h.err" ]'
t "signsim prints one row per N plus the GRPO reference" sh -c '
  skpo-signsim --trials 2000 --n 8,64,512 >"$TMP/s.txt" && [ "$(grep -c " mc$" "$TMP/s.txt")" = 3 ] &&
  [ "$(grep -c " grpo$" "$TMP/s.txt")" = 1 ]'
t "signsim is reproducible for a seed and changes with it" sh -c '
  skpo-signsim --trials 3000 --seed 5 >"$TMP/a" && skpo-signsim --trials 3000 --seed 5 >"$TMP/b" &&
  skpo-signsim --trials 3000 --seed 6 >"$TMP/c" && cmp -s "$TMP/a" "$TMP/b" && ! cmp -s "$TMP/a" "$TMP/c"'
t "signsim small spread stays below half at N=512" sh -c '
  f=$(skpo-signsim --trials 4000 --n 512 --dist band --centre 0.5 --spread 0.1 | awk "\$1 == 512 { print \$2 }") &&
  awk -v f="$f" "BEGIN { exit !(f < 0.5) }"'
t "signsim --records writes metrics records and the table to stderr" sh -c '
  skpo-signsim --trials 500 --n 8,16 --records >"$TMP/r.zst" 2>"$TMP/r.err" && grep -q "grpo" "$TMP/r.err" &&
  [ "$(zstd -dc "$TMP/r.zst" | grep -ac correct_frac)" -ge 1 ] && zstd -t -q "$TMP/r.zst"'
t "signsim rejects a band outside [0,1] with exit 2" expect_exit 2 skpo-signsim --dist band --centre 0.95 --spread 0.2
t "signsim rejects a junk N list with exit 2" expect_exit 2 skpo-signsim --n 8,zero
t "signsim rejects an unknown distribution with exit 2" expect_exit 2 skpo-signsim --dist cauchy
t "signsim.sh writes the table, tsv and plot" sh -c '
  sh "$TOP/pipelines/analysis/signsim.sh" --out "$TMP/ss" --trials 300 --spreads 0.1,uniform --n 8,64 >/dev/null 2>&1 &&
  [ "$(cut -f7 "$TMP/ss/signsim.tsv" | grep -c "^mc$")" = 4 ] && [ "$(cut -f7 "$TMP/ss/signsim.tsv" | grep -c "^grpo$")" = 2 ] &&
  { ! command -v gnuplot >/dev/null || [ -s "$TMP/ss/signsim.png" ]; }'
