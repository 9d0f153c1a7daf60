# pipelines/common.sh - shared by step.sh, grpo.sh, spo.sh, dapo.sh, train.sh (sourced, bash).
#
# A training step N+1 reads the committed step N (RUN/ckpt/N, RUN/state/N) and
# builds everything in RUN/tmp/N+1; only when every stage of the pipeline exited
# 0 is it committed: ckpt, state, rollouts and metrics are renamed into place and
# RUN/last is rewritten atomically (the commit marker). A failed or killed step
# leaves RUN/last, the previous checkpoint and the previous state untouched, and
# its RUN/tmp/N+1 (with one stderr log per stage) for inspection; the next run
# removes it and redoes the step.
#
# Run folder:
#   config                     KEY=VALUE (pipelines/config/defaults.conf + overrides)
#   last                       number of the last committed step (commit marker)
#   ckpt/N/                    checkpoint after step N (ckpt/0 = the initial model)
#   state/N/                   tracker state folder after step N (skpo-advantage --state)
#   rollouts/N.msgpack.zst     what step N sampled, with rewards (teed after the reward stage)
#   metrics/N.msgpack.zst      metrics records of step N (skpo-update) and evals
#   eval/N.msgpack.zst         rewarded eval samples at step N
#   logs/                      per-stage stderr of the committed steps
#   prm/N/, prm-metrics/N...   PRIME only: the implicit PRM after step N and its update's metrics
set -o pipefail
PIPE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TOP=$(cd "$PIPE/.." && pwd)
PATH="$TOP/bin:$PATH"
SKPO_SHARED=${SKPO_SHARED:-$TOP/../shared}

die() { echo "skpo-pipeline: $*" >&2; exit 1; }

# load_config RUN: defaults, then the run's config (later lines win).
# REWARD_CMD from the environment wins over the config (a one-off reward swap).
load_config() {
  local env_reward=${REWARD_CMD-}
  # shellcheck disable=SC1091
  . "$PIPE/config/defaults.conf"
  [ -f "$1/config" ] || die "no config in run folder '$1' (start it with pipelines/train.sh)"
  # shellcheck disable=SC1090,SC1091
  . "$1/config"
  REWARD_CMD=${env_reward:-${REWARD_CMD:-skpo-reward}}
}

