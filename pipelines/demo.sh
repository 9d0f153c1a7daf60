#!/usr/bin/env bash
# pipelines/demo.sh [DIR] - `make demo`: prove on a CPU that SKPO learns.
#
#   1. skpo-synth: arithmetic word problems (train prompts, held-out test prompts,
#      SFT records with worked solutions, a share without the worked steps)
#   2. skpo-init: the tiny qwen2 model of tests/fixtures/demo (byte-level BPE)
#   3. skpo-update --loss sft: warm start on the worked solutions
#   4. pipelines/train.sh: SKPO steps (sample --segment | splice | reward |
#      advantage | update), held-out avg@k before, during and after
#   5. pipelines/plot.sh: PNGs of the run; a before/after line; exit 1 if the
#      held-out accuracy did not rise by MIN_GAIN
# Recipe and its reasons: pipelines/config/demo.conf, docs/demo.md. DIR defaults to
# ./demo-run; an existing DIR is resumed (delete it to start over). SEED=n picks
# another seed; DEMO_STEPS=n overrides the number of SKPO steps; DEMO_PREPARE_ONLY=1
# stops after the warm start (pipelines/compare.sh uses that); DEMO_CONF=FILE takes
# the recipe from FILE instead of config/demo.conf (config/chain.conf: the chained task).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"  # `sh demo.sh` (make) re-runs under bash
. "$(dirname "$0")/common.sh"
. "$PIPE/report.sh"
DIR=${1:-$TOP/demo-run}
mkdir -p "$DIR" || exit 1
DIR=$(cd "$DIR" && pwd)
ENV_SEED=${SEED:-}
# shellcheck disable=SC1091
. "$PIPE/config/defaults.conf"
DEMO_CONF=${DEMO_CONF:-$PIPE/config/demo.conf}
# shellcheck disable=SC1090
. "$DEMO_CONF"
SEED=${ENV_SEED:-1}
FIXT=$TOP/tests/fixtures/demo
MODEL_CONFIG=${MODEL_CONFIG:-$FIXT/config.json}   # the model to initialise (a demo-only key)
TOK=$FIXT/tokenizer
T0=$(date +%s)
for t in skpo-synth skpo-init skpo-update skpo-sample skpo-splice skpo-reward skpo-advantage skpo-eval skpo-cat; do
  command -v "$t" >/dev/null || die "demo: '$t' is not built (run make)"
done
stamp() { echo "demo: [$(( $(date +%s) - T0 ))s] $*"; }

# 1. data (skip what exists: a rerun resumes)
if [ ! -s "$DIR/data/sft.msgpack.zst" ]; then
  mkdir -p "$DIR/data"
  # shellcheck disable=SC2086
  skpo-synth $SYNTH_FLAGS --count "$N_TRAIN" --seed "$SEED" --tokenizer "$TOK" >"$DIR/data/train.msgpack.zst" &&
  skpo-synth $SYNTH_FLAGS --count "$N_TEST" --seed "$SEED" --split test --tokenizer "$TOK" >"$DIR/data/test.msgpack.zst" &&
  for e in $(seq 1 "$SFT_EPOCHS"); do
    skpo-synth $SYNTH_FLAGS --count "$N_TRAIN" --seed "$((SEED * 1000 + e))" --direct "$DIRECT" --skip "${SFT_SKIP:-0}" --tokenizer "$TOK" --sft
  done >"$DIR/data/sft.tmp" && mv "$DIR/data/sft.tmp" "$DIR/data/sft.msgpack.zst" || die "demo: data generation failed"
  stamp "data: $N_TRAIN train / $N_TEST test problems, $SFT_EPOCHS SFT epochs ($DIRECT without worked steps)"
fi

# 2. the tiny model, 3. SFT warm start
if [ ! -f "$DIR/sft/config.json" ]; then
  skpo-init --config "$MODEL_CONFIG" --tokenizer "$TOK" --seed "$SEED" --out "$DIR/init" 2>"$DIR/init.log" ||
    { cat "$DIR/init.log" >&2; die "demo: skpo-init failed"; }
  stamp "init: $(tail -n 1 "$DIR/init.log" | sed 's/^skpo-init: //')"
  skpo-update --loss sft --model "$DIR/init" --out "$DIR/sft" --lr "$SFT_LR" --warmup-steps 0 --weight-decay 0 \
      --minibatch "$SFT_MINIBATCH" ${THREADS:+--threads "$THREADS"} "$DIR/data/sft.msgpack.zst" 2>"$DIR/sft.log" ||
    { cat "$DIR/sft.log" >&2; die "demo: SFT failed"; }
  stamp "sft: $(tail -n 1 "$DIR/sft.log" | sed 's/^skpo-update: //')"
fi

[ -n "${DEMO_PREPARE_ONLY:-}" ] && exit 0  # compare.sh: data and warm start only

# 4. SKPO
mapfile -t KV < <(sed '/demo-only keys/,$d' "$DEMO_CONF" | grep -E '^[A-Z_]+=' | sed 's/[[:space:]]*#.*//')
[ -n "${DEMO_STEPS:-}" ] && KV+=("STEPS=$DEMO_STEPS")
stamp "skpo: training (one line per step; eval = held-out avg@k with the same seed each time)"
bash "$PIPE/train.sh" "$DIR/run" "${KV[@]}" MODEL="$DIR/sft" TRAIN_DATA="$DIR/data/train.msgpack.zst" \
  EVAL_DATA="$DIR/data/test.msgpack.zst" SEED="$SEED" ${THREADS:+THREADS="$THREADS"} || die "demo: training failed"

# 5. plot and verdict
bash "$PIPE/plot.sh" "$DIR/run" >/dev/null 2>"$DIR/plot.log" || echo "demo: plot failed (see $DIR/plot.log)" >&2
load_config "$DIR/run"
before=$(eval_line "$DIR/run" 0 | cut -d' ' -f1)
after=$(eval_line "$DIR/run" "$(last_step "$DIR/run")" | cut -d' ' -f1)
secs=$(( $(date +%s) - T0 ))
{
  echo "before=$before"; echo "after=$after"; echo "seconds=$secs"; echo "steps=$(last_step "$DIR/run")"
} >"$DIR/result"
stamp "held-out mean@$EVAL_K: before SKPO $before, after $after (plots: $DIR/run/plots/)"
awk -v b="$before" -v a="$after" -v m="$MIN_GAIN" 'BEGIN { exit !(a - b >= m) }' ||
  die "demo: accuracy did not rise by $MIN_GAIN ($before -> $after)"
echo "demo: ok, SKPO raised held-out accuracy by $(awk -v b="$before" -v a="$after" 'BEGIN { printf "%.1f points", 100 * (a - b) }') in ${secs}s"
