/*
 * optim_dev.c - the optimizer's device path (optim.h, "Device path"): moments
 * on the GPU, gradient reduction (all-reduce or ZeRO-1 reduce-scatter /
 * all-gather), norm (one deterministic launch, before the update: a
 * non-finite norm is refused with the weights untouched), clipping and AdamW
 * over every tensor in one launch (a plan of the rank's segments, made once).
 * It names no device: every device operation is one of the backend's
 * primitives (model.h skpo_dev_ops, given with the buffers); a model whose
 * backend gives none is refused.
 */
#include "train/comm.h"
#include "train/optim_dev.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// Flat layout: param i covers [off[i], off[i+1]). This rank steps segment A =
// [lo, lo + shard) (moments at 0) and, under ZeRO, the tail [tail0, numel)
// (moments at shard) that every rank keeps whole: its held elements.
// Offloaded: the moments and the masters of the held elements are at their
// host homes hm / hv / hw, m = v = NULL, and the model has freed its masters.
// A flat home is indexed by flat element and is memory that exists anyway
// (rank 0's host moments o->mflat / vflat, the params' host data); otherwise
// it is a pinned buffer of this optimizer indexed by held element (A at 0, the
// tail at shard).
struct skpo_optim_dev {
    skpo_dev_params d;
    skpo_comm *comm;
    int zero;
    size_t *off;
    int *decay;
    size_t shard, lo, tail0;
    float *m, *v;
    float *hm, *hv, *hw;
    int hm_flat, hw_flat;   // hv is like hm
    void *locked[8];        // page-locked ranges of the flat homes
    int nlocked, lock_tried;
    int offloaded;
    void *plan;                   // the segments this rank steps (built on the first step; the backend's)
};

void optim_dev_free(struct skpo_optim_dev *d) {
    if (!d) return;
    d->d.ops->free(d->m);
    d->d.ops->free(d->v);
    for (int i = 0; i < d->nlocked; i++) d->d.ops->host_unregister(d->locked[i]);
    if (!d->hm_flat) d->d.ops->host_free(d->hm);
    if (!d->hm_flat) d->d.ops->host_free(d->hv);
    if (!d->hw_flat) d->d.ops->host_free(d->hw);
    d->d.ops->adamw_plan_free(d->plan);
    free(d->off);
    free(d->decay);
    free(d);
}

// Copy flat elements [a, a + len) between the per-param host arrays hs and
// the flat device buffer dev (element a of the flat space at dev[0]).
static skpo_status host_dev(const struct skpo_optim_dev *D, int n, float **hs, float *dev, size_t a, size_t len,
                            int to_device, skpo_err *err) {
    size_t b = a + len;
    for (int i = 0; i < n; i++) {
        size_t x = D->off[i] > a ? D->off[i] : a, y = D->off[i + 1] < b ? D->off[i + 1] : b;
        if (x >= y) continue;
        float *h = hs[i] + (x - D->off[i]);
        float *dv = dev + (x - a);
        skpo_status st = to_device ? D->d.ops->h2d(D->d.cu, dv, h, (y - x) * 4, err)
                                   : D->d.ops->d2h(D->d.cu, h, dv, (y - x) * 4, err);
        if (st) return st;
    }
    return SKPO_OK;
}

