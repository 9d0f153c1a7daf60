#!/usr/bin/env bash
# pipelines/compare.sh [DIR] - every method and ablation on a synthetic task with
# equal sample budgets and several seeds: our small-scale replication of the
# paper's Table 1 / Table 2 comparison and its per-step time (Fig. 11). All runs
# start from one warm-started model (demo.sh's data and SFT, seed 1) and use the
# task's recipe; per step every method generates PROMPTS x G responses (SKPO: G
# downstream per upstream segment, GRPO family: G per prompt, SPO: one for each of
# PROMPTS x G prompts). DAPO's dynamic sampling may draw more rounds (its budget is
# larger, as in the paper); REWARD_UP=self also finishes the kept candidates;
# critique generates G - 1 direct responses, then a critique and a refinement per prompt.
#
# Methods (METHODS, default all below): skpo and any other ALGO with a step script
# (pipelines/ALGO.sh), and the ablations skpo-noskip (LAYOUT=continual), skpo-nomc (REWARD_UP=self),
# skpo-fixed (CUT=fixed), skpo-extreme (SELECT=extreme).
# Any method may carry config overrides after '@': skpo@W_UP=0 (SKPO without its
# upstream objective), skpo@CUT=1/3@MINIBATCH=8; run folders spell '/' as ':'.
# TASK=demo (default; config/demo.conf: 1-2 operations) or TASK=chain
# (config/chain.conf: 3-4 chained operations, where an early wrong step dooms the
# answer). Environment: SEEDS (default "1 2 3"), METHODS (ALGOS is the old name),
# COMPARE_STEPS (default: the task's STEPS), COMPARE_UPDATES (optimizer updates per
# step, default 4: MINIBATCH = PROMPTS / 4 as in the paper; see below), THREADS,
# REVISITS (default 3.7, the paper's: 500 steps x 128 prompts over 17,398 problems):
# the RL prompts are the first STEPS x PROMPTS / REVISITS training problems, so each
# is drawn about REVISITS times and SPO's / SKPO's per-prompt baseline V(q) gets
# revisits to learn from; REVISITS=0 trains on the whole train set (6-8% revisits),
# PAIRS (extra "A:B" method pairs for the paired statistics; every method is paired
# with the first of METHODS).
#
# Writes DIR/NAME.txt (NAME: COMPARE_NAME, default compare; several comparisons
# may share DIR and its runs): held-out mean@k before / after and the gain (mean ± sample
# sd over seeds), best-over-steps, mean seconds per training step (Fig. 11), wall
# time per run, the revisit rate (the share of draws that revisit a prompt, and draws
# per prompt of the pool, as the tracker saw them) and the paired statistics (per
# seed, the same warm start and eval draw: after(A) - after(B), mean, sd, t with its
# two-sided p, seeds ahead); DIR/NAME.png (held-out mean@k per step, averaged over
# seeds), DIR/NAME-paired.png (paired differences with 95% intervals) and DIR/NAME-step-time.png
# (seconds per step per method) when gnuplot is installed. A stopped comparison
# resumes where it was.
# A method named M+loraR trains a rank-R LoRA adapter instead of all weights
# (LORA_RANK=R, LR=LORA_LR, default 1e-3 = 10x demo.conf's LR as "LoRA Without
# Regret" recommends), e.g. METHODS="skpo skpo+lora1 skpo+lora8 skpo+lora32".
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"  # `sh demo.sh` (make) re-runs under bash
. "$(dirname "$0")/common.sh"
. "$PIPE/report.sh"
DIR=${1:-$TOP/runs/compare}
mkdir -p "$DIR" && DIR=$(cd "$DIR" && pwd)
SEEDS=${SEEDS:-1 2 3}
METHODS=${METHODS:-${ALGOS:-skpo grpo drgrpo dapo spo gspo cispo sapo critique prime skpo-noskip skpo-nomc skpo-fixed skpo-extreme}}
TASK=${TASK:-demo}
CONF=${TASK_CONF:-$PIPE/config/$TASK.conf}   # TASK_CONF=FILE: a recipe of one's own (the tests' tiny one)
[ -f "$CONF" ] || die "compare: no task config '$CONF' (TASK=demo or chain)"
# method_kv NAME: the config keys of one method or ablation
method_kv() {
  case "$1" in
    *@*=*) local b=${1%%@*} o=${1#*@}; echo "$(method_kv "$b") ${o//@/ }";;
    *+lora*) echo "$(method_kv "${1%%+lora*}") LORA_RANK=${1##*+lora} LR=${LORA_LR:-1e-3}";;
    # PRIME: 4 responses for each of 2 x PROMPTS drawn prompts (PROMPTS x 8 generated, as
    # G = 8), PROMPTS kept by the accuracy filter and trained on
    prime) echo "ALGO=prime PRIME_K=4 PRIME_OVERSAMPLE=2";;
    skpo-noskip) echo "ALGO=skpo LAYOUT=continual";;
    skpo-nomc) echo "ALGO=skpo REWARD_UP=self";;
    skpo-fixed) echo "ALGO=skpo CUT=fixed";;
    skpo-extreme) echo "ALGO=skpo SELECT=extreme";;
    *) step_script "$1" >/dev/null && echo "ALGO=$1";;   # any algorithm with a step script
  esac
}
for m in $METHODS; do method_kv "$m" >/dev/null || die "compare: unknown method '$m'"; done
slug() { printf '%s' "${1//\//:}"; }   # a method's run folder name (CUT=1/3: '/' is no file name character)
DEMO_CONF=$CONF DEMO_PREPARE_ONLY=1 SEED=1 bash "$PIPE/demo.sh" "$DIR/base" || die "compare: preparing data and warm start failed"
mapfile -t KV < <(sed '/demo-only keys/,$d' "$CONF" | grep -E '^[A-Z_]+=' | sed 's/[[:space:]]*#.*//')
[ -n "${COMPARE_STEPS:-}" ] && KV+=("STEPS=$COMPARE_STEPS")
# Several optimizer updates per rollout batch, as in the paper: 128 prompts per step in
# mini-batches of 32 (its section 7; config/defaults.conf), so updates 2-4 of a step are
# off-policy and what only acts off-policy (PPO's clip, GSPO's sequence clip, SAPO's gate,
# CISPO's capped IS weight) acts. The task configs keep PROMPTS = MINIBATCH (the demo's
# pinned numbers); here MINIBATCH = PROMPTS / COMPARE_UPDATES, default 4 (1: on-policy).
prompts=$(printf '%s\n' "${KV[@]}" | sed -n 's/^PROMPTS=//p' | tail -n 1)
UPDATES=${COMPARE_UPDATES:-4}
case "$UPDATES" in ''|*[!0-9]*|0) die "compare: COMPARE_UPDATES='$UPDATES' is not a whole number >= 1";; esac
[ $((prompts % UPDATES)) = 0 ] || die "compare: PROMPTS=$prompts is not a multiple of COMPARE_UPDATES=$UPDATES"
KV+=("MINIBATCH=$((prompts / UPDATES))")
# The prompt pool: STEPS x PROMPTS / REVISITS training problems (the paper's revisit rate).
steps=$(printf '%s\n' "${KV[@]}" | sed -n 's/^STEPS=//p' | tail -n 1)
REVISITS=${REVISITS:-3.7}
POOL=$(awk -v r="$REVISITS" -v s="$steps" -v p="$prompts" 'BEGIN { if (r !~ /^[0-9.]+$/) exit 1; print (r > 0 ? int(s * p / r + 0.5) : 0) }') ||
  die "compare: REVISITS='$REVISITS' is not a number >= 0"
