/*
 * ops.h - the host kernel table: every kernel the float32 transformer needs
 * (forward and backward), as a struct of function pointers (ggml-backend
 * style), filled by core/cpu/ops_cpu.c (own AVX-512/AVX2 kernels, OpenBLAS, OpenMP). The model's CPU
 * backend (model/model_cpu.c, model_train.c) holds the math of the network
 * and calls only these. The CUDA backend has its own bf16 kernels
 * (cuda/cuda.h); it is tested against this reference. Every slot is filled
 * and called.
 *
 * Conventions: row-major float32 tensors in the backend's memory; shapes are
 * given in the comments as (rows, cols). N is a number of token rows, C the
 * hidden size, NH / NKV the query / key-value heads, HS the head size. GQA
 * maps query head h to kv head h / (NH / NKV). "backward" ops ADD into the
 * gradients they produce (so residual branches and shared weights accumulate)
 * unless noted.
 */
#ifndef SKPO_OPS_H
#define SKPO_OPS_H

#include <stddef.h>
#include <stdint.h>

// A paged KV cache as seen by attention (see kvcache.h for the layout): row
// `pos` of a sequence at `layer` starts at
//   pool + ((blocks[pos / block_size] * n_layers + layer) * block_size + pos % block_size) * kv_dim
typedef struct skpo_paged_kv {
    const float *pool_k, *pool_v;
    int n_layers, block_size, kv_dim;
} skpo_paged_kv;

typedef struct skpo_ops {
    const char *name;

    // --- dense -----------------------------------------------------------------
    // out (N, O) = in (N, K) @ w^T, w (O, K), + bias (O) when non-NULL.
    // accumulate = 1 adds into out instead of overwriting it. Batch-invariant:
    // each output element's rounding depends on its own row and w only, never
    // on N, the row's place, the thread count or which kernel ran. Every
    // forward pass (decode, prefill, scoring, training) uses it, so a token's
    // log-prob is the same bits wherever it is computed.
    void (*matmul)(float *out, const float *in, const float *w, const float *bias, int N, int K, int O, int accumulate);
    // din (N, K) += dout (N, O) @ w; dw (O, K) += dout^T @ in; dbias (O) += column sums of dout.
    // Each output may be NULL (not needed). wt: w packed by pack_t (nullable:
    // re-laid out per call when the backend needs it).
    void (*matmul_backward)(float *din, float *dw, float *dbias, const float *dout, const float *in, const float *w,
                            const void *wt, int N, int K, int O);

    // --- elementwise / rows -------------------------------------------------------
    // out (N, C) = in / sqrt(mean(in^2) + eps) * w; rstd (N) keeps 1/sqrt(...) for backward (nullable).
    void (*rmsnorm)(float *out, float *rstd, const float *in, const float *w, int N, int C, float eps);
    // din (N, C) += ..., dw (C) += ...
    void (*rmsnorm_backward)(float *din, float *dw, const float *dout, const float *in, const float *w,
                             const float *rstd, int N, int C);
    // Rotate-half RoPE in place on x (N, nh, HS) at positions pos (N) with
    // frequencies inv_freq (HS/2). inverse = 1 rotates by -angle (the backward).
    void (*rope)(float *x, const int *pos, const float *inv_freq, int N, int nh, int HS, int inverse);
    // h (n) = silu(gate) * up
    void (*swiglu)(float *h, const float *gate, const float *up, size_t n);
    // dgate, dup (n) = (overwritten, not added) gradients through h = silu(gate) * up.
    void (*swiglu_backward)(float *dgate, float *dup, const float *dh, const float *gate, const float *up, size_t n);
    // out (N, C) = wte[ids[n]]
    void (*embed)(float *out, const float *wte, const int32_t *ids, int N, int C);
    // dwte[ids[n]] += dout[n]
    void (*embed_backward)(float *dwte, const float *dout, const int32_t *ids, int N, int C);

    // --- attention -----------------------------------------------------------------
    // Attention over nseq contiguous rows, tokens seq_off[s] .. seq_off[s+1]
    // of q (N, NH, HS), k, v (N, NKV, HS). seg (N, nullable) gives each
    // token's segment (base/attn_mask.h): NULL makes every row one causal
    // sequence; otherwise a row may be a packed group (model/pack.h) whose
    // continuations see the prefix and their own earlier tokens only.
    // out (N, NH, HS); lse (N, NH) keeps the softmax log-normaliser for
    // backward (nullable). A packed token's output is the same bits as in its
    // unpacked sequence (its keys are the same, in the same order).
    void (*attention)(float *out, float *lse, const float *q, const float *k, const float *v, const int *seq_off,
                      int nseq, const int *seg, int NH, int NKV, int HS);
    // dq (N, NH, HS), dk, dv (N, NKV, HS) are OVERWRITTEN.
    void (*attention_backward)(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                               const float *q, const float *k, const float *v, const int *seq_off, int nseq,
                               const int *seg, int NH, int NKV, int HS);
    // Decode / prefill over a paged cache: query row r (of N) sits at position
    // pos[r] of the sequence whose block table is blocks[r], and attends to
    // positions 0..pos[r] of it at `layer` (K/V for those are already written).
    void (*attention_paged)(float *out, const float *q, int N, const int *pos, const int *const *blocks,
                            const skpo_paged_kv *kv, int layer, int NH, int NKV, int HS);

    // --- log-probs -------------------------------------------------------------------
    // Rows of logits (N, V), z = logits / temperature: logp[n] = log softmax(z)[tgt[n]],
    // ent[n] = entropy of softmax(z) (nullable), lse[n] = logsumexp(z) (nullable).
    void (*logprob)(float *logp, float *ent, float *lse, const float *logits, const int32_t *tgt, int N, int V,
                    float temperature);
    // In place: logits (N, V) -> d(loss)/d(logits) from dlogp (N) and dent
    // (N, nullable), given the lse and ent of the forward (ent nullable iff dent is).
    void (*logprob_backward)(float *logits, const int32_t *tgt, const float *lse, const float *ent, const float *dlogp,
                             const float *dent, int N, int V, float temperature);

    // --- packed weights ---------------------------------------------------------
    // A copy of w (O, K) in the backend's own layout, made once per weight
    // version (a model load, an optimizer update) so that passes do not
    // re-layout the weights at every call; bf16-exact weights are kept as
    // bf16 (half the bytes). The copy does not follow later writes to w.
    void *(*pack)(const float *w, int K, int O);
    // The same for the backward's din = dout @ w (w (O, K)); freed by pack_free.
    void *(*pack_t)(const float *w, int K, int O);
    void (*pack_free)(void *packed);
    // matmul with w given packed: bit-identical to matmul on w.
    void (*matmul_packed)(float *out, const float *in, const void *packed, const float *bias, int N, int K, int O,
                          int accumulate);
} skpo_ops;

const skpo_ops *skpo_ops_cpu(void);

#endif