skpo_status skpo_optim_to_device(skpo_optim *o, const skpo_param *params, int n, const skpo_dev_params *d,
                                 struct skpo_comm *comm, int zero, skpo_err *err) {
    SKPO_ASSERT(n == o->n && !o->dev);
    if (!d->ops) return skpo_err_set(err, SKPO_EUNSUPPORTED, "the model's backend has no device optimizer");
    if (comm->size > 1 && strcmp(comm->ops->name, "nccl"))
        return skpo_err_set(err, SKPO_EUNSUPPORTED,
                            "training on cuda over %d ranks needs the NCCL communicator (got '%s')", comm->size,
                            comm->ops->name);
    struct skpo_optim_dev *D = skpo_xcalloc(1, sizeof *D);
    D->d = *d;
    D->comm = comm;
    D->zero = zero && comm->size > 1;
    D->off = skpo_xcalloc((size_t)n + 1, sizeof *D->off);
    D->decay = skpo_xcalloc((size_t)n + 1, sizeof *D->decay);
    for (int i = 0; i < n; i++) {
        SKPO_ASSERT(params[i].numel == o->numel[i]);
        D->off[i + 1] = D->off[i] + params[i].numel;
        D->decay[i] = o->cfg.weight_decay != 0 && (!o->cfg.decay_matrices_only || params[i].ndim >= 2);
    }
    size_t total = D->off[n];
    if (total != d->numel) {
        optim_dev_free(D);
        return skpo_err_set(err, SKPO_ERANGE, "device buffers hold %zu parameters, the optimizer %zu", d->numel, total);
    }
    if (D->zero) {
        // Shards a multiple of 4 floats: every rank's slice (and NCCL's
        // in-place recv = send + rank * count) starts 16-byte aligned; the
        // remainder joins the tail that every rank keeps whole.
        D->shard = d->numel / (size_t)comm->size / 4 * 4;
        D->lo = (size_t)comm->rank * D->shard;
        D->tail0 = D->shard * (size_t)comm->size;
    } else {
        D->shard = d->numel;
        D->tail0 = d->numel;
    }
    size_t tail = d->numel - D->tail0, k = D->shard + tail;
    skpo_status st = D->d.ops->malloc(d->cu, (void **)&D->m, k * 4, "AdamW first moments", err);
    if (!st) st = D->d.ops->malloc(d->cu, (void **)&D->v, k * 4, "AdamW second moments", err);
    if (!st) st = host_dev(D, n, o->m, D->m, D->lo, D->shard, 1, err);
    if (!st) st = host_dev(D, n, o->v, D->v, D->lo, D->shard, 1, err);
    if (!st && tail) st = host_dev(D, n, o->m, D->m + D->shard, D->tail0, tail, 1, err);
    if (!st && tail) st = host_dev(D, n, o->v, D->v + D->shard, D->tail0, tail, 1, err);
    if (st) {
        optim_dev_free(D);
        return st;
    }
    // Only rank 0 writes the state file: the others need no host moments (8
    // bytes per parameter each). Rank 0's are the home of its moments while
    // offloaded; the params' host data, when one array, that of the masters.
    if (comm->rank != 0) {
        free(o->mflat), free(o->vflat);
        o->mflat = o->vflat = NULL;
        for (int i = 0; i < n; i++) o->m[i] = o->v[i] = NULL;
    } else {
        D->hm = o->mflat, D->hv = o->vflat, D->hm_flat = 1;
    }
    int one = n > 0 && params[0].data;
    for (int i = 0; one && i < n; i++) one = params[i].data == params[0].data + D->off[i];
    if (one) D->hw = params[0].data, D->hw_flat = 1;
    o->dev = D;
    return SKPO_OK;
}

// Gradients summed over ranks where this rank needs them.
static skpo_status reduce_grads(struct skpo_optim_dev *D, skpo_err *err) {
    skpo_comm *c = D->comm;
    if (c->size == 1) return SKPO_OK;
    if (!D->zero) return skpo_comm_allreduce_f32(c, D->d.grad, D->d.numel, err);
    skpo_status st = skpo_comm_reduce_scatter_f32(c, D->d.grad, D->shard, err);
    if (!st && D->d.numel > D->tail0) st = skpo_comm_allreduce_f32(c, D->d.grad + D->tail0, D->d.numel - D->tail0, err);
    return st;
}

static skpo_status global_norm(struct skpo_optim_dev *D, double *norm, skpo_err *err) {
    double ss = 0, t = 0;
    skpo_status st = D->d.ops->sumsq_f64(D->d.cu, &ss, D->d.grad + D->lo, D->shard, err);
    // The tail is identical on every rank: rank 0 counts it once.
    if (!st && D->d.numel > D->tail0 && D->comm->rank == 0)
        st = D->d.ops->sumsq_f64(D->d.cu, &t, D->d.grad + D->tail0, D->d.numel - D->tail0, err);
    ss += t;
    if (!st && D->zero) st = skpo_comm_allreduce_f64(D->comm, &ss, 1, err);
    *norm = sqrt(ss);
    return st;
}

