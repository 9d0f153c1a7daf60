#!/bin/sh
# shortcut.sh - shortcut validation (docs/analyses.md, analysis 3; the paper's
# Fig. 3). For a checkpoint and a prompt/benchmark file: R responses per
# prompt, each cut at P relative positions evenly spaced in [1/6, 1/2]
# (skpo-cut), each segment s continued G times three ways:
#   Unconditional  q only             (skpo-cut --empty, then splice)
#   Continual      [q, s]             (skpo-splice --layout continual)
#   Skip           [s, q]             (skpo-splice --layout skip)
# then rewarded; skpo-analyze shortcut reports per layout and position the
# answer diversity (distinct extracted answers per group of G), the
# all-same-outcome rate, accuracy and mean continuation length.
#
# Outputs in --out: responses.msgpack.zst, cont-<layout>.msgpack.zst,
# shortcut.txt (the table) and shortcut.png (four panels).
set -eu
USAGE="$0 --model DIR --prompts FILE [--out DIR] [--group G] [--responses R] [--positions P]
       [--max-tokens T] [--seed S] [--sample-flags '...'] [--reward-flags '...']"
. "$(dirname "$0")/common.sh"
model= prompts= out=runs/analysis/shortcut group=8 responses=1 positions=6 max_tokens=3072 seed=0 sflags= rflags=
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || usage_die "$1 needs a value"
  case $1 in
    --model) model=$2;; --prompts) prompts=$2;; --out) out=$2;; --group) group=$2;;
    --responses) responses=$2;; --positions) positions=$2;; --max-tokens) max_tokens=$2;; --seed) seed=$2;;
    --sample-flags) sflags=$2;; --reward-flags) rflags=$2;;
    *) usage_die "unknown option '$1'";;
  esac
  shift 2
done
[ -n "$model" ] && [ -n "$prompts" ] || usage_die "--model and --prompts are required"
need_tools skpo-sample skpo-reward skpo-cut skpo-splice skpo-analyze
mkdir -p "$out"
trap 'rm -f "$out"/*.tmp "$out"/.*.gp' EXIT # a failed stage leaves no partial stream
at=$(linspace 0.1666667 0.5 "$positions")

log "sampling $responses response(s) per prompt"
# shellcheck disable=SC2086 # flag lists are word lists
skpo-sample --model "$model" --prompts "$prompts" --n "$responses" --max-tokens "$max_tokens" --seed "$seed" $sflags \
  | skpo-reward $rflags >"$out/responses.msgpack.zst.tmp"
mv "$out/responses.msgpack.zst.tmp" "$out/responses.msgpack.zst"

for layout in unconditional continual skip; do
  log "$layout: $group continuations per segment at positions $at"
  cutflags= splice=$layout
  if [ "$layout" = unconditional ]; then cutflags=--empty splice=skip; fi # an empty s leaves q alone
  # shellcheck disable=SC2086
  skpo-cut --at "$at" --label "$layout" $cutflags "$out/responses.msgpack.zst" \
    | skpo-splice --model "$model" --layout "$splice" --group "$group" --max-tokens "$max_tokens" --seed "$seed" $sflags \
    | skpo-reward $rflags >"$out/cont-$layout.msgpack.zst.tmp"
  mv "$out/cont-$layout.msgpack.zst.tmp" "$out/cont-$layout.msgpack.zst"
done

skpo-analyze shortcut "$out"/cont-unconditional.msgpack.zst "$out"/cont-continual.msgpack.zst \
  "$out"/cont-skip.msgpack.zst >"$out/shortcut.txt"
cat "$out/shortcut.txt"
cmds=$out/.shortcut.gp
: >"$cmds"
panel "$out/shortcut.txt" 5 '^all$' "distinct answers per group of $group" >>"$cmds"
panel "$out/shortcut.txt" 6 '^all$' 'all-same-outcome rate' >>"$cmds"
panel "$out/shortcut.txt" 7 '^all$' 'accuracy' >>"$cmds"
panel "$out/shortcut.txt" 8 '^all$' 'mean continuation length (tokens)' >>"$cmds"
plot "$out/shortcut.png" "Shortcut validation: $(basename "$model")" '2,2' <"$cmds"
rm -f "$cmds"
