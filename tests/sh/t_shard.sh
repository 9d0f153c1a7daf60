#!/bin/sh
# t_shard.sh - the sampling stage sharded (docs/scaling.md "Shards"): the
# baselines' samplers (grpo.sh and the GRPO family through full_step, spo.sh's
# prioritized draw, dapo.sh's rounds) on 2 shards give step 1's rollouts of 1
# shard record for record; NODES=2 starts the shards through the launcher
# (mpirun --hostfile; here both "nodes" are this host) for SKPO and GRPO with
# the same result; shard.sh refuses to run without a shard; a failing shard
# fails the step naming it.
. "$(dirname "$0")/lib.sh"
need_tools "sharded sampling" skpo-synth skpo-init skpo-sample skpo-splice skpo-advantage skpo-update skpo-cat
command -v bash >/dev/null || { skip "sharded sampling" "bash is not installed"; exit 0; }
P="$TOP/pipelines"
D="$FIX/demo"
export OMP_NUM_THREADS=1
# Under make asan: the kill test preloads a fault shim (ASan must not insist on
# coming first), and OpenMPI's own allocations from its unloaded plugins are
# reported as leaks when an mpirun-launched update exits (as in t_update.sh's
# mpi2); the tools' own leaks are checked by the single-process tests.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0:detect_leaks=0"
unset SKPO_SERVE_DIR SKPO_FAULT_STAGE SKPO_FAULT_STEP SKPO_FAULT_KILL_AT SKPO_SHARD
PARITY=$(parity_reward 'down|full')
export PARITY
pipeline_fixtures 24 "shard"
CONF="STEPS=1 PROMPTS=4 MINIBATCH=2 G=4 MAX_TOKENS=6 LQ_INIT=6 LR=1e-3 WARMUP=0 KEEP=2 THREADS=1 SERVE= EVAL_DATA="
run() { d=$1; train_run "$@" >"$d.out" 2>"$d.err"; }   # run DIR [KEY=VALUE...]
# same A B: step 1 of both runs committed with the same records (meta records and run paths aside)
same() {
  [ "$(cat "$1/last" 2>/dev/null)" = 1 ] && [ "$(cat "$2/last" 2>/dev/null)" = 1 ] || { cat "$1.err" "$2.err"; return 1; }
  a=$(skpo-cat "$1/rollouts/1.msgpack.zst" | grep -v '"kind":"meta"' | sed "s#$1#RUN#g" | md5sum)
  b=$(skpo-cat "$2/rollouts/1.msgpack.zst" | grep -v '"kind":"meta"' | sed "s#$2#RUN#g" | md5sum)
  [ "$a" = "$b" ] && [ "$(skpo-cat --count "$1/rollouts/1.msgpack.zst")" -gt 8 ] || { echo "rollouts of step 1 differ: $1 $2"; return 1; }
}
# shards_ran RUN N: the committed step's logs show N sampling shards
shards_ran() { [ "$(ls "$1"/logs/1.sample.*.err 2>/dev/null | wc -l)" = "$2" ] || { ls "$1/logs"; return 1; }; }
sharded_same() { shards_ran "$2" "$3" && same "$1" "$2"; }

if ! command -v mpirun >/dev/null; then skip "sharded sampling" "mpirun is not installed (RANKS=2 runs the update under it)"; exit 0; fi
for algo in grpo spo dapo; do
  run "$TMP/$algo-1" ALGO=$algo
  run "$TMP/$algo-2" ALGO=$algo RANKS=2
  t "$algo.sh with RANKS=2 samples in 2 shards and gives the rollouts of 1 shard" sharded_same "$TMP/$algo-1" "$TMP/$algo-2" 2
done

# NODES=2 through the launcher: a hostfile naming this host twice stands for two
# nodes, so the shards and the update ranks are started by mpirun from the
# hostfile as they would be on a cluster (only one host was available).
printf 'localhost slots=2\n' >"$TMP/hosts"
for algo in skpo grpo; do
  [ -d "$TMP/$algo-1" ] || run "$TMP/$algo-1" ALGO=$algo
  run "$TMP/$algo-n2" ALGO=$algo NODES=2 HOSTFILE="$TMP/hosts"
  t "$algo with NODES=2 (mpirun --hostfile) starts 2 shards through the launcher and gives the rollouts of 1 shard" sh -c '
    grep -q "shard 1/2 via mpirun" "$1/logs/1.sample.1.err" || { cat "$1.err"; ls "$1/logs"; exit 1; }' "$TMP/$algo-1" "$TMP/$algo-n2"
  t "$algo with NODES=2: the same rollouts as 1 shard" sharded_same "$TMP/$algo-1" "$TMP/$algo-n2" 2
