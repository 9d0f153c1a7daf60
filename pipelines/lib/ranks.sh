# pipelines/lib/ranks.sh - ranks, devices and the update server (sourced by
# common.sh; docs/scaling.md): the launcher, the sampler's shards, the GPUs a run
# needs, and handing a step to `skpo-update --serve`.

# nranks: update ranks of the run: GPUS (else RANKS) per node, times NODES.
nranks() {
  local per=$RANKS
  [ "$GPUS" -gt 0 ] && per=$GPUS
  echo $((per * $NODES))
}

# launcher: LAUNCH=(the MPI launcher command for nranks processes), empty for
# one rank. CPU ranks may outnumber cores (--oversubscribe) and are not pinned
# (each runs OpenMP threads).
launcher() {
  local n; n=$(nranks)
  LAUNCH=()
  [ "$n" -le 1 ] && return 0
  case "$LAUNCHER" in
    mpirun)
      LAUNCH=(mpirun -np "$n")
      [ "$(id -u)" = 0 ] && LAUNCH+=(--allow-run-as-root)
      [ "$GPUS" -gt 0 ] || LAUNCH+=(--oversubscribe --bind-to none)
      [ -n "${HOSTFILE:-}" ] && LAUNCH+=(--hostfile "$HOSTFILE")
      [ "$NODES" -gt 1 ] && LAUNCH+=(-x SKPO_SERVE_OWNER -x PATH -x OMP_NUM_THREADS)
      ;;
    srun) LAUNCH=(srun --ntasks "$n" --kill-on-bad-exit=1 --mpi=pmix);;
    *) die "LAUNCHER='$LAUNCHER' is not mpirun or srun";;
  esac
}

# launch CMD...: CMD as nranks MPI processes (one rank: CMD as is).
launch() { launcher; "${LAUNCH[@]}" "$@"; }

# nshards: sample / splice processes per step on this node: GPUS, else RANKS.
nshards() { if [ "$GPUS" -gt 0 ]; then echo "$GPUS"; else echo "$RANKS"; fi; }

# gpu_of I: the CUDA_VISIBLE_DEVICES entry of shard I (I itself when unset).
gpu_of() {
  if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then printf '%s' "$CUDA_VISIBLE_DEVICES" | cut -d, -f$(($1 + 1)); else echo "$1"; fi
}

# sharded: is the sampling stage run as several shards? (nshards > 1 on this node, or NODES > 1)
sharded() { [ "$(nshards)" -gt 1 ] || [ "$NODES" -gt 1 ]; }

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
  if [ "$NODES" -gt 1 ]; then
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
  case "$RANKS$GPUS$NODES" in *[!0-9]*) die "RANKS, GPUS and NODES must be whole numbers";; esac
  [ "$RANKS" -ge 1 ] && [ "$NODES" -ge 1 ] || die "RANKS and NODES must be at least 1"
  if [ "$(nranks)" -gt 1 ]; then
    case "$LAUNCHER" in
      mpirun) command -v mpirun >/dev/null || die "$(nranks) ranks need mpirun (apt-get install openmpi-bin)";;
      srun) command -v srun >/dev/null || die "LAUNCHER=srun but srun is not on PATH";;
      *) die "LAUNCHER='$LAUNCHER' is not mpirun or srun";;
    esac
  fi
  [ "$NODES" -gt 1 ] && [ "$LAUNCHER" = mpirun ] && [ ! -f "${HOSTFILE:-}" ] &&
    die "NODES=$NODES with LAUNCHER=mpirun needs HOSTFILE=FILE (or LAUNCHER=srun inside a Slurm allocation)"
  [ "$GPUS" -gt 0 ] || return 0
  local vis=0
  if [ -n "${CUDA_VISIBLE_DEVICES+x}" ]; then
    vis=$(printf '%s' "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
  elif command -v nvidia-smi >/dev/null; then
    vis=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  fi
  [ "$vis" -ge "$GPUS" ] || die "GPUS=$GPUS but $vis GPU(s) are visible on $(hostname) (nvidia-smi -L, CUDA_VISIBLE_DEVICES)"
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
