/*
 * comm.c - see comm.h. The local backend and the MPI backend. MPI is linked
 * when the build finds it (<mpi.h>); without it only local exists.
 */
#include "train/comm.h"

#include <fcntl.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<mpi.h>)
#define SKPO_HAVE_MPI 1
#include <mpi.h>
#endif
#endif

// MPI counts are int: move big buffers in slices of this many elements.
#define SLICE ((size_t)1 << 30)

int skpo_comm_launched_by_mpi(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

int skpo_comm_have_mpi(void) {
#ifdef SKPO_HAVE_MPI
    return 1;
#else
    return 0;
#endif
}

// --- local: one rank, collectives are the identity ------------------------------------

static skpo_status local_allreduce_f32(skpo_comm *c, float *buf, size_t n, skpo_err *err) { return SKPO_OK; }
static skpo_status local_allreduce_f64(skpo_comm *c, double *buf, size_t n, skpo_err *err) { return SKPO_OK; }
static skpo_status local_bcast(skpo_comm *c, void *buf, size_t n, int root, skpo_err *err) {
    return root == 0 ? SKPO_OK : skpo_err_set(err, SKPO_ERANGE, "broadcast root %d on a 1-rank communicator", root);
}
static skpo_status local_barrier(skpo_comm *c, skpo_err *err) { return SKPO_OK; }
static void local_destroy(skpo_comm *c) { free(c); }
static skpo_status local_shard_op(skpo_comm *c, float *buf, size_t shard, skpo_err *err) { return SKPO_OK; }

static const skpo_comm_ops local_ops = {
    "local", local_allreduce_f32, local_allreduce_f64, local_bcast, local_barrier, local_destroy,
    local_shard_op, local_shard_op,
};

// --- MPI ------------------------------------------------------------------------------

#ifdef SKPO_HAVE_MPI
static skpo_status mpi_fail(skpo_err *err, int rc, const char *what) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "code %d", rc);
    return skpo_err_set(err, SKPO_EIO, "%s failed: %s", what, s);
}

static skpo_status mpi_allreduce(void *buf, size_t n, size_t esz, MPI_Datatype t, skpo_err *err) {
    char *p = buf;
    for (size_t off = 0; off < n; off += SLICE) {
        size_t k = n - off < SLICE ? n - off : SLICE;
        int rc = MPI_Allreduce(MPI_IN_PLACE, p + off * esz, (int)k, t, MPI_SUM, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "MPI_Allreduce");
    }
    return SKPO_OK;
}

static skpo_status mpi_allreduce_f32(skpo_comm *c, float *buf, size_t n, skpo_err *err) {
    return mpi_allreduce(buf, n, sizeof *buf, MPI_FLOAT, err);
}
static skpo_status mpi_allreduce_f64(skpo_comm *c, double *buf, size_t n, skpo_err *err) {
    return mpi_allreduce(buf, n, sizeof *buf, MPI_DOUBLE, err);
}

static skpo_status mpi_bcast(skpo_comm *c, void *buf, size_t n, int root, skpo_err *err) {
    if (root < 0 || root >= c->size) return skpo_err_set(err, SKPO_ERANGE, "broadcast root %d of %d ranks", root, c->size);
    char *p = buf;
    for (size_t off = 0; off < n; off += SLICE) {
        size_t k = n - off < SLICE ? n - off : SLICE;
        int rc = MPI_Bcast(p + off, (int)k, MPI_BYTE, root, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "MPI_Bcast");
    }
    return SKPO_OK;
}

