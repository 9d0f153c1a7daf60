/*
 * cuda_infer.h - CUDA pieces the inference path (model_cuda.c) adds to the
 * kernels of cuda.h: asynchronous copies and pinned host memory for per-step
 * staging, a linear layer with float32 output (logits), paged attention for
 * query rows at arbitrary positions (prefill and decode in one launch), and
 * CUDA graph capture/replay of a step. Implemented in core/cuda/infer.cu;
 * compiled only with SKPO_HAVE_CUDA. All work is on the context's stream.
 */
#ifndef SKPO_CUDA_INFER_H
#define SKPO_CUDA_INFER_H

#include "cuda/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

// Pinned host memory (fast, truly asynchronous host<->device copies).
skpo_status skpo_cuda_host_alloc(void **p, size_t bytes, skpo_err *err);
void skpo_cuda_host_free(void *p);
// Enqueue copies on the stream without waiting.
skpo_status skpo_cuda_h2d_async(skpo_cuda *c, void *dst, const void *src, size_t bytes, skpo_err *err);
skpo_status skpo_cuda_d2h_async(skpo_cuda *c, void *dst, const void *src, size_t bytes, skpo_err *err);
skpo_status skpo_cuda_d2d_async(skpo_cuda *c, void *dst, const void *src, size_t bytes, skpo_err *err);
// Events: record on the context's stream; a host wait blocks until the work
// enqueued before the record has run (a never-recorded event is done). They
// let a pinned staging buffer be rewritten as soon as its copy has run,
// without waiting for the whole stream.
typedef struct skpo_cuda_event skpo_cuda_event;
skpo_status skpo_cuda_event_new(skpo_cuda_event **out, skpo_err *err);
void skpo_cuda_event_free(skpo_cuda_event *e);
skpo_status skpo_cuda_event_record(skpo_cuda *c, skpo_cuda_event *e, skpo_err *err);
skpo_status skpo_cuda_event_wait(skpo_cuda_event *e, skpo_err *err);
// Total memory of the context's device (bytes).
size_t skpo_cuda_mem_total(skpo_cuda *c);

// y(T,N) float32 = x(T,K) W(N,K)^T, bf16 inputs, fp32 accumulation and output.
skpo_status skpo_cuda_linear_f32out(skpo_cuda *c, float *y, const skpo_bf16 *x, const skpo_bf16 *w, int T, int K,
                                    int N, skpo_err *err);

// After one GEMM over the fused projection [Wq; Wk; Wv] (model.c keeps them,
// and the biases bq | bk | bv, contiguous): qkv(T, (nh + 2 nkv) hs), in one
// launch add the biases (bias NULL: none), rotate q and k (HF rotate-half
// RoPE at pos[t], inv_freq(hs/2)) and write q(T, nh hs) and the k and v rows:
// into the paged pool (k = pool_k, v = pool_v) at (slot_block[t],
// slot_row[t]) of layer `layer` (kvcache.h layout) when slot_block is
// non-NULL, else into k, v (T, nkv hs). Math in fp32, one rounding to bf16.
skpo_status skpo_cuda_qkv_rope(skpo_cuda *c, skpo_bf16 *q, skpo_bf16 *k, skpo_bf16 *v, const skpo_bf16 *qkv,
                               const skpo_bf16 *bias, const int32_t *pos, const float *inv_freq,
                               const int32_t *slot_block, const int32_t *slot_row, int T, int nh, int nkv, int hs,
                               int n_layers, int layer, int block_size, skpo_err *err);

// The residual add and the RMSNorm after it, in one launch:
// x_out(T,C) = x_in + y (+ bias(C)), y the fp32 output of the GEMM that feeds
// the residual (skpo_cuda_linear_f32out), rounded to bf16 once; then
// ln = x_out / rms(x_out) * w, rstd(T) saved (fp32) when non-NULL. x_out may be
// x_in; ln NULL does the add only.
skpo_status skpo_cuda_add_rmsnorm(skpo_cuda *c, skpo_bf16 *x_out, skpo_bf16 *ln, float *rstd, const skpo_bf16 *x_in,
                                  const float *y, const skpo_bf16 *bias, const skpo_bf16 *w, int T, int C, float eps,
                                  skpo_err *err);

// out(T,F) = silu(gu[:, :F]) * gu[:, F:] for gu(T, 2F) = x [Wg; Wu]^T, the
// output of one GEMM over the gate and up projections stored back to back.
skpo_status skpo_cuda_swiglu_fused(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *gu, int T, int F, skpo_err *err);

