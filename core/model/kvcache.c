/*
 * kvcache.c - paged KV cache bookkeeping: a pool of blocks with reference
 * counts, per-sequence block tables, fork by sharing, copy-on-write of a
 * shared block on the first append into it. See kvcache.h for the layout.
 *
 * Not here: attention itself (model.c walks the block tables) and device
 * memory: a pool made by skpo_kv_new_ext belongs to its owner's callbacks
 * (model_cuda.c keeps it on the GPU and copies blocks there).
 */
#include "model/kvcache.h"

#include <stdlib.h>
#include <string.h>

typedef struct kv_seq {
    int used;     // slot in use
    int len;      // positions held
    int *blocks;  // block table
    int nblocks, cap;
} kv_seq;

struct skpo_kv {
    skpo_kv_shape shape;
    float *k, *v;          // (n_blocks, n_layers, block_size, kv_dim)
    int *refcount;         // (n_blocks)
    int *free_list;        // stack of free block ids
    size_t nfree;
    kv_seq *seqs;          // (max_seqs)
    size_t block_floats;   // floats per block per K or V: n_layers * block_size * kv_dim
    const skpo_kv_pool_ops *ext;  // non-NULL: the pool lives elsewhere (xk, xv)
    void *ext_ctx;
    void *xk, *xv;
};

static int shape_ok(const skpo_kv_shape *shape, size_t elem, skpo_err *err) {
    if (shape->n_layers <= 0 || shape->kv_dim <= 0 || shape->block_size <= 0 || shape->n_blocks == 0 ||
        shape->max_seqs <= 0 || shape->n_blocks > INT32_MAX) {
        skpo_err_set(err, SKPO_ERANGE, "invalid kv cache shape");
        return 0;
    }
    size_t bf = (size_t)shape->n_layers * (size_t)shape->block_size * (size_t)shape->kv_dim;
    if (bf > SIZE_MAX / elem / shape->n_blocks) {
        skpo_err_set(err, SKPO_ENOMEM, "kv cache too large");
        return 0;
    }
    return 1;
}

// The bookkeeping half shared by both kinds of pool.
static skpo_kv *kv_alloc(const skpo_kv_shape *shape) {
    skpo_kv *kv = skpo_xcalloc(1, sizeof *kv);
    kv->shape = *shape;
    kv->block_floats = (size_t)shape->n_layers * (size_t)shape->block_size * (size_t)shape->kv_dim;
    kv->refcount = skpo_xcalloc(shape->n_blocks, sizeof(int));
    kv->free_list = skpo_xmalloc(shape->n_blocks * sizeof(int));
    // Hand out low block ids first (pop from the end).
    for (size_t i = 0; i < shape->n_blocks; i++) kv->free_list[i] = (int)(shape->n_blocks - 1 - i);
    kv->nfree = shape->n_blocks;
    kv->seqs = skpo_xcalloc((size_t)shape->max_seqs, sizeof(kv_seq));
    return kv;
}

skpo_kv *skpo_kv_new(const skpo_kv_shape *shape, skpo_err *err) {
    if (!shape_ok(shape, sizeof(float), err)) return NULL;
    skpo_kv *kv = kv_alloc(shape);
    size_t bytes = kv->block_floats * shape->n_blocks * sizeof(float);
    kv->k = malloc(bytes);
    kv->v = malloc(bytes);
    if (!kv->k || !kv->v) {
        skpo_err_set(err, SKPO_ENOMEM, "cannot allocate kv cache (%zu MiB)", 2 * bytes >> 20);
        skpo_kv_free(kv);
        return NULL;
    }
    return kv;
}