static skpo_status mpi_barrier(skpo_comm *c, skpo_err *err) {
    int rc = MPI_Barrier(MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? SKPO_OK : mpi_fail(err, rc, "MPI_Barrier");
}

static void mpi_destroy(skpo_comm *c) {
    int fin = 0;
    if (c->owns_runtime && MPI_Finalized(&fin) == MPI_SUCCESS && !fin) MPI_Finalize();
    free(c);
}

// Host-buffer versions for completeness (the CPU trainer does not shard):
// reduce-scatter as a full all-reduce, all-gather as one broadcast per rank,
// both sliced below MPI's int counts.
static skpo_status mpi_reduce_scatter_f32(skpo_comm *c, float *buf, size_t shard, skpo_err *err) {
    return mpi_allreduce(buf, shard * (size_t)c->size, sizeof *buf, MPI_FLOAT, err);
}

static skpo_status mpi_allgather_f32(skpo_comm *c, float *buf, size_t shard, skpo_err *err) {
    for (int r = 0; r < c->size; r++) {
        skpo_status st = mpi_bcast(c, buf + (size_t)r * shard, shard * sizeof *buf, r, err);
        if (st) return st;
    }
    return SKPO_OK;
}

static const skpo_comm_ops mpi_ops = {
    "mpi", mpi_allreduce_f32, mpi_allreduce_f64, mpi_bcast, mpi_barrier, mpi_destroy,
    mpi_reduce_scatter_f32, mpi_allgather_f32,
};

static skpo_status mpi_open(skpo_comm *c, skpo_err *err) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int rc = MPI_Init(NULL, NULL);
        if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "MPI_Init");
        c->owns_runtime = 1;
        // Errors come back as codes (we print them) instead of aborting the job.
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    c->ops = &mpi_ops;
    return SKPO_OK;
}
#endif

// --- NCCL: device collectives --------------------------------------------------------------

#ifdef SKPO_HAVE_CUDA
#include "cuda/cuda.h"
#include "cuda/cuda_train.h"

#include <time.h>
#include <unistd.h>

static skpo_status nccl_allreduce_f32(skpo_comm *c, float *buf, size_t n, skpo_err *err) {
    return skpo_nccl_allreduce_sum(c->impl, buf, n, err);
}

// In place: NCCL allows recvbuff == sendbuff + rank * count for both.
static skpo_status nccl_reduce_scatter_f32(skpo_comm *c, float *buf, size_t shard, skpo_err *err) {
    return skpo_nccl_reduce_scatter_sum(c->impl, buf + (size_t)c->rank * shard, buf, shard, err);
}

static skpo_status nccl_allgather_f32(skpo_comm *c, float *buf, size_t shard, skpo_err *err) {
    return skpo_nccl_allgather(c->impl, buf, buf + (size_t)c->rank * shard, shard, err);
}

// Without MPI (shared-file bootstrap) the host collectives ride on NCCL too.
static skpo_status nf_allreduce_f64(skpo_comm *c, double *buf, size_t n, skpo_err *err) {
    return skpo_nccl_allreduce_f64_host(c->impl, buf, n, err);
}
static skpo_status nf_bcast(skpo_comm *c, void *buf, size_t n, int root, skpo_err *err) {
    if (root < 0 || root >= c->size) return skpo_err_set(err, SKPO_ERANGE, "broadcast root %d of %d ranks", root, c->size);
    return skpo_nccl_bcast_host(c->impl, buf, n, root, err);
}
static skpo_status nf_barrier(skpo_comm *c, skpo_err *err) {
    double x = 0;
    return skpo_nccl_allreduce_f64_host(c->impl, &x, 1, err);
}
static void nf_destroy(skpo_comm *c) {
    skpo_nccl_free(c->impl);
    free(c);
}

static const skpo_comm_ops nccl_file_ops = {
    "nccl", nccl_allreduce_f32, nf_allreduce_f64, nf_bcast, nf_barrier, nf_destroy,
    nccl_reduce_scatter_f32, nccl_allgather_f32,
};

// Every NCCL collective of a communicator ends here (comm.h "a rank's failure").
static int nccl_poll_op(void *n, skpo_err *err) { return skpo_nccl_poll(n, err); }
static void nccl_abort_op(void *n) { skpo_nccl_abort(n); }
static skpo_status nccl_waiter(void *ctx, skpo_nccl *n, const char *what, skpo_err *err) {
    skpo_comm *c = ctx;
    skpo_comm_op op = {nccl_poll_op, nccl_abort_op, n};
    char w[64];
    snprintf(w, sizeof w, "nccl %s", what);
    skpo_status st = skpo_comm_wait(c, &op, w, err);
    if (st && c->ops == &nccl_file_ops) c->broken = 1;   // its host collectives rode on this NCCL
    return st;
}

