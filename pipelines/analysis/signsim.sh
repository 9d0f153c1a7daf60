#!/bin/sh
# signsim.sh - the sign-consistency simulation (docs/algorithm.md section 8, paper
# appendix A) for several quality spreads: one skpo-signsim run per spread,
# a TSV of all rows, the tables, and a gnuplot PNG of "fraction of groups with
# all G signs right" against the number of continuations N (log scale). The
# N = 1 point of every curve is the GRPO reference (one outcome per prefix).
#
#   pipelines/analysis/signsim.sh [--out DIR] [--trials T] [--group G] [--seed S]
#                                 [--centre C] [--spreads S1,S2,...] [--n LIST]
# Writes DIR/signsim.tsv (spread, N, correct, se, sign_acc, no_signal),
# DIR/signsim.txt (the tables) and DIR/signsim.png (skipped without gnuplot).
set -eu
TOP=$(cd "$(dirname "$0")/../.." && pwd)
PATH="$TOP/bin:$PATH"
out=runs/analysis/signsim trials=20000 group=8 seed=0 centre=0.5 spreads=0.05,0.1,0.2,0.4,uniform
ns=8,16,32,64,128,256,512,1024,2048,4096,8192
usage() { echo "usage: $0 [--out DIR] [--trials T] [--group G] [--seed S] [--centre C] [--spreads S,...|uniform] [--n LIST]" >&2; exit 2; }
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || usage
  case $1 in
    --out) out=$2;; --trials) trials=$2;; --group) group=$2;; --seed) seed=$2;;
    --centre) centre=$2;; --spreads) spreads=$2;; --n) ns=$2;;
    *) usage;;
  esac
  shift 2
done
mkdir -p "$out"
tsv=$out/signsim.tsv txt=$out/signsim.txt dat=$out/.plot.dat labels=
printf 'spread\tN\tcorrect\tse\tsign_acc\tno_signal\tmethod\n' >"$tsv.tmp"
: >"$txt.tmp"
: >"$dat"
for s in $(echo "$spreads" | tr ',' ' '); do
  if [ "$s" = uniform ]; then dist="--dist uniform"; label="uniform[0,1]"
  else dist="--dist band --centre $centre --spread $s"; label="band=$s"; fi
  # shellcheck disable=SC2086 # dist is a list of words
  skpo-signsim --group "$group" --trials "$trials" --seed "$seed" --n "$ns" $dist >"$out/.one"
  cat "$out/.one" >>"$txt.tmp"
  # rows: N correct se sign_acc no_signal method; GRPO (N = 1) first so lines run left to right
  rows() { awk -v l="$label" -v m="$1" '!/^#/ && $1 != "N" && $6 == m { printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l, $1, $2, $3, $4, $5, $6 }' "$out/.one"; }
  rows grpo >>"$tsv.tmp"
  rows mc >>"$tsv.tmp"
  { rows grpo; rows mc; printf '\n\n'; } >>"$dat" # one gnuplot data block per spread
  labels="$labels $label"
done
rm -f "$out/.one"
mv "$tsv.tmp" "$tsv"
mv "$txt.tmp" "$txt"
cat "$txt"
if command -v gnuplot >/dev/null 2>&1; then
  gnuplot <<GP
set terminal pngcairo size 900,600 noenhanced
set output '$out/signsim.png.tmp'
set title 'Sign consistency of group-normalised MC advantages (G=$group, $trials trials; N=1 = GRPO)'
set xlabel 'continuations per prefix N'
set ylabel 'fraction of groups with all G signs right'
set logscale x 2
set yrange [0:1]
set grid
set key left top
set datafile separator '\t'
labels = '$labels'
plot for [i=1:words(labels)] '$dat' index (i-1) using 2:3:4 with yerrorlines title word(labels, i)
GP
  mv "$out/signsim.png.tmp" "$out/signsim.png"
  echo "wrote $out/signsim.png" >&2
  rm -f "$dat"
else
  rm -f "$dat"
  echo "gnuplot not found: no $out/signsim.png" >&2
fi
