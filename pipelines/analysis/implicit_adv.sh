#!/bin/sh
# implicit_adv.sh - implicit advantage of methods along the trajectory
# (docs/analyses.md, analysis 4; the paper's Fig. 4 protocol with our own
# judge model instead of an external API).
#
# For two or more methods (a checkpoint to sample R responses per prompt
# from, or a file of rewarded full records already sampled): the correct
# responses are cut at K relative positions (the centres of K equal parts),
# each segment is continued M times by the judge from [q, s] (prefix
# continuation: no instruction needed, unlike the paper's chat API), and
# rewarded. skpo-analyze implicit averages, per problem and position, each
# method's success rate, normalises it across the methods present (centred
# and z-scored), and reports the mean per method and position.
#
# Outputs in --out: resp-<name>.msgpack.zst (sampled methods),
# cont-<name>.msgpack.zst, implicit.txt and implicit.png.
set -eu
USAGE="$0 --judge DIR --prompts FILE --method NAME=CKPT|NAME=FILE.msgpack.zst (twice or more)
       [--out DIR] [--k K] [--m M] [--responses R] [--max-tokens T] [--seed S] [--all-responses]
       [--sample-flags '...'] [--reward-flags '...']"
. "$(dirname "$0")/common.sh"
judge= prompts= out=runs/analysis/implicit k=100 m=8 responses=4 max_tokens=3072 seed=0 sflags= rflags= methods= only=--only-correct
while [ $# -gt 0 ]; do
  # --all-responses: cut wrong responses too (a smoke test with an untrained model; not the paper's protocol)
  if [ "$1" = --all-responses ]; then only=; shift; continue; fi
  [ $# -ge 2 ] || usage_die "$1 needs a value"
  case $1 in
    --judge) judge=$2;; --prompts) prompts=$2;; --out) out=$2;; --k) k=$2;; --m) m=$2;;
    --responses) responses=$2;; --max-tokens) max_tokens=$2;; --seed) seed=$2;;
    --sample-flags) sflags=$2;; --reward-flags) rflags=$2;;
    --method) case $2 in *=?*) methods="$methods $2";; *) usage_die "--method wants NAME=CKPT or NAME=FILE";; esac;;
    *) usage_die "unknown option '$1'";;
  esac
  shift 2
done
[ -n "$judge" ] && [ -n "$prompts" ] || usage_die "--judge and --prompts are required"
[ "$(echo $methods | wc -w)" -ge 2 ] || usage_die "give at least two --method NAME=..."
need_tools skpo-sample skpo-reward skpo-cut skpo-splice skpo-analyze
mkdir -p "$out"
trap 'rm -f "$out"/*.tmp "$out"/.*.gp' EXIT # a failed stage leaves no partial stream
at=$(centres "$k")
conts=
for spec in $methods; do
  name=${spec%%=*} src=${spec#*=}
  case $name in *[!A-Za-z0-9_.-]*|'') usage_die "method name '$name': use letters, digits, _ . -";; esac
  if [ -d "$src" ]; then
    log "$name: sampling $responses responses per prompt from $src"
    # shellcheck disable=SC2086 # flag lists are word lists
    skpo-sample --model "$src" --prompts "$prompts" --n "$responses" --max-tokens "$max_tokens" --seed "$seed" \
      --policy "$name" $sflags | skpo-reward $rflags >"$out/resp-$name.msgpack.zst.tmp"
    mv "$out/resp-$name.msgpack.zst.tmp" "$out/resp-$name.msgpack.zst"
    src=$out/resp-$name.msgpack.zst
  elif [ ! -f "$src" ]; then
    die "method $name: '$src' is neither a checkpoint folder nor a record file"
  fi
  log "$name: judge continues each ${only:+correct }response $m times at $k positions"
  # shellcheck disable=SC2086
  skpo-cut --at "$at" $only --label "$name" "$src" \
    | skpo-splice --model "$judge" --layout continual --group "$m" --max-tokens "$max_tokens" --seed "$seed" $sflags \
    | skpo-reward $rflags >"$out/cont-$name.msgpack.zst.tmp"
  mv "$out/cont-$name.msgpack.zst.tmp" "$out/cont-$name.msgpack.zst"
  conts="$conts $out/cont-$name.msgpack.zst"
done

# shellcheck disable=SC2086
if ! skpo-analyze implicit $conts >"$out/implicit.txt"; then
  die "no (problem, position) had correct responses from two methods: sample more (--responses) or more prompts"
fi
cat "$out/implicit.txt"
cmds=$out/.implicit.gp
: >"$cmds"
panel "$out/implicit.txt" 6 '^all$' 'advantage (rate - mean over methods)' >>"$cmds"
panel "$out/implicit.txt" 5 '^all$' "judge success rate ($m continuations)" >>"$cmds"
plot "$out/implicit.png" "Implicit advantage (judge $(basename "$judge"), K=$k positions)" '2,1' <"$cmds"
rm -f "$cmds"