# step_script ALGO: the path of ALGO's step script (skpo: step.sh, else pipelines/ALGO.sh),
# or fail. A step script is a file that begins a step (a line `begin_step ...`), so
# a new algorithm is one new file here and nothing else lists the names.
step_script() {
  local f
  case "$1" in ''|step|*[!a-z0-9_-]*) return 1;; skpo) f=$PIPE/step.sh;; *) f=$PIPE/$1.sh;; esac
  [ -f "$f" ] && grep -q '^begin_step ' "$f" && echo "$f"
}
# step_algos: the ALGO names that have a step script, space-separated (for messages).
step_algos() {
  local f a out=skpo
  for f in "$PIPE"/*.sh; do
    a=$(basename "$f" .sh)
    [ "$a" != step ] && step_script "$a" >/dev/null && out="$out $a"
  done
  echo "$out"
}

last_step() { if [ -f "$1/last" ]; then cat "$1/last"; else echo 0; fi; }

# commit_file SRC DST: rename into place (same filesystem), creating DST's folder.
commit_file() { mkdir -p "$(dirname "$2")" && mv -f "$1" "$2"; }

# write_marker RUN N: atomically record N as the last complete step.
write_marker() {
  printf '%s\n' "$2" >"$1/last.tmp.$$" && sync "$1/last.tmp.$$" 2>/dev/null; mv -f "$1/last.tmp.$$" "$1/last"
}

# --- stage commands (the only place tool flags appear) -------------------------------
# Each reads the variables of the config plus: CK (checkpoint dir), OUT (next
# checkpoint dir), ST (tracker state folder of this step), TMPD (the step's work
# folder), STEP.

seed_of_step() { echo $((SEED * 100003 + STEP)); }

# The ablation keys: CUT (adaptive|fixed), SELECT (median|extreme) and REWARD_UP
# (mc|self: self makes the sampler finish the candidates and write the kept one's
# whole generation, which the reward stage scores and skpo-advantage uses as R_I).
stage_sample_segment() {
  ${STAGE_EXEC:-} skpo-sample --model "$CK" --prompts "$TRAIN_DATA" --state "$ST" --segment --group "$G" \
    --cut "${CUT:-adaptive}" --select "${SELECT:-median}" $([ "${REWARD_UP:-mc}" = self ] && echo --self) \
    --prompts-per-step "$PROMPTS" --temperature "$TEMPERATURE" --top-p "$TOP_P" \
    --max-tokens "$MAX_TOKENS" --seed "$(seed_of_step)" --step "$STEP" ${THREADS:+--threads "$THREADS"} \
    ${RHO_RESCORE:+--rescore} ${SHARE_WEIGHTS:+--export-weights "$(weights_ipc)"} "$@"
}
# weights_ipc: with SHARE_WEIGHTS, the handle file through which this shard's
# sampler lends its device weights to its splice (one weights load per GPU).
weights_ipc() { echo "$TMPD/weights.${SHARD_I:-0}.ipc"; }
# stage_sample_n K [FLAGS]: K whole responses for every prompt of the step's draw (draw_prompts).
stage_sample_n() {
  skpo-sample --model "$CK" --prompts "$TMPD/prompts.msgpack.zst" --n "$1" \
    --temperature "$TEMPERATURE" --top-p "$TOP_P" --max-tokens "$MAX_TOKENS" --seed "$(seed_of_step)" \
    --step "$STEP" ${THREADS:+--threads "$THREADS"} "${@:2}"
}
stage_splice() {
  skpo-splice --model "$CK" --group "$G" --layout "${LAYOUT:-skip}" --temperature "$TEMPERATURE" --top-p "$TOP_P" \
    --max-tokens "$MAX_TOKENS" --seed "$(seed_of_step)" ${THREADS:+--threads "$THREADS"} ${SHARE_WEIGHTS:+--import-weights "$(weights_ipc)"}
}
# stage_reward [flags]: the flags (DAPO's --overlong) go to skpo-reward only; a
# swapped-in REWARD_CMD runs as given (it owns its shaping) and a note says so.
stage_reward() {
  case "$REWARD_CMD" in
    skpo-reward|skpo-reward\ *) eval "$REWARD_CMD \"\$@\"";;
    *) [ $# -gt 0 ] && echo "skpo-pipeline: note: custom REWARD_CMD, not adding: $*" >&2; eval "$REWARD_CMD";;
  esac
}
# stage_advantage MODE [flags]: advantages + tracker update (into $ST) + metrics.
# L_q observes the mean response length, capped at MAX_TOKENS; under LAYOUT=continual
# the downstream response continues s, so |s| counts too (docs/algorithm.md Q6).
stage_advantage() {
  local mode=$1; shift
  skpo-advantage --mode "$mode" --state "$ST" --step "$STEP" --group "$G" --max-tokens "$MAX_TOKENS" \
    $([ "$mode" = skpo ] && echo --reward-up "${REWARD_UP:-mc}" --layout "${LAYOUT:-skip}" --up-warmup "${UP_WARMUP:-0}") \
    ${RHO_RESCORE:+--rescored} \
    --rho-min "$RHO_MIN" --rho-max "$RHO_MAX" --tau "$TAU_HALF" --prio-eps "$PRIO_EPS" --lq-init "$LQ_INIT" \
    --max-reward-failures "${MAX_REWARD_FAILURES:-0.05}" \
    --metrics "$TMPD/metrics.msgpack.zst" "$@"
}
# stage_update [extra flags]: the step's update. With an update server running
# (train.sh with SERVE, SKPO_SERVE_DIR set) the same command line goes to it
# (serve_step) and only durable steps write optimizer state; otherwise a
# one-shot skpo-update, under the MPI launcher when there are several ranks.
stage_update() {
  local args=(--model "$CK" --out "$OUT" --metrics "$TMPD/metrics.msgpack.zst" --step "$STEP"
    --minibatch "$MINIBATCH" --lr "$LR" --warmup-steps "$WARMUP" --weight-decay "$WEIGHT_DECAY"
    --beta1 "$BETA1" --beta2 "$BETA2" --adam-eps "$ADAM_EPS" --max-grad-norm "$GRAD_CLIP" --epochs "$EPOCHS"
    --temperature "$TEMPERATURE" --kl-coef "$KL_BETA" --entropy-coef "$ENT_COEF"
    --old-logp "${OLD_LOGP:-recompute}" --mismatch "${MISMATCH:-tis}")
  [ -n "${MISMATCH_CAP:-}" ] && args+=(--mismatch-cap "$MISMATCH_CAP")
  [ -n "${MISMATCH_LOW:-}" ] && args+=(--mismatch-low "$MISMATCH_LOW")
  [ -n "${MISMATCH_HIGH:-}" ] && args+=(--mismatch-high "$MISMATCH_HIGH")
  [ "$CK" = "$RUN/ckpt/0" ] && args+=(--fresh-optimizer)
  [ -n "${LORA_RANK:-}" ] && args+=(--lora-rank "$LORA_RANK" --lora-alpha "$LORA_ALPHA" --lora-targets "$LORA_TARGETS" --lora-seed "$SEED")
  if [ -n "${SKPO_SERVE_DIR:-}" ]; then
    durable_due "$STEP" || args+=(--weights-only)
    serve_step "${args[@]}" "$@"
  else
    launch skpo-update "${args[@]}" ${THREADS:+--threads "$THREADS"} "$@"
  fi
}

# --- ranks, devices, the update server (docs/scaling.md) --------------------------------

# nranks: update ranks of the run: GPUS (else RANKS) per node, times NODES.
nranks() {
  local per=${RANKS:-1}
  [ "${GPUS:-0}" -gt 0 ] && per=$GPUS
  echo $((per * ${NODES:-1}))
}
# launcher: LAUNCH=(the MPI launcher command for nranks processes), empty for
# one rank. CPU ranks may outnumber cores (--oversubscribe) and are not pinned
# (each runs OpenMP threads).
launcher() {
  local n; n=$(nranks)
  LAUNCH=()
  [ "$n" -le 1 ] && return 0
  case "${LAUNCHER:-mpirun}" in
    mpirun)
      LAUNCH=(mpirun -np "$n")
      [ "$(id -u)" = 0 ] && LAUNCH+=(--allow-run-as-root)
      [ "${GPUS:-0}" -gt 0 ] || LAUNCH+=(--oversubscribe --bind-to none)
      [ -n "${HOSTFILE:-}" ] && LAUNCH+=(--hostfile "$HOSTFILE")
      [ "${NODES:-1}" -gt 1 ] && LAUNCH+=(-x SKPO_SERVE_OWNER -x PATH -x OMP_NUM_THREADS)
      ;;
    srun) LAUNCH=(srun --ntasks "$n" --kill-on-bad-exit=1 --mpi=pmix);;
    *) die "LAUNCHER='$LAUNCHER' is not mpirun or srun";;
  esac
}
# launch CMD...: CMD as nranks MPI processes (one rank: CMD as is).
launch() { launcher; "${LAUNCH[@]}" "$@"; }
# nshards: sample / splice processes per step on this node: GPUS, else RANKS.
nshards() { if [ "${GPUS:-0}" -gt 0 ]; then echo "$GPUS"; else echo "${RANKS:-1}"; fi; }
# gpu_of I: the CUDA_VISIBLE_DEVICES entry of shard I (I itself when unset).
gpu_of() {
  if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then printf '%s' "$CUDA_VISIBLE_DEVICES" | cut -d, -f$(($1 + 1)); else echo "$1"; fi
}
# sharded: is the sampling stage run as several shards? (nshards > 1 on this node, or NODES > 1)
sharded() { [ "$(nshards)" -gt 1 ] || [ "${NODES:-1}" -gt 1 ]; }
# sample_shards OUT FN ARGS...: the sampling stage `FN ARGS --shard I/N` (a stage_sample_*
# function; stage_sample_segment is piped into stage_splice) as N shards in parallel, each
# one `pipelines/shard.sh RUN STEP FN ARGS` writing $TMPD/shard.I.msgpack.zst, concatenated
# in shard order into OUT: the unsharded stream (every shard draws the same prompts and
# keeps its slice, the sampler writes in draw order, splice keeps input order, seeds are
# per prompt and record). One node: nshards local processes (shard I on GPU I with GPUS).
# NODES > 1: nranks processes started by the launcher (mpirun --hostfile, srun in the
# allocation), each taking its shard from its launcher rank and its GPU from its local
# rank; the run folder is on the filesystem every node sees. Logs: sample.I.err, splice.I.err.
sample_shards() {
  local out=$1 n i rc=0 pids=(); shift
  if [ "${NODES:-1}" -gt 1 ]; then
    n=$(nranks)
    launcher
    "${LAUNCH[@]}" bash "$PIPE/shard.sh" "$RUN" "$STEP" "$@" || rc=1
  else
    n=$(nshards)
    for ((i = 0; i < n; i++)); do
      SKPO_SHARD=$i/$n bash "$PIPE/shard.sh" "$RUN" "$STEP" "$@" &
      pids+=($!)
    done
    for i in "${!pids[@]}"; do wait "${pids[$i]}" || rc=1; done
  fi
  [ "$rc" = 0 ] || { echo "skpo-pipeline: step $STEP: a sampling shard failed (logs in $TMPD/logs: sample.I.err)" >&2; return 1; }
  for ((i = 0; i < n; i++)); do
    [ -f "$TMPD/shard.$i.msgpack.zst" ] || { echo "skpo-pipeline: step $STEP: sampling shard $i of $n wrote nothing" >&2; return 1; }
  done
  for ((i = 0; i < n; i++)); do cat "$TMPD/shard.$i.msgpack.zst"; done >"$out" || return 1
  rm -f "$TMPD"/shard.*.msgpack.zst
}
# shard_segments OUT: SKPO's `skpo-sample --segment --shard I/N | skpo-splice` shards into OUT.
shard_segments() { sample_shards "$1" stage_sample_segment; }
# one_shard I N FN ARGS...: shard I of N of the sampling stage on stdout (shard.sh runs it).
one_shard() {
  local i=$1 n=$2 fn=$3 L=$TMPD/logs SHARD_I=$1; shift 3
  if [ "$fn" = stage_sample_segment ]; then
    timed_head sample "$fn" "$@" --shard "$i/$n" 2>>"$L/sample.$i.err" | timed splice stage_splice 2>>"$L/splice.$i.err"
    check_pipe "sample.$i" "splice.$i" -- "${PIPESTATUS[@]}"
  else
    timed sample "$fn" "$@" --shard "$i/$n" 2>>"$L/sample.$i.err"
    check_pipe "sample.$i" -- $?
  fi
}
# sampled FN ARGS...: the baselines' sampling stage on stdout: `timed sample FN ARGS` as one
# process, or its shards (sample_shards) concatenated when sharded.
sampled() {
  sharded || { timed sample "$@"; return; }
  sample_shards "$TMPD/sampled.msgpack.zst" "$@" && cat "$TMPD/sampled.msgpack.zst" && rm -f "$TMPD/sampled.msgpack.zst"
}
# check_devices: the run's ranks and GPUs exist before any work starts.
check_devices() {
  case "${RANKS:-1}${GPUS:-0}${NODES:-1}" in *[!0-9]*) die "RANKS, GPUS and NODES must be whole numbers";; esac
  [ "${RANKS:-1}" -ge 1 ] && [ "${NODES:-1}" -ge 1 ] || die "RANKS and NODES must be at least 1"
  if [ "$(nranks)" -gt 1 ]; then
    case "${LAUNCHER:-mpirun}" in
      mpirun) command -v mpirun >/dev/null || die "$(nranks) ranks need mpirun (apt-get install openmpi-bin)";;
      srun) command -v srun >/dev/null || die "LAUNCHER=srun but srun is not on PATH";;
      *) die "LAUNCHER='$LAUNCHER' is not mpirun or srun";;
    esac
  fi
  [ "${NODES:-1}" -gt 1 ] && [ "${LAUNCHER:-mpirun}" = mpirun ] && [ ! -f "${HOSTFILE:-}" ] &&
    die "NODES=$NODES with LAUNCHER=mpirun needs HOSTFILE=FILE (or LAUNCHER=srun inside a Slurm allocation)"
  [ "${GPUS:-0}" -gt 0 ] || return 0
  local vis=0
  if [ -n "${CUDA_VISIBLE_DEVICES+x}" ]; then
    vis=$(printf '%s' "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
  elif command -v nvidia-smi >/dev/null; then
    vis=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  fi
  [ "$vis" -ge "$GPUS" ] || die "GPUS=$GPUS but $vis GPU(s) are visible on $(hostname) (nvidia-smi -L, CUDA_VISIBLE_DEVICES)"
}
# durable_due N: does step N write a durable checkpoint (weights + optimizer +
# trainer state)? Every SAVE_EVERY steps and the last one; every step without a server.
durable_due() {
  [ -z "${SKPO_SERVE_DIR:-}" ] && return 0
  [ "$1" -ge "$STEPS" ] || [ $(($1 % ${SAVE_EVERY:-1})) = 0 ]
}
# has_optim CKPT: does the checkpoint hold optimizer state (one file, or one per rank)?
has_optim() { [ -f "$1/optim.safetensors" ] || [ -f "$1/optim.index.json" ]; }
# complete CKPT: does the checkpoint carry its completion marker, the file its
# save writes last (core/base/marker.c), and has every file it lists that size?
# (The marker is written with one file per line: "    "NAME": BYTES,".)
complete() {
  local m="$1/skpo-checkpoint.json" f s
  grep -q '"complete": true' "$m" 2>/dev/null || return 1
  awk -F'"' '/^    "/ { s = $3; gsub(/[^0-9]/, "", s); print $2, s }' "$m" | {
    while read -r f s; do [ "$(wc -c <"$1/$f" 2>/dev/null)" = "$s" ] || return 1; done
  }
}
# durable_step RUN: the newest committed step whose checkpoint is complete and holds
# the optimizer state (0: the start). A checkpoint without its completion marker
# is never resumed from, and named.
durable_step() {
  local n; n=$(last_step "$1")
  while [ "$n" -gt 0 ]; do
    if ! complete "$1/ckpt/$n"; then
      [ -e "$1/ckpt/$n" ] &&
        echo "skpo-pipeline: $1/ckpt/$n is not a complete checkpoint (its skpo-checkpoint.json is missing or not complete, or a file it lists has another size): not resuming from it" >&2
    elif has_optim "$1/ckpt/$n" && [ -d "$1/state/$n" ]; then
      break
    fi
    n=$((n - 1))
  done
  echo "$n"
}
# serve_step ARGS...: hand the step's records (stdin) and command line to the
# update server and wait until it wrote the checkpoint, or fail when it is gone.
serve_step() {
  local d=$SKPO_SERVE_DIR in="$SKPO_SERVE_DIR/$STEP.msgpack.zst" pid
  pid=$(cat "$d/pid" 2>/dev/null)
  rm -f "$d/$STEP.done"
  cat >"$in.tmp" && mv -f "$in.tmp" "$in" || { echo "skpo-pipeline: cannot hand step $STEP's records to the update server in $d" >&2; return 1; }
  printf '%s\n' "$@" "$in" >"$d/$STEP.req.tmp" && mv -f "$d/$STEP.req.tmp" "$d/$STEP.req" || return 1
  while [ ! -f "$d/$STEP.done" ]; do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$d/$STEP.req"
      # the launcher names the rank that died first; else: the ranks whose pid (this node) is gone
      local f r dead
      dead=$(sed -n 's/.*process rank \([0-9]*\) .*/\1/p' "$RUN/logs/serve.err" 2>/dev/null | tail -n 1)
      if [ -z "$dead" ]; then
        for f in "$d"/rank*.pid; do
          [ -f "$f" ] || continue
          r=${f##*/rank}; r=${r%.pid}
          kill -0 "$(cat "$f")" 2>/dev/null || dead="${dead:+$dead }$r"
        done
      fi
      [ -n "$dead" ] && echo "skpo-pipeline: update rank(s) $dead (of $(nranks)) died during step $STEP" >&2
      echo "skpo-pipeline: the update server (pid ${pid:-?}) ended during step $STEP; the end of RUN/logs/serve.err:" >&2
      tail -n 8 "$RUN/logs/serve.err" 2>/dev/null | sed 's/^/  | /' >&2
      return 1
    fi
    sleep 0.05
  done
  rm -f "$in" "$d/$STEP.req"
  cat "$d/$STEP.done" >&2
}
# start_server RUN: skpo-update --serve from the last committed (durable) step,
# under the launcher; waits until it has loaded. Exports SKPO_SERVE_DIR. The
# first step it serves is the run's (n + 1), never the starting model's own
# trainer state: ckpt/0 may be an SFT output whose trainer_state.json says step 1.
start_server() {
  local S="$1/serve" n; n=$(last_step "$1")
  rm -rf "$S"; mkdir -p "$S" "$1/logs"
  echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) server from step $n, $(nranks) rank(s)" >>"$1/logs/serve.err"
  launcher
  # exec: $! is the server (or its launcher) itself, so the client can watch it
  (export SKPO_SERVE_OWNER=$$; [ "${SKPO_FAULT_STAGE:-}" = server ] && export LD_PRELOAD=$SKPO_FAULT_SHIM
   exec "${LAUNCH[@]}" skpo-update --serve "$S" --model "$1/ckpt/$n" --step $((n + 1)) \
    ${THREADS:+--threads "$THREADS"} ${OFFLOAD:+--offload} $([ "$n" = 0 ] && echo --fresh-optimizer)) </dev/null >>"$1/logs/serve.err" 2>&1 &
  echo $! >"$S/pid"
  while [ ! -f "$S/ready" ]; do
    kill -0 "$(cat "$S/pid")" 2>/dev/null || { tail -n 8 "$1/logs/serve.err" >&2; die "the update server did not start (RUN/logs/serve.err)"; }
    sleep 0.05
  done
  export SKPO_SERVE_DIR=$S
}
stop_server() {
  [ -n "${SKPO_SERVE_DIR:-}" ] && [ -d "$SKPO_SERVE_DIR" ] || return 0
  local pid; pid=$(cat "$SKPO_SERVE_DIR/pid" 2>/dev/null)
  : >"$SKPO_SERVE_DIR/stop"
  [ -n "$pid" ] && wait "$pid" 2>/dev/null
  unset SKPO_SERVE_DIR
  return 0
}
# rollback_to_durable RUN: steps after the newest durable checkpoint are redone
# (their optimizer state lived only in a server that is gone): the commit marker
# goes back there and their checkpoints and states go. The redone steps draw,
# sample and train exactly what they did (same seeds, same tracker state).
rollback_to_durable() {
  local l d n; l=$(last_step "$1"); d=$(durable_step "$1")
  [ "$d" -lt "$l" ] || return 0
  echo "skpo-pipeline: step $l is the last committed step, $d the last durable one: redoing steps $((d + 1))..$l" >&2
  write_marker "$1" "$d"
  for ((n = d + 1; n <= l; n++)); do rm -rf "$1/ckpt/$n" "$1/state/$n" "$1/prm/$n"; done
}

