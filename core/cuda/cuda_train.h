/*
 * cuda_train.h - device kernels the training pass adds to cuda.h (in
 * core/cuda/train_ops.cu): scored-row gather/scatter, the input-gradient GEMM
 * with accumulation, and a deterministic double-precision sum of squares.
 * Same conventions as cuda.h (bf16 = skpo_bf16, row-major, the context's
 * stream). CUDA builds only.
 */
#ifndef SKPO_CUDA_TRAIN_H
#define SKPO_CUDA_TRAIN_H

#include "cuda/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

// dst(n, C) = src[rows[i]] ; dst[rows[i]] = src(n, C) (rows distinct).
skpo_status skpo_cuda_rows_gather(skpo_cuda *c, skpo_bf16 *dst, const skpo_bf16 *src, const int32_t *rows, int n, int C,
                                  skpo_err *err);
skpo_status skpo_cuda_rows_scatter(skpo_cuda *c, skpo_bf16 *dst, const skpo_bf16 *src, const int32_t *rows, int n, int C,
                                   skpo_err *err);
// dst(fp32)[rows[i]] += src[i] for i < n, rows repeating: each i in round dup[i]
// (rounds 0 .. rounds-1, rows distinct within a round), so the sum order is fixed.
skpo_status skpo_cuda_rows_scatter_add(skpo_cuda *c, float *dst, const skpo_bf16 *src, const int32_t *rows,
                                       const int32_t *dup, int rounds, int n, int C, skpo_err *err);
// dx(T,K) = beta dx + dy(T,N) W(N,K)
skpo_status skpo_cuda_linear_dx(skpo_cuda *c, skpo_bf16 *dx, const skpo_bf16 *dy, const skpo_bf16 *w, int T, int K, int N,
                                float beta, skpo_err *err);
// dst = src, n bytes, both on the device (stream-ordered).
skpo_status skpo_cuda_d2d(skpo_cuda *c, void *dst, const void *src, size_t bytes, skpo_err *err);
// dst(N) += sum over rows t of a[t,n] * (b ? b[t,n] * r[t] : 1), a and b
// (T, N) bf16, r (T) fp32: bias gradients (b NULL) and RMSNorm weight
// gradients (b = the norm's input, r = its rstd). Deterministic (no atomics).
// scratch: SKPO_COL_PARTS * N floats of device memory.
#define SKPO_COL_PARTS 64
skpo_status skpo_cuda_colsum(skpo_cuda *c, float *dst, const skpo_bf16 *a, const skpo_bf16 *b, const float *r, int T,
                             int N, float *scratch, skpo_err *err);
// RMSNorm backward into the residual gradient: dx(T,C) += d(norm)/dx . dy
// (the weight gradient is a colsum of dy * x * rstd).
skpo_status skpo_cuda_rmsnorm_backward_acc(skpo_cuda *c, skpo_bf16 *dx, const skpo_bf16 *dy, const skpo_bf16 *x,
                                           const skpo_bf16 *w, const float *rstd, int T, int C, skpo_err *err);
// *host_out = sum g[i]^2 in double, same bits for the same input on any run
// (fixed grid, fixed order); synchronises the stream.
skpo_status skpo_cuda_sumsq_f64(skpo_cuda *c, double *host_out, const float *g, size_t n, skpo_err *err);

// Tensor-core causal attention over packed sequences (flash.cu), the
// contract of skpo_cuda_attention / _backward with two differences: seq_of
// (T) gives each row's sequence (skpo_cuda_flash_seq_of fills it from
// seq_start), and the backward writes dk, dv in bf16 (overwritten, no fp32
// accumulation buffers) using work: T * nh * (1 + hs) floats. head_dim 64 or
// 128, else SKPO_EUNSUPPORTED (the caller falls back to the simple kernels).
skpo_status skpo_cuda_flash_seq_of(skpo_cuda *c, int32_t *seq_of, const int32_t *seq_start, int nseq, skpo_err *err);
skpo_status skpo_cuda_flash_attention(skpo_cuda *c, skpo_bf16 *out, float *lse, const skpo_bf16 *q, const skpo_bf16 *k,
                                      const skpo_bf16 *v, const int32_t *seq_of, const int32_t *seq_start, int T, int nh,
                                      int nkv, int hs, skpo_err *err);
skpo_status skpo_cuda_flash_attention_backward(skpo_cuda *c, skpo_bf16 *dq, skpo_bf16 *dk, skpo_bf16 *dv,
                                               const skpo_bf16 *dout, const skpo_bf16 *out, const float *lse,
                                               const skpo_bf16 *q, const skpo_bf16 *k, const skpo_bf16 *v,
                                               const int32_t *seq_of, const int32_t *seq_start, int T, int nh, int nkv,
                                               int hs, float *work, skpo_err *err);