// Causal attention of N query rows over a paged bf16 pool (kvcache.h layout,
// layer `layer`): row r belongs to sequence row_seq[r] (a row of block_table,
// (nseq, max_blocks)) and sits at position row_pos[r]; it attends to positions
// 0..row_pos[r] of that sequence, which must already be stored in the pool
// (its own K/V included). q, out (N, nh*hs). Covers prefill rows and decode
// rows in one launch; query heads sharing a KV head are handled by one block,
// so each K/V row is read once per group. When there are too few rows to fill
// the device, each row's positions are split over several blocks and merged
// (flash-decoding) using `work` (fp32, work_bytes; NULL = never split). The
// split count depends only on N, max_blocks and the device, so a step captured
// in a CUDA graph replays correctly.
skpo_status skpo_cuda_attention_paged(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *q, const skpo_bf16 *pool_k,
                                      const skpo_bf16 *pool_v, const int32_t *block_table, int max_blocks,
                                      const int32_t *row_seq, const int32_t *row_pos, int N, int n_layers, int layer,
                                      int block_size, int nh, int nkv, int hs, float *work, size_t work_bytes,
                                      skpo_err *err);
// Prefill: the same attention for steps with runs of rows of one sequence.
// The rows come in tiles: tile i is rows tiles[2i] .. tiles[2i] + tiles[2i+1]
// - 1 (at most SKPO_CUDA_PREFILL_ROWS rows of one sequence at consecutive
// positions); every row in exactly one tile. A block owns one tile
// and one KV head and stages each K/V tile of the prefix once (16-byte loads,
// one block-table lookup per position) for all rows and query heads of the
// group. Shapes it does not cover (head_dim > 128 or not a multiple of 8, more
// than 8 query heads per KV head) run skpo_cuda_attention_paged unsplit.
#define SKPO_CUDA_PREFILL_ROWS 16
skpo_status skpo_cuda_attention_prefill(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *q, const skpo_bf16 *pool_k,
                                        const skpo_bf16 *pool_v, const int32_t *block_table, int max_blocks,
                                        const int32_t *row_seq, const int32_t *row_pos, const int32_t *tiles,
                                        int ntiles, int N, int n_layers, int layer, int block_size, int nh, int nkv,
                                        int hs, skpo_err *err);
// Bytes of `work` that let skpo_cuda_attention_paged split as much as it wants.
size_t skpo_cuda_attention_paged_work(skpo_cuda *c, int nh, int nkv, int hs);
// The tensor-core kernel skpo_cuda_attention_paged runs when _fits says so
// (head_dim 64, 128 or 256, at most 16 query heads per KV head, 16-byte
// aligned q and pools; SKPO_DECODE_ATTN=simt turns it off): same contract,
// split count from the occupancy API (decode.cu). Otherwise the CUDA-core
// kernel of infer.cu runs.
int skpo_cuda_attention_paged_mma_fits(const void *q, const void *pool_k, const void *pool_v, int nh, int nkv, int hs,
                                       int max_blocks, int block_size);
skpo_status skpo_cuda_attention_paged_mma(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *q, const skpo_bf16 *pool_k,
                                          const skpo_bf16 *pool_v, const int32_t *block_table, int max_blocks,
                                          const int32_t *row_seq, const int32_t *row_pos, int N, int n_layers, int layer,
                                          int block_size, int nh, int nkv, int hs, float *work, size_t work_bytes,
                                          skpo_err *err);
size_t skpo_cuda_attention_paged_mma_work(skpo_cuda *c, int nh, int nkv, int hs);

// CUDA graphs over the context's stream: begin capture, end it into an
// executable graph, launch it, free it. A failed capture leaves the stream
// usable (the caller runs the work eagerly instead).
typedef struct skpo_cuda_graph skpo_cuda_graph;
skpo_status skpo_cuda_capture_begin(skpo_cuda *c, skpo_err *err);
skpo_status skpo_cuda_capture_end(skpo_cuda *c, skpo_cuda_graph **out, skpo_err *err);
skpo_status skpo_cuda_graph_launch(skpo_cuda *c, skpo_cuda_graph *g, skpo_err *err);
void skpo_cuda_graph_free(skpo_cuda_graph *g);

#ifdef __cplusplus
}
#endif
#endif