# timed NAME CMD...: CMD, appending "NAME START END" (epoch seconds) to $TMPD/times.
# Fault injection for tests (tests/sh/t_scale.sh): SKPO_FAULT_STAGE=NAME runs
# that stage (of step SKPO_FAULT_STEP, default every step; NAME=server: the
# update server) with LD_PRELOAD=$SKPO_FAULT_SHIM (tests/fault/killshim.c).
timed() {
  local n=$1 t0 rc; shift
  t0=$(date +%s.%N)
  if [ "${SKPO_FAULT_STAGE:-}" = "$n" ] && [ "${SKPO_FAULT_STEP:-$STEP}" = "$STEP" ]; then
    (export LD_PRELOAD=$SKPO_FAULT_SHIM; "$@"); rc=$?
  else
    "$@"; rc=$?
  fi
  echo "$n $t0 $(date +%s.%N)" >>"$TMPD/times"
  return $rc
}
# timed_head NAME CMD...: timed, as the first element of a pipeline (its own
# subshell) whose command ends its output before it exits: skpo-sample
# --export-weights (SHARE_WEIGHTS) ends its output, then waits until
# skpo-splice, which reads to EOF, is done with the lent weights. An element
# running CMD in the foreground would hold the pipe open until CMD exits: a
# deadlock. So CMD runs in the background, a stage function exec'ing its tool
# (STAGE_EXEC=exec), and the element lets go of its standard output; INT, TERM
# and HUP are passed on (a background command ignores INT).
timed_head() {
  local n=$1 t0 pid rc; shift
  t0=$(date +%s.%N)
  if [ "${SKPO_FAULT_STAGE:-}" = "$n" ] && [ "${SKPO_FAULT_STEP:-$STEP}" = "$STEP" ]; then
    (export LD_PRELOAD=$SKPO_FAULT_SHIM; STAGE_EXEC=exec; "$@") <&0 &
  else
    (STAGE_EXEC=exec; "$@") <&0 &
  fi
  pid=$!
  exec >/dev/null
  trap 'kill -TERM "$pid" 2>/dev/null' INT TERM HUP
  wait "$pid"; rc=$?
  while [ "$rc" -gt 128 ] && kill -0 "$pid" 2>/dev/null; do wait "$pid"; rc=$?; done
  echo "$n $t0 $(date +%s.%N)" >>"$TMPD/times"
  return $rc
}
# bytes_of PATH...: bytes of the files under PATHs (0 when none).
bytes_of() { du -sbc "$@" 2>/dev/null | tail -n 1 | cut -f1; }