static skpo_status nccl_file_open(struct skpo_cuda *cu, const char *path, skpo_comm **out, skpo_err *err) {
    int rank, size;
    if (!skpo_comm_file_rank(&rank, &size))
        return skpo_err_set(err, SKPO_EUNSUPPORTED,
                            "SKPO_NCCL_ID_FILE is set but no rank / size (SKPO_RANK + SKPO_WORLD_SIZE, or SLURM_PROCID + SLURM_NTASKS)");
    unsigned char id[128] = {0};
    skpo_status st = rank == 0 ? skpo_nccl_unique_id(id, err) : SKPO_OK;
    if (!st) st = skpo_comm_file_id(path, rank, id, 120.0, err);
    skpo_nccl *nc = NULL;
    if (!st) st = skpo_nccl_init(cu, id, rank, size, &nc, err);
    if (st) return st;
    // Every rank has joined: the id is no longer needed, and a later run with
    // the same path must not find a stale one.
    if (rank == 0) unlink(path);
    skpo_comm *c = skpo_xcalloc(1, sizeof *c);
    c->rank = rank;
    c->size = size;
    c->impl = nc;
    c->ops = &nccl_file_ops;
    // Failure notices next to the id file, named after this run's id (every
    // rank knows it, no other run has it). Left there for the record.
    uint64_t h = 14695981039346656037ull;
    for (int i = 0; i < 128; i++) h = (h ^ id[i]) * 1099511628211ull;
    char *np = skpo_xmalloc(strlen(path) + 32);
    sprintf(np, "%s.failed-%016llx", path, (unsigned long long)h);
    c->notice = np;
    skpo_nccl_set_waiter(nc, nccl_waiter, c);
    *out = c;
    return SKPO_OK;
}
#endif

#if defined(SKPO_HAVE_MPI) && defined(SKPO_HAVE_CUDA)
// Under MPI: NCCL carries the device buffers, MPI the host collectives.
static void nccl_destroy(skpo_comm *c) {
    skpo_nccl_free(c->impl);
    mpi_destroy(c);
}

static const skpo_comm_ops nccl_ops = {
    "nccl", nccl_allreduce_f32, mpi_allreduce_f64, mpi_bcast, mpi_barrier, nccl_destroy,
    nccl_reduce_scatter_f32, nccl_allgather_f32,
};

static skpo_status nccl_mpi_open(struct skpo_cuda *cu, skpo_comm **out, skpo_err *err) {
    skpo_comm *c = skpo_xcalloc(1, sizeof *c);
    skpo_status st = mpi_open(c, err);
    unsigned char id[128] = {0};
    if (!st && c->rank == 0) st = skpo_nccl_unique_id(id, err);
    // Every rank must take part in the broadcast even if rank 0 failed.
    int bad = st != SKPO_OK, any = 0;
    if (MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS || any) {
        if (!st) st = skpo_err_set(err, SKPO_EDEVICE, "NCCL bootstrap failed on another rank");
    } else {
        st = mpi_bcast(c, id, sizeof id, 0, err);
    }
    skpo_nccl *nc = NULL;
    if (!st) st = skpo_nccl_init(cu, id, c->rank, c->size, &nc, err);
    if (st) {
        mpi_destroy(c);
        return st;
    }
    c->impl = nc;
    c->ops = &nccl_ops;
    skpo_nccl_set_waiter(nc, nccl_waiter, c);
    *out = c;
    return SKPO_OK;
}
#endif

skpo_status skpo_comm_init_nccl(struct skpo_cuda *cu, skpo_comm **out, skpo_err *err) {
    *out = NULL;
#ifdef SKPO_HAVE_CUDA
    const char *path = getenv("SKPO_NCCL_ID_FILE");
    if (path && *path && !skpo_comm_launched_by_mpi()) return nccl_file_open(cu, path, out, err);
#endif
#if defined(SKPO_HAVE_MPI) && defined(SKPO_HAVE_CUDA)
    return nccl_mpi_open(cu, out, err);
#else
    return skpo_err_set(err, SKPO_EUNSUPPORTED, "the NCCL communicator needs a build with CUDA (and MPI, or SKPO_NCCL_ID_FILE)");
#endif
}

// --- a trainer's placement: its GPU and its communicator ---------------------------------

