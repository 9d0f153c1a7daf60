/*
 * cuda_dnn.h - attention through cuDNN's fused scaled-dot-product attention
 * (the graph API, built with the cudnn-frontend headers; core/cuda/sdpa_cudnn.cpp),
 * and the choice between it and the backend's own kernels.
 *
 * Three attention paths, one table of names (model_attn_names in
 * core/model/model_cuda.c, which chooses), by SKPO_ATTN:
 *   cudnn   cuDNN's flash-attention kernels: training forward and backward over
 *           the packed batch (ragged offsets, one sequence per batch entry), and
 *           prefill over the paged KV pool (page tables). The default wherever it
 *           runs: a build with cuDNN (scripts/deps.sh fetches the frontend), cuDNN
 *           >= 9.6 at run time (grouped-query attention on ragged tensors), an
 *           sm_90 or newer GPU (ragged log-sum-exp in the backward).
 *   flash   the tensor-core kernels of flash.cu (training; head_dim 64 or 128).
 *   custom  the CUDA-core kernels of attention.cu (training) and infer.cu (prefill).
 * Prefill has no flash kernel: flash means custom there. The own kernels stay as
 * the fallback and the reference (tests/unit/test_cuda_dnn.c compares all three
 * with the CPU backend on a GPU). A training or scoring pass whose sequences
 * share prefixes (model/pack.h) runs packed on the own kernels: cuDNN cannot
 * take the tree mask, so such a pass takes flash where cuDNN was chosen, not
 * forced (model_cuda_train.c pass_path).
 *
 * Graphs are built once per shape (batch size padded to a bucket with empty
 * sequences: 1, 2, 3, 4, 6, 8, 12, 16, ... at most 1.5x; the longest sequence
 * rounded up to a power of two; heads, head_dim; for the backward also the
 * token count rounded up, which sizes cuDNN's workspace) and kept in the
 * context (LRU). SKPO_CUDNN_EXACT_BATCH=1 keys on the exact batch instead
 * (no empty sequences: a check for the first GPU run). Index
 * tensors and the workspace grow in the context and are reused: no allocation
 * in a steady state. Compiled in CUDA builds; without cuDNN every function
 * reports SKPO_EUNSUPPORTED saying why.
 */
#ifndef SKPO_CUDA_DNN_H
#define SKPO_CUDA_DNN_H

#include "cuda/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

// 1 when this build has the cuDNN path compiled in.
int skpo_cudnn_compiled(void);
// SKPO_OK when cuDNN attention can run on the context's device (first call:
// creates the cuDNN handle); else SKPO_EUNSUPPORTED with the reason.
skpo_status skpo_cudnn_check(skpo_cuda *c, skpo_err *err);
// "9.13.0 (headers 9.19.0, frontend 1.32.0)" or why there is none.
const char *skpo_cudnn_version(skpo_cuda *c);

// Training forward, the contract of skpo_cuda_attention: q (T, nh*hs), k, v
// (T, nkv*hs), sequences at seq_start (device, nseq + 1) of at most max_len
// tokens (host); out (T, nh*hs); lse (T, nh) natural-log log-sum-exp of the
// scaled scores (may be NULL: no statistics).
skpo_status skpo_cudnn_attention(skpo_cuda *c, skpo_bf16 *out, float *lse, const skpo_bf16 *q, const skpo_bf16 *k,
                                 const skpo_bf16 *v, const int32_t *seq_start, int nseq, int max_len, int T, int nh,
                                 int nkv, int hs, skpo_err *err);
// Its backward: dq (T, nh*hs), dk, dv (T, nkv*hs), all bf16 and overwritten.
skpo_status skpo_cudnn_attention_backward(skpo_cuda *c, skpo_bf16 *dq, skpo_bf16 *dk, skpo_bf16 *dv,
                                          const skpo_bf16 *dout, const skpo_bf16 *out, const float *lse,
                                          const skpo_bf16 *q, const skpo_bf16 *k, const skpo_bf16 *v,
                                          const int32_t *seq_start, int nseq, int max_len, int T, int nh, int nkv,
                                          int hs, skpo_err *err);
// Prefill over the paged pool (kvcache.h layout, layer `layer` of n_layers,
// n_blocks blocks of block_size rows): the N rows of the step come sequence by
// sequence, sequence b's last row is last[b] (device, nseq), each row at
// position pos[r] (device) and every position up to it already in the pool;
// block_table (device, nseq x max_blocks). max_q: most rows of one sequence
// (host). The contract of skpo_cuda_attention_paged for such steps.
skpo_status skpo_cudnn_attention_paged(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *q, const skpo_bf16 *pool_k,
                                       const skpo_bf16 *pool_v, const int32_t *block_table, int max_blocks,
                                       const int32_t *last, const int32_t *pos, int nseq, int max_q, int N,
                                       int n_layers, int layer, int n_blocks, int block_size, int nh, int nkv, int hs,
                                       skpo_err *err);

// Index tensors cuDNN reads, in attention.cu: idx = [len_q (Bp) | len_kv (Bp) |
// off_q (Bp+1) | off_kv (Bp+1) | off_stats (Bp+1)], offsets in elements of the
// packed (T, nh*hs), (T, nkv*hs) and (T, nh) tensors. From seq_start
// (training: len_q = len_kv) or from the last row of each sequence and the
// rows' positions (prefill: len_kv = position of the last row + 1). Entries
// B..Bp-1 are empty sequences after the last (the batch padded to a bucket,
// so a graph serves batches of several sizes).
#define SKPO_SDPA_INDEX_INTS(Bp) (5 * (size_t)(Bp) + 3)
skpo_status skpo_cuda_sdpa_index(skpo_cuda *c, int32_t *idx, const int32_t *seq_start, int B, int Bp, int nh, int nkv,
                                 int hs, skpo_err *err);
skpo_status skpo_cuda_sdpa_index_paged(skpo_cuda *c, int32_t *idx, const int32_t *last, const int32_t *pos, int B,
                                       int Bp, int nh, int nkv, int hs, skpo_err *err);

// For the backend's context (device.cu): its stream, and the cuDNN state freed
// with it.
void *skpo_cuda_stream_of(skpo_cuda *c);
void **skpo_cuda_dnn_slot(skpo_cuda *c);
void skpo_cudnn_free_state(void *state);

#ifdef __cplusplus
}
#endif
#endif
