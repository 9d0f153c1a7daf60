#!/bin/sh
# t_update.sh - skpo-update black-box tests: the PyTorch-checked step through
# the tool, resume, metrics, atomic output on failure, usage errors, and data
# parallel runs under mpirun (2 ranks, oversubscribed on small machines).
. "$(dirname "$0")/lib.sh"
BUILD=${SKPO_BUILD:-build}
M=$UPD_MODEL
R=$UPD_RECORDS
CHK="$BUILD/tests/test_update_model"
A=$UPD_FLAGS

# These tests check the float32 CPU path against PyTorch: pin it, also on a
# machine with a GPU (the device path is tests/unit/test_cuda_train.c).
export SKPO_DEVICE=cpu

# mpirun as root needs these; --oversubscribe lets 2 ranks share fewer cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
have_mpirun() { command -v mpirun >/dev/null 2>&1; }
# Open MPI keeps process-lifetime allocations that LeakSanitizer reports as
# leaks (not ours): leak checking is off for MPI runs only.
mpi2() { ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" mpirun -np 2 --oversubscribe "$@"; }
# Count records holding a key in a stream (keys are plain bytes in msgpack).
count_key() { zstd -dc "$1" | grep -ao "$2" | wc -l; }

if [ ! -x "$TOP/bin/skpo-update" ] || [ ! -x "$CHK" ]; then
  skip "skpo-update" "bin/skpo-update or $CHK not built"
  exit 0
fi

t "one step through the tool matches the PyTorch step" sh -c "
  $(command -v skpo-update) --model '$M' --out '$TMP/ck1' --metrics '$TMP/m.zst' $A <'$R' 2>'$TMP/err1' &&
  '$CHK' --compare '$TMP/ck1'"

t "output is an HF folder with tokenizer files, optimizer state and step 1" sh -c "
  for f in config.json model.safetensors tokenizer.json tokenizer_config.json optim.safetensors trainer_state.json; do
    [ -f '$TMP/ck1/'\$f ] || { echo missing \$f; exit 1; }; done
  grep -q '\"step\": 1' '$TMP/ck1/trainer_state.json' &&
  grep -q '\"optimizer_updates\": 2' '$TMP/ck1/trainer_state.json' &&
  [ ! -e '$TMP/ck1/records.msgpack.zst' ]"

t "summary line on stderr names step, updates and output" \
  grep -q "skpo-update: step 1: 2 updates over 4 prompts, 16 records.*-> $TMP/ck1" "$TMP/err1"

t "metrics file gets one record per mini-batch" sh -c "
  [ \$(zstd -dc '$TMP/m.zst' | grep -ao grad_norm | wc -l) = 2 ] && zstd -dc '$TMP/m.zst' | grep -aq skpo-update"
if [ -x "$TOP/bin/skpo-cat" ]; then
  t "metrics file reads back through skpo-cat (schema-valid)" sh -c "
    [ \$(skpo-cat --where kind=metrics '$TMP/m.zst' | grep -c '\"grad_norm\"') = 2 ]"
fi

t "stdout stays empty" sh -c "[ -z \"\$(skpo-update --model '$M' --out '$TMP/ck-q' $A <'$R' 2>/dev/null)\" ]"

t "second step continues the optimizer state and appends metrics" sh -c "
  skpo-update --model '$TMP/ck1' --out '$TMP/ck2' --metrics '$TMP/m.zst' $A '$R' 2>/dev/null &&
  grep -q '\"step\": 2' '$TMP/ck2/trainer_state.json' &&
  grep -q '\"optimizer_updates\": 4' '$TMP/ck2/trainer_state.json' &&
  [ \$(zstd -dc '$TMP/m.zst' | grep -ao grad_norm | wc -l) = 4 ]"

t "--fresh-optimizer and a resumed step differ (state is really used)" sh -c "
  skpo-update --model '$TMP/ck1' --out '$TMP/ck2f' --fresh-optimizer $A '$R' 2>/dev/null &&
  ! cmp -s '$TMP/ck2/model.safetensors' '$TMP/ck2f/model.safetensors'"

t "the same run twice writes identical bytes" sh -c "
  skpo-update --model '$M' --out '$TMP/ck1b' $A <'$R' 2>/dev/null &&
  cmp '$TMP/ck1/model.safetensors' '$TMP/ck1b/model.safetensors' &&
  cmp '$TMP/ck1/optim.safetensors' '$TMP/ck1b/optim.safetensors'"

t "--resume without optimizer state fails" expect_exit 1 skpo-update --model "$M" --out "$TMP/x" --resume $A "$R"

# A NaN log-prob in mini-batch 2: the tool stops naming step and record, and
# --out (from the first test) stays byte-identical with no temp folder left.
t "non-finite record stops the step, names it, keeps the old output" sh -c "
  cp -r '$TMP/ck1' '$TMP/keep' &&
  { skpo-update --model '$M' --out '$TMP/ck1' --metrics '$TMP/m-nan.zst' $A '$M/records_nan.msgpack.zst' 2>'$TMP/err-nan'; [ \$? = 1 ]; } &&
  grep -q \"skpo-update: step 1, recomputing old log-probs: record 'q3-d1': rollout log-prob of token 2 is nan\" '$TMP/err-nan' &&
  diff -r '$TMP/keep' '$TMP/ck1' && [ ! -e '$TMP/m-nan.zst' ] && [ -z \"\$(ls -d '$TMP'/ck1.tmp.* 2>/dev/null)\" ]"
t "with --old-logp rollout the NaN reaches the loss of mini-batch 2 and is named there" sh -c "
  { skpo-update --model '$M' --out '$TMP/ck1' --old-logp rollout $A '$M/records_nan.msgpack.zst' 2>'$TMP/err-nan2'; [ \$? = 1 ]; } &&
  grep -q \"skpo-update: step 1, mini-batch 2 of 2: record 'q3-d1': old log-prob of token 2 is nan\" '$TMP/err-nan2' &&
  diff -r '$TMP/keep' '$TMP/ck1'"

t "every mini-batch's metrics record carries the rollout vs pi_old mismatch" sh -c "
  for k in mismatch_k3 mismatch_dlogp_mean mismatch_dlogp_max mismatch_truncated mismatch_masked; do
    [ \$(zstd -dc '$TMP/m.zst' | grep -ao \$k | wc -l) = 4 ] || { echo no \$k; exit 1; }; done &&
  grep -q 'mismatch k3 ' '$TMP/err1'"
t "--old-logp rollout writes no mismatch metrics and trains differently" sh -c "
  skpo-update --model '$M' --out '$TMP/ro' --old-logp rollout --metrics '$TMP/m-ro.zst' $A '$R' 2>/dev/null &&
  [ \$(zstd -dc '$TMP/m-ro.zst' | grep -ao mismatch_k3 | wc -l) = 0 ] && ! '$CHK' --same '$TMP/ro' '$TMP/ck1' 1e-6 2>/dev/null"
t "every mini-batch's metrics record carries raw_tokens, packed_tokens and shared_ratio; packing computes fewer tokens" sh -c "
  for k in raw_tokens packed_tokens shared_ratio; do
    [ \$(zstd -dc '$TMP/m.zst' | grep -ao \$k | wc -l) = 4 ] || { echo no \$k; exit 1; }; done &&
  skpo-update --model '$M' --out '$TMP/pk' --metrics '$TMP/m-pk.zst' $A --micro-tokens 1000 '$R' 2>/dev/null &&
  skpo-cat --where kind=metrics --fields raw_tokens,packed_tokens,shared_ratio '$TMP/m-pk.zst' |
    awk -F'[:,}]' '{ if (!(\$4 < \$2 && \$6 > 0.1)) bad = 1 } END { exit bad || NR != 2 }'"
t "--no-pack trains the same weights (to 1e-6) and reports packed_tokens = raw_tokens" sh -c "
  skpo-update --model '$M' --out '$TMP/np' --metrics '$TMP/m-np.zst' $A --micro-tokens 1000 --no-pack '$R' 2>/dev/null &&
  '$CHK' --same '$TMP/np' '$TMP/pk' 1e-6 &&
  skpo-cat --where kind=metrics --fields raw_tokens,packed_tokens,shared_ratio '$TMP/m-np.zst' |
    awk -F'[:,}]' '{ if (\$4 != \$2 || \$6 != 0) bad = 1 } END { exit bad || NR != 2 }'"
# --micro-tokens counts packed tokens: q0's three downs hold 50 tokens as given (a prompt of 10 under
# each), 30 packed. At --micro-tokens 30 every group stays whole: each mini-batch computes the
# tokens it computes in one pass (the 1000 run above), where counting tokens as given cut the downs
# and computed each part's prefix again; --no-pack keeps its old cut (more passes), same weights.
t "a group whose records exceed --micro-tokens but whose packed size fits is one micro-batch (same weights as --no-pack, 1e-6)" sh -c "
  [ \$(skpo-cat --where kind=down --where pid=q0 --fields prompt,tokens '$R' | awk '{ n += gsub(/[0-9]+/, \"\") } END { print n }') -gt 30 ] &&
  skpo-update --model '$M' --out '$TMP/w30' --metrics '$TMP/m-30.zst' $A --micro-tokens 30 '$R' 2>/dev/null &&
  skpo-update --model '$M' --out '$TMP/w30n' --metrics '$TMP/m-30n.zst' $A --micro-tokens 30 --no-pack '$R' 2>/dev/null &&
  '$CHK' --same '$TMP/w30' '$TMP/w30n' 1e-6 &&
  skpo-cat --where kind=metrics --fields packed_tokens '$TMP/m-pk.zst' >'$TMP/pk-whole' &&
  skpo-cat --where kind=metrics --fields packed_tokens '$TMP/m-30.zst' | cmp - '$TMP/pk-whole' &&
  skpo-cat --where kind=metrics --fields micro_batches '$TMP/m-30.zst' | awk -F'[:}]' '{ print \$2 }' >'$TMP/mb-p' &&
  skpo-cat --where kind=metrics --fields micro_batches '$TMP/m-30n.zst' | awk -F'[:}]' '{ print \$2 }' |
    paste '$TMP/mb-p' - | awk '{ if (!(\$1 < \$2)) bad = 1 } END { exit bad || NR != 2 }'"
# The fixture's rollout log-probs are pi_old + N(0, 0.3): no ratio reaches tis's cap 2
# (tis weighs every token by its ratio), so mask-token and icepop need tighter bands to differ.
t "each --mismatch mode changes the step (off, mask-token at 1.2, mask-seq, icepop from 0.9 vs tis)" sh -c "
  for m in off 'mask-token --mismatch-high 1.2' mask-seq 'icepop --mismatch-low 0.9'; do
    skpo-update --model '$M' --out '$TMP/mm' --mismatch \$m $A '$R' 2>/dev/null || exit 1
    ! '$CHK' --same '$TMP/mm' '$TMP/ck1' 1e-7 2>/dev/null || { echo \$m same as tis; exit 1; }; done"
t "a stream with no trainable records fails (a step that trains nothing is not a step)" sh -c "
  printf '' | zstd -q -c > '$TMP/empty.zst' &&
  { skpo-update --model '$M' --out '$TMP/em' $A '$TMP/empty.zst' 2>'$TMP/err-em'; [ \$? = 1 ]; } &&
  grep -q 'skpo-update: no trainable records (kinds up, down, full with tokens) in $TMP/empty.zst' '$TMP/err-em' &&
  [ ! -e '$TMP/em' ] &&
  skpo-update --model '$M' --out '$TMP/em' --allow-empty $A '$TMP/empty.zst' 2>/dev/null && [ -f '$TMP/em/config.json' ]"
t "--old-logp foo is a usage error" expect_exit 2 skpo-update --model "$M" --out "$TMP/x" --old-logp foo
t "--mismatch-cap without tis is a usage error" expect_exit 2 skpo-update --model "$M" --out "$TMP/x" --mismatch off --mismatch-cap 3
t "an empty mismatch band is a usage error" expect_exit 2 skpo-update --model "$M" --out "$TMP/x" --mismatch icepop --mismatch-low 2 --mismatch-high 1

t "missing ref_logp with --kl-coef names the record" sh -c "
  { skpo-update --model '$M' --out '$TMP/kl' $A --kl-coef 0.1 '$R' 2>'$TMP/err-kl'; [ \$? = 1 ]; } &&
  grep -q \"up record 'q0-up' has no 'ref_logp'\" '$TMP/err-kl' && [ ! -e '$TMP/kl' ]"

t "truncated input fails with exit 1" sh -c "
  head -c 500 '$R' > '$TMP/trunc.zst'
  skpo-update --model '$M' --out '$TMP/t' $A '$TMP/trunc.zst' 2>'$TMP/err-t'; [ \$? = 1 ] &&
  grep -q 'skpo-update: ' '$TMP/err-t' && [ ! -e '$TMP/t' ]"

t "unknown loss form is a usage error" expect_exit 2 skpo-update --model "$M" --out "$TMP/x" --down-loss foo
t "dual clip at or below 1 is a usage error" expect_exit 2 skpo-update --model "$M" --out "$TMP/x" --up-dual-clip 0.5
t "missing --out is a usage error" expect_exit 2 skpo-update --model "$M"
t "pipeline flags: --epochs 2 makes 4 updates; --clip-* and --w-* change the result" sh -c "
  skpo-update --model '$M' --out '$TMP/ep' $A --epochs 2 --metrics '$TMP/m-ep.zst' '$R' 2>/dev/null &&
  grep -q '\"optimizer_updates\": 4' '$TMP/ep/trainer_state.json' &&
  [ \$(zstd -dc '$TMP/m-ep.zst' | grep -ao grad_norm | wc -l) = 4 ] &&
  skpo-update --model '$M' --out '$TMP/cl' $A --clip-low 0.1 --clip-high 0.1 --clip-high-up 0.1 '$R' 2>/dev/null &&
  ! '$CHK' --same '$TMP/cl' '$TMP/ck1' 1e-6 2>/dev/null &&
  skpo-update --model '$M' --out '$TMP/cl2' $A --up-clip-low 0.1 --down-clip-low 0.1 --full-clip-low 0.1 \
    --up-clip-high 0.1 --down-clip-high 0.1 '$R' 2>/dev/null && '$CHK' --same '$TMP/cl' '$TMP/cl2' 0 &&
  skpo-update --model '$M' --out '$TMP/w' $A --w-up 0.5 --w-down 0.5 '$R' 2>/dev/null &&
  '$CHK' --same '$TMP/w' '$TMP/ck1' 0"
t "--warmup/--eps/--grad-clip spell the same options as --warmup-steps/--adam-eps/--max-grad-norm" sh -c "
  skpo-update --model '$M' --out '$TMP/sp' --minibatch 2 --lr 1e-2 --warmup 2 --eps 1e-4 --grad-clip 1.0 \
    --micro-tokens 24 '$R' 2>/dev/null && '$CHK' --same '$TMP/sp' '$TMP/ck1' 0"
t "sft with a KL term is a usage error" expect_exit 2 skpo-update --model "$M" --out "$TMP/x" --loss sft --kl-coef 0.1
t "sft warm start runs on the same records" sh -c "
  skpo-update --model '$M' --out '$TMP/sft' --loss sft --lr 1e-3 '$R' 2>'$TMP/err-sft' &&
  grep -q 'full ' '$TMP/err-sft'"

if [ -x "$TOP/bin/skpo-score" ]; then
  t "skpo-score --field old_logp with --old-logp field equals the recomputed pi_old bit for bit (the same checkpoint)" sh -c "
    skpo-score --model '$M' --field old_logp '$R' | skpo-update --model '$M' --out '$TMP/sc' --old-logp field $A 2>/dev/null &&
    skpo-update --model '$M' --out '$TMP/rc' --recompute-old $A '$R' 2>/dev/null &&
    '$CHK' --same '$TMP/sc' '$TMP/rc' 0 && '$CHK' --same '$TMP/rc' '$TMP/ck1' 0 &&
    ! '$CHK' --same '$TMP/sc' '$TMP/ro' 1e-4 2>/dev/null"
else
  skip "skpo-score into skpo-update" "bin/skpo-score not built"
fi

if have_mpirun && [ -x "$BUILD/tests/test_update_dp" ]; then
  t "data-parallel step over 2 MPI ranks equals the single-process step (core)" \
    mpi2 "$BUILD/tests/test_update_dp"
  t "mpirun -np 2 skpo-update writes the single-process checkpoint (1e-6)" sh -c "
    ASAN_OPTIONS='${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0' mpirun -np 2 --oversubscribe \
      $(command -v skpo-update) --model '$M' --out '$TMP/dp1' $A '$R' 2>'$TMP/err-dp' &&
    grep -q '2 ranks' '$TMP/err-dp' && '$CHK' --same '$TMP/ck1' '$TMP/dp1' 1e-6"
  t "mpirun -np 2 reads records from stdin on rank 0" sh -c "
    ASAN_OPTIONS='${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0' mpirun -np 2 --oversubscribe \
      $(command -v skpo-update) --model '$M' --out '$TMP/dp2' $A <'$R' 2>/dev/null &&
    '$CHK' --same '$TMP/ck1' '$TMP/dp2' 1e-6"
  # Only the rank holding q3-d1 fails; rank 0 prints that rank's message once.
  t "under mpirun a NaN record on rank 1 stops all ranks and writes nothing" sh -c "
    ASAN_OPTIONS='${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0' mpirun -np 2 --oversubscribe \
      $(command -v skpo-update) --model '$M' --out '$TMP/dpn' $A '$M/records_nan.msgpack.zst' 2>'$TMP/err-dpn';
    [ \$? != 0 ] && [ \$(grep -c \"skpo-update: step 1, recomputing old log-probs: record 'q3-d1'\" '$TMP/err-dpn') = 1 ] &&
    [ ! -e '$TMP/dpn' ]"
else
  skip "data-parallel runs" "no mpirun or no $BUILD/tests/test_update_dp"
fi
