#!/bin/sh
# t_scale.sh - the scale-out composition of train.sh on a tiny random model
# (docs/scaling.md): rho measured by the sampler (the advantage stage loads no
# model) with pinned tracker values (tests/fixtures/scale: first made with the
# model-loading design's binaries and found equal; regenerated when #19 changed
# L_q to |s| + mean|o| and the loss defaults, and again when #32 made it mean|o| under
# the skip layout; each moves the trajectory), the update server
# (SERVE=1: optimizer state in memory, weights-only steps between durable
# checkpoints, bit-identical to one-shot updates), a kill of every stage in turn
# and of the server, each resumed bit for bit with every drawn prompt trained
# once, a kill after a non-durable step (rollback to the durable one), 2 CPU
# ranks under mpirun against 1 (their checkpoints written by both ranks in
# parallel: HF-sharded weights, per-rank optimizer shards; resumed bit for bit,
# also after both ranks were killed inside that save), a rank that dies, and
# the device checks.
. "$(dirname "$0")/lib.sh"
need_tools "scale-out" skpo-synth skpo-init skpo-sample skpo-splice skpo-advantage skpo-update skpo-cat skpo-score
command -v bash >/dev/null || { skip "scale-out" "bash is not installed"; exit 0; }
P="$TOP/pipelines"
D="$FIX/demo"
export OMP_NUM_THREADS=1
unset SKPO_SERVE_DIR SKPO_FAULT_STAGE SKPO_FAULT_STEP SKPO_FAULT_KILL_AT
PARITY=$(parity_reward 'down|full')
export PARITY
pipeline_fixtures 40 "scale"
# The configuration the fixture was made with (tau 0.5 so rho is not always clamped).
CONF="PROMPTS=4 MINIBATCH=2 G=4 MAX_TOKENS=6 LQ_INIT=6 LR=1e-3 WARMUP=0 KEEP=10 THREADS=1 TAU_HALF=0.5 EVAL_DATA="
run() { d=$1; train_run "$@"; }   # run DIR [KEY=VALUE...]
tracker() { skpo-cat "$1/state/$2/$(cat "$1/state/$2/CURRENT")"; }
adv_metrics() { for n in $(seq 1 "$2"); do skpo-cat --where tool=skpo-advantage --fields step,revisits,rho_mean,kl_d_mean "$1/metrics/$n.msgpack.zst"; done; }
# same_rollouts A B N: step N's records equal (meta records and the run paths aside).
same_rollouts() {
  a=$(skpo-cat "$1/rollouts/$3.msgpack.zst" | grep -v '"kind":"meta"' | sed "s#$1#RUN#g" | md5sum)
  b=$(skpo-cat "$2/rollouts/$3.msgpack.zst" | grep -v '"kind":"meta"' | sed "s#$2#RUN#g" | md5sum)
  [ "$a" = "$b" ] || { echo "rollouts of step $3 differ: $1 $2"; return 1; }
}

S=$TMP/served
run "$S" SERVE=1 SAVE_EVERY=2 STEPS=4 >"$S.out" 2>"$S.err"
t "a served run (SERVE=1) commits 4 steps" sh -c '[ "$(cat "$0/last")" = 4 ] || { cat "$0.out" "$0.err"; exit 1; }' "$S"
# The pinned floats are compared to a relative 1e-6: the last float32 digit of a
# forward depends on the CPU (OpenBLAS picks kernels by CPU model) and on -O2 vs
# the sanitizer build's -O1; the structure, the counts and every token must not.
skpo-cat "$S/state/4/$(cat "$S/state/4/CURRENT")" >"$S.tracker" 2>&1
for n in 1 2 3 4; do skpo-cat --where tool=skpo-advantage --fields step,revisits,rho_mean,kl_d_mean "$S/metrics/$n.msgpack.zst"; done >"$S.advm" 2>&1
pinned_tracker() { same_json_lines "$S.tracker" "$FIX/scale/tracker_step4.jsonl" && same_json_lines "$S.advm" "$FIX/scale/advantage_metrics.jsonl"; }
t "the tracker after 4 steps equals the pinned values of tests/fixtures/scale (rho from skpo-sample --rescore)" pinned_tracker
t "revisited prompts carry seg_div from the sampler and the advantage stage was given no model" sh -c '
  skpo-cat --where kind=up --fields seg_div "$0/rollouts/3.msgpack.zst" | grep -q "\"seg_div\":" &&
  ! grep -q -- "--model" "$0/logs/3.advantage.err" && ! skpo-cat --where tool=skpo-advantage "$0/rollouts/3.msgpack.zst" | grep -q -- "--model"' "$S"
