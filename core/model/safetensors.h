/*
 * safetensors.h - Hugging Face safetensors checkpoints: mmap reading of one file
 * or a sharded folder, and atomic writing in F32 or BF16.
 *
 * File layout (https://github.com/huggingface/safetensors):
 *     u64 little-endian N | N bytes of JSON header | byte buffer
 * The header maps each tensor name to {"dtype": "F32"|"BF16"|"F16"|...,
 * "shape": [d0, ...], "data_offsets": [begin, end]} with offsets relative to
 * the byte buffer; an optional "__metadata__" holds string pairs ("format":
 * "pt"). A sharded checkpoint is model-0000i-of-0000n.safetensors files plus
 * model.safetensors.index.json {"metadata": {"total_size": B}, "weight_map":
 * {name: file}}.
 *
 * Reading validates every header entry (known dtype, offsets inside the file,
 * end - begin == numel * element size) and names the file and tensor in the
 * error. Tensor data stays mmapped; skpo_st_read_f32 converts to float32.
 * Not here: dtypes other than F32/BF16/F16 in data (they are rejected on read).
 */
#ifndef SKPO_SAFETENSORS_H
#define SKPO_SAFETENSORS_H

#include "base/bf16.h" // skpo_f32_to_bf16 / skpo_bf16_to_f32: the dtype BF16
#include "base/common.h"

#include <stdint.h>

#define SKPO_ST_MAX_DIMS 8

typedef enum skpo_st_dtype { SKPO_ST_F32 = 0, SKPO_ST_BF16 = 1, SKPO_ST_F16 = 2 } skpo_st_dtype;

typedef struct skpo_st_tensor {
    char *name;
    skpo_st_dtype dtype;
    int ndim;
    int64_t shape[SKPO_ST_MAX_DIMS];
    size_t numel;
    const void *data;   // inside the mmapped file
    size_t nbytes;
    int file;           // index into the opened files (for messages)
} skpo_st_tensor;

typedef struct skpo_st skpo_st;

// --- open / close ---------------------------------------------------------------

// One .safetensors file.
skpo_status skpo_st_open_file(const char *path, skpo_st **out, skpo_err *err);
// A checkpoint folder: model.safetensors if present, else model.safetensors.index.json.
skpo_status skpo_st_open_dir(const char *dir, skpo_st **out, skpo_err *err);
void skpo_st_close(skpo_st *st);

// --- read -----------------------------------------------------------------------

int skpo_st_count(const skpo_st *st);
const skpo_st_tensor *skpo_st_get(const skpo_st *st, int i);
const skpo_st_tensor *skpo_st_find(const skpo_st *st, const char *name); // NULL if absent
const char *skpo_st_file_name(const skpo_st *st, int file);
// Copy tensor `name` into dst as float32 after checking its shape equals
// shape[0..ndim). ENOTFOUND if absent, ERANGE on a shape mismatch.
skpo_status skpo_st_read_f32(const skpo_st *st, const char *name, float *dst, int ndim, const int64_t *shape,
                             skpo_err *err);

// --- write ----------------------------------------------------------------------

typedef struct skpo_st_wtensor {
    const char *name;
    const float *data;
    int ndim;
    int64_t shape[SKPO_ST_MAX_DIMS];
} skpo_st_wtensor;

// Write tensors into dir as dtype (F32 or BF16, rounded to nearest even):
// model.safetensors when the total is <= shard_bytes (0 = 4 GiB), else shards
// plus the index. Each file is written atomically; a stale single file or index
// of the other layout is removed so loaders cannot pick up old weights.
skpo_status skpo_st_write_dir(const char *dir, const skpo_st_wtensor *t, int n, skpo_st_dtype dtype,
                              size_t shard_bytes, skpo_err *err);

// The pieces of skpo_st_write_dir, for writers that split a checkpoint among
// processes (every rank its shard, in parallel): shard k of nshards holds the
// tensors i with shard_of[i] == k, in order, as model-<k+1>-of-<nshards>
// (nothing is written for a shard that holds no tensor); the index maps every
// tensor to its shard and records total_size, as Hugging Face writes it.
skpo_status skpo_st_write_shard(const char *dir, const skpo_st_wtensor *t, int n, skpo_st_dtype dtype, const int *shard_of,
                                int k, int nshards, skpo_err *err);
skpo_status skpo_st_write_index(const char *dir, const skpo_st_wtensor *t, int n, skpo_st_dtype dtype, const int *shard_of,
                                int nshards, skpo_err *err);

// One file at path (atomically), every tensor in dtype (adapters: adapter_model.safetensors).
skpo_status skpo_st_write_file(const char *path, const skpo_st_wtensor *t, int n, skpo_st_dtype dtype, skpo_err *err);

// --- conversions ------------------------------------------------------------------

float skpo_f16_to_f32(uint16_t h);
const char *skpo_st_dtype_name(skpo_st_dtype d);

#endif
