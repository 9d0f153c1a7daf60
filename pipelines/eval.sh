#!/usr/bin/env bash
# pipelines/eval.sh [OPTIONS] MODEL BENCH... - evaluate a checkpoint on benchmarks
# with the paper's protocol (docs/algorithm.md section 6): avg@32 for AIME, avg@3 otherwise,
# 3072 new tokens, T = 1.0, top-p = 0.7 (DAPO's evaluation setting).
#
# BENCH is a name in ${SKPO_SHARED:-../shared}/data/benchmarks (aime24, aime25,
# amc23, math500, math, gsm8k, minerva_math, olympiadbench) or a .jsonl path.
# The out-of-domain benchmarks of the paper: mmlu_pro (MMLU-Pro test rows,
# $MMLU_PRO or BENCH_DIR/mmlu_pro.jsonl) and livecodebench (LiveCodeBench
# code_generation_lite rows, $LIVECODEBENCH or BENCH_DIR/livecodebench.jsonl);
# docs/eval.md says where the official files come from. Their rows carry their
# own prompt and task (choice / code); code is run in the bubblewrap sandbox.
# Per benchmark: skpo-prep | skpo-sample --n K | $REWARD_CMD | skpo-eval.
# Writes OUT/<bench>.samples.msgpack.zst (rewarded samples, for skpo-cat --view),
# OUT/<bench>.metrics.msgpack.zst and prints every table, then a summary table
# with one column per benchmark (mean@k, %) and their average.
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
#   --max-prompt N      skip prompts over N tokens (default 1024; 4096 for livecodebench)
#   --after DATE        livecodebench: problems with contest_date >= DATE (YYYY-MM-DD)
#   --before DATE       livecodebench: problems with contest_date < DATE
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"  # `sh demo.sh` (make) re-runs under bash
. "$(dirname "$0")/common.sh"
K= MAXTOK=3072 LIMIT= TEMP=1.0 TOPP=0.7 TMPL=qwen2.5-math WORDING=dapo OUTD= ESEED=0 MAXPROMPT= AFTER= BEFORE=
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
    --after) AFTER=$2; shift 2;;
    --before) BEFORE=$2; shift 2;;
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
REWARD_CMD=${REWARD_CMD:-$(conf_default REWARD_CMD)}
BENCH_DIR="$SKPO_SHARED/data/benchmarks"
bench_file() { # name -> file
  case "$1" in
    mmlu_pro) [ -n "${MMLU_PRO:-}" ] && { echo "$MMLU_PRO"; return; };;
    livecodebench) [ -n "${LIVECODEBENCH:-}" ] && { echo "$LIVECODEBENCH"; return; };;
  esac
  if [ -f "$1" ]; then echo "$1"; else echo "$BENCH_DIR/$1.jsonl"; fi
}
NAMES=()
for b in "$@"; do
  f=$(bench_file "$b")
  [ -f "$f" ] || die "no benchmark '$b' (looked for '$b' and '$f'; docs/eval.md says where to get it)"
  name=$b; [ -f "$b" ] && name=$(basename "$f" .jsonl)
  NAMES+=("$name")
  extra=()
  mp=$MAXPROMPT
  case "$name" in
    livecodebench*) [ -n "$mp" ] || mp=4096
      [ -n "$AFTER" ] && extra+=(--after "$AFTER"); [ -n "$BEFORE" ] && extra+=(--before "$BEFORE");;
  esac
  [ -n "$mp" ] || mp=1024
  k=$K; [ -n "$k" ] || case "$name" in aime*) k=32;; *) k=3;; esac
  src=$f
  if [ -n "$LIMIT" ]; then head -n "$LIMIT" "$f" >"$OUTD/$name.jsonl"; src=$OUTD/$name.jsonl; fi
  echo "== $name: avg@$k, $MAXTOK tokens, T $TEMP, top-p $TOPP" >&2
  skpo-prep --tokenizer "$MODEL" --template "$TMPL" --wording "$WORDING" --source "$name" \
      --max-prompt-tokens "$mp" "${extra[@]}" --out "$OUTD/$name.prompts.msgpack.zst" "$src" || die "$name: skpo-prep failed"
  skpo-sample --model "$MODEL" --prompts "$OUTD/$name.prompts.msgpack.zst" --n "$k" --max-tokens "$MAXTOK" \
      --temperature "$TEMP" --top-p "$TOPP" --seed "$ESEED" \
    | eval "$REWARD_CMD" \
    | tee "$OUTD/$name.samples.msgpack.zst" \
    | skpo-eval >"$OUTD/$name.metrics.msgpack.zst" 2>"$OUTD/$name.table.txt"
  st=("${PIPESTATUS[@]}")
  [ "${st[*]}" = "0 0 0 0" ] || die "$name: evaluation failed (sample=${st[0]} reward=${st[1]} tee=${st[2]} eval=${st[3]})"
  cat "$OUTD/$name.table.txt"
done
# one column per benchmark (its overall group: the source row) and the mean of the columns
echo "== summary (mean@k, %; avg = mean of the columns)"
for name in "${NAMES[@]}"; do
  skpo-cat --where kind=metrics --where "group=$name" "$OUTD/$name.metrics.msgpack.zst" | awk -v n="$name" '
    { k = $0; sub(/.*"samples":/, "", k); sub(/[,}].*/, "", k)
      m = $0; if (!sub(".*\"mean@" k "\":", "", m)) next; sub(/[,}].*/, "", m)
      printf "%s avg@%s %.6f\n", n, k, 100 * m; exit }'
done | awk -v model="$(basename "$MODEL")" '
  { name[NR] = $1; k[NR] = $2; v[NR] = $3; sum += $3 }
  END { if (!NR) exit 1
    printf "%-20s", "model"; for (i = 1; i <= NR; i++) printf " %14s", name[i]; printf " %8s\n", "avg"
    printf "%-20s", ""; for (i = 1; i <= NR; i++) printf " %14s", k[i]; printf " %8s\n", ""
    printf "%-20s", model; for (i = 1; i <= NR; i++) printf " %14.2f", v[i]; printf " %8.2f\n", sum / NR }' \
  || die "no metrics to summarise"
