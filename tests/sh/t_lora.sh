#!/bin/sh
# t_lora.sh - LoRA through the tools (docs/update.md "LoRA"): skpo-update writes
# PEFT adapter checkpoints (no base weights), resumes them, refuses mismatched
# flags and bad adapters with one line, --merge-adapter writes a plain HF
# checkpoint that scores like the adapter; and a short pipelines/train.sh run
# with LORA_RANK whose every stage loads base + adapter, with KEEP and resume.
. "$(dirname "$0")/lib.sh"
need_tools "lora" skpo-update skpo-score skpo-cat skpo-synth skpo-init
export SKPO_DEVICE=cpu OMP_NUM_THREADS=1
M="$FIX/update/model"
R="$M/records.msgpack.zst"
A="--minibatch 2 --lr 1e-2 --warmup-steps 2 --micro-tokens 24 --threads 1"

skpo-update --model "$M" --out "$TMP/l1" --lora-rank 4 $A "$R" 2>"$TMP/l1.err"
t "a LoRA step writes the PEFT adapter, optimizer and step, and no base weights" sh -c '
  for f in adapter_config.json adapter_model.safetensors optim.safetensors trainer_state.json tokenizer.json; do
    [ -f "$0/$f" ] || { echo missing $f; cat "$1"; exit 1; }; done
  [ ! -e "$0/model.safetensors" ] && [ ! -e "$0/config.json" ] &&
  grep -q "\"r\": 4" "$0/adapter_config.json" && grep -q "\"lora_alpha\": 32" "$0/adapter_config.json" &&
  grep -q "\"base_model_name_or_path\": \"$(cd "$2" && pwd -P)\"" "$0/adapter_config.json"' "$TMP/l1" "$TMP/l1.err" "$M"
t "the adapter checkpoint is small next to the base" sh -c '
  [ $(wc -c <"$0/adapter_model.safetensors") -lt $(wc -c <"$1/model.safetensors") ]' "$TMP/l1" "$M"
t "resuming an adapter continues its step and optimizer state" sh -c '
  skpo-update --model "$0" --out "$1" --resume '"$A"' "$2" 2>/dev/null &&
  grep -q "\"step\": 2" "$1/trainer_state.json" && grep -q "\"optimizer_updates\": 4" "$1/trainer_state.json" &&
  ! cmp -s "$0/adapter_model.safetensors" "$1/adapter_model.safetensors"' "$TMP/l1" "$TMP/l2" "$R"
t "a rank that differs from the adapter being continued is refused" sh -c '
  ! skpo-update --model "$0" --out "$1/x" --lora-rank 8 '"$A"' "$2" 2>"$1/e" &&
  grep -q "^skpo-update: --lora-rank 8, but .* holds a rank-4 adapter" "$1/e"' "$TMP/l1" "$TMP" "$R"
t "unknown targets and rank 0 are refused" sh -c '
  ! skpo-update --model "$0" --out "$1/x" --lora-rank 2 --lora-targets q,lm_head "$2" 2>"$1/e1" &&
  grep -q "unknown LoRA target .lm_head." "$1/e1" &&
  ! skpo-update --model "$0" --out "$1/x" --lora-rank 0 "$2" 2>"$1/e2" && grep -q -- "--lora-rank" "$1/e2" &&
  [ ! -e "$1/x" ]' "$M" "$TMP" "$R"
t "an adapter for another base is refused naming the tensor" sh -c '
  skpo-init --config "$0/demo/config.json" --tokenizer "$0/demo/tokenizer" --seed 1 --out "$1/other" 2>/dev/null &&
  ! skpo-score --model "$1/other" --adapter "$1/l1" "$2" >/dev/null 2>"$1/e3" &&
  grep -q "^skpo-score: .*lora_A.weight.* (an adapter for another base?)" "$1/e3"' "$FIX" "$TMP" "$R"
t "--merge-adapter writes an HF checkpoint that scores like the adapter" sh -c '
  skpo-update --model "$0" --out "$1/merged" --merge-adapter 2>/dev/null &&
  [ -f "$1/merged/config.json" ] && [ -f "$1/merged/model.safetensors" ] &&
  skpo-score --model "$0" --threads 1 "$2" | skpo-cat --where kind=down --fields ref_logp >"$1/s_ad" &&
  skpo-score --model "$1/merged" --threads 1 "$2" | skpo-cat --where kind=down --fields ref_logp >"$1/s_m" &&
  skpo-score --model "$3" --threads 1 "$2" | skpo-cat --where kind=down --fields ref_logp >"$1/s_b" &&
  cmp -s "$1/s_ad" "$1/s_m" && ! cmp -s "$1/s_ad" "$1/s_b"' "$TMP/l2" "$TMP" "$R" "$M"
t "skpo-score --adapter on the base equals the adapter folder alone" sh -c '
  skpo-score --model "$3" --adapter "$0" --threads 1 "$2" | skpo-cat --where kind=down --fields ref_logp >"$1/s_a2" &&
  cmp -s "$1/s_ad" "$1/s_a2"' "$TMP/l2" "$TMP" "$R" "$M"

# --- the pipeline -----------------------------------------------------------------
need_tools "lora pipeline" skpo-sample skpo-splice skpo-reward skpo-advantage
command -v bash >/dev/null || { skip "lora pipeline" "bash is not installed"; exit 0; }
D="$FIX/demo"
PARITY=$(parity_reward 'down|full')
pipeline_fixtures 20 "lora pipeline"
PR=$TMP/run
REWARD_CMD=$PARITY bash "$TOP/pipelines/train.sh" "$PR" MODEL="$TMP/model" TRAIN_DATA="$TMP/train.msgpack.zst" \
  STEPS=2 PROMPTS=2 MINIBATCH=2 G=2 MAX_TOKENS=4 LQ_INIT=4 LR=1e-2 WARMUP=0 KEEP=1 THREADS=1 \
  LORA_RANK=2 LORA_TARGETS=q,v,down >"$TMP/run.out" 2>"$TMP/run.err"
t "a LORA_RANK run commits adapter checkpoints that name the base" sh -c '
  [ "$(cat "$0/last")" = 2 ] && [ -f "$0/ckpt/2/adapter_model.safetensors" ] && [ ! -e "$0/ckpt/2/model.safetensors" ] &&
  grep -q "\"base_model_name_or_path\": \"$(cd "$1" && pwd -P)\"" "$0/ckpt/2/adapter_config.json" &&
  grep -q "\"r\": 2" "$0/ckpt/2/adapter_config.json" && grep -q "\"down_proj\"" "$0/ckpt/2/adapter_config.json" ||
  { cat "$0.out" "$0.err"; exit 1; }' "$PR" "$TMP/model"
t "KEEP prunes adapter checkpoints and leaves the base alone" sh -c '
  [ ! -e "$0/ckpt/1" ] && [ -f "$1/model.safetensors" ] && [ -L "$0/ckpt/0" ]' "$PR" "$TMP/model"
REWARD_CMD=$PARITY bash "$TOP/pipelines/train.sh" "$PR" STEPS=3 >"$TMP/run3.out" 2>"$TMP/run3.err"
t "the LoRA run resumes from its last adapter" sh -c '
  [ "$(cat "$0/last")" = 3 ] && grep -q "\"step\": 3" "$0/ckpt/3/trainer_state.json" &&
  grep -q "\"optimizer_updates\": 3" "$0/ckpt/3/trainer_state.json" || { cat "$0/../run3.err"; exit 1; }' "$PR"
