/*
 * cuda.h - the CUDA backend's C interface: device memory, bf16 kernels for
 * every op of the Qwen2/Llama forward and backward, cuBLAS GEMMs with fp32
 * accumulation, paged-KV decode attention, chunked log-prob over the vocab,
 * sampling on the device, fused AdamW, and NCCL collectives.
 *
 * Layouts match the CPU backend: activations row-major (T, C); weights in the
 * Hugging Face layout (out, in), so a linear layer is y = x W^T (+ b).
 * bf16 is stored as uint16_t on the C side (skpo_bf16). All kernels take a
 * stream (NULL = default) and return SKPO_OK or SKPO_EDEVICE with a message.
 * Compiled only with SKPO_HAVE_CUDA (nvcc present); callers check
 * skpo_cuda_available() first. Tested against the CPU reference in
 * tests/unit/test_cuda_ops.c (skips visibly without a GPU).
 */
#ifndef SKPO_CUDA_H
#define SKPO_CUDA_H

#include "base/bf16.h"
#include "base/common.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t skpo_bf16;
typedef struct skpo_cuda skpo_cuda;   // a device context: handle, stream, workspace

// --- devices and memory ---------------------------------------------------
int skpo_cuda_device_count(void);                // 0 without a usable GPU (never fails)
skpo_status skpo_cuda_init(int device, skpo_cuda **out, skpo_err *err);
void skpo_cuda_free_ctx(skpo_cuda *c);
// Why cuBLAS (loaded on first use, cublas_load.c) is not there; NULL when it is.
const char *skpo_cublas_load_error(void);
size_t skpo_cuda_mem_free(skpo_cuda *c);
// Device allocation; a failure names the byte count and the free memory.
skpo_status skpo_cuda_malloc(skpo_cuda *c, void **p, size_t bytes, const char *what, skpo_err *err);
void skpo_cuda_dfree(void *p);
skpo_status skpo_cuda_h2d(skpo_cuda *c, void *dst, const void *src, size_t bytes, skpo_err *err);
skpo_status skpo_cuda_d2h(skpo_cuda *c, void *dst, const void *src, size_t bytes, skpo_err *err);
// CUDA IPC (docs/scaling.md "One weights load per sampling GPU"): a 64-byte handle
// to the device allocation p that another process on the same GPU maps with
// skpo_cuda_ipc_open (and unmaps with skpo_cuda_ipc_close before it exits; the
// exporter keeps p allocated until then). skpo_cuda_pci_id names the context's
// GPU as the driver does ("0000:1b:00.0"), which both sides compare.
enum { SKPO_CUDA_IPC_BYTES = 64 };
skpo_status skpo_cuda_ipc_export(skpo_cuda *c, const void *p, unsigned char handle[SKPO_CUDA_IPC_BYTES], skpo_err *err);
skpo_status skpo_cuda_ipc_open(skpo_cuda *c, const unsigned char handle[SKPO_CUDA_IPC_BYTES], void **p, skpo_err *err);
void skpo_cuda_ipc_close(void *p);
skpo_status skpo_cuda_pci_id(skpo_cuda *c, char *out, int len, skpo_err *err);
skpo_status skpo_cuda_memset0(skpo_cuda *c, void *p, size_t bytes, skpo_err *err);
skpo_status skpo_cuda_sync(skpo_cuda *c, skpo_err *err);

// float32 <-> bf16 (round to nearest even), on the device
skpo_status skpo_cuda_f32_to_bf16(skpo_cuda *c, skpo_bf16 *dst, const float *src, size_t n, skpo_err *err);
skpo_status skpo_cuda_bf16_to_f32(skpo_cuda *c, float *dst, const skpo_bf16 *src, size_t n, skpo_err *err);
// On the host: skpo_f32_to_bf16_host / skpo_bf16_to_f32_host of base/bf16.h
// (the same rounding; device code converts with the cuda_bf16.h intrinsics).

// --- forward ops (bf16 activations, fp32 math inside) -----------------------
// y(T,N) = x(T,K) W(N,K)^T (+ bias(N) if non-NULL); beta=1 accumulates into y.
skpo_status skpo_cuda_linear(skpo_cuda *c, skpo_bf16 *y, const skpo_bf16 *x, const skpo_bf16 *w,
                             const skpo_bf16 *bias, int T, int K, int N, float beta, skpo_err *err);
// out(T,C) = wte[ids[t]]
skpo_status skpo_cuda_embed(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *wte, const int32_t *ids, int T, int C, skpo_err *err);
// out = x / rms(x) * w, rstd(T) saved (fp32) for backward when non-NULL
skpo_status skpo_cuda_rmsnorm(skpo_cuda *c, skpo_bf16 *out, float *rstd, const skpo_bf16 *x, const skpo_bf16 *w,
                              int T, int C, float eps, skpo_err *err);