t "durable checkpoints every SAVE_EVERY steps and at the end; the steps between write weights only and are pruned" sh -c '
  [ -f "$0/ckpt/2/optim.safetensors" ] && [ -f "$0/ckpt/4/optim.safetensors" ] && [ ! -e "$0/ckpt/1" ] && [ ! -e "$0/ckpt/3" ] &&
  grep -q "^bytes.optimizer 0$" "$0/logs/3.time" && ! grep -q "^bytes.optimizer 0$" "$0/logs/4.time" || { ls "$0/ckpt"; cat "$0/logs/3.time"; exit 1; }' "$S"
t "a step between durable checkpoints writes at most 1.5x the weights" sh -c '
  awk "/^bytes.weights / { w = \$2 } /^bytes.total / { t = \$2 } END { if (!(w > 0 && t <= 1.5 * w)) { print t, w; exit 1 } }" "$0/logs/3.time"' "$S"
t "logs/N.time has seconds per stage (update: load/compute/save) and bytes; the step line shows the split" sh -c '
  for k in seconds.sample seconds.splice seconds.reward seconds.advantage seconds.update.load seconds.update.compute \
           seconds.update.save bytes.rollouts bytes.state bytes.weights bytes.handoff bytes.total; do
    grep -q "^$k [0-9.]*$" "$0/logs/3.time" || { echo "no $k"; cat "$0/logs/3.time"; exit 1; }
  done
  grep -q "^step 3/4 .*\[sample [0-9.]*s splice [0-9.]*s reward [0-9.]*s adv [0-9.]*s upd [0-9.]*/[0-9.]*/[0-9.]*s  [0-9.]* [kMG]B\]" "$0.out" || { cat "$0.out"; exit 1; }' "$S"

# The starting model may carry its own trainer state (the demo starts from an SFT
# output whose trainer_state.json says step 1): the server still serves step 1.
M2=$TMP/model-sft
cp -r "$TMP/model" "$M2" && printf '{"format": "skpo-trainer-1", "step": 1, "optimizer_updates": 7, "dtype": "float32", "lr": 0.003}\n' >"$M2/trainer_state.json"
Z=$TMP/from-sft
REWARD_CMD=$PARITY timeout 300 bash "$P/train.sh" "$Z" MODEL="$M2" TRAIN_DATA="$TMP/train.msgpack.zst" $CONF SERVE=1 STEPS=2 >"$Z.out" 2>"$Z.err"
t "a served run from a model with its own trainer state (an SFT output) trains steps 1 and 2" sh -c '
  [ "$(cat "$0/last")" = 2 ] && [ -f "$0/ckpt/2/model.safetensors" ] || { tail -n 5 "$0.out" "$0.err" "$0/logs/serve.err"; exit 1; }' "$Z"

O=$TMP/oneshot
run "$O" SERVE= STEPS=4 >"$O.out" 2>"$O.err"
t "one-shot updates (SERVE=) give the same tracker and the same weights as the server, bit for bit" sh -c '
  [ "$(cat "$1/last")" = 4 ] && cmp "$0/ckpt/4/model.safetensors" "$1/ckpt/4/model.safetensors" &&
  [ "$(skpo-cat "$1/state/4/$(cat "$1/state/4/CURRENT")")" = "$(skpo-cat "$0/state/4/$(cat "$0/state/4/CURRENT")")" ] || { cat "$1.err"; exit 1; }' "$S" "$O"

