/*
 * comm.h - collectives for data-parallel training: rank/size, in-place sum
 * all-reduce of float buffers, broadcast, barrier.
 *
 * A communicator is a struct of function pointers (ggml-backend style) so the
 * trainer does not know what carries the bytes:
 *   local  one process, every collective is the identity (no MPI_Init, so a
 *          plain run and ASan runs never touch MPI);
 *   mpi    MPI_COMM_WORLD (CPU data parallel under mpirun / srun);
 *   nccl   allreduce_f32 sums DEVICE buffers over NCCL (one rank per GPU);
 *          the f64 all-reduce, broadcast and barrier stay on MPI with host
 *          buffers (counts, metrics, error agreement). Bootstrapped through
 *          MPI (rank 0's NCCL unique id is broadcast) or a shared file (then
 *          NCCL carries the host collectives as well). Needs a CUDA build and
 *          a device context: skpo_comm_init_nccl(). reduce_scatter_f32 and
 *          allgather_f32 (in place, device buffers) serve ZeRO-1 (optim.h).
 *          Compiled in CUDA builds but never run yet (no GPU where written).
 * SKPO_COMM_AUTO picks mpi when the process was started by an MPI launcher
 * (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK in the environment) and local
 * otherwise, so `bin/skpo-update` and `mpirun -np N bin/skpo-update` both work.
 *
 * All ranks must call each collective in the same order with the same sizes.
 * Buffers of any length are fine (split below MPI's int count limit here).
 */
#ifndef SKPO_COMM_H
#define SKPO_COMM_H

#include "base/common.h"

#include <stddef.h>

typedef enum skpo_comm_kind {
    SKPO_COMM_AUTO = 0,
    SKPO_COMM_LOCAL = 1,
    SKPO_COMM_MPI = 2,
    SKPO_COMM_NCCL = 3,   // device buffers: created by skpo_comm_init_nccl only
} skpo_comm_kind;

typedef struct skpo_comm skpo_comm;

// The backend: every slot is required.
typedef struct skpo_comm_ops {
    const char *name;
    // buf[i] = sum over ranks of buf[i], in place, on every rank.
    skpo_status (*allreduce_f32)(skpo_comm *c, float *buf, size_t n, skpo_err *err);
    skpo_status (*allreduce_f64)(skpo_comm *c, double *buf, size_t n, skpo_err *err);
    // Copy n bytes of root's buf into every rank's buf.
    skpo_status (*bcast)(skpo_comm *c, void *buf, size_t n, int root, skpo_err *err);
    skpo_status (*barrier)(skpo_comm *c, skpo_err *err);
    void (*destroy)(skpo_comm *c);
    // In place over buf (size * shard floats): after reduce_scatter, rank r's
    // slice buf[r*shard, (r+1)*shard) holds the sum over ranks of that slice
    // (the other slices are undefined); allgather copies every rank's slice r
    // into slice r of every rank's buf. (ZeRO-1 on the device.)
    skpo_status (*reduce_scatter_f32)(skpo_comm *c, float *buf, size_t shard, skpo_err *err);
    skpo_status (*allgather_f32)(skpo_comm *c, float *buf, size_t shard, skpo_err *err);
} skpo_comm_ops;

struct skpo_comm {
    const skpo_comm_ops *ops;
    int rank, size;
    int owns_runtime;   // this communicator initialised MPI and finalises it
    void *impl;         // backend state (the NCCL communicator)
    char *notice;       // failure notices go through this file (shared-file bootstrap); NULL: MPI, or none
    int broken;         // its host collectives can no longer run (they rode on an aborted NCCL)
};

// --- open / close ---------------------------------------------------------------

// kind AUTO chooses as described above. MPI is initialised here when needed
// (and finalised by skpo_comm_free of the communicator that initialised it).
// kind NCCL is refused here: it needs a device, see skpo_comm_init_nccl.
skpo_status skpo_comm_init(skpo_comm_kind kind, skpo_comm **out, skpo_err *err);
struct skpo_cuda;
// The NCCL communicator over the GPU of context cu (one rank per GPU).
// Bootstrap: under an MPI launcher (mpirun, srun --mpi=pmix) rank 0's NCCL
// unique id is broadcast over MPI, which also carries the host collectives.
// Otherwise, when SKPO_NCCL_ID_FILE names a path on a filesystem every rank
// sees (unique to the job, e.g. /shared/nccl.$SLURM_JOB_ID), rank and size
// come from SKPO_RANK / SKPO_WORLD_SIZE (else SLURM_PROCID / SLURM_NTASKS):
// rank 0 writes the id there atomically, the others poll for it (120 s), and
// rank 0 removes it once all have joined; the host collectives (counts,
// metrics, broadcasts, error agreement) then go over NCCL too, staged
// through device memory. Neither: a single rank (MPI as a singleton).
// SKPO_EUNSUPPORTED in builds without CUDA (or without MPI and the file).
skpo_status skpo_comm_init_nccl(struct skpo_cuda *cu, skpo_comm **out, skpo_err *err);

// --- a trainer's placement (skpo-update) -------------------------------------------