// In-place rotate-half RoPE on q(T, nh*hs) and k(T, nkv*hs) at positions pos[t];
// inv_freq(hs/2) precomputed on the host (llama3 scaling folded in).
skpo_status skpo_cuda_rope(skpo_cuda *c, skpo_bf16 *q, skpo_bf16 *k, const int32_t *pos, const float *inv_freq,
                           int T, int nh, int nkv, int hs, int inverse, skpo_err *err);
// out(T,F) = silu(gate) * up, from gu(T, 2F) = [gate | up] or two buffers
skpo_status skpo_cuda_swiglu(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *gate, const skpo_bf16 *up, size_t n, skpo_err *err);
// y += x (residual)
skpo_status skpo_cuda_add(skpo_cuda *c, skpo_bf16 *y, const skpo_bf16 *x, size_t n, skpo_err *err);

// Causal GQA attention for packed sequences (prefill / training), flash-style
// (online softmax, scores never materialised). q(T,nh*hs), k,v(T,nkv*hs),
// seq_start(nseq+1) offsets of each sequence in T. out(T,nh*hs); lse(T,nh)
// (log-sum-exp, fp32) saved for backward when non-NULL.
skpo_status skpo_cuda_attention(skpo_cuda *c, skpo_bf16 *out, float *lse, const skpo_bf16 *q, const skpo_bf16 *k,
                                const skpo_bf16 *v, const int32_t *seq_start, int nseq, int T, int nh, int nkv, int hs,
                                skpo_err *err);
// A packed batch's mask (model/pack.h, base/attn_mask.h skpo_mask_runs):
// device arrays (T) of batch-global token indices. Query t sees the keys
// [its row's start, pre_end[t]) and [own0[t], t]; key j is seen by the
// queries [j, q_end[j]).
typedef struct skpo_cuda_runs {
    const int32_t *pre_end, *own0, *q_end;
} skpo_cuda_runs;
// skpo_cuda_attention over seq_start's rows with runs (NULL: causal rows, the
// call above).
skpo_status skpo_cuda_attention_runs(skpo_cuda *c, skpo_bf16 *out, float *lse, const skpo_bf16 *q, const skpo_bf16 *k,
                                     const skpo_bf16 *v, const int32_t *seq_start, int nseq, const skpo_cuda_runs *runs,
                                     int T, int nh, int nkv, int hs, skpo_err *err);
// Decode attention over a paged bf16 KV pool (layout of kvcache.h, one layer
// selected by `layer`): q(B, nh*hs) for B sequences, block tables (B, max_blocks)
// and lengths (B). Sequences that share prefix blocks read them through the
// same block ids (L2-resident across the group).
skpo_status skpo_cuda_attention_decode(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *q, const skpo_bf16 *pool_k,
                                       const skpo_bf16 *pool_v, const int32_t *block_table, int max_blocks,
                                       const int32_t *seq_len, int B, int n_layers, int layer, int block_size,
                                       int nh, int nkv, int hs, skpo_err *err);
// Write k,v rows (T, nkv*hs) of new tokens into the pool at (block, row) slots.
skpo_status skpo_cuda_kv_store(skpo_cuda *c, skpo_bf16 *pool_k, skpo_bf16 *pool_v, const skpo_bf16 *k, const skpo_bf16 *v,
                               const int32_t *slot_block, const int32_t *slot_row, int T, int n_layers, int layer,
                               int block_size, int kv_dim, skpo_err *err);

// Log-prob of targets under softmax(logits / temp) and entropy, per row; the
// vocabulary is processed in chunks (online max/sum), so any V works.
// logits(T,V) bf16; logp(T), entropy(T) fp32 (entropy may be NULL).
skpo_status skpo_cuda_logprob(skpo_cuda *c, float *logp, float *entropy, const skpo_bf16 *logits,
                              const int32_t *target, int T, int V, float temp, skpo_err *err);

// Sampling on the device: per row b, temperature, top-k (0 = off), top-p
// (1 = off) and a uniform coin[b] in [0,1) chosen by the host RNG, so the draw
// is replayable. out_tok(B), out_logp(B) = log softmax(logits/temp)[tok].
// temp == 0 is greedy.
skpo_status skpo_cuda_sample(skpo_cuda *c, int32_t *out_tok, float *out_logp, const float *logits, int B, int V,
                             float temp, int top_k, float top_p, const float *coin, skpo_err *err);

// --- backward ops --------------------------------------------------------------
// dlogits(T,V) = dlogp * (onehot - p)/temp (+ entropy term if dent non-NULL)
skpo_status skpo_cuda_logprob_backward(skpo_cuda *c, skpo_bf16 *dlogits, const skpo_bf16 *logits, const int32_t *target,
                                       const float *dlogp, const float *dent, int T, int V, float temp, skpo_err *err);