# draw_prompts B [ROUND]: the step's B prompts for the --n pipelines into
# $TMPD/prompts.msgpack.zst, uniformly without replacement from TRAIN_DATA: one
# shuffle per step seeded by (SEED, STEP) (skpo-cat --shuffle: the project's seeded
# generator; `shuf --random-source=<(yes SEED)` drew nearly the same prompts at every
# step), of which ROUND r (default 0) takes slice r, so DAPO's extra rounds never
# repeat a prompt within a step. Empty when the data is used up.
draw_prompts() {
  local r=${2:-0}
  skpo-cat --where kind=prompt --shuffle "$(seed_of_step)" "$TRAIN_DATA" | awk -v a="$((r * $1))" -v b="$(((r + 1) * $1))" 'NR > a && NR <= b' \
    | skpo-cat --pack >"$TMPD/prompts.msgpack.zst" || die "step $STEP: cannot draw prompts from TRAIN_DATA '$TRAIN_DATA'"
}
# stage_sample_n_prio K B [FLAGS]: K whole responses for each of B prompts drawn by the
# tracker's prioritized sampling (SPO's prompt selection, as SKPO's sampler does).
stage_sample_n_prio() {
  skpo-sample --model "$CK" --prompts "$TRAIN_DATA" --state "$ST" --n "$1" --prompts-per-step "$2" \
    --temperature "$TEMPERATURE" --top-p "$TOP_P" --max-tokens "$MAX_TOKENS" --seed "$(seed_of_step)" \
    --step "$STEP" ${THREADS:+--threads "$THREADS"} ${RHO_RESCORE:+--rescore} "${@:3}"
}
# informative_groups FILE: how many prompts of FILE's full records have outcomes that
# are not all equal (the groups DAPO's dynamic sampling keeps; core/rl/groups.h).
informative_groups() { skpo-cut --count-informative "$1"; }
# keep_groups N: stdin to stdout, dropping the informative groups after the first N
# (records and meta pass through; all-equal groups pass for skpo-advantage to count and drop).
keep_groups() { skpo-cut --keep-informative "$1"; }