// Under a launcher (a local rank, skpo_comm_local_rank), unless want is "cpu":
// narrow CUDA_VISIBLE_DEVICES to this rank's GPU, entry (local rank mod count),
// or the local rank when unset. want: the --device name, else $SKPO_DEVICE;
// NULL = whatever is visible. Must run before anything initialises CUDA: the
// runtime reads the variable once.
void skpo_comm_bind_gpu(const char *want);
// The trainer's communicator: kind's (skpo_comm_init), or, on a GPU with
// SKPO_NCCL_ID_FILE set, no MPI launcher and more than one file rank, NCCL
// bootstrapped through that file on a device context of its own (*cu; NULL
// otherwise). skpo_comm_close frees both, the communicator first.
skpo_status skpo_comm_open(skpo_comm_kind kind, int on_gpu, skpo_comm **c, struct skpo_cuda **cu, skpo_err *err);
void skpo_comm_close(skpo_comm *c, struct skpo_cuda *cu);
void skpo_comm_free(skpo_comm *c);
// True when the environment says an MPI launcher started this process.
int skpo_comm_launched_by_mpi(void);
// Is this build able to do MPI at all.
int skpo_comm_have_mpi(void);

// --- collectives (thin wrappers over c->ops) ------------------------------------------

skpo_status skpo_comm_allreduce_f32(skpo_comm *c, float *buf, size_t n, skpo_err *err);
skpo_status skpo_comm_allreduce_f64(skpo_comm *c, double *buf, size_t n, skpo_err *err);
skpo_status skpo_comm_bcast(skpo_comm *c, void *buf, size_t n, int root, skpo_err *err);
skpo_status skpo_comm_barrier(skpo_comm *c, skpo_err *err);
// See skpo_comm_ops; identity on one rank.
skpo_status skpo_comm_reduce_scatter_f32(skpo_comm *c, float *buf, size_t shard, skpo_err *err);
skpo_status skpo_comm_allgather_f32(skpo_comm *c, float *buf, size_t shard, skpo_err *err);
// Shared-file bootstrap pieces (any build, so they are testable without a GPU):
// rank and size from SKPO_RANK / SKPO_WORLD_SIZE or SLURM_PROCID /
// SLURM_NTASKS (0 when absent or inconsistent); the 128-byte id written by
// rank 0 (atomically) or read by the others (polling up to timeout_s).
// The file carries the run's nonce (skpo_comm_run_nonce): a waiting rank takes
// only an id of its own run, so an id file a crashed run left, however
// recent, is never joined (that would hang in ncclCommInitRank). Without a
// nonce, a file written more than SKPO_NCCL_ID_MAX_AGE seconds (60) before the
// rank started waiting counts as stale.
int skpo_comm_file_rank(int *rank, int *size);
skpo_status skpo_comm_file_id(const char *path, int rank, unsigned char id[128], double timeout_s, skpo_err *err);
// What every rank of one run, and no other run, has: $SKPO_RUN_NONCE, else
// Slurm's job and step ($SLURM_JOB_ID.$SLURM_STEP_ID); "" when neither is set.
void skpo_comm_run_nonce(char out[96]);

// --- a rank's failure while the others wait in a device collective ---------------------
//
// A rank that fails before a collective never joins it, and the others would
// wait in NCCL forever. So a failing rank posts a notice (skpo_comm_agree does,
// before agreeing): a small MPI message to every other rank, or, under the
// shared-file bootstrap, a file next to the id file. A rank waiting on a NCCL
// collective (skpo_comm_wait, the NCCL communicators' waiter) polls the
// collective, NCCL's asynchronous error, the notices and a deadline of
// SKPO_NCCL_TIMEOUT seconds (600); the first that says no aborts the
// communicator (ncclCommAbort) and fails the collective naming the rank and
// its reason, or the timeout. Agreement then reports the rank that failed
// first-hand, not the ones that stopped because of it.
typedef struct skpo_comm_op {
    int (*poll)(void *ctx, skpo_err *err);   // 1 done, 0 not yet, -1 failed (err set)
    void (*abort)(void *ctx);
    void *ctx;
} skpo_comm_op;
skpo_status skpo_comm_wait(skpo_comm *c, const skpo_comm_op *op, const char *what, skpo_err *err);
// Post this rank's failure notice (once per process; nothing on one rank).
void skpo_comm_announce_failure(skpo_comm *c, const char *msg);
// Send and watch notices through the file PATH (the shared-file bootstrap does).
void skpo_comm_set_notice_file(skpo_comm *c, const char *path);
// This process's rank on its node as the launcher says
// (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCALRANKID, LOCAL_RANK);
// -1 when none is set. Picks the GPU of a rank without starting MPI.
int skpo_comm_local_rank(void);
// Broadcast a byte string whose length only root knows: *buf/*len are root's
// input; on other ranks they are outputs (malloc'd, caller frees).
skpo_status skpo_comm_bcast_bytes(skpo_comm *c, char **buf, size_t *len, int root, skpo_err *err);
// Agree on a failure: returns the lowest rank whose `failed` is nonzero (a
// rank that failed first-hand before one that stopped on another's notice),
// or -1. Lets every rank stop together instead of hanging in the next collective.
int skpo_comm_first_failed(skpo_comm *c, int failed);
// The same for a status: returns SKPO_OK when every rank passed SKPO_OK;
// otherwise every rank returns the first failed rank's status with its
// message copied into err. A failing rank posts its notice first. On a broken
// communicator no agreement is possible: each rank returns its own status.
skpo_status skpo_comm_agree(skpo_comm *c, skpo_status st, skpo_err *err);

#endif
