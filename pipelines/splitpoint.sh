#!/usr/bin/env bash
# pipelines/splitpoint.sh [DIR] - split-point sensitivity: SKPO's held-out gain
# with the segment cut at fixed fractions of L_q against the adaptive default
# t_q ~ U[L_q/6, L_q/2].
#
# Runs pipelines/compare.sh (same task, warm start, seeds, revisit rate and
# schedule; its environment: TASK, SEEDS, COMPARE_STEPS, COMPARE_UPDATES,
# REVISITS, THREADS) with METHODS = skpo and skpo@CUT=F for each F of FRACTIONS
# (default "1/6 1/3 1/2 2/3"; t_q = round(F L_q), skpo-sample --cut F) into DIR
# (default runs/compare; runs already there, e.g. a comparison's skpo, are reused),
# then writes:
#   DIR/splitpoint.txt  per cut: the realised segment (mean |s|, and |s| / |o| against the
#                       mean downstream response),
#                       held-out mean@k after and gain (mean ± sd over seeds), the
#                       gain paired with the adaptive cut (mean, 95% interval, p),
#                       and the train-time downstream accuracy of the last 10 steps
#                       (train: prompts the runs tuned on; held-out: never seen)
#   DIR/splitpoint.png  held-out gain against the cut fraction (mean ± 95% interval
#                       over seeds), the adaptive default as a band at its mean cut
# plus compare.sh's own report as DIR/splitpoint-*.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname "$0")/common.sh"
. "$PIPE/report.sh"
DIR=${1:-$TOP/runs/compare}
FRACTIONS=${FRACTIONS:-1/6 1/3 1/2 2/3}
methods=skpo
for f in $FRACTIONS; do methods="$methods skpo@CUT=$f"; done
METHODS=$methods COMPARE_NAME=splitpoint bash "$PIPE/compare.sh" "$DIR" >&2 || die "splitpoint: compare.sh failed"
DIR=$(cd "$DIR" && pwd)
SEEDS=${SEEDS:-1 2 3}
slug() { printf '%s' "${1//\//:}"; }
# per run: "method fraction seed before after mean_|s| |s|/|o| train_acc"
rows=$(for m in $methods; do for s in $SEEDS; do
  r="$DIR/$(slug "$m")-$s"; [ -f "$r/evals.tsv" ] || continue
  frac=adaptive; [ "$m" = skpo ] || frac=${m#skpo@CUT=}
  last=$(last_step "$r")
  # the realised segment: mean |s| and its ratio to the mean downstream response |o|
  seg=$(for ((n = 1; n <= last; n++)); do
      skpo-cat --where kind=up --fields tokens "$r/rollouts/$n.msgpack.zst" 2>/dev/null | sed 's/^/U /'
      skpo-cat --where kind=down --fields tokens "$r/rollouts/$n.msgpack.zst" 2>/dev/null | sed 's/^/D /'
    done | awk '{ t = $0; sub(/.*"tokens":\[/, "", t); sub(/\].*/, "", t); l = t == "" ? 0 : split(t, x, ",")
                  if ($1 == "U") { nu++; su += l } else { nd++; sd += l } }
                END { printf "%.2f %.3f", nu ? su / nu : 0, nu && nd && sd ? (su / nu) / (sd / nd) : 0 }')
  acc=$(for ((n = last - 9; n <= last; n++)); do [ "$n" -ge 1 ] && skpo-cat --where tool=skpo-advantage --fields accuracy "$r/metrics/$n.msgpack.zst" 2>/dev/null; done |
    awk '{ sub(/.*"accuracy":/, ""); sub(/[,}].*/, ""); s += $0; n++ } END { printf "%.4f", n ? s / n : 0 }')
  awk -v m="$m" -v f="$frac" -v s="$s" -v seg="$seg" -v acc="$acc" -v last="$last" -F'\t' '
    NR > 1 { if ($1 == 0) b = $2; if ($1 == last) e = $2 } END { print m, f, s, b, e, seg, acc }' "$r/evals.tsv"
done; done)
[ -n "$rows" ] || die "splitpoint: no finished runs in '$DIR'"
pairs=$(for f in $FRACTIONS; do printf 'skpo@CUT=%s:skpo ' "$f"; done)
rm -f "$DIR/.sp-paired"; : >"$DIR/.sp-paired"
echo "$rows" | awk '{ print $1, $3, $5 }' | awk -v pairs="$pairs" -v tsv="$DIR/.sp-paired" "$PAIRED_AWK" >"$DIR/.sp-pairs.txt"
{
  echo "split-point sensitivity: $(head -n 1 "$DIR/splitpoint.txt" | sed 's/^task //')"
  printf '%-10s %4s %8s %8s %16s %16s %22s %9s\n' cut runs "|s|" "|s|/|o|" "after (mean±sd)" "gain (mean±sd)" "gain - adaptive (95%)" "train acc"
  echo "$rows" | awk '
    function frac(f,   q) { if (f == "adaptive") return -1; if (split(f, q, "/") == 2) return q[1] / q[2]; return f + 0 }
    function sd(s, s2, m,   v) { v = m > 1 ? (s2 - s * s / m) / (m - 1) : 0; return v > 0 ? sqrt(v) : 0 }
    FILENAME != "-" { split($0, x, "\t"); pd[x[1]] = sprintf("%+.3f ± %.3f", x[2], x[3]); next }
    { k = $2; if (!(k in n)) order[++nk] = k; n[k]++; a[k] += $5; a2[k] += $5 * $5; g = $5 - $4; gs[k] += g; g2[k] += g * g
      c[k] += $6; sl[k] += $7; acc[k] += $8 }
    END { for (i = 1; i <= nk; i++) { k = order[i]; m = n[k]
      p = ("skpo@CUT=" k "-skpo") in pd ? pd["skpo@CUT=" k "-skpo"] : "-"
      printf "%-10s %4d %8.2f %8.3f %9.3f ± %.3f %9.3f ± %.3f %22s %9.3f\n", k, m, c[k] / m, sl[k] / m, a[k] / m, sd(a[k], a2[k], m),
        gs[k] / m, sd(gs[k], g2[k], m), p, acc[k] / m } }' "$DIR/.sp-paired" -
  echo
  echo "paired over seeds, after(A) - after(B):"
  cat "$DIR/.sp-pairs.txt"
  echo
  echo "per run: method cut seed before after mean_|s| |s|/|o| train_acc(last 10 steps)"
  echo "$rows"
} >"$DIR/splitpoint.tmp" && mv "$DIR/splitpoint.tmp" "$DIR/splitpoint.txt" && cat "$DIR/splitpoint.txt"
rm -f "$DIR/.sp-paired" "$DIR/.sp-pairs.txt"
if command -v gnuplot >/dev/null; then
  # gain per fraction: mean and 95% interval (t quantile over seeds); the adaptive band
  echo "$rows" | awk '
    function frac(f,   q) { if (f == "adaptive") return -1; if (split(f, q, "/") == 2) return q[1] / q[2]; return f + 0 }
    { k = $2; g = $5 - $4; n[k]++; s[k] += g; s2[k] += g * g }
    END { for (k in n) { m = s[k] / n[k]; v = n[k] > 1 ? (s2[k] - s[k] * s[k] / n[k]) / (n[k] - 1) : 0
      printf "%s\t%.6f\t%.6f\t%.6f\t%d\n", k, frac(k), m, (v > 0 ? sqrt(v / n[k]) : 0), n[k] } }' | sort -t$'\t' -k2,2g >"$DIR/.sp.tsv"
  # 95% half-width = t(0.975, n - 1) x standard error; t from PAIRED_AWK's quantile
  awk -F'\t' "$PAIRED_AWK"'
    { hw = $5 > 1 ? t975($5 - 1) * $4 : 0; printf "%s\t%s\t%s\t%.6f\n", $1, $2, $3, hw }' "$DIR/.sp.tsv" >"$DIR/.sp2.tsv"
  ad=$(awk -F'\t' '$1 == "adaptive" { print $3, $4 }' "$DIR/.sp2.tsv")
  read -r am ahw <<<"${ad:-0 0}"
  grep -v '^adaptive' "$DIR/.sp2.tsv" >"$DIR/.sp3.tsv"
  gnuplot <<GP && echo "plot: $DIR/splitpoint.png"
set terminal pngcairo size 800,480 noenhanced
set output '$DIR/splitpoint.png'
set datafile separator tab
set grid
set xlabel 'cut t_q as a fraction of L_q'
set ylabel 'held-out gain (after - before), mean ± 95% CI'
set title 'split-point sensitivity: fixed fractions against the adaptive U[L/6, L/2]'
set xrange [0:0.75]
set object 1 rect from 1.0/6, $am - $ahw to 0.5, $am + $ahw fc rgb '#cce5ff' fs solid 0.5 noborder behind
plot $am with lines lw 2 lc rgb '#3070c0' title 'adaptive U[L/6, L/2] (band: 95% CI)', \
  '$DIR/.sp3.tsv' using 2:3:4 with yerrorbars pt 7 ps 1.3 lc rgb '#c03030' title 'fixed fraction', \
  '' using 2:3 with lines lc rgb '#c03030' notitle
GP
  rm -f "$DIR"/.sp.tsv "$DIR"/.sp2.tsv "$DIR"/.sp3.tsv
fi
exit 0