// dx(T,K) = dy(T,N) W(N,K); dW(N,K) += dy^T x; dbias(N) += sum_t dy (dbias may be NULL). fp32 grads.
skpo_status skpo_cuda_linear_backward(skpo_cuda *c, skpo_bf16 *dx, float *dw, float *dbias, const skpo_bf16 *dy,
                                      const skpo_bf16 *x, const skpo_bf16 *w, int T, int K, int N, skpo_err *err);
skpo_status skpo_cuda_rmsnorm_backward(skpo_cuda *c, skpo_bf16 *dx, float *dw, const skpo_bf16 *dy, const skpo_bf16 *x,
                                       const skpo_bf16 *w, const float *rstd, int T, int C, skpo_err *err);
skpo_status skpo_cuda_swiglu_backward(skpo_cuda *c, skpo_bf16 *dgate, skpo_bf16 *dup, const skpo_bf16 *dout,
                                      const skpo_bf16 *gate, const skpo_bf16 *up, size_t n, skpo_err *err);
skpo_status skpo_cuda_embed_backward(skpo_cuda *c, float *dwte, const skpo_bf16 *dout, const int32_t *ids, int T, int C,
                                     skpo_err *err);
// Attention backward (recomputes probabilities from q, k and lse).
skpo_status skpo_cuda_attention_backward(skpo_cuda *c, skpo_bf16 *dq, float *dk, float *dv, const skpo_bf16 *dout,
                                         const skpo_bf16 *out, const float *lse, const skpo_bf16 *q, const skpo_bf16 *k,
                                         const skpo_bf16 *v, const int32_t *seq_start, int nseq, int T, int nh, int nkv,
                                         int hs, skpo_err *err);
skpo_status skpo_cuda_attention_backward_runs(skpo_cuda *c, skpo_bf16 *dq, float *dk, float *dv, const skpo_bf16 *dout,
                                              const skpo_bf16 *out, const float *lse, const skpo_bf16 *q,
                                              const skpo_bf16 *k, const skpo_bf16 *v, const int32_t *seq_start, int nseq,
                                              const skpo_cuda_runs *runs, int T, int nh, int nkv, int hs, skpo_err *err);

// --- optimizer -------------------------------------------------------------------
// Sum of squares of g(n) accumulated into *out (device fp32 scalar).
skpo_status skpo_cuda_sumsq(skpo_cuda *c, float *out, const float *g, size_t n, skpo_err *err);
// Fused AdamW on fp32 master weights w, moments m, v; grad scaled by gscale
// (grad-norm clipping); also writes the bf16 copy wb (may be NULL).
skpo_status skpo_cuda_adamw(skpo_cuda *c, float *w, skpo_bf16 *wb, float *m, float *v, const float *g, size_t n,
                            float lr, float b1, float b2, float eps, float wd, int step, float gscale, skpo_err *err);

// --- NCCL ------------------------------------------------------------------------
typedef struct skpo_nccl skpo_nccl;
// unique_id: 128 bytes from skpo_nccl_unique_id on rank 0, shared through MPI or a file.
skpo_status skpo_nccl_unique_id(unsigned char id[128], skpo_err *err);
skpo_status skpo_nccl_init(skpo_cuda *c, const unsigned char id[128], int rank, int nranks, skpo_nccl **out, skpo_err *err);
skpo_status skpo_nccl_allreduce_sum(skpo_nccl *n, float *buf, size_t count, skpo_err *err);
skpo_status skpo_nccl_reduce_scatter_sum(skpo_nccl *n, float *recv, const float *send, size_t recv_count, skpo_err *err);
skpo_status skpo_nccl_allgather(skpo_nccl *n, float *recv, const float *send, size_t send_count, skpo_err *err);
void skpo_nccl_free(skpo_nccl *n);
// How a collective is waited for: each enqueues its work and then calls the
// waiter (default: a plain stream synchronisation, which waits forever when a
// peer never comes). comm.c's waiter polls skpo_nccl_poll, watches for other
// ranks' failure notices and a timeout, and calls skpo_nccl_abort (NCCL's
// ncclCommAbort: the stuck kernels end; every later call on n fails at once).
typedef skpo_status (*skpo_nccl_waiter)(void *ctx, skpo_nccl *n, const char *what, skpo_err *err);
void skpo_nccl_set_waiter(skpo_nccl *n, skpo_nccl_waiter fn, void *ctx);
// 1: the stream's work is done; 0: not yet; -1: failed (err says why: a CUDA
// error, or NCCL's asynchronous error, e.g. a peer's connection broke).
int skpo_nccl_poll(skpo_nccl *n, skpo_err *err);
void skpo_nccl_abort(skpo_nccl *n);

#ifdef __cplusplus
}
#endif
#endif