// Segments of the parameters inside flat [a, b) whose moments start at
// moment index mo, appended to segs.
static int add_segments(const skpo_optim *o, size_t a, size_t b, size_t mo, skpo_dev_seg *segs, int n) {
    const struct skpo_optim_dev *D = o->dev;
    for (int i = 0; i < o->n; i++) {
        size_t x = D->off[i] > a ? D->off[i] : a, y = D->off[i + 1] < b ? D->off[i + 1] : b;
        if (x >= y) continue;
        float wd = D->decay[i] ? (float)o->cfg.weight_decay : 0.f;
        segs[n++] = (skpo_dev_seg){.x = x, .n = y - x, .mo = mo + (x - a), .wd = wd};
    }
    return n;
}

// The rank's slice [lo, lo + shard) and the tail, as one launch's segments.
static skpo_status adamw_plan(skpo_optim *o, skpo_err *err) {
    struct skpo_optim_dev *D = o->dev;
    if (D->plan) return SKPO_OK;
    skpo_dev_seg *segs = skpo_xmalloc(2 * ((size_t)o->n + 1) * sizeof *segs);
    int n = add_segments(o, D->lo, D->lo + D->shard, 0, segs, 0);
    if (D->d.numel > D->tail0) n = add_segments(o, D->tail0, D->d.numel, D->shard, segs, n);
    skpo_status st = D->d.ops->adamw_plan_new(D->d.cu, segs, n, &D->plan, err);
    free(segs);
    return st;
}

skpo_status optim_dev_step(skpo_optim *o, double lr, double *grad_norm, skpo_err *err) {
    struct skpo_optim_dev *D = o->dev;
    if (D->offloaded) return skpo_err_set(err, SKPO_EUNSUPPORTED, "the optimizer is offloaded to the host: reload it first");
    // The communicator may run on another stream than the model (the
    // shared-file bootstrap opens its own context): collectives start only
    // after the model's stream is idle.
    skpo_status st = D->d.ops->sync(D->d.cu, err);
    if (!st) st = reduce_grads(D, err);
    double norm = 0;
    if (!st) st = global_norm(D, &norm, err);
    if (st) return st;
    if (grad_norm) *grad_norm = norm;
    if (!isfinite(norm)) return skpo_err_set(err, SKPO_ENUMERIC, "gradient norm is %g", norm);
    float coef = 1.0f;
    if (o->cfg.max_grad_norm > 0) {
        float cf = (float)o->cfg.max_grad_norm / ((float)norm + 1e-6f);
        if (cf < 1.0f) coef = cf;
    }
    if ((st = adamw_plan(o, err))) return st;
    o->t++;
    const skpo_adamw_cfg *c = &o->cfg;
    st = D->d.ops->adamw_multi(D->d.cu, D->plan, D->d.master, D->d.w, D->m, D->v, D->d.grad, (float)lr, (float)c->beta1,
                               (float)c->beta2, (float)c->eps, (int)o->t, coef, err);
    if (!st && D->zero) {
        st = D->d.ops->sync(D->d.cu, err);
        if (!st) st = skpo_comm_allgather_f32(D->comm, D->d.master, D->shard, err);
        if (!st) st = D->d.ops->to_bf16(D->d.cu, D->d.w, D->d.master, D->tail0, err);
    }
    if (!st) st = D->d.ops->sync(D->d.cu, err);
    return st;
}

// ZeRO: every rank's slice of one moment buffer, in chunks through a device
// buffer of size * K floats, lands in rank 0's host arrays.
#define GATHER_CHUNK ((size_t)1 << 24)

static skpo_status gather_moments(skpo_optim *o, float *dm, float **host, skpo_err *err) {
    struct skpo_optim_dev *D = o->dev;
    skpo_comm *c = D->comm;
    size_t K = D->shard < GATHER_CHUNK ? D->shard : GATHER_CHUNK, R = (size_t)c->size;
    float *tmp = NULL;
    skpo_status st = D->d.ops->malloc(D->d.cu, (void **)&tmp, (K ? K : 1) * R * 4, "optimizer state gather", err);
    for (size_t c0 = 0; !st && c0 < D->shard; c0 += K) {
        size_t len = D->shard - c0 < K ? D->shard - c0 : K;
        st = D->d.ops->d2d(D->d.cu, tmp + (size_t)c->rank * len, dm + c0, len * 4, err);
        if (!st) st = D->d.ops->sync(D->d.cu, err);
        if (!st) st = skpo_comm_allgather_f32(c, tmp, len, err);
        for (size_t r = 0; !st && c->rank == 0 && r < R; r++)
            st = host_dev(D, o->n, host, tmp + r * len, r * D->shard + c0, len, 0, err);
    }
    D->d.ops->free(tmp);
    return st;
}

