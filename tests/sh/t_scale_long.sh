#!/bin/sh
# t_scale_long.sh - `make test-long`: the real-shape case of issue #18 on CPU.
# A Qwen2.5-0.5B-shaped checkpoint (skpo-init from the real config values,
# bfloat16, random weights), the real Qwen2.5 tokenizer, MATH train problems
# through skpo-prep --template qwen2.5-math; 2 SKPO steps with RANKS=2 and the
# update server, PROMPTS=2 G=2 MAX_TOKENS=16; a kill of the server during step 2
# and a resume, compared with the uninterrupted run bit for bit. Memory (measured
# 2026-12-02): each update server rank holds ~8 GB (float32 weights, gradients,
# its AdamW share) for the whole run, each sampling shard ~8 GB (sample and
# splice, float32 weights and their packed copy each) while it samples: ~32 GB
# at RANKS=2, ~18 GB at SKPO_LONG_RANKS=1; skipped, saying so, when the machine
# has less available. Tens of minutes on 2 cores.
. "$(dirname "$0")/lib.sh"
if [ -z "${SKPO_TEST_LONG:-}" ]; then skip "0.5B-shaped 2-rank run, kill and resume" "long test (make test-long)"; exit 0; fi
SH=${SKPO_SHARED:-$TOP/../shared}
TOK=$SH/data/tokenizer/qwen2.5
MATH=$SH/data/train/math_train.jsonl
[ -f "$TOK/tokenizer.json" ] && [ -f "$MATH" ] || { skip "0.5B-shaped run" "no $TOK or $MATH"; exit 0; }
command -v mpirun >/dev/null || { skip "0.5B-shaped run" "mpirun is not installed"; exit 0; }
R=${SKPO_LONG_RANKS:-2}
need=$((16 * R + 2))
avail=$(awk '/^MemAvailable:/ { print int($2 / 1048576) }' /proc/meminfo 2>/dev/null || echo 0)
[ "$avail" -ge "$need" ] || { skip "0.5B-shaped run at RANKS=$R" "needs ~$need GB of RAM, $avail GB available (SKPO_LONG_RANKS=1: ~18 GB)"; exit 0; }
P="$TOP/pipelines"
export OMP_NUM_THREADS=1
cp "$FIX/scale/qwen2.5-0.5b.config.json" "$TMP/config.json"   # Qwen2.5-0.5B's config values
head -n 16 "$MATH" >"$TMP/math.jsonl"
skpo-prep --template qwen2.5-math --tokenizer "$TOK" "$TMP/math.jsonl" >"$TMP/train.msgpack.zst" 2>"$TMP/prep.err" &&
skpo-init --config "$TMP/config.json" --dtype bf16 --tokenizer "$TOK" --seed 1 --out "$TMP/model" 2>"$TMP/init.err" ||
  { echo "FAIL 0.5B-shaped fixtures: $(cat "$TMP/prep.err" "$TMP/init.err" | head -n 3)"; exit 1; }
t "the 0.5B-shaped checkpoint has the real shape (494 M parameters, bfloat16)" sh -c '
  grep -q "\"hidden_size\": *896" "$0/model/config.json" && s=$(wc -c <"$0/model/model.safetensors") &&
  [ "$s" -gt 980000000 ] && [ "$s" -lt 1000000000 ]' "$TMP"
run() {
  d=$1; shift
  REWARD_CMD='skpo-reward --reward 01' bash "$P/train.sh" "$d" MODEL="$TMP/model" TRAIN_DATA="$TMP/train.msgpack.zst" \
    EVAL_DATA= STEPS=2 PROMPTS=2 MINIBATCH=2 G=2 MAX_TOKENS=16 LQ_INIT=16 LR=1e-5 WARMUP=0 THREADS=1 RANKS="$R" SERVE=1 SAVE_EVERY=2 "$@"
}
run "$TMP/a" >"$TMP/a.out" 2>"$TMP/a.err"
t "2 SKPO steps on $R rank(s) at the 0.5B shape; step 1 writes only the weights, step 2 is durable" sh -c '
  [ "$(cat "$0/last")" = 2 ] && grep -q "^bytes.optimizer 0$" "$0/logs/1.time" && { [ -f "$0/ckpt/2/optim.index.json" ] || [ -f "$0/ckpt/2/optim.safetensors" ]; } &&
  awk "/^bytes.weights / { w = \$2 } /^bytes.total / { t = \$2 } END { exit !(t <= 1.5 * w) }" "$0/logs/1.time" ||
  { cat "$0.out" "$0.err"; exit 1; }' "$TMP/a"
cat "$TMP/a.out"
# kill the server in step 2 (its 3rd file event after step 2's request), resume
SHIM="$TMP/killshim.so"
if ${CC:-cc} -shared -fPIC -O1 -o "$SHIM" "$TOP/tests/fault/killshim.c" -ldl 2>/dev/null; then
  SKPO_FAULT_SHIM=$SHIM SKPO_FAULT_STAGE=server SKPO_FAULT_KILL_AT=3 SKPO_FAULT_ARM="$TMP/b/serve/2.req" \
    run "$TMP/b" >"$TMP/b.out1" 2>"$TMP/b.err1"
  rc=$?
  run "$TMP/b" >"$TMP/b.out2" 2>"$TMP/b.err2"
  t "killed in step 2 and resumed: the same weights and tracker as the uninterrupted run, bit for bit" sh -c '
    [ "$2" != 0 ] && [ "$(cat "$0/last")" = 2 ] && cmp "$0/ckpt/2/model.safetensors" "$1/ckpt/2/model.safetensors" &&
    [ "$(skpo-cat "$0/state/2/$(cat "$0/state/2/CURRENT")")" = "$(skpo-cat "$1/state/2/$(cat "$1/state/2/CURRENT")")" ] ||
    { echo "rc $2"; cat "$0.err1" "$0.err2"; exit 1; }' "$TMP/b" "$TMP/a" "$rc"
else
  skip "0.5B kill and resume" "cannot build tests/fault/killshim.c"
fi