# full_step MODE [UPDATE FLAGS...]: the GRPO-family step (GRPO, Dr. GRPO, GSPO,
# CISPO, SAPO differ only in the advantage mode and the loss flags):
#   draw PROMPTS prompts | skpo-sample --n G | $REWARD_CMD | tee rollouts |
#   skpo-advantage --mode MODE | skpo-update FLAGS, then commit.
full_step() {
  local mode=$1; shift
  local L=$TMPD/logs
  draw_prompts "$PROMPTS"
  sampled stage_sample_n "$G" 2>"$L/sample.err" \
    | timed reward stage_reward 2>"$L/reward.err" \
    | tee "$TMPD/rollouts.msgpack.zst" 2>"$L/tee.err" \
    | timed advantage stage_advantage "$mode" 2>"$L/advantage.err" \
    | timed update stage_update "$@" 2>"$L/update.err"
  check_pipe sample reward tee advantage update -- "${PIPESTATUS[@]}" || exit 1
  commit_step
}

# init_state DIR [STEP]: an empty tracker at STEP (default 1) whose parameters come from
# the config (so the first visit of a prompt already uses LQ_INIT for the split position).
init_state() {
  skpo-advantage --init-state --state "$1" --step "${2:-1}" --rho-min "$RHO_MIN" --rho-max "$RHO_MAX" \
    --tau "$TAU_HALF" --prio-eps "$PRIO_EPS" --lq-init "$LQ_INIT"
}

