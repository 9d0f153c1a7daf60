/*
 * kvcache.h - a paged key/value cache with reference-counted prefix sharing.
 *
 * Memory is a pool of fixed-size blocks. A block holds `block_size` token
 * positions for every layer, K and V. Layout of block b (float32 on CPU):
 *     k: pool_k + ((size_t)b * n_layers + layer) * block_size * kv_dim
 *     v: pool_v + same offset
 * with kv_dim = num_key_value_heads * head_dim and position p of a sequence at
 * row (p % block_size) of its block table entry p / block_size.
 * A sequence is a block table plus a length. Forking a sequence shares all its
 * blocks (refcount += 1); the first append into a shared block copies it
 * (copy-on-write), so G sequences forked from one prefix hold one copy of it
 * plus their own suffixes. The backend decides where the pool lives (host or
 * device); this module only does the bookkeeping and the CPU copy.
 */
#ifndef SKPO_KVCACHE_H
#define SKPO_KVCACHE_H

#include "base/common.h"

#include <stddef.h>

typedef struct skpo_kv skpo_kv;

typedef struct skpo_kv_shape {
    int n_layers;
    int kv_dim;        // num_key_value_heads * head_dim
    int block_size;    // token positions per block (default 16)
    size_t n_blocks;   // pool size
    int max_seqs;      // sequence slots
} skpo_kv_shape;

// Allocate a CPU pool (float32). Returns NULL with err set if it cannot.
skpo_kv *skpo_kv_new(const skpo_kv_shape *shape, skpo_err *err);
void skpo_kv_free(skpo_kv *kv);
const skpo_kv_shape *skpo_kv_get_shape(const skpo_kv *kv);

// A pool kept outside host memory (e.g. bf16 on a GPU, model_cuda.c): the
// bookkeeping stays here, the pool's owner allocates it and copies blocks.
typedef struct skpo_kv_pool_ops {
    size_t elem_bytes;  // bytes per stored K or V element (2 for bf16)
    // Allocate the K and V pools of `bytes` each (SKPO_ENOMEM naming sizes on failure).
    skpo_status (*alloc)(void *ctx, size_t bytes, void **k, void **v, skpo_err *err);
    void (*release)(void *ctx, void *k, void *v);
    // Copy block src over block dst in both pools (block_bytes each): the
    // copy-on-write of a shared block. Device errors surface at the next sync.
    void (*copy_block)(void *ctx, void *k, void *v, size_t block_bytes, int dst, int src);
} skpo_kv_pool_ops;

// A cache over a pool from `ops` (ctx is passed back to every callback and
// must outlive the cache). skpo_kv_pool_k/v and skpo_kv_k/v are host-pool
// only (NULL / assert); use skpo_kv_pool_raw_k/v to reach this pool.
skpo_kv *skpo_kv_new_ext(const skpo_kv_shape *shape, const skpo_kv_pool_ops *ops, void *ctx, skpo_err *err);
void *skpo_kv_pool_raw_k(skpo_kv *kv);
void *skpo_kv_pool_raw_v(skpo_kv *kv);
void *skpo_kv_pool_ctx(const skpo_kv *kv);   // ctx of skpo_kv_new_ext, NULL for a host pool

// --- sequences ---
int skpo_kv_seq_new(skpo_kv *kv);                 // -1 if no slot is free
int skpo_kv_seq_fork(skpo_kv *kv, int seq);       // share all of seq's blocks; -1 if no slot
void skpo_kv_seq_free(skpo_kv *kv, int seq);      // drop refs; blocks at refcount 0 return to the pool
int skpo_kv_seq_len(const skpo_kv *kv, int seq);

// Reserve room for n more positions of seq (allocating blocks and copying the
// last block if it is shared). Returns the position of the first new token, or
// -1 if the pool is exhausted (nothing changed then). The length grows by n.
int skpo_kv_seq_append(skpo_kv *kv, int seq, int n);
// Shrink a sequence to len positions (frees blocks no longer used).
void skpo_kv_seq_truncate(skpo_kv *kv, int seq, int len);

// Block table of seq: returns its block ids (valid until the next append/free).
const int *skpo_kv_seq_blocks(const skpo_kv *kv, int seq, int *n_blocks);
// Pointers to K / V rows (kv_dim floats) of a position of seq at a layer.
float *skpo_kv_k(skpo_kv *kv, int seq, int layer, int pos);
float *skpo_kv_v(skpo_kv *kv, int seq, int layer, int pos);
// Base pointers of the pool (for backends that walk block tables themselves).
float *skpo_kv_pool_k(skpo_kv *kv);
float *skpo_kv_pool_v(skpo_kv *kv);

// --- accounting ---
size_t skpo_kv_blocks_used(const skpo_kv *kv);
size_t skpo_kv_blocks_free(const skpo_kv *kv);
size_t skpo_kv_bytes_per_block(const skpo_kv *kv);

#endif
