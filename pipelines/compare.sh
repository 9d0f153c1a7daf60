#!/usr/bin/env bash
# pipelines/compare.sh [DIR] - SKPO, GRPO, SPO and DAPO on the synthetic task with
# equal sample budgets and several seeds: our small-scale replication of the
# paper's comparison. All runs start from one warm-started model (demo.sh's data
# and SFT, seed 1) and use the demo recipe (config/demo.conf); per step every
# algorithm generates PROMPTS x G responses (SKPO: G downstream per upstream
# segment, GRPO/DAPO: G per prompt, SPO: one for each of PROMPTS x G prompts).
# DAPO's dynamic sampling drops uniform groups without refilling them, so its
# budget is the same and it trains on fewer samples.
#
# Prints a table (held-out mean@k before / after: mean and sample std over seeds,
# best-over-steps, training wall time per run: the sum of step times) into DIR/compare.txt and draws
# DIR/compare.png (held-out mean@k per step, averaged over seeds).
# An algorithm named ALGO+loraR trains a rank-R LoRA adapter instead of all weights
# (LORA_RANK=R, LR=LORA_LR, default 1e-3 = 10x demo.conf's LR as "LoRA Without
# Regret" recommends), e.g. ALGOS="skpo skpo+lora1 skpo+lora8 skpo+lora32".
# Environment: SEEDS (default "1 2 3"), ALGOS (default "skpo grpo spo dapo"),
# COMPARE_STEPS (default: demo.conf's STEPS), THREADS.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"  # `sh demo.sh` (make) re-runs under bash
. "$(dirname "$0")/common.sh"
. "$PIPE/report.sh"
DIR=${1:-$TOP/runs/compare}
mkdir -p "$DIR" && DIR=$(cd "$DIR" && pwd)
SEEDS=${SEEDS:-1 2 3}
ALGOS=${ALGOS:-skpo grpo spo dapo}
DEMO_PREPARE_ONLY=1 SEED=1 bash "$PIPE/demo.sh" "$DIR/base" || die "compare: preparing data and warm start failed"
mapfile -t KV < <(sed '/demo-only keys/,$d' "$PIPE/config/demo.conf" | grep -E '^[A-Z_]+=' | sed 's/[[:space:]]*#.*//')
[ -n "${COMPARE_STEPS:-}" ] && KV+=("STEPS=$COMPARE_STEPS")
algo_kv() { case "$1" in *+lora*) echo "ALGO=${1%%+lora*} LORA_RANK=${1##*+lora} LR=${LORA_LR:-1e-3}";; *) echo "ALGO=$1";; esac; }
for s in $SEEDS; do   # seeds outer: a stopped comparison still has every algorithm
  for algo in $ALGOS; do
    r="$DIR/$algo-$s"
    [ -f "$r/wall" ] && continue
    echo "compare: $algo seed $s" >&2
    # shellcheck disable=SC2046
    bash "$PIPE/train.sh" "$r" "${KV[@]}" $(algo_kv "$algo") SEED="$s" MODEL="$DIR/base/sft" \
      TRAIN_DATA="$DIR/base/data/train.msgpack.zst" EVAL_DATA="$DIR/base/data/test.msgpack.zst" \
      ${THREADS:+THREADS="$THREADS"} >"$DIR/$algo-$s.log" 2>&1 || { tail -n 20 "$DIR/$algo-$s.log" >&2; die "compare: $algo seed $s failed"; }
    # training wall time = sum of committed step times (survives a resume; evals excluded)
    cat "$r"/logs/[0-9]*.time | awk '{ s += $1 } END { printf "%.1f\n", s }' >"$r/wall"
  done
done
# per run: "algo seed before after best wall"
rows=$(for algo in $ALGOS; do for s in $SEEDS; do
  r="$DIR/$algo-$s"; load_config "$r"
  evals_tsv "$r" >"$r/evals.tsv"
  awk -v a="$algo" -v s="$s" -v w="$(cat "$r/wall")" -v last="$(last_step "$r")" -F'\t' '
    NR > 1 { if ($1 == 0) b = $2; if ($1 == last) e = $2; if ($1 > 0 && $2 > best) best = $2 }
    END { print a, s, b, e, best, w }' "$r/evals.tsv"
done; done)
{
  echo "held-out mean@k on $(skpo-cat --count --where kind=prompt "$DIR/base/data/test.msgpack.zst") synthetic test problems; seeds: $SEEDS"
  printf '%-6s %6s %16s %16s %16s %10s\n' algo runs "before" "after (mean±sd)" "gain (mean±sd)" "wall s"
  echo "$rows" | awk '
    { n[$1]++; b[$1] += $3; a[$1] += $4; a2[$1] += $4 * $4; g = $4 - $3; gs[$1] += g; g2[$1] += g * g; w[$1] += $6
      if (!($1 in order)) { order[$1] = ++k; name[k] = $1 } }
    function sd(s, s2, m) { return m > 1 ? sqrt((s2 - s * s / m) / (m - 1)) : 0 }
    END { for (i = 1; i <= k; i++) { x = name[i]; m = n[x]
      printf "%-6s %6d %16.3f %9.3f ± %.3f %9.3f ± %.3f %10.0f\n", x, m, b[x] / m, a[x] / m, sd(a[x], a2[x], m),
        gs[x] / m, sd(gs[x], g2[x], m), w[x] / m } }'
  echo; echo "per run: algo seed before after best-during wall_s"; echo "$rows"
} | tee "$DIR/compare.txt"
# curves averaged over seeds
for algo in $ALGOS; do
  for s in $SEEDS; do tail -n +2 "$DIR/$algo-$s/evals.tsv"; done |
    awk -F'\t' '{ s[$1] += $2; n[$1]++ } END { for (k in s) printf "%d\t%f\n", k, s[k] / n[k] }' | sort -n >"$DIR/$algo.curve"
done
if command -v gnuplot >/dev/null; then
  cmd=""; for algo in $ALGOS; do cmd="$cmd${cmd:+, }'$DIR/$algo.curve' using 1:2 with linespoints title '$algo'"; done
  gnuplot <<GP && echo "plot: $DIR/compare.png"
set terminal pngcairo size 800,500 noenhanced
set output '$DIR/compare.png'
set datafile separator tab
set grid
set key bottom right
set xlabel 'step'
set ylabel 'held-out mean@k (avg over seeds)'
set title 'SKPO vs GRPO vs SPO vs DAPO on the synthetic task'
plot $cmd
GP
fi