# --- running one step ------------------------------------------------------------------

# begin_step RUN: set STEP/CK/OUT/ST/TMPD for the step after the last committed one.
begin_step() {
  enter_step "$1" $(($(last_step "$1") + 1))
  rm -rf "$TMPD"
  mkdir -p "$TMPD/logs"
  if [ -d "$RUN/state/$((STEP - 1))" ]; then cp -r "$RUN/state/$((STEP - 1))" "$ST"; else init_state "$ST" || die "step $STEP: cannot write the first tracker state"; fi
  STEP_T0=$(date +%s.%N)
}

# enter_step RUN N: the config and STEP/CK/OUT/ST/TMPD of step N (begun: the shards' view).
enter_step() {
  RUN=$1 STEP=$2
  load_config "$RUN"
  CK="$RUN/ckpt/$((STEP - 1))"
  [ -f "$CK/config.json" ] || [ -f "$CK/adapter_config.json" ] || die "step $STEP: checkpoint '$CK' is missing"
  [ "$STEP" = 1 ] || complete "$CK" ||
    die "step $STEP: checkpoint '$CK' is not complete (skpo-checkpoint.json missing or not complete, or a file of another size; train.sh redoes that step)"
  TMPD="$RUN/tmp/$STEP"
  OUT="$TMPD/ckpt"
  ST="$TMPD/state"
}