done

# LAUNCHER=srun NODES=2: no Slurm here, so a stand-in srun on PATH records its
# command line and runs its --ntasks tasks with SLURM_PROCID / SLURM_NTASKS /
# SLURM_LOCALID as Slurm does (the MPI update ranks go to mpirun, as Slurm's PMI
# would wire them). What is tested: the command train.sh builds and the shards'
# use of Slurm's variables; a real Slurm allocation never ran.
mkdir -p "$TMP/fake"
cat >"$TMP/fake/srun" <<'SRUN'
#!/bin/sh
echo "srun $*" >>"$SRUN_LOG"
n=1
while [ $# -gt 0 ]; do case "$1" in --ntasks) n=$2; shift 2;; --*) shift;; *) break;; esac; done
case "$*" in
  *shard.sh*) i=0; pids=
    while [ "$i" -lt "$n" ]; do SLURM_PROCID=$i SLURM_NTASKS=$n SLURM_LOCALID=$i "$@" & pids="$pids $!"; i=$((i + 1)); done
    rc=0; for p in $pids; do wait "$p" || rc=1; done; exit $rc;;
  *) exec mpirun -np "$n" --oversubscribe --bind-to none $([ "$(id -u)" = 0 ] && echo --allow-run-as-root) "$@";;
esac
SRUN
chmod +x "$TMP/fake/srun"
SRUN_LOG=$TMP/srun.log PATH="$TMP/fake:$PATH" run "$TMP/srun-n2" ALGO=grpo NODES=2 LAUNCHER=srun
t "LAUNCHER=srun NODES=2: the shards run as srun tasks (srun --ntasks 2 ... shard.sh) with the rollouts of 1 shard" sh -c '
  grep -q "^srun --ntasks 2 --kill-on-bad-exit=1 .*pipelines/shard.sh $1 1 stage_sample_n 4$" "$0" &&
  grep -q "shard 1/2 via srun" "$1/logs/1.sample.1.err" || { cat "$0" "$1.err"; exit 1; }' "$TMP/srun.log" "$TMP/srun-n2"
t "LAUNCHER=srun NODES=2: the same rollouts as 1 shard" sharded_same "$TMP/grpo-1" "$TMP/srun-n2" 2
# step.sh's sharded branch hands the update the same flags as the one-process branch
# (it once dropped --up-dual-clip): the launcher's log shows the update's command line.
SRUN_LOG=$TMP/srun-skpo.log PATH="$TMP/fake:$PATH" run "$TMP/srun-skpo" ALGO=skpo NODES=2 LAUNCHER=srun UP_DUAL_CLIP=3
t "a sharded SKPO step passes UP_DUAL_CLIP to the update (--up-dual-clip 3) and commits" sh -c '
  [ "$(cat "$1/last" 2>/dev/null)" = 1 ] && grep -q "^srun --ntasks 2 .*skpo-update .*--up-dual-clip 3 " "$0" ||
  { cat "$0" "$1.err"; exit 1; }' "$TMP/srun-skpo.log" "$TMP/srun-skpo"

t "shard.sh refuses to run with no shard given and outside a launcher" sh -c '
  ! env -u OMPI_COMM_WORLD_RANK -u SLURM_PROCID -u SKPO_SHARD bash "$1/shard.sh" "$0" 1 stage_sample_n 4 2>"$0.noshard" &&
  grep -q "no shard: set SKPO_SHARD=I/N or start it under mpirun or srun" "$0.noshard" || { cat "$0.noshard"; exit 1; }' "$TMP/grpo-1" "$P"
# a shard that fails fails the step, naming the shard (the kill shim of t_scale.sh in the samplers)
SHIM="$TMP/killshim.so"
if ${CC:-cc} -shared -fPIC -O1 -o "$SHIM" "$TOP/tests/fault/killshim.c" -ldl 2>/dev/null; then
  SKPO_FAULT_SHIM=$SHIM SKPO_FAULT_STAGE=sample SKPO_FAULT_STEP=1 SKPO_FAULT_KILL_AT=2 run "$TMP/fail" ALGO=grpo RANKS=2
  t "a sampling shard that is killed stops the step, which names the shard; the rerun equals the 1-shard run" sh -c '
    [ "$(cat "$0/last" 2>/dev/null || echo 0)" = 0 ] && grep -q "failed in stage .sample.[01]. (killed by signal 9)" "$0.err" &&
    grep -q "a sampling shard failed" "$0.err" || { cat "$0.err"; exit 1; }' "$TMP/fail"
  run "$TMP/fail" ALGO=grpo RANKS=2
  t "a run whose sampling shard was killed resumes to the rollouts of 1 shard" sharded_same "$TMP/grpo-1" "$TMP/fail" 2