# Kill each stage of step 3 in turn (and the server), resume, compare with the
# uninterrupted runs: same prompts drawn, same rollouts, tracker and weights.
K=$TMP/base
run "$K" SERVE=1 SAVE_EVERY=2 STEPS=2 >"$K.out" 2>"$K.err"
SHIM="$TMP/killshim.so"
${CC:-cc} -shared -fPIC -O1 -o "$SHIM" "$TOP/tests/fault/killshim.c" -ldl 2>"$TMP/shim.err" || SHIM=
if [ -n "$SHIM" ] && [ "$(cat "$K/last" 2>/dev/null)" = 2 ]; then
  for stage in sample splice reward advantage server; do
    cp -r "$K" "$TMP/k-$stage" && rm -f "$TMP/k-$stage/lock"
    # the server: its 3rd file event after step 3's request arrived (inside that step's save)
    arm=; [ "$stage" = server ] && arm="$TMP/k-$stage/serve/3.req"
    SKPO_FAULT_SHIM=$SHIM SKPO_FAULT_STAGE=$stage SKPO_FAULT_STEP=3 SKPO_FAULT_KILL_AT=2 SKPO_FAULT_ARM=$arm \
      run "$TMP/k-$stage" STEPS=3 >"$TMP/k-$stage.out1" 2>"$TMP/k-$stage.err1"
    rc=$?
    run "$TMP/k-$stage" STEPS=3 >"$TMP/k-$stage.out2" 2>"$TMP/k-$stage.err2"
    t "killed in $stage during step 3 and resumed: same prompts, rollouts, tracker and weights as uninterrupted runs" sh -c '
      [ "$5" != 0 ] && [ "$(cat "$0/last")" = 3 ] || { echo "rc $5"; cat "$0.err1" "$0.err2"; exit 1; }
      grep -q "failed in stage\|update server" "$0.err1" || { cat "$0.err1"; exit 1; }
      a=$(skpo-cat "$0/rollouts/3.msgpack.zst" | grep -v "\"kind\":\"meta\"" | sed "s#$0#RUN#g" | md5sum)
      b=$(skpo-cat "$1/rollouts/3.msgpack.zst" | grep -v "\"kind\":\"meta\"" | sed "s#$1#RUN#g" | md5sum)
      [ "$a" = "$b" ] || { echo "rollouts differ"; exit 1; }
      [ "$(skpo-cat "$0/state/3/$(cat "$0/state/3/CURRENT")")" = "$(skpo-cat "$2/state/3/$(cat "$2/state/3/CURRENT")")" ] || { echo "tracker differs"; exit 1; }
      cmp "$0/ckpt/3/model.safetensors" "$2/ckpt/3/model.safetensors"' "$TMP/k-$stage" "$S" "$O" "$stage" "$rc"
  done
  # Killed after step 3 committed without optimizer state: the rerun goes back
  # to the durable step 2 and redoes step 3, then 4.
  cp -r "$K" "$TMP/rb" && rm -f "$TMP/rb/lock"
  SKPO_FAULT_SHIM=$SHIM SKPO_FAULT_STAGE=advantage SKPO_FAULT_STEP=4 SKPO_FAULT_KILL_AT=2 \
    run "$TMP/rb" SAVE_EVERY=2 STEPS=4 >"$TMP/rb.out1" 2>"$TMP/rb.err1"
  run "$TMP/rb" STEPS=4 >"$TMP/rb.out2" 2>"$TMP/rb.err2"
  t "a kill after a weights-only step resumes from the newest durable checkpoint and equals the uninterrupted run" sh -c '
    grep -q "step 3 is the last committed step, 2 the last durable one: redoing steps 3..3" "$0.err2" &&
    [ "$(cat "$0/last")" = 4 ] && cmp "$0/ckpt/4/model.safetensors" "$1/ckpt/4/model.safetensors" &&
    cmp "$0/ckpt/4/optim.safetensors" "$1/ckpt/4/optim.safetensors" &&
    [ "$(skpo-cat "$0/state/4/$(cat "$0/state/4/CURRENT")")" = "$(skpo-cat "$1/state/4/$(cat "$1/state/4/CURRENT")")" ] ||
    { cat "$0.err1" "$0.err2"; exit 1; }' "$TMP/rb" "$S"
  # A checkpoint that is not whole (its marker gone, as a copy cut short before
  # the marker leaves it, or a file cut short under a complete marker) is never
  # resumed from: train.sh names it, goes back to the newest complete durable
  # step (here the start) and ends equal to the uninterrupted run.
  for how in nomarker cut; do
    cp -r "$K" "$TMP/$how" && rm -f "$TMP/$how/lock"
    if [ "$how" = nomarker ]; then rm "$TMP/$how/ckpt/2/skpo-checkpoint.json"
    else truncate -s -1 "$TMP/$how/ckpt/2/optim.safetensors"; fi
    run "$TMP/$how" STEPS=3 >"$TMP/$how.out" 2>"$TMP/$how.err"
    t "a checkpoint that is not whole ($how) is named, never resumed from, and its steps are redone equal to the uninterrupted run" sh -c '
      grep -q "$0/ckpt/2 is not a complete checkpoint" "$0.err" && grep -q "redoing steps 1..2" "$0.err" &&
      [ "$(cat "$0/last")" = 3 ] && cmp "$0/ckpt/3/model.safetensors" "$1/ckpt/3/model.safetensors" &&
      [ "$(skpo-cat "$0/state/3/$(cat "$0/state/3/CURRENT")")" = "$(skpo-cat "$1/state/3/$(cat "$1/state/3/CURRENT")")" ] ||
      { cat "$0.err"; exit 1; }' "$TMP/$how" "$O"
  done