skpo_status skpo_optim_from_device(skpo_optim *o, skpo_err *err) {
    struct skpo_optim_dev *D = o->dev;
    if (!D) return SKPO_OK;
    if (D->offloaded) return skpo_err_set(err, SKPO_EUNSUPPORTED, "the optimizer is offloaded to the host: reload it first");
    skpo_status st = SKPO_OK;
    if (D->zero) {
        st = gather_moments(o, D->m, o->m, err);
        if (!st) st = gather_moments(o, D->v, o->v, err);
    }
    if (D->comm->rank != 0 || st) return st;
    if (!D->zero) {
        st = host_dev(D, o->n, o->m, D->m, 0, D->d.numel, 0, err);
        if (!st) st = host_dev(D, o->n, o->v, D->v, 0, D->d.numel, 0, err);
    } else if (D->d.numel > D->tail0) {
        size_t tail = D->d.numel - D->tail0;
        st = host_dev(D, o->n, o->m, D->m + D->shard, D->tail0, tail, 0, err);
        if (!st) st = host_dev(D, o->n, o->v, D->v + D->shard, D->tail0, tail, 0, err);
    }
    return st;
}
// Moments held here: [lo, lo + shard) at index 0, the tail [tail0, numel) at
// shard (ZeRO-1's last rank: the two are adjacent).
skpo_status optim_dev_copy_range(const skpo_optim *o, size_t a, size_t b, float *m, float *v, skpo_err *err) {
    const struct skpo_optim_dev *D = o->dev;
    size_t seg[2][3] = {{D->lo, D->lo + D->shard, 0}, {D->tail0, D->d.numel, D->shard}}, got = 0;
    for (int k = 0; k < 2; k++) {
        size_t x = seg[k][0] > a ? seg[k][0] : a, y = seg[k][1] < b ? seg[k][1] : b;
        if (x >= y) continue;
        size_t at = seg[k][2] + (x - seg[k][0]), bytes = (y - x) * 4;
        skpo_status st = SKPO_OK;
        if (D->offloaded) {
            size_t h = D->hm_flat ? x : at;
            memcpy(m + (x - a), D->hm + h, bytes);
            memcpy(v + (x - a), D->hv + h, bytes);
        } else {
            st = D->d.ops->d2h(D->d.cu, m + (x - a), D->m + at, bytes, err);
            if (!st) st = D->d.ops->d2h(D->d.cu, v + (x - a), D->v + at, bytes, err);
        }
        if (st) return st;
        got += y - x;
    }
    if (got != b - a)
        return skpo_err_set(err, SKPO_ERANGE, "rank %d holds optimizer state [%zu, %zu) + [%zu, %zu), not all of [%zu, %zu)",
                            D->comm->rank, D->lo, D->lo + D->shard, D->tail0, D->d.numel, a, b);
    return SKPO_OK;
}

static size_t held(const struct skpo_optim_dev *D) { return D->shard + (D->d.numel - D->tail0); }

// The held elements between a host home and a device buffer (to_host: d2h);
// *_flat: indexed by flat element, else by held element.
static skpo_status held_copy(const struct skpo_optim_dev *D, float *host, int host_flat, float *dev, int dev_flat,
                             int to_host, skpo_err *err) {
    size_t n[2] = {D->shard, D->d.numel - D->tail0}, flat[2] = {D->lo, D->tail0}, at[2] = {0, D->shard};
    for (int k = 0; k < 2; k++) {
        if (!n[k]) continue;
        float *h = host + (host_flat ? flat[k] : at[k]), *dv = dev + (dev_flat ? flat[k] : at[k]);
        skpo_status st = to_host ? D->d.ops->d2h(D->d.cu, h, dv, n[k] * 4, err) : D->d.ops->h2d(D->d.cu, dv, h, n[k] * 4, err);
        if (st) return st;
    }
    return SKPO_OK;
}

