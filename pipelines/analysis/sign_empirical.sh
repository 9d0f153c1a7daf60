#!/bin/sh
# sign_empirical.sh - sign consistency of Monte Carlo advantages on real
# rollouts of a checkpoint (docs/analyses.md, analysis 2; docs/algorithm.md section 8).
#
# For each prompt: G responses (skpo-sample --n G), rewarded; each response cut
# at the relative positions --at (skpo-cut); each segment continued N times
# from [q, s] (skpo-splice --layout continual --group N), rewarded. Then
# skpo-analyze signs compares, per position, the signs of group-normalised
# estimates from k continuations (and of the responses' own outcomes: GRPO)
# with a leave-out reference from the other continuations.
#
# Outputs in --out: responses.msgpack.zst, continuations.msgpack.zst,
# signs.txt (the table), signs.png (sign accuracy and all-signs-right rate
# against the position, one line per estimate size), mae.txt, mae.png (mean
# absolute error of the k-continuation MC advantages against the leave-out
# reference, per cut position, against k; GRPO at k = 1) and mae-pos.png (the
# paper's Fig. 8: the same MAE against the relative position, one line per
# estimator, GRPO's own outcomes included).
set -eu
USAGE="$0 --model DIR --prompts FILE [--out DIR] [--group G] [--n N] [--at R,R,...] [--k K,K,...]
       [--max-tokens T] [--seed S] [--sample-flags '...'] [--reward-flags '...']"
. "$(dirname "$0")/common.sh"
model= prompts= out=runs/analysis/signs group=8 n=32 at=0.1,0.25,0.5,0.75 k=1,2,4,8,16,32,64,128,256,512
max_tokens=3072 seed=0 sflags= rflags=
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || usage_die "$1 needs a value"
  case $1 in
    --model) model=$2;; --prompts) prompts=$2;; --out) out=$2;; --group) group=$2;; --n) n=$2;;
    --at) at=$2;; --k) k=$2;; --max-tokens) max_tokens=$2;; --seed) seed=$2;;
    --sample-flags) sflags=$2;; --reward-flags) rflags=$2;;
    *) usage_die "unknown option '$1'";;
  esac
  shift 2
done
[ -n "$model" ] && [ -n "$prompts" ] || usage_die "--model and --prompts are required"
need_tools skpo-sample skpo-reward skpo-cut skpo-splice skpo-analyze
mkdir -p "$out"
trap 'rm -f "$out"/*.tmp "$out"/.*.gp' EXIT # a failed stage leaves no partial stream

log "sampling $group responses per prompt"
# shellcheck disable=SC2086 # flag lists are word lists
skpo-sample --model "$model" --prompts "$prompts" --n "$group" --max-tokens "$max_tokens" --seed "$seed" $sflags \
  | skpo-reward $rflags >"$out/responses.msgpack.zst.tmp"
mv "$out/responses.msgpack.zst.tmp" "$out/responses.msgpack.zst"

log "continuing every segment $n times (positions $at)"
# shellcheck disable=SC2086
skpo-cut --at "$at" "$out/responses.msgpack.zst" \
  | skpo-splice --model "$model" --layout continual --group "$n" --max-tokens "$max_tokens" --seed "$seed" $sflags \
  | skpo-reward $rflags >"$out/continuations.msgpack.zst.tmp"
mv "$out/continuations.msgpack.zst.tmp" "$out/continuations.msgpack.zst"

skpo-analyze signs --k "$k" "$out/continuations.msgpack.zst" >"$out/signs.txt"
cat "$out/signs.txt"
cmds=$out/.signs.gp
: >"$cmds"
panel "$out/signs.txt" 7 '^(grpo|mc_k=[0-9]+)$' 'per-prefix sign accuracy' 'top left' >>"$cmds"
panel "$out/signs.txt" 6 '^(grpo|mc_k=[0-9]+)$' 'fraction of groups with all signs right' 'top left' >>"$cmds"
plot "$out/signs.png" "Sign consistency on rollouts of $(basename "$model") (G=$group, N=$n)" '2,1' <"$cmds"
rm -f "$cmds"
# MAE against k (Fig. 8): one block per position of the "all" MC rows, plus GRPO
awk '!/^#/ && $2 ~ /^mc_k=[0-9]+$/ { print $3, $4, $9 } !/^#/ && $2 == "grpo" { g[$3] = $9 }
     END { for (r in g) print r, "grpo", g[r] }' "$out/signs.txt" | sort -k1,1g -k2,2g |
  awk 'BEGIN { print "# rel k adv_mae   (k = grpo: the responses'"'"' own outcomes)" } { print }' >"$out/mae.txt"
cat "$out/mae.txt"
if command -v gnuplot >/dev/null 2>&1; then
  dat=$out/.mae.dat
  awk '!/^#/ && $2 != "grpo" { if ($1 != last && NR > 2) printf "\n\n"; last = $1; print }' "$out/mae.txt" >"$dat"
  titles=$(awk '!/^#/ && $2 != "grpo" && !($1 in s) { s[$1] = 1; printf "rel=%s ", $1 }' "$out/mae.txt")
  printf "set terminal pngcairo size 800,500 noenhanced\nset output '%s.tmp'\nset logscale x 2\nset grid\nset xlabel 'continuations k'\nset ylabel 'MAE of MC advantages'\nset title 'MC advantage error against k, rollouts of %s'\ntitles = '%s'\nplot for [i=1:words(titles)] '%s' index (i-1) using 2:3 with linespoints title word(titles, i)\n" \
    "$out/mae.png" "$(basename "$model")" "$titles" "$dat" | gnuplot && mv "$out/mae.png.tmp" "$out/mae.png" && log "wrote $out/mae.png"
  # Fig. 8: MAE against the relative position, one block per estimator (grpo first, then k ascending)
  awk '!/^#/ { print ($2 == "grpo" ? 0 : $2), $1, $3 }' "$out/mae.txt" | sort -k1,1g -k2,2g |
    awk '{ if (NR > 1 && $1 != last) printf "\n\n"; last = $1; print }' >"$dat"
  titles=$(awk '!/^#/ { print ($2 == "grpo" ? 0 : $2) }' "$out/mae.txt" | sort -gu | awk '{ printf "%s ", $1 == 0 ? "grpo" : "mc_k=" $1 }')
  printf "set terminal pngcairo size 800,500 noenhanced\nset output '%s.tmp'\nset grid\nset key outside right\nset xlabel 'relative position of the cut'\nset ylabel 'MAE of the advantage'\nset title 'Advantage error by position (Fig. 8), rollouts of %s'\ntitles = '%s'\nplot for [i=1:words(titles)] '%s' index (i-1) using 2:3 with linespoints title word(titles, i)\n" \
    "$out/mae-pos.png" "$(basename "$model")" "$titles" "$dat" | gnuplot && mv "$out/mae-pos.png.tmp" "$out/mae-pos.png" && log "wrote $out/mae-pos.png"
  rm -f "$dat"
fi