else
  skip "kill tests" "no killshim or no base run: $(head -n 3 "$TMP/shim.err" "$K.err")"
fi

# 2 CPU ranks under mpirun: the same rollouts, weights within float tolerance
# (log-probs of step 2's records under both step-2 checkpoints within 1e-4).
if command -v mpirun >/dev/null; then
  M=$TMP/ranks2
  run "$M" SERVE=1 SAVE_EVERY=1 STEPS=1 RANKS=2 >"$M.out" 2>"$M.err"
  t "RANKS=2 (mpirun) gives the same rollouts as 1 rank and the same weights within 1e-4 in log-prob" sh -c '
    [ "$(cat "$0/last")" = 1 ] || { cat "$0.err" "$0/logs/serve.err"; exit 1; }
    grep -q "2 ranks" "$0/logs/serve.err" || { cat "$0/logs/serve.err"; exit 1; }
    a=$(skpo-cat "$0/rollouts/1.msgpack.zst" | grep -v "\"kind\":\"meta\"" | sed "s#$0#RUN#g" | md5sum)
    b=$(skpo-cat "$1/rollouts/1.msgpack.zst" | grep -v "\"kind\":\"meta\"" | sed "s#$1#RUN#g" | md5sum)
    [ "$a" = "$b" ] || { echo "rollouts of step 1 differ"; exit 1; }
    skpo-score --model "$0/ckpt/1" --threads 1 "$1/rollouts/2.msgpack.zst" | skpo-cat --where kind=down --fields ref_logp >"$0.a" &&
    skpo-score --model "$1/ckpt/1" --threads 1 "$1/rollouts/2.msgpack.zst" | skpo-cat --where kind=down --fields ref_logp >"$0.b" &&
    paste -d" " "$0.a" "$0.b" | tr -d "{}[]\"a-z_:" | awk "{ n = split(\$1, x, \",\"); split(\$2, y, \",\")
      for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > m) m = d; c++ } }
      END { print \"max |dlogp| \" m \" over \" c; exit !(c > 0 && m <= 1e-4) }"' "$M" "$O" "$TMP"
  # every rank wrote its slice of the weights: a Hugging Face sharded checkpoint (what
  # skpo-score just loaded), each tensor in the shard the index names, none twice
  t "2 ranks write the weights as a Hugging Face sharded checkpoint, one shard per rank, every tensor once" sh -c '
    c=$0/ckpt/1
    [ ! -e "$c/model.safetensors" ] && [ -f "$c/model-00001-of-00002.safetensors" ] && [ -f "$c/model-00002-of-00002.safetensors" ] &&
    [ -f "$c/model.safetensors.index.json" ] && [ -f "$c/config.json" ] && [ -f "$c/tokenizer.json" ] || { ls "$c"; exit 1; }
    n1=$(grep -c "model-00001-of-00002" "$c/model.safetensors.index.json"); n2=$(grep -c "model-00002-of-00002" "$c/model.safetensors.index.json")
    n=$(grep -o "\"model\.[a-z0-9_.]*\": \"model-" "$c/model.safetensors.index.json" | sort -u | wc -l)
    [ "$n1" -gt 0 ] && [ "$n2" -gt 0 ] && [ $((n1 + n2)) = "$n" ] || { cat "$c/model.safetensors.index.json"; exit 1; }
    ! cmp -s "$c/model-00001-of-00002.safetensors" "$1/model/model.safetensors"' "$M" "$TMP"
  # the durable step 1 of the 2-rank run: each rank wrote its share of the optimizer state;
  # continuing from it equals an uninterrupted 2-rank run bit for bit
  t "a durable step on 2 ranks writes one optimizer shard per rank, by that rank" sh -c '
    [ -f "$0/ckpt/1/optim.index.json" ] && [ -f "$0/ckpt/1/optim-00000-of-00002.safetensors" ] &&
    [ -f "$0/ckpt/1/optim-00001-of-00002.safetensors" ] && [ ! -e "$0/ckpt/1/optim.safetensors" ] &&
    grep -q "\"optimizer_shards\": 2" "$0/ckpt/1/trainer_state.json" || { ls "$0/ckpt/1"; exit 1; }' "$M"
  [ -n "${SHIM:-}" ] && cp -r "$M" "$TMP/k2" && rm -f "$TMP/k2/lock"
  run "$M" STEPS=2 >"$M.out2" 2>"$M.err2"
  run "$TMP/ranks2b" SERVE=1 SAVE_EVERY=1 STEPS=2 RANKS=2 >"$TMP/ranks2b.out" 2>"$TMP/ranks2b.err"
  t "resuming 2 ranks from per-rank optimizer shards equals the uninterrupted 2-rank run, bit for bit (weights and state shards)" sh -c '
    [ "$(cat "$0/last")" = 2 ] || { cat "$0.err2" "$0/logs/serve.err"; exit 1; }
    for f in model-00001-of-00002.safetensors model-00002-of-00002.safetensors optim-00000-of-00002.safetensors optim-00001-of-00002.safetensors; do
      cmp "$0/ckpt/2/$f" "$1/ckpt/2/$f" || exit 1
    done' "$M" "$TMP/ranks2b"
  if [ -n "${SHIM:-}" ] && [ -d "$TMP/k2" ]; then
    # both ranks killed at their 2nd file event once step 2's request is there:
    # inside the parallel save of the weights and optimizer shards
    SKPO_FAULT_SHIM=$SHIM SKPO_FAULT_STAGE=server SKPO_FAULT_STEP=2 SKPO_FAULT_KILL_AT=2 SKPO_FAULT_ARM="$TMP/k2/serve/2.req" \
      run "$TMP/k2" STEPS=2 >"$TMP/k2.out1" 2>"$TMP/k2.err1"
    rc=$?
    run "$TMP/k2" STEPS=2 >"$TMP/k2.out2" 2>"$TMP/k2.err2"
    t "2 ranks killed while writing their shards of step 2 and resumed: the same rollouts, weights and state shards as the uninterrupted run" sh -c '
      [ "$2" != 0 ] && [ "$(cat "$0/last")" = 2 ] || { echo "rc $2"; cat "$0.err1" "$0.err2"; exit 1; }
      a=$(skpo-cat "$0/rollouts/2.msgpack.zst" | grep -v "\"kind\":\"meta\"" | sed "s#$0#RUN#g" | md5sum)
      b=$(skpo-cat "$1/rollouts/2.msgpack.zst" | grep -v "\"kind\":\"meta\"" | sed "s#$1#RUN#g" | md5sum)
      [ "$a" = "$b" ] || { echo "rollouts differ"; exit 1; }
      for f in model-00001-of-00002.safetensors model-00002-of-00002.safetensors model.safetensors.index.json \
               optim-00000-of-00002.safetensors optim-00001-of-00002.safetensors optim.index.json; do
        cmp "$0/ckpt/2/$f" "$1/ckpt/2/$f" || exit 1
      done' "$TMP/k2" "$TMP/ranks2b" "$rc"
  fi
  RK=$TMP/rankdeath
  RCMD='kill -9 $(cat "$RUN/serve/rank1.pid"); '"$PARITY" run "$RK" SERVE=1 STEPS=1 RANKS=2 >"$RK.out" 2>"$RK.err"
  t "a rank that dies stops the step and the message names the rank" sh -c '
    [ "$(cat "$0/last" 2>/dev/null || echo 0)" = 0 ] && grep -q "update rank(s) 1 (of 2) died during step 1" "$0.err" ||
    { cat "$0.err"; exit 1; }' "$RK"
else
  skip "2-rank tests" "mpirun is not installed"
fi

t "asking for more GPUs than are visible is an error before any work" sh -c '
  CUDA_VISIBLE_DEVICES= REWARD_CMD=skpo-reward bash "$1/train.sh" "$0" MODEL="$2/model" TRAIN_DATA="$2/train.msgpack.zst" GPUS=2 EVAL_DATA= 2>"$0.err"
  [ $? != 0 ] && grep -q "GPUS=2 but 0 GPU(s) are visible" "$0.err" && [ ! -e "$0/tmp" ] && [ "$(ls "$0/ckpt")" = 0 ] || { cat "$0.err"; exit 1; }' "$TMP/gpus" "$P" "$TMP"
refuses() { # refuses DIR WHAT KEY=VALUE...: train.sh fails before any step, saying WHAT
  d=$1 what=$2; shift 2
  if bash "$P/train.sh" "$d" MODEL="$TMP/model" TRAIN_DATA="$TMP/train.msgpack.zst" EVAL_DATA= "$@" 2>"$d.err"; then
    echo "train.sh accepted $*"; return 1
  fi
  grep -q "$what" "$d.err" && [ ! -e "$d/ckpt/1" ] || { cat "$d.err"; return 1; }
}
t "train.sh refuses SAVE_EVERY=0 before any step" refuses "$TMP/bad1" "SAVE_EVERY=.0." SAVE_EVERY=0
t "train.sh refuses an unknown LAUNCHER before any step" refuses "$TMP/bad2" "LAUNCHER=.pbs." LAUNCHER=pbs RANKS=2
t "train.sh refuses OFFLOAD=1 without GPUS before any step (it offloads the server's device state)" refuses "$TMP/bad3" "OFFLOAD=1 needs SERVE=1 and GPUS" OFFLOAD=1