// Page-lock the held ranges of a flat home (adjacent ones as one), so its
// copies run at pinned speed. Failing costs only speed.
static void lock_home(struct skpo_optim_dev *D, float *home) {
    uintptr_t r[2][2];
    size_t a[2] = {D->lo, D->tail0}, b[2] = {D->lo + D->shard, D->d.numel};
    int n = 0;
    for (int k = 0; k < 2; k++) {
        if (a[k] == b[k]) continue;
        uintptr_t x = (uintptr_t)(home + a[k]), y = (uintptr_t)(home + b[k]);
        if (n && x <= r[n - 1][1]) r[n - 1][1] = y > r[n - 1][1] ? y : r[n - 1][1];
        else r[n][0] = x, r[n][1] = y, n++;
    }
    for (int k = 0; k < n && D->nlocked < (int)(sizeof D->locked / sizeof D->locked[0]); k++) {
        skpo_err e = {0};
        if (D->d.ops->host_register((void *)r[k][0], r[k][1] - r[k][0], &e) == SKPO_OK)
            D->locked[D->nlocked++] = (void *)r[k][0];
        else
            skpo_warn("offload: copies to host memory run unpinned (%s)", e.msg);
    }
}

// Only this rank's slice of the (replicated) masters goes to the host: under
// ZeRO-1 the reload all-gathers the rest from the other ranks over NCCL, as
// every step does, so PCIe carries 12 P / N bytes per rank each way.
skpo_status optim_dev_offload(skpo_optim *o, skpo_err *err) {
    struct skpo_optim_dev *D = o->dev;
    if (D->offloaded) return SKPO_OK;
    size_t bytes = held(D) * 4;
    skpo_status st = D->d.ops->sync(D->d.cu, err);
    if (!st && !D->hm) st = D->d.ops->host_alloc((void **)&D->hm, bytes + 4, err);
    if (!st && !D->hv) st = D->d.ops->host_alloc((void **)&D->hv, bytes + 4, err);
    if (!st && !D->hw) st = D->d.ops->host_alloc((void **)&D->hw, bytes + 4, err);
    if (!st && !D->lock_tried) {
        D->lock_tried = 1;
        if (D->hm_flat) lock_home(D, D->hm), lock_home(D, D->hv);
        if (D->hw_flat) lock_home(D, D->hw);
    }
    if (!st) st = held_copy(D, D->hm, D->hm_flat, D->m, 0, 1, err);
    if (!st) st = held_copy(D, D->hv, D->hm_flat, D->v, 0, 1, err);
    if (!st) st = held_copy(D, D->hw, D->hw_flat, D->d.master, 1, 1, err);
    if (st) return st;
    D->d.ops->free(D->m);
    D->d.ops->free(D->v);
    D->m = D->v = NULL;
    D->offloaded = 1;
    return SKPO_OK;
}

skpo_status optim_dev_reload(skpo_optim *o, const skpo_dev_params *d, skpo_err *err) {
    struct skpo_optim_dev *D = o->dev;
    if (!D->offloaded) return SKPO_OK;
    if (d->numel != D->d.numel)
        return skpo_err_set(err, SKPO_ERANGE, "device buffers hold %zu parameters, the optimizer %zu", d->numel, D->d.numel);
    size_t bytes = held(D) * 4;
    skpo_status st = D->d.ops->malloc(d->cu, (void **)&D->m, bytes + 4, "AdamW first moments", err);
    if (!st) st = D->d.ops->malloc(d->cu, (void **)&D->v, bytes + 4, "AdamW second moments", err);
    if (!st) st = held_copy(D, D->hm, D->hm_flat, D->m, 0, 0, err);
    if (!st) st = held_copy(D, D->hv, D->hm_flat, D->v, 0, 0, err);
    if (st) {
        D->d.ops->free(D->m);
        D->d.ops->free(D->v);
        D->m = D->v = NULL;
        return st;
    }
    D->d = *d;
    D->offloaded = 0;
    st = held_copy(D, D->hw, D->hw_flat, D->d.master, 1, 0, err);
    if (!st && D->zero) st = D->d.ops->sync(D->d.cu, err);
    if (!st && D->zero) st = skpo_comm_allgather_f32(D->comm, D->d.master, D->shard, err);
    if (!st) st = D->d.ops->sync(D->d.cu, err);
    return st;
}

int optim_dev_offloaded(const skpo_optim *o) { return o->dev->offloaded; }