// Entry r mod count of CUDA_VISIBLE_DEVICES (or "r" when unset).
static void bind_gpu(long r) {
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    char pick[64];
    if (!vis || !*vis) {
        snprintf(pick, sizeof pick, "%ld", r);
    } else {
        long n = 1;
        for (const char *p = vis; *p; p++) n += *p == ',';
        long k = r % n;
        const char *p = vis;
        for (long i = 0; i < k; i++) p = strchr(p, ',') + 1;
        size_t len = strcspn(p, ",");
        if (len >= sizeof pick) return;
        memcpy(pick, p, len);
        pick[len] = 0;
    }
    setenv("CUDA_VISIBLE_DEVICES", pick, 1);
}

void skpo_comm_bind_gpu(const char *want) {
    long r = skpo_comm_local_rank();
    if (r >= 0 && (!want || strcmp(want, "cpu"))) bind_gpu(r);
}

skpo_status skpo_comm_open(skpo_comm_kind kind, int on_gpu, skpo_comm **c, struct skpo_cuda **cu, skpo_err *err) {
    *cu = NULL;
#ifdef SKPO_HAVE_CUDA
    int rank, size;
    const char *idf = getenv("SKPO_NCCL_ID_FILE");
    if (on_gpu && idf && *idf && !skpo_comm_launched_by_mpi() && skpo_comm_file_rank(&rank, &size) && size > 1) {
        skpo_status st = skpo_cuda_init(0, cu, err);
        if (!st) st = skpo_comm_init_nccl(*cu, c, err);
        return st;
    }
#else
    (void)on_gpu;
#endif
    return skpo_comm_init(kind, c, err);
}

void skpo_comm_close(skpo_comm *c, struct skpo_cuda *cu) {
    skpo_comm_free(c);
#ifdef SKPO_HAVE_CUDA
    skpo_cuda_free_ctx(cu);
#else
    (void)cu;
#endif
}

// --- shared-file bootstrap (host side; any build) --------------------------------------------

static int env_int(const char *name, long max, long *out) {
    const char *v = getenv(name);
    return v && skpo_parse_long(v, 0, max, out) == 0;
}

int skpo_comm_file_rank(int *rank, int *size) {
    long r, n;
    if ((env_int("SKPO_RANK", INT_MAX, &r) && env_int("SKPO_WORLD_SIZE", INT_MAX, &n)) ||
        (env_int("SLURM_PROCID", INT_MAX, &r) && env_int("SLURM_NTASKS", INT_MAX, &n))) {
        if (n < 1 || r >= n) return 0;
        *rank = (int)r;
        *size = (int)n;
        return 1;
    }
    return 0;
}

void skpo_comm_run_nonce(char out[96]) {
    const char *n = getenv("SKPO_RUN_NONCE"), *job = getenv("SLURM_JOB_ID"), *step = getenv("SLURM_STEP_ID");
    if (n && *n) snprintf(out, 96, "%s", n);
    else if (job && *job) snprintf(out, 96, "slurm-%s.%s", job, step && *step ? step : "0");
    else out[0] = 0;
    for (char *p = out; *p; p++)   // one word of the id file
        if (*p == ' ' || *p == '\n' || *p == '\t') *p = '_';
}

// The id file: "skpo-nccl-id 2 <nonce or -> <256 hex digits>\n".
static const char ID_MAGIC[] = "skpo-nccl-id 2";

// 1 when buf is an id file; its nonce ("" for "-") and id.
static int parse_id_file(const char *buf, char nonce[96], unsigned char id[128]) {
    char magic[32], ver[8], hex[260];
    if (sscanf(buf, "%31s %7s %95s %259s", magic, ver, nonce, hex) != 4) return 0;
    if (strcmp(magic, "skpo-nccl-id") || strcmp(ver, "2") || strlen(hex) != 256) return 0;
    for (int i = 0; i < 128; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1) return 0;
        id[i] = (unsigned char)v;
    }
    if (!strcmp(nonce, "-")) nonce[0] = 0;
    return 1;
}

