#!/bin/sh
# tests/gpu/skpo_step.sh BUNDLE WORK [0.5b] - one real SKPO step, end to end,
# through pipelines/train.sh as a user runs it, with the bundle's tools.
#
# 0.5b (the GPU run): a randomly initialised model of the Qwen2.5-0.5B shape
# (bf16, the Qwen2.5 tokenizer carried in the bundle), SKPO_DEVICE=cuda,
# 16 prompts x G=8, up to 256 new tokens. Random weights write nonsense, so
# every reward is -1: the step still samples, splices, scores, computes
# advantages and updates at full size, which is what this measures.
# Without 0.5b (the rehearsal here): the demo's tiny model on the CPU.
#
# Prints INFO lines: train.sh's step line (processed tokens/s end to end and
# the seconds per stage) and the wall time; PASS when the step committed, else FAIL.
set -u
[ $# -ge 2 ] || { echo "usage: tests/gpu/skpo_step.sh BUNDLE WORK [0.5b]" >&2; exit 2; }
top=$(cd "$(dirname "$0")/../.." && pwd)
B=$1; W=$2; shape=${3:-}
export PATH="$B/bin:$PATH"
rm -rf "$W" && mkdir -p "$W"
if [ "$shape" = 0.5b ]; then
  cfg=$top/tests/gpu/qwen2.5-0.5b.json; tok=$B/share/qwen2.5; dtype=bf16
  export SKPO_DEVICE=cuda
  set -- GPUS=1 PROMPTS=16 MINIBATCH=16 G=8 MAX_TOKENS=256 LQ_INIT=128
  [ -f "$tok/tokenizer.json" ] || { echo "SKIP skpo step: skipped: no Qwen2.5 tokenizer in the bundle"; exit 0; }
else
  cfg=$top/tests/fixtures/demo/config.json; tok=$top/tests/fixtures/demo/tokenizer; dtype=f32; shape=tiny
  set -- PROMPTS=8 MINIBATCH=8 G=4 MAX_TOKENS=32 LQ_INIT=24
fi
t0=$(date +%s)
skpo-synth --ops 2 --min-ops 1 --max-operand 9 --kinds +- --count 64 --seed 1 --tokenizer "$tok" >"$W/train.msgpack.zst" &&
skpo-init --config "$cfg" --tokenizer "$tok" --dtype "$dtype" --seed 1 --out "$W/model" 2>"$W/init.log" ||
  { echo "FAIL skpo step: data or model init failed:"; tail -n 3 "$W/init.log"; exit 1; }
t1=$(date +%s)
echo "INFO skpo step $shape: model and data in $((t1 - t0))s"
bash "$top/pipelines/train.sh" "$W/run" MODEL="$W/model" TRAIN_DATA="$W/train.msgpack.zst" STEPS=1 EVAL_EVERY=0 \
  WARMUP=0 SEED=1 "$@" >"$W/train.log" 2>&1
trc=$?
t2=$(date +%s)
sed 's/^/INFO skpo step: /' "$W/train.log" | tail -n 4
if [ "$trc" != 0 ] || [ "$(cat "$W/run/last" 2>/dev/null)" != 1 ]; then
  echo "FAIL skpo step $shape: train.sh exit $trc (logs: $W/run)"
  for f in "$W"/run/tmp*/logs/*.err "$W"/run/logs/*; do [ -s "$f" ] && { echo "  $f:"; tail -n 4 "$f" | sed 's/^/    /'; }; done 2>/dev/null
  exit 1
fi
# the step line (train.sh) carries the processed tokens/s and the split by stage
echo "INFO skpo step $shape: 1 step in $((t2 - t1))s wall (train.sh start and the update's model load included)"
echo "PASS skpo step $shape: one SKPO step committed"