skpo_kv *skpo_kv_new_ext(const skpo_kv_shape *shape, const skpo_kv_pool_ops *ops, void *ctx, skpo_err *err) {
    SKPO_ASSERT(ops && ops->elem_bytes > 0 && ops->alloc && ops->release && ops->copy_block);
    if (!shape_ok(shape, ops->elem_bytes, err)) return NULL;
    // The pool first: a pool that does not fit fails before the bookkeeping is built.
    size_t bf = (size_t)shape->n_layers * (size_t)shape->block_size * (size_t)shape->kv_dim;
    void *k, *v;
    if (ops->alloc(ctx, bf * shape->n_blocks * ops->elem_bytes, &k, &v, err) != SKPO_OK) return NULL;
    skpo_kv *kv = kv_alloc(shape);
    kv->ext = ops;
    kv->ext_ctx = ctx;
    kv->xk = k;
    kv->xv = v;
    return kv;
}

void *skpo_kv_pool_raw_k(skpo_kv *kv) { return kv->ext ? kv->xk : (void *)kv->k; }
void *skpo_kv_pool_raw_v(skpo_kv *kv) { return kv->ext ? kv->xv : (void *)kv->v; }
void *skpo_kv_pool_ctx(const skpo_kv *kv) { return kv->ext ? kv->ext_ctx : NULL; }

void skpo_kv_free(skpo_kv *kv) {
    if (!kv) return;
    if (kv->seqs)
        for (int i = 0; i < kv->shape.max_seqs; i++) free(kv->seqs[i].blocks);
    free(kv->seqs);
    if (kv->ext) kv->ext->release(kv->ext_ctx, kv->xk, kv->xv);
    free(kv->k);
    free(kv->v);
    free(kv->refcount);
    free(kv->free_list);
    free(kv);
}

const skpo_kv_shape *skpo_kv_get_shape(const skpo_kv *kv) { return &kv->shape; }

static kv_seq *get_seq(const skpo_kv *kv, int seq) {
    SKPO_ASSERT(seq >= 0 && seq < kv->shape.max_seqs && kv->seqs[seq].used);
    return &kv->seqs[seq];
}

static int alloc_slot(skpo_kv *kv) {
    for (int i = 0; i < kv->shape.max_seqs; i++)
        if (!kv->seqs[i].used) {
            kv_seq *s = &kv->seqs[i];
            s->used = 1;
            s->len = 0;
            s->nblocks = 0;
            return i;
        }
    return -1;
}

int skpo_kv_seq_new(skpo_kv *kv) { return alloc_slot(kv); }

int skpo_kv_seq_fork(skpo_kv *kv, int seq) {
    int id = alloc_slot(kv);
    if (id < 0) return -1;
    kv_seq *src = get_seq(kv, seq), *dst = &kv->seqs[id];
    if (dst->cap < src->nblocks) {
        dst->blocks = skpo_xrealloc(dst->blocks, (size_t)src->nblocks * sizeof(int));
        dst->cap = src->nblocks;
    }
    memcpy(dst->blocks, src->blocks, (size_t)src->nblocks * sizeof(int));
    dst->nblocks = src->nblocks;
    dst->len = src->len;
    for (int i = 0; i < src->nblocks; i++) kv->refcount[src->blocks[i]]++;
    return id;
}

static void unref(skpo_kv *kv, int b) {
    SKPO_ASSERT(kv->refcount[b] > 0);
    if (--kv->refcount[b] == 0) kv->free_list[kv->nfree++] = b;
}

void skpo_kv_seq_free(skpo_kv *kv, int seq) {
    kv_seq *s = get_seq(kv, seq);
    for (int i = 0; i < s->nblocks; i++) unref(kv, s->blocks[i]);
    s->nblocks = 0;
    s->len = 0;
    s->used = 0;
}

int skpo_kv_seq_len(const skpo_kv *kv, int seq) { return get_seq(kv, seq)->len; }