// A waiting rank takes only an id of its own run: the file's nonce must be
// this run's. Without a nonce it takes only a file written at most
// SKPO_NCCL_ID_MAX_AGE seconds (default 60) before it started waiting: an
// older one is left by a crashed run, and joining with its id would hang in
// ncclCommInitRank.
skpo_status skpo_comm_file_id(const char *path, int rank, unsigned char id[128], double timeout_s, skpo_err *err) {
    char mine[96];
    skpo_comm_run_nonce(mine);
    if (rank == 0) {
        char buf[400];
        int n = snprintf(buf, sizeof buf, "%s %s ", ID_MAGIC, *mine ? mine : "-");
        for (int i = 0; i < 128; i++) n += snprintf(buf + n, sizeof buf - (size_t)n, "%02x", id[i]);
        buf[n++] = '\n';
        return skpo_write_file_atomic(path, buf, (size_t)n, err);
    }
    double t0 = skpo_now();
    time_t start = time(NULL);
    long max_age = 60;
    const char *ma = getenv("SKPO_NCCL_ID_MAX_AGE");
    if (ma && skpo_parse_long(ma, 0, 1L << 30, &max_age))
        return skpo_err_set(err, SKPO_ERANGE, "SKPO_NCCL_ID_MAX_AGE='%s': expected seconds", ma);
    double stale = -1;      // age of a stale file seen (no nonce), at the time this rank started
    char other[96] = "";    // the nonce of another run's file seen
    int foreign = 0;        // a file that is no id file of this version
    for (;;) {
        FILE *f = fopen(path, "rb");
        if (f) {
            char buf[400] = {0}, nonce[96];
            unsigned char got[128];
            struct stat sb;
            int old = fstat(fileno(f), &sb) == 0 && (double)sb.st_mtime < (double)start - (double)max_age;
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            fclose(f);
            buf[n] = 0;
            if (!parse_id_file(buf, nonce, got)) {
                foreign = 1;
            } else if (strcmp(nonce, mine)) {
                snprintf(other, sizeof other, "%s", *nonce ? nonce : "none");
            } else if (!*mine && old) {
                stale = difftime(start, sb.st_mtime);
            } else {
                memcpy(id, got, 128);   // written atomically: all or nothing
                return SKPO_OK;
            }
        }
        if (skpo_now() - t0 > timeout_s) {
            if (*other)
                return skpo_err_set(err, SKPO_EIO, "rank %d: '%s' holds the NCCL id of another run (nonce %s, this run's %s): "
                                    "left by a crashed run? remove it and restart every rank", rank, path, other, *mine ? mine : "none");
            if (stale >= 0)
                return skpo_err_set(err, SKPO_EIO, "rank %d: '%s' holds a stale NCCL id, written %.0f s before this rank started (left by a crashed run?); remove it and restart every rank",
                                    rank, path, stale);
            if (foreign)
                return skpo_err_set(err, SKPO_EFORMAT, "rank %d: '%s' is not an NCCL id file of this skpo (line 1 is not '%s ...')",
                                    rank, path, ID_MAGIC);
            return skpo_err_set(err, SKPO_EIO, "rank %d: no NCCL id in '%s' after %.0f s (is rank 0 running, and is the path on a filesystem all ranks share?)",
                                rank, path, timeout_s);
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

// --- failure notices, waiting on a device collective (comm.h) ------------------------------

#define NOTICE_TAG 7301            // the MPI tag of failure notices
static int failed_second_hand;     // this process stopped because another rank failed

void skpo_comm_set_notice_file(skpo_comm *c, const char *path) {
    free(c->notice);
    c->notice = path ? skpo_xstrdup(path) : NULL;
}

#ifdef SKPO_HAVE_MPI
static int mpi_usable(void) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    if (init) MPI_Finalized(&fin);
    return init && !fin;
}
#endif

void skpo_comm_announce_failure(skpo_comm *c, const char *msg) {
    static int announced;
    static char buf[300];   // MPI may still be sending from it after this returns
    if (announced || !c || c->size <= 1) return;
    announced = 1;
    int n = snprintf(buf, sizeof buf, "%d %s", c->rank, msg && *msg ? msg : "(no message)");
    if (n < 0 || n >= (int)sizeof buf) n = (int)sizeof buf - 1;
    if (c->notice) {   // the first notice of the run stays (later ones are second-hand)
        int fd = open(c->notice, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (fd >= 0) {
            if (write(fd, buf, (size_t)n) < 0) {}
            close(fd);
        }
        return;
    }
#ifdef SKPO_HAVE_MPI
    if (!mpi_usable()) return;
    for (int r = 0; r < c->size; r++) {
        MPI_Request q;
        if (r != c->rank && MPI_Isend(buf, n + 1, MPI_CHAR, r, NOTICE_TAG, MPI_COMM_WORLD, &q) == MPI_SUCCESS)
            MPI_Request_free(&q);
    }
#endif
}

// Another rank's notice: 1 with its rank and message.
static int notice_of_peer(skpo_comm *c, int *rank, char *msg, size_t cap) {
    char buf[300] = {0};
    if (c->notice) {
        FILE *f = fopen(c->notice, "r");
        if (!f) return 0;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
    } else {
#ifdef SKPO_HAVE_MPI
        int flag = 0;
        MPI_Status s;
        if (!mpi_usable() || MPI_Iprobe(MPI_ANY_SOURCE, NOTICE_TAG, MPI_COMM_WORLD, &flag, &s) != MPI_SUCCESS || !flag)
            return 0;
        if (MPI_Recv(buf, (int)sizeof buf, MPI_CHAR, s.MPI_SOURCE, NOTICE_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return 0;
        buf[sizeof buf - 1] = 0;
#else
        return 0;
#endif
    }
    int r, off = 0;
    if (sscanf(buf, "%d %n", &r, &off) != 1 || off == 0 || r == c->rank) return 0;
    *rank = r;
    snprintf(msg, cap, "%s", buf + off);
    return 1;
}

static double nccl_timeout(void) {
    const char *v = getenv("SKPO_NCCL_TIMEOUT");
    double t;
    return v && !skpo_parse_double(v, 1e-3, 1e9, &t) ? t : 600.0;
}

skpo_status skpo_comm_wait(skpo_comm *c, const skpo_comm_op *op, const char *what, skpo_err *err) {
    double t0 = skpo_now(), limit = nccl_timeout(), next_look = t0, nap = 2e-5;
    for (;;) {
        int r = op->poll(op->ctx, err);
        if (r > 0) return SKPO_OK;
        if (r < 0) {
            op->abort(op->ctx);
            return SKPO_EDEVICE;
        }
        // A file is looked at every 0.1 s (it may be on a network filesystem); MPI at every poll.
        double now = skpo_now();
        int peer;
        char msg[300];
        if ((!c->notice || now >= next_look) && notice_of_peer(c, &peer, msg, sizeof msg)) {
            op->abort(op->ctx);
            failed_second_hand = 1;
            return skpo_err_set(err, SKPO_EIO, "%s: rank %d failed before joining it (%s); rank %d stopped waiting and "
                                "aborted the communicator", what, peer, msg, c->rank);
        }
        if (c->notice && now >= next_look) next_look = now + 0.1;
        if (now - t0 > limit) {
            op->abort(op->ctx);
            return skpo_err_set(err, SKPO_EIO, "%s did not finish in %g s (SKPO_NCCL_TIMEOUT): another rank is stuck or "
                                "gone; rank %d aborted the communicator", what, limit, c->rank);
        }
        struct timespec ts = {0, (long)(nap * 1e9)};
        nanosleep(&ts, NULL);
        if (nap < 1e-3) nap *= 2;
    }
}

// --- open / close -----------------------------------------------------------------------

skpo_status skpo_comm_init(skpo_comm_kind kind, skpo_comm **out, skpo_err *err) {
    *out = NULL;
    if (kind == SKPO_COMM_AUTO) kind = skpo_comm_launched_by_mpi() ? SKPO_COMM_MPI : SKPO_COMM_LOCAL;
    skpo_comm *c = skpo_xcalloc(1, sizeof *c);
    c->rank = 0;
    c->size = 1;
    c->ops = &local_ops;
    if (kind == SKPO_COMM_MPI) {
#ifdef SKPO_HAVE_MPI
        skpo_status st = mpi_open(c, err);
        if (st) {
            free(c);
            return st;
        }
#else
        free(c);
        return skpo_err_set(err, SKPO_EUNSUPPORTED, "this build has no MPI (install libopenmpi-dev and rebuild)");
#endif
    } else if (kind == SKPO_COMM_NCCL) {
        free(c);
        return skpo_err_set(err, SKPO_EUNSUPPORTED, "the NCCL communicator needs a device: use skpo_comm_init_nccl");
    } else if (kind != SKPO_COMM_LOCAL) {
        free(c);
        return skpo_err_set(err, SKPO_ERANGE, "unknown communicator kind %d", (int)kind);
    }
    *out = c;
    return SKPO_OK;
}

void skpo_comm_free(skpo_comm *c) {
    if (!c) return;
    free(c->notice);
    c->notice = NULL;
    c->ops->destroy(c);
}

// --- collectives ---------------------------------------------------------------------------

skpo_status skpo_comm_allreduce_f32(skpo_comm *c, float *buf, size_t n, skpo_err *err) {
    return c->size == 1 ? SKPO_OK : c->ops->allreduce_f32(c, buf, n, err);
}
skpo_status skpo_comm_allreduce_f64(skpo_comm *c, double *buf, size_t n, skpo_err *err) {
    return c->size == 1 ? SKPO_OK : c->ops->allreduce_f64(c, buf, n, err);
}
skpo_status skpo_comm_bcast(skpo_comm *c, void *buf, size_t n, int root, skpo_err *err) {
    return c->ops->bcast(c, buf, n, root, err);
}
skpo_status skpo_comm_barrier(skpo_comm *c, skpo_err *err) {
    return c->ops->barrier(c, err);
}

skpo_status skpo_comm_reduce_scatter_f32(skpo_comm *c, float *buf, size_t shard, skpo_err *err) {
    return c->size == 1 ? SKPO_OK : c->ops->reduce_scatter_f32(c, buf, shard, err);
}
skpo_status skpo_comm_allgather_f32(skpo_comm *c, float *buf, size_t shard, skpo_err *err) {
    return c->size == 1 ? SKPO_OK : c->ops->allgather_f32(c, buf, shard, err);
}

int skpo_comm_local_rank(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        long r;
        if (v && skpo_parse_long(v, 0, INT_MAX, &r) == 0) return (int)r;
    }
    return -1;
}

skpo_status skpo_comm_bcast_bytes(skpo_comm *c, char **buf, size_t *len, int root, skpo_err *err) {
    uint64_t n = c->rank == root ? (uint64_t)*len : 0;
    skpo_status st = skpo_comm_bcast(c, &n, sizeof n, root, err);
    if (st) return st;
    if (c->rank != root) {
        *buf = skpo_xmalloc(n ? (size_t)n : 1);
        *len = (size_t)n;
    }
    st = skpo_comm_bcast(c, *buf, (size_t)n, root, err);
    if (st && c->rank != root) {
        free(*buf);
        *buf = NULL;
        *len = 0;
    }
    return st;
}

int skpo_comm_first_failed(skpo_comm *c, int failed) {
    if (c->size == 1) return failed ? 0 : -1;
    double *v = skpo_xcalloc((size_t)c->size, sizeof *v);
    v[c->rank] = failed ? (failed_second_hand ? 2.0 : 1.0) : 0.0;   // first-hand failures first
    int first = -1;
    skpo_err e = {0};
    if (skpo_comm_allreduce_f64(c, v, (size_t)c->size, &e) != SKPO_OK) first = c->rank; // cannot agree: stop
    for (int r = 0; first < 0 && r < c->size; r++)
        if (v[r] == 1.0) first = r;
    for (int r = 0; first < 0 && r < c->size; r++)
        if (v[r] != 0) first = r;
    free(v);
    return first;
}

skpo_status skpo_comm_agree(skpo_comm *c, skpo_status st, skpo_err *err) {
    if (st) skpo_comm_announce_failure(c, err->msg);   // others may be waiting in a device collective
    // Host collectives over NCCL (shared-file bootstrap) cannot agree with a
    // rank that failed or stopped: the others may be in another collective.
    if (st && c->notice) c->broken = 1;
    if (c->broken)
        return st ? st : skpo_err_set(err, SKPO_EIO, "rank %d: the communicator was aborted after another rank failed", c->rank);
    int first = skpo_comm_first_failed(c, st != SKPO_OK);
    if (first < 0) return SKPO_OK;
    if (c->size == 1) return st;
    int code = (int)st;
    skpo_err mine = *err, e2 = {0};
    if (skpo_comm_bcast(c, &code, sizeof code, first, &e2) == SKPO_OK &&
        skpo_comm_bcast(c, mine.msg, sizeof mine.msg, first, &e2) == SKPO_OK) {
        *err = mine;
        return code ? (skpo_status)code : SKPO_EIO;
    }
    return skpo_err_set(err, SKPO_EIO, "rank %d failed; %s", first, e2.msg);
}