// SKPO_DETERMINISTIC=1 (docs/update.md "Deterministic mode"): the two
// backward ops that otherwise add with fp32 atomics in arrival order.
// Embedding: dwte[id] += the rows of dout with that id, the rows given sorted
// by (id, row) in order (T) with the runs of one id starting at seg (nseg + 1
// entries), each run summed in that order (train_ops.cu). Attention: the
// contract of skpo_cuda_attention_backward with seq_of (T) as flash takes it,
// dk and dv overwritten (not accumulated), work: T * nh floats
// (attention_det.cu).
skpo_status skpo_cuda_embed_backward_sorted(skpo_cuda *c, float *dwte, const skpo_bf16 *dout, const int32_t *ids,
                                            const int32_t *order, const int32_t *seg, int nseg, int C, skpo_err *err);
skpo_status skpo_cuda_attention_backward_det(skpo_cuda *c, skpo_bf16 *dq, float *dk, float *dv, const skpo_bf16 *dout,
                                             const skpo_bf16 *out, const float *lse, const skpo_bf16 *q,
                                             const skpo_bf16 *k, const skpo_bf16 *v, const int32_t *seq_of,
                                             const int32_t *seq_start, int T, int nh, int nkv, int hs, float *work,
                                             skpo_err *err);
// The same with a packed batch's runs (cuda.h skpo_cuda_runs; NULL: the call above).
skpo_status skpo_cuda_attention_backward_det_runs(skpo_cuda *c, skpo_bf16 *dq, float *dk, float *dv,
                                                  const skpo_bf16 *dout, const skpo_bf16 *out, const float *lse,
                                                  const skpo_bf16 *q, const skpo_bf16 *k, const skpo_bf16 *v,
                                                  const int32_t *seq_of, const int32_t *seq_start,
                                                  const skpo_cuda_runs *runs, int T, int nh, int nkv, int hs,
                                                  float *work, skpo_err *err);

// Page-lock existing host memory (cudaHostRegister) for fast copies, and undo
// it (before that memory is freed). The optimizer's offload locks the host
// homes of its state (optim_dev.c).
skpo_status skpo_cuda_host_register(void *p, size_t bytes, skpo_err *err);
void skpo_cuda_host_unregister(void *p);

// Backward of skpo_cuda_qkv_rope (the training form, q, k, v buffers):
// dqkv(T, (nh + 2 nkv) hs) = [R^-1 dq | R^-1 dk | dv], the input of one dW and
// one dx GEMM over the fused [Wq; Wk; Wv] and of one bias colsum (fused.cu).
skpo_status skpo_cuda_qkv_rope_backward(skpo_cuda *c, skpo_bf16 *dqkv, const skpo_bf16 *dq, const skpo_bf16 *dk,
                                        const skpo_bf16 *dv, const int32_t *pos, const float *inv_freq, int T, int nh,
                                        int nkv, int hs, skpo_err *err);
// Backward of skpo_cuda_swiglu_fused: dgu(T, 2F) = [d gate | d up] from dh(T, F)
// and gu(T, 2F) = [gate | up].
skpo_status skpo_cuda_swiglu_fused_backward(skpo_cuda *c, skpo_bf16 *dgu, const skpo_bf16 *dh, const skpo_bf16 *gu,
                                            int T, int F, skpo_err *err);

// AdamW over every tensor in one launch (optim.cu): segment i updates
// elements [x, x + n) of the flat w, wb (nullable) and g, with moments
// [mo, mo + n) of m and v and weight decay wd; the math of skpo_cuda_adamw,
// element for element. A plan keeps the table on the device (made once: it
// depends only on the layout and the rank's slice).
typedef struct skpo_adamw_seg {
    uint64_t x, n, mo;
    float wd, unused;
} skpo_adamw_seg;
typedef struct skpo_cuda_adamw_plan skpo_cuda_adamw_plan;
skpo_status skpo_cuda_adamw_plan_new(skpo_cuda *c, const skpo_adamw_seg *segs, int nseg, skpo_cuda_adamw_plan **out,
                                     skpo_err *err);
void skpo_cuda_adamw_plan_free(skpo_cuda_adamw_plan *p);
skpo_status skpo_cuda_adamw_multi(skpo_cuda *c, const skpo_cuda_adamw_plan *p, float *w, skpo_bf16 *wb, float *m,
                                  float *v, const float *g, float lr, float b1, float b2, float eps, int step,
                                  float gscale, skpo_err *err);

// Collectives on host buffers over NCCL (staged through device memory), for
// a communicator without MPI (comm.c's shared-file bootstrap). In device.cu.
skpo_status skpo_nccl_allreduce_f64_host(skpo_nccl *n, double *buf, size_t count, skpo_err *err);
skpo_status skpo_nccl_bcast_host(skpo_nccl *n, void *buf, size_t bytes, int root, skpo_err *err);

#ifdef __cplusplus
}
#endif
#endif