TRAIN=$DIR/base/data/train.msgpack.zst
if [ "$POOL" -gt 0 ]; then
  [ "$POOL" -ge "$prompts" ] || die "compare: REVISITS=$REVISITS leaves $POOL prompts, fewer than the $prompts of a step"
  case " $METHODS " in *" spo "*|*" spo@"*|*" spo+"*)
    g=$(printf '%s\n' "${KV[@]}" | sed -n 's/^G=//p' | tail -n 1)
    [ "$POOL" -ge $((prompts * g)) ] || die "compare: REVISITS=$REVISITS leaves $POOL prompts; SPO draws $((prompts * g)) a step";;
  esac
  TRAIN=$DIR/base/data/pool-$POOL.msgpack.zst
  [ -s "$TRAIN" ] || { skpo-cat --where kind=prompt --head "$POOL" "$DIR/base/data/train.msgpack.zst" | skpo-cat --pack >"$TRAIN.tmp" &&
    mv "$TRAIN.tmp" "$TRAIN"; } || die "compare: cannot write the prompt pool '$TRAIN'"
  echo "compare: $POOL training prompts for $steps steps x $prompts prompts (REVISITS=$REVISITS draws per prompt)" >&2
fi
for s in $SEEDS; do   # seeds outer: a stopped comparison still has every method
  for m in $METHODS; do
    r="$DIR/$(slug "$m")-$s"
    [ -f "$r/wall" ] && continue
    echo "compare: $m seed $s" >&2
    # shellcheck disable=SC2046
    bash "$PIPE/train.sh" "$r" "${KV[@]}" $(method_kv "$m") SEED="$s" MODEL="$DIR/base/sft" \
      TRAIN_DATA="$TRAIN" EVAL_DATA="$DIR/base/data/test.msgpack.zst" \
      ${THREADS:+THREADS="$THREADS"} >"$r.log" 2>&1 || { tail -n 20 "$r.log" >&2; die "compare: $m seed $s failed"; }
    # training wall time = sum of committed step times (survives a resume; evals excluded)
    # (the first line of each N.time is the step's wall seconds; the others are its split)
    awk 'FNR == 1 { s += $1; n++ } END { printf "%.1f %.3f\n", s, n ? s / n : 0 }' "$r"/logs/[0-9]*.time >"$r/wall"
  done