# check_pipe NAMES... -- STATUSES...: after a pipeline, name the stage that failed
# first. A stage killed by SIGPIPE (141) or failing to write stdout only reacts to
# a later stage dying, and one reading a truncated stream reacts to an earlier one,
# so the culprit is the earliest stage with a status of its own.
check_pipe() {
  local names=() sts=() i culprit=-1 any=0
  while [ "$1" != "--" ]; do names+=("$1"); shift; done; shift
  sts=("$@")
  for i in "${!sts[@]}"; do
    [ "${sts[$i]}" = 0 ] && continue
    any=1
    [ "${sts[$i]}" = 141 ] && continue
    grep -qi "broken pipe\|cannot write standard output" "$TMPD/logs/${names[$i]}.err" 2>/dev/null && continue
    [ "$culprit" = -1 ] && culprit=$i
  done
  [ "$any" = 0 ] && return 0
  if [ "$culprit" = -1 ]; then for i in "${!sts[@]}"; do [ "${sts[$i]}" != 0 ] && { culprit=$i; break; }; done; fi
  local n=${names[$culprit]} s=${sts[$culprit]} why
  why="exit $s"; [ "$s" -gt 128 ] && why="killed by signal $((s - 128))"
  {
    echo "skpo-pipeline: step $STEP failed in stage '$n' ($why); step $((STEP - 1)) stays the last committed one"
    echo "skpo-pipeline: stage statuses: $(for i in "${!sts[@]}"; do printf '%s=%s ' "${names[$i]}" "${sts[$i]}"; done)"
    sed 's/^/  | /' "$TMPD/logs/$n.err" | tail -n 15
    echo "skpo-pipeline: logs in $TMPD/logs; rerun the same command to redo step $STEP"
  } >&2
  return 1
}