else
  skip "a killed sampling shard" "cannot build tests/fault/killshim.c"
fi

# SHARE_WEIGHTS=1 (one weights load per GPU) on CPU: the sampler writes a `none`
# handle (nothing to lend: both tools read the checkpoint through the page
# cache), the splice loads the checkpoint itself, and the step's rollouts are
# those of a run without the key, sharded or not. The CUDA mapping never ran here.
run "$TMP/share-1" ALGO=skpo SHARE_WEIGHTS=1
run "$TMP/share-2" ALGO=skpo SHARE_WEIGHTS=1 RANKS=2
same3() { same "$1" "$2" && same "$1" "$3"; }
t "SHARE_WEIGHTS=1 on CPU: the same SKPO rollouts as without it, 1 and 2 shards" same3 "$TMP/skpo-1" "$TMP/share-1" "$TMP/share-2"
t "skpo-sample --export-weights on CPU writes a none handle saying why; skpo-splice --import-weights then loads the checkpoint" sh -c '
  skpo-synth --count 4 --max-operand 9 --tokenizer "$1/tokenizer" >"$0/p.zst" &&
  skpo-sample --model "$0/model" --prompts "$0/p.zst" --segment --group 2 --prompts-per-step 2 --max-tokens 4 --threads 1 --seed 5 \
      --export-weights "$0/w.ipc" 2>"$0/s.err" | skpo-splice --model "$0/model" --group 2 --max-tokens 4 --threads 1 --seed 5 \
      --import-weights "$0/w.ipc" 2>"$0/sp.err" | skpo-cat | grep -v "\"kind\":\"meta\"" >"$0/shared.jsonl" &&
  grep -q "^none the cpu backend has no device weights to share" "$0/w.ipc" &&
  skpo-sample --model "$0/model" --prompts "$0/p.zst" --segment --group 2 --prompts-per-step 2 --max-tokens 4 --threads 1 --seed 5 2>/dev/null |
    skpo-splice --model "$0/model" --group 2 --max-tokens 4 --threads 1 --seed 5 2>/dev/null | skpo-cat | grep -v "\"kind\":\"meta\"" >"$0/plain.jsonl" &&
  [ -s "$0/plain.jsonl" ] && cmp "$0/shared.jsonl" "$0/plain.jsonl" || { cat "$0/w.ipc" "$0/s.err" "$0/sp.err"; exit 1; }' "$TMP" "$D"
# The loan's end (model.h) in the pipeline's shape: the lender ends its output,
# then waits for the importer, which reads to EOF first. The pipeline element
# running the lender must not hold the pipe (with plain `timed` it does, and the
# stand-in lender below gives up after 10 s: the test fails instead of hanging).
t "a lending pipeline head lets go of the pipe: the next stage sees EOF when the lender ends its output" bash -c '
  . "$1/pipelines/common.sh"; TMPD=$0; STEP=1
  lender() { ${STAGE_EXEC:-} sh -c "echo records; exec >/dev/null; i=0
    while [ ! -f \"\$0/done\" ] && [ \$i -lt 100 ]; do sleep 0.1; i=\$((i + 1)); done; [ -f \"\$0/done\" ]" "$0"; }
  timed_head sample lender 2>"$0/lender.err" | { cat >/dev/null; touch "$0/done"; } &&
  grep -q "^sample " "$0/times"' "$TMP" "$TOP"
t "skpo-sample --export-weights into a file (no reader to hold the weights for) writes a none handle" sh -c '
  skpo-sample --model "$0/model" --prompts "$0/p.zst" --n 1 --max-tokens 2 --threads 1 --export-weights "$0/f.ipc" >"$0/f.zst" 2>"$0/f.err" &&
  grep -q "^none the sampler.s output is not a pipe" "$0/f.ipc" || { cat "$0/f.ipc" "$0/f.err"; exit 1; }' "$TMP"
t "skpo-splice --import-weights of a malformed handle file on a GPU-less machine still loads and runs (CPU: never waits)" sh -c '
  echo garbage >"$0/bad.ipc" && skpo-sample --model "$0/model" --prompts "$0/p.zst" --segment --group 2 --prompts-per-step 1 --max-tokens 3 --threads 1 2>/dev/null |
  skpo-splice --model "$0/model" --group 2 --max-tokens 3 --threads 1 --import-weights "$0/bad.ipc" 2>"$0/bad.err" | skpo-cat --count | grep -q "^[1-9]"' "$TMP"
