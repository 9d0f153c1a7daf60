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

#include "common.h"

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