static void copy_block(skpo_kv *kv, int dst, int src) {
    size_t n = kv->block_floats;
    if (kv->ext) {
        kv->ext->copy_block(kv->ext_ctx, kv->xk, kv->xv, n * kv->ext->elem_bytes, dst, src);
        return;
    }
    memcpy(kv->k + (size_t)dst * n, kv->k + (size_t)src * n, n * sizeof(float));
    memcpy(kv->v + (size_t)dst * n, kv->v + (size_t)src * n, n * sizeof(float));
}

int skpo_kv_seq_append(skpo_kv *kv, int seq, int n) {
    kv_seq *s = get_seq(kv, seq);
    SKPO_ASSERT(n >= 0);
    int bs = kv->shape.block_size;
    int start = s->len, end = s->len + n;
    int need_blocks = (end + bs - 1) / bs;
    // A shared last block that will receive new rows must be copied first.
    int cow = (start % bs) != 0 && n > 0 && kv->refcount[s->blocks[s->nblocks - 1]] > 1;
    size_t want = (size_t)(need_blocks - s->nblocks) + (size_t)cow;
    if (want > kv->nfree) return -1;
    if (cow) {
        int old = s->blocks[s->nblocks - 1];
        int nb = kv->free_list[--kv->nfree];
        kv->refcount[nb] = 1;
        copy_block(kv, nb, old);
        unref(kv, old);
        s->blocks[s->nblocks - 1] = nb;
    }
    if (need_blocks > s->cap) {
        int c = s->cap ? s->cap : 8;
        while (c < need_blocks) c *= 2;
        s->blocks = skpo_xrealloc(s->blocks, (size_t)c * sizeof(int));
        s->cap = c;
    }
    while (s->nblocks < need_blocks) {
        int nb = kv->free_list[--kv->nfree];
        kv->refcount[nb] = 1;
        s->blocks[s->nblocks++] = nb;
    }
    s->len = end;
    return start;
}

void skpo_kv_seq_truncate(skpo_kv *kv, int seq, int len) {
    kv_seq *s = get_seq(kv, seq);
    SKPO_ASSERT(len >= 0 && len <= s->len);
    int bs = kv->shape.block_size;
    int keep = (len + bs - 1) / bs;
    while (s->nblocks > keep) unref(kv, s->blocks[--s->nblocks]);
    s->len = len;
}

const int *skpo_kv_seq_blocks(const skpo_kv *kv, int seq, int *n_blocks) {
    kv_seq *s = get_seq(kv, seq);
    *n_blocks = s->nblocks;
    return s->blocks;
}

static size_t row_offset(const skpo_kv *kv, int seq, int layer, int pos) {
    SKPO_ASSERT(!kv->ext);  // rows of a device pool are not host-addressable
    kv_seq *s = get_seq(kv, seq);
    SKPO_ASSERT(pos >= 0 && pos < s->len && layer >= 0 && layer < kv->shape.n_layers);
    int bs = kv->shape.block_size;
    size_t b = (size_t)s->blocks[pos / bs];
    return ((b * (size_t)kv->shape.n_layers + (size_t)layer) * (size_t)bs + (size_t)(pos % bs)) *
           (size_t)kv->shape.kv_dim;
}

float *skpo_kv_k(skpo_kv *kv, int seq, int layer, int pos) { return kv->k + row_offset(kv, seq, layer, pos); }
float *skpo_kv_v(skpo_kv *kv, int seq, int layer, int pos) { return kv->v + row_offset(kv, seq, layer, pos); }
float *skpo_kv_pool_k(skpo_kv *kv) { return kv->k; }
float *skpo_kv_pool_v(skpo_kv *kv) { return kv->v; }

size_t skpo_kv_blocks_used(const skpo_kv *kv) { return kv->shape.n_blocks - kv->nfree; }
size_t skpo_kv_blocks_free(const skpo_kv *kv) { return kv->nfree; }
size_t skpo_kv_bytes_per_block(const skpo_kv *kv) {
    return 2 * kv->block_floats * (kv->ext ? kv->ext->elem_bytes : sizeof(float));
}
