#!/bin/sh
# b_scale.sh - where a training step's time and bytes go (docs/scaling.md):
# the same 2-step SKPO run twice, with one-shot updates (SERVE=: today's
# design, optimizer state through files every step) and with the update server
# (SERVE=1), printing each step's logs/N.time side by side and the ratio of
# bytes written per step (served / one-shot). Today's design also loaded the
# model in skpo-advantage to rescore the segments; its cost is measured as that
# load + scoring (skpo-score on the step's up records with the sampling
# checkpoint), which the served design does inside the sampler.
# Shape: SKPO_BENCH_SHAPE=tiny (default: the demo model) or qwen0.5b (skpo-init
# from Qwen2.5-0.5B's config values, the real Qwen2.5 tokenizer, MATH train
# prompts through skpo-prep --template qwen2.5-math; PROMPTS=2 G=2
# MAX_TOKENS=16; needs ~10 GB of RAM and minutes on 2 cores). SKPO_BENCH_RANKS
# (default 1) runs the update on that many CPU ranks; SKPO_BENCH_MODEL=DIR reuses
# a 0.5B-shaped checkpoint made before (skpo-init takes minutes).
top=${SKPO_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$top" || exit 1
PATH="$top/bin:$PATH"
shared=${SKPO_SHARED:-$top/../shared}
d=${SKPO_BENCH_DIR:-$(mktemp -d)}
[ -n "${SKPO_BENCH_DIR:-}" ] || trap 'rm -rf "$d"' EXIT
mkdir -p "$d"
shape=${SKPO_BENCH_SHAPE:-tiny}
ranks=${SKPO_BENCH_RANKS:-1}
case "$shape" in
  tiny)
    fx=tests/fixtures/demo
    skpo-synth --count 40 --max-operand 9 --tokenizer "$fx/tokenizer" >"$d/train.msgpack.zst" &&
      skpo-init --config "$fx/config.json" --tokenizer "$fx/tokenizer" --seed 3 --out "$d/model" 2>/dev/null ||
      { echo "b_scale: cannot build the tiny model" >&2; exit 1; }
    conf="PROMPTS=4 MINIBATCH=2 G=4 MAX_TOKENS=6 LQ_INIT=6";;
  qwen0.5b)
    tok=$shared/data/tokenizer/qwen2.5
    cp tests/fixtures/scale/qwen2.5-0.5b.config.json "$d/config.json"   # Qwen2.5-0.5B's config values
    head -n 64 "$shared/data/train/math_train.jsonl" >"$d/math.jsonl" &&
      skpo-prep --template qwen2.5-math --tokenizer "$tok" "$d/math.jsonl" >"$d/train.msgpack.zst" &&
      { [ -n "${SKPO_BENCH_MODEL:-}" ] && ln -s "$SKPO_BENCH_MODEL" "$d/model" ||   # reuse an initialised one
        skpo-init --config "$d/config.json" --dtype bf16 --tokenizer "$tok" --seed 1 --out "$d/model" 2>"$d/init.err"; } ||
      { echo "b_scale: cannot build the 0.5B-shaped model or prompts" >&2; cat "$d/init.err" >&2; exit 1; }
    conf="PROMPTS=2 MINIBATCH=2 G=2 MAX_TOKENS=16 LQ_INIT=16";;
  *) echo "b_scale: SKPO_BENCH_SHAPE='$shape' is not tiny or qwen0.5b" >&2; exit 2;;
esac
REWARD='skpo-reward --reward 01'
for mode in oneshot served; do
  serve=; [ "$mode" = served ] && serve=1
  # shellcheck disable=SC2086
  REWARD_CMD=$REWARD bash pipelines/train.sh "$d/$mode" MODEL="$d/model" TRAIN_DATA="$d/train.msgpack.zst" \
    EVAL_DATA= STEPS=2 WARMUP=0 LR=1e-5 KEEP=3 SAVE_EVERY=20 SERVE=$serve RANKS="$ranks" $conf \
    >"$d/$mode.out" 2>"$d/$mode.err" || { echo "b_scale: the $mode run failed" >&2; tail -n 20 "$d/$mode.err" >&2; exit 1; }
done
# today's advantage: load the sampling checkpoint and score step 2's up records
t0=$(date +%s.%N)
skpo-score --model "$d/oneshot/ckpt/1" --field now "$d/oneshot/rollouts/2.msgpack.zst" >/dev/null 2>&1
t1=$(date +%s.%N)
echo "shape $shape, $ranks update rank(s); step 1 of each run (logs/1.time; step 2, the last, is durable in both)"
printf '%-24s %16s %16s\n' key one-shot served
{ sed 1d "$d/oneshot/logs/1.time" | sed 's/^/o /'; sed 1d "$d/served/logs/1.time" | sed 's/^/s /'
  echo "o seconds.step $(head -n 1 "$d/oneshot/logs/1.time")"; echo "s seconds.step $(head -n 1 "$d/served/logs/1.time")"; } |
  awk '{ v[$2, $1] = $3; if (!($2 in seen)) { seen[$2] = 1; k[++n] = $2 } }
    END { for (i = 1; i <= n; i++) printf "%-24s %16s %16s\n", k[i], v[k[i], "o"] == "" ? "-" : v[k[i], "o"], v[k[i], "s"] == "" ? "-" : v[k[i], "s"] }'
echo "today's advantage model load + rescoring (skpo-score, step 2): $(echo "$t1 $t0" | awk '{printf "%.3f", $1 - $2}') s (served: inside seconds.sample)"
ob=$(sed -n 's/^bytes.total //p' "$d/oneshot/logs/1.time"); sb=$(sed -n 's/^bytes.total //p' "$d/served/logs/1.time")
w=$(sed -n 's/^bytes.weights //p' "$d/served/logs/1.time")
echo "bytes written per step: one-shot $ob, served $sb, ratio $(echo "$sb $ob" | awk '{printf "%.3f", $1 / $2}') (served / one-shot); served / weights $(echo "$sb $w" | awk '{printf "%.3f", $1 / $2}')"