done
# per run: "method seed before after best wall step_s revisit_share draws_per_prompt"
rows=$(for m in $METHODS; do for s in $SEEDS; do
  r="$DIR/$(slug "$m")-$s"; [ -f "$r/wall" ] || continue
  load_config "$r"
  evals_tsv "$r" >"$r/evals.tsv"
  [ -s "$r/revisits" ] || revisit_rate "$r" >"$r/revisits"
  read -r w st <"$r/wall"
  read -r rv dp <"$r/revisits"
  awk -v a="$m" -v s="$s" -v w="$w" -v st="${st:-0}" -v rv="$rv" -v dp="$dp" -v last="$(last_step "$r")" -F'\t' '
    NR > 1 { if ($1 == 0) b = $2; if ($1 == last) e = $2; if ($1 > 0 && $2 > best) best = $2 }
    END { print a, s, b, e, best, w, st, rv, dp }' "$r/evals.tsv"
done; done)
R=$DIR/${COMPARE_NAME:-compare}   # the report files: R.txt, R.png, R-paired.*, R-step-time.*
rm -f "$R-paired.tsv"
first=${METHODS%% *}
pairs=$(for m in $METHODS; do [ "$m" = "$first" ] || printf '%s:%s ' "$m" "$first"; done; echo "${PAIRS:-}")
{
  echo "task $TASK: held-out mean@k on $(skpo-cat --count --where kind=prompt "$DIR/base/data/test.msgpack.zst") test problems;" \
    "$(skpo-cat --count --where kind=prompt "$TRAIN") training prompts (REVISITS=$REVISITS); seeds: $SEEDS"
  printf '%-24s %4s %7s %16s %16s %7s %8s %8s %7s %7s\n' method runs before "after (mean±sd)" "gain (mean±sd)" best "s/step" "wall s" revisit draws/p
  echo "$rows" | awk '
    NF { n[$1]++; b[$1] += $3; a[$1] += $4; a2[$1] += $4 * $4; g = $4 - $3; gs[$1] += g; g2[$1] += g * g
      bst[$1] += $5; w[$1] += $6; st[$1] += $7; rv[$1] += $8; dp[$1] += $9
      if (!($1 in order)) { order[$1] = ++k; name[k] = $1 } }
    function sd(s, s2, m) { v = m > 1 ? (s2 - s * s / m) / (m - 1) : 0; return v > 0 ? sqrt(v) : 0 }
    END { for (i = 1; i <= k; i++) { x = name[i]; m = n[x]
      printf "%-24s %4d %7.3f %9.3f ± %.3f %9.3f ± %.3f %7.3f %8.2f %8.0f %7.3f %7.2f\n", x, m, b[x] / m, a[x] / m, sd(a[x], a2[x], m),
        gs[x] / m, sd(gs[x], g2[x], m), bst[x] / m, st[x] / m, w[x] / m, rv[x] / m, dp[x] / m } }'
  echo; echo "paired over seeds, after(A) - after(B) (same warm start and eval draw per seed):"
  echo "$rows" | awk 'NF { print $1, $2, $4 }' | awk -v pairs="$pairs" -v tsv="$R-paired.tsv" "$PAIRED_AWK"
  echo; echo "per run: method seed before after best-during wall_s s_per_step revisit_share draws_per_prompt"; echo "$rows"
} | tee "$R.txt"
# curves averaged over seeds
for m in $METHODS; do
  for s in $SEEDS; do f="$DIR/$(slug "$m")-$s/evals.tsv"; [ -f "$f" ] && tail -n +2 "$f"; done |
    awk -F'\t' '{ s[$1] += $2; n[$1]++ } END { for (k in s) printf "%d\t%f\n", k, s[k] / n[k] }' | sort -n >"$DIR/$(slug "$m").curve"
