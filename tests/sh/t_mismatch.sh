#!/bin/sh
# t_mismatch.sh - on the CPU the rollout/train mismatch is exactly zero: three
# SKPO steps through pipelines/train.sh from a bf16 checkpoint (the sampler
# reads each step's bf16 weights, the trainer continues from fp32 masters and
# computes with their bf16 rounding), and every skpo-update metrics record says
# mismatch_k3 = 0 and max |logp pi_old - logp rollout| = 0. The bit-level
# proof per token is tests/unit/test_rollout_logp.c.
. "$(dirname "$0")/lib.sh"
tiny_rl_fixture mismatch skpo-synth skpo-init skpo-sample skpo-splice skpo-reward skpo-advantage skpo-update skpo-cat
skpo-init --config "$FIX/demo/config.json" --tokenizer "$FIX/demo/tokenizer" --seed 4 --dtype bf16 --std 0.08 \
  --out "$TMP/model" 2>/dev/null || { echo "FAIL mismatch fixture (skpo-init --dtype bf16)"; exit 1; }
CONF="STEPS=3 PROMPTS=4 MINIBATCH=2 G=4 MAX_TOKENS=8 LQ_INIT=8 LR=1e-3 WARMUP=0 KEEP=3 THREADS=1 EVAL_DATA="
train_run "$TMP/run" >"$TMP/run.log" 2>&1 || { echo "FAIL mismatch: train.sh"; tail -20 "$TMP/run.log"; exit 1; }
for s in 1 2 3; do skpo-cat --where kind=metrics "$TMP/run/metrics/$s.msgpack.zst"; done |
  grep '"tool":"skpo-update"' >"$TMP/m.jsonl"
t "three steps from a bf16 checkpoint: every update measured the mismatch" sh -c '
  [ "$(wc -l <"$0/m.jsonl")" -ge 6 ] && [ "$(grep -c "\"mismatch_dlogp_max\":" "$0/m.jsonl")" = "$(wc -l <"$0/m.jsonl")" ]' "$TMP"
t "the trainer's weights moved between steps (the masters are not bf16 values)" sh -c '
  ! cmp -s "$0/run/ckpt/1/model.safetensors" "$0/run/ckpt/3/model.safetensors"' "$TMP"
t "mismatch k3 and max |dlogp| are exactly 0 on every mini-batch of every step" sh -c '
  ! grep -vE "\"mismatch_k3\":0(\\.0+)?[,}]" "$0/m.jsonl" | grep . && ! grep -vE "\"mismatch_dlogp_max\":0(\\.0+)?[,}]" "$0/m.jsonl" | grep . &&
  ! grep -vE "\"mismatch_truncated\":0(\\.0+)?[,}]" "$0/m.jsonl" | grep .' "$TMP"
