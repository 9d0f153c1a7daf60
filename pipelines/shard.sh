#!/usr/bin/env bash
# pipelines/shard.sh RUN STEP FN ARGS... - one shard of step STEP's sampling stage
# (common.sh's sample_shards starts N of them): `FN ARGS --shard I/N` (a stage_sample_*
# function of common.sh; stage_sample_segment piped into stage_splice) into
# RUN/tmp/STEP/shard.I.msgpack.zst. I/N is SKPO_SHARD when set (the shards of one
# node), else this process's rank and size under the launcher (mpirun: OMPI_COMM_WORLD_*,
# srun: SLURM_PROCID / SLURM_NTASKS), which is how the shards reach the other nodes
# with NODES > 1. With GPUS the shard takes GPU L of CUDA_VISIBLE_DEVICES, L its
# index on its node. Reads only the run folder, so any node that sees it can run it.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname "$0")/common.sh"
[ $# -ge 3 ] || { echo "usage: pipelines/shard.sh RUN STEP FN [ARGS...]" >&2; exit 2; }
enter_step "$1" "$2"
shift 2
case "$1" in stage_sample_*) ;; *) die "shard.sh: '$1' is not a sampling stage (stage_sample_*)";; esac
if [ -n "${SKPO_SHARD:-}" ]; then
  I=${SKPO_SHARD%/*} N=${SKPO_SHARD#*/} LOCAL=$I VIA=local
elif [ -n "${OMPI_COMM_WORLD_RANK:-}" ]; then
  I=$OMPI_COMM_WORLD_RANK N=$OMPI_COMM_WORLD_SIZE LOCAL=${OMPI_COMM_WORLD_LOCAL_RANK:-0} VIA=mpirun
elif [ -n "${SLURM_PROCID:-}" ]; then
  I=$SLURM_PROCID N=$SLURM_NTASKS LOCAL=${SLURM_LOCALID:-0} VIA=srun
else
  die "shard.sh: no shard: set SKPO_SHARD=I/N or start it under mpirun or srun"
fi
case "$I$N$LOCAL" in ''|*[!0-9]*) die "shard.sh: shard '$I/$N' (local $LOCAL) is not I/N";; esac
[ "$I" -lt "$N" ] || die "shard.sh: shard $I is not below $N"
[ "$GPUS" -gt 0 ] && export CUDA_VISIBLE_DEVICES=$(gpu_of "$LOCAL")
echo "# $(hostname) shard $I/$N via $VIA${CUDA_VISIBLE_DEVICES:+ GPU $CUDA_VISIBLE_DEVICES}" >>"$TMPD/logs/sample.$I.err"
one_shard "$I" "$N" "$@" >"$TMPD/shard.$I.msgpack.zst"