done
if command -v gnuplot >/dev/null; then
  cmd=""; for m in $METHODS; do c="$DIR/$(slug "$m").curve"; [ -s "$c" ] && cmd="$cmd${cmd:+, }'$c' using 1:2 with linespoints title '$m'"; done
  [ -n "$cmd" ] && gnuplot <<GP && echo "plot: $R.png"
set terminal pngcairo size 900,560 noenhanced
set output '$R.png'
set datafile separator tab
set grid
set key outside right
set xlabel 'step'
set ylabel 'held-out mean@k (avg over seeds)'
set title 'task $TASK: methods and ablations'
plot $cmd
GP
  # per-step wall time per method (the paper's Fig. 11), mean over seeds
  awk '/^per run:/ { on = 1; next } on && NF >= 7 { t[$1] += $7; n[$1]++; if (!($1 in o)) { o[$1] = ++k; nm[k] = $1 } }
       END { for (i = 1; i <= k; i++) printf "%d\t%s\t%.3f\n", i - 1, nm[i], t[nm[i]] / n[nm[i]] }' "$R.txt" >"$R-step-time.tsv"
  # bars PNG YLABEL TITLE: gnuplot's preamble of a bar chart with one bar per method
  bars() { printf "set terminal pngcairo size 900,460 noenhanced\nset output '%s'\nset datafile separator tab\nset style fill solid 0.6\nset boxwidth 0.7\nset grid y\nset ylabel '%s'\nset title 'task %s: %s'\nset xtics rotate by -30\n" "$1" "$2" "$TASK" "$3"; }
  [ -s "$R-step-time.tsv" ] && { bars "$R-step-time.png" 'seconds per training step' 'wall time per step (same sample budget)'
    echo "set yrange [0:*]"; echo "plot '$R-step-time.tsv' using 1:3:xtic(2) with boxes notitle"; } | gnuplot && echo "plot: $R-step-time.png"
  # paired differences against the first method, with 95% intervals
  [ -s "$R-paired.tsv" ] && { bars "$R-paired.png" 'held-out mean@k, paired difference (95% CI)' 'after(A) - after(B) over seeds'
    echo "set xzeroaxis lw 2"; echo "plot '$R-paired.tsv' using 0:2:xtic(1) with boxes notitle, '' using 0:2:3 with yerrorbars pt 7 notitle"; } |
    gnuplot && echo "plot: $R-paired.png"
fi
exit 0
