#!/usr/bin/env bash
# pipelines/eval.sh [OPTIONS] MODEL BENCH... - evaluate a checkpoint on benchmarks
# with the paper's protocol (SKPO.md section 6): avg@32 for AIME, avg@3 otherwise,
# 3072 new tokens, T = 1.0, top-p = 0.7 (DAPO's evaluation setting).
#
# BENCH is a name in ${SKPO_SHARED:-../shared}/data/benchmarks (aime24, aime25,
# amc23, math500, math, gsm8k, minerva_math, olympiadbench) or a .jsonl path.
# Per benchmark: skpo-prep | skpo-sample --n K | $REWARD_CMD | skpo-eval.
# Writes OUT/<bench>.samples.msgpack.zst (rewarded samples, for skpo-cat --view),
# OUT/<bench>.metrics.msgpack.zst and prints every table, then a summary.
#
# options (to shrink the protocol for a quick look):
#   --k K               samples per problem for every benchmark (default 32 AIME / 3 other)
#   --max-tokens N      new tokens per sample (default 3072)
#   --limit N           first N problems of each benchmark only
#   --temperature T     (default 1.0)      --top-p P   (default 0.7)
#   --template NAME     chat template (default qwen2.5-math)
#   --wording W         dapo (default), boxed or raw
#   --out DIR           results folder (default eval-<model folder name>)
#   --seed S            sampler seed (default 0)
#   --max-prompt N      skip prompts over N tokens (default 1024)
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"  # `sh demo.sh` (make) re-runs under bash
. "$(dirname "$0")/common.sh"
K= MAXTOK=3072 LIMIT= TEMP=1.0 TOPP=0.7 TMPL=qwen2.5-math WORDING=dapo OUTD= ESEED=0 MAXPROMPT=1024
usage() { sed -n '2,/^\. /p' "$0" | sed -n 's/^# \{0,1\}//p' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --k) K=$2; shift 2;;
    --max-tokens) MAXTOK=$2; shift 2;;
    --limit) LIMIT=$2; shift 2;;
    --temperature) TEMP=$2; shift 2;;
    --top-p) TOPP=$2; shift 2;;
    --template) TMPL=$2; shift 2;;
    --wording) WORDING=$2; shift 2;;
    --out) OUTD=$2; shift 2;;
    --seed) ESEED=$2; shift 2;;
    --max-prompt) MAXPROMPT=$2; shift 2;;
    -h|--help) usage;;
    -*) echo "eval.sh: unknown option '$1'" >&2; usage;;
    *) break;;
  esac
done
[ $# -ge 2 ] || usage
MODEL=$1; shift
[ -f "$MODEL/config.json" ] || [ -f "$MODEL/adapter_config.json" ] || die "'$MODEL' is not a checkpoint or LoRA adapter folder"
OUTD=${OUTD:-eval-$(basename "$MODEL")}
mkdir -p "$OUTD"
REWARD_CMD=${REWARD_CMD:-skpo-reward}
BENCH_DIR="$SKPO_SHARED/data/benchmarks"
for b in "$@"; do
  f=$b; [ -f "$f" ] || f="$BENCH_DIR/$b.jsonl"
  [ -f "$f" ] || die "no benchmark '$b' (looked for '$b' and '$f')"
  name=$(basename "$f" .jsonl)
  k=$K; [ -n "$k" ] || case "$name" in aime*) k=32;; *) k=3;; esac
  src=$f
  if [ -n "$LIMIT" ]; then head -n "$LIMIT" "$f" >"$OUTD/$name.jsonl"; src=$OUTD/$name.jsonl; fi
  echo "== $name: avg@$k, $MAXTOK tokens, T $TEMP, top-p $TOPP" >&2
  skpo-prep --tokenizer "$MODEL" --template "$TMPL" --wording "$WORDING" --source "$name" \
      --max-prompt-tokens "$MAXPROMPT" --out "$OUTD/$name.prompts.msgpack.zst" "$src" || die "$name: skpo-prep failed"
  skpo-sample --model "$MODEL" --prompts "$OUTD/$name.prompts.msgpack.zst" --n "$k" --max-tokens "$MAXTOK" \
      --temperature "$TEMP" --top-p "$TOPP" --seed "$ESEED" \
    | eval "$REWARD_CMD" \
    | tee "$OUTD/$name.samples.msgpack.zst" \
    | skpo-eval >"$OUTD/$name.metrics.msgpack.zst" 2>"$OUTD/$name.table.txt"
  st=("${PIPESTATUS[@]}")
  [ "${st[*]}" = "0 0 0 0" ] || die "$name: evaluation failed (sample=${st[0]} reward=${st[1]} tee=${st[2]} eval=${st[3]})"
  cat "$OUTD/$name.table.txt"
done
echo "== summary (mean@k, %)"
for b in "$@"; do
  name=$(basename "$b" .jsonl)
  skpo-cat --where kind=metrics "$OUTD/$name.metrics.msgpack.zst" | awk -v n="$name" '
    { k = $0; sub(/.*"samples":/, "", k); sub(/[,}].*/, "", k)
      m = $0; if (!sub(".*\"mean@" k "\":", "", m)) next; sub(/[,}].*/, "", m)
      printf "%-16s avg@%-3s %6.2f\n", n, k, 100 * m; exit }'
done