# commit_step: move the step's products into place, then write the marker.
commit_step() {
  [ -f "$OUT/config.json" ] || [ -f "$OUT/adapter_config.json" ] || die "step $STEP: the update wrote no checkpoint in '$OUT'"
  complete "$OUT" || die "step $STEP: the checkpoint in '$OUT' is not complete (skpo-checkpoint.json)"
  mkdir -p "$RUN/ckpt" "$RUN/state" "$RUN/rollouts" "$RUN/metrics" "$RUN/logs"
  rm -rf "$RUN/ckpt/$STEP"
  mv "$OUT" "$RUN/ckpt/$STEP"
  rm -rf "$RUN/state/$STEP"
  [ -d "$ST" ] && mv "$ST" "$RUN/state/$STEP"
  [ -f "$TMPD/rollouts.msgpack.zst" ] && commit_file "$TMPD/rollouts.msgpack.zst" "$RUN/rollouts/$STEP.msgpack.zst"
  [ -f "$TMPD/metrics.msgpack.zst" ] && commit_file "$TMPD/metrics.msgpack.zst" "$RUN/metrics/$STEP.msgpack.zst"
  for f in "$TMPD"/logs/*.err; do [ -f "$f" ] && mv -f "$f" "$RUN/logs/$STEP.$(basename "$f")"; done
  write_times >"$RUN/logs/$STEP.time.tmp"
  sync 2>/dev/null
  write_marker "$RUN" "$STEP"
  mv -f "$RUN/logs/$STEP.time.tmp" "$RUN/logs/$STEP.time"
  rm -rf "$TMPD"
}
# write_times: logs/N.time of the committed step: the wall seconds on the first
# line (what report.sh reads), then "seconds.STAGE S" for each timed stage (its
# process lifetime: piped stages overlap), the update server's split
# (seconds.update.load / .compute / .save), and "bytes.WHAT B" for what the step
# wrote: rollouts, metrics, tracker state, checkpoint (weights, optimizer), the
# records handed to the server, and their total.
write_times() {
  local c="$RUN/ckpt/$STEP" w o
  { echo "$(date +%s.%N) $STEP_T0" | awk '{printf "%.3f\n", $1 - $2}'
  # a stage run as several shards: the longest
  [ -f "$TMPD/times" ] && awk '{ d = $3 - $2; if (!($1 in m)) k[++n] = $1; if (!($1 in m) || d > m[$1]) m[$1] = d }
    END { for (i = 1; i <= n; i++) printf "seconds.%s %.3f\n", k[i], m[k[i]] }' "$TMPD/times"
  grep -h "^step=$STEP " "$RUN/logs/$STEP.update.err" 2>/dev/null | tail -n 1 | tr ' ' '\n' |
    awk -F= '$1 ~ /_s$/ { sub(/_s$/, "", $1); printf "seconds.update.%s %s\n", $1, $2 } $1 == "read_bytes" { printf "bytes.handoff %s\n", $2 }'
  o=$(bytes_of "$c"/optim*.safetensors "$c"/optim.index.json); w=$(($(bytes_of "$c") - o))
  printf 'bytes.rollouts %s\nbytes.metrics %s\nbytes.state %s\nbytes.weights %s\nbytes.optimizer %s\n' \
    "$(bytes_of "$RUN/rollouts/$STEP.msgpack.zst")" "$(bytes_of "$RUN/metrics/$STEP.msgpack.zst")" \
    "$(bytes_of "$RUN/state/$STEP")" "$w" "$o"
  } | awk '{ print } /^bytes\./ { t += $2 } END { printf "bytes.total %.0f\n", t }'
}
