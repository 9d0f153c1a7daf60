/*
 * gemm_cpu.h - the CPU backend's one matrix product for every forward pass
 * (private to core/cpu/; ops.h exposes it as matmul / pack / matmul_packed):
 * out (N, O) = in (N, K) @ w^T (+ bias), w (O, K), where every output element
 * is ONE fixed-order sum that does not depend on N, on where its row sits in
 * the batch, on the thread count, on the output tiling or on the kernel:
 *     t = fma(in[k], w[k], t) for k = 0 .. K-1, starting from t = 0;
 *     out = ((accumulate ? out : 0) + (bias ? bias : 0)) + t.
 * Every code path (AVX-512, AVX2+FMA, portable fmaf) performs exactly those
 * roundings, so the dispatch choice never changes a result either. Sampling,
 * scoring, pi_old and the training forward all call it: that is what makes
 * a rollout's log-probs equal the trainer's bit for bit.
 *
 * Speed comes from the weight layout: w is repacked into panels of 32 output
 * columns, panel p holding w[p*32 + j][k] at [k][j] (K x 32, 64-byte
 * aligned, zero past O), so the kernel streams one panel and keeps a tile of
 * up to 8 rows x 32 outputs in registers: vectorised over outputs, not over
 * K, hence no horizontal reduction and no dependence on N. When every weight
 * is exactly a bfloat16 (a bf16 checkpoint, or the bf16 compute copy of
 * fp32 masters) the panels hold bf16: half the bytes for decode, which is
 * bound by reading weights, and the same results (bf16 -> fp32 is exact).
 *
 * Backward products (no invariance needed) use the same kernels through
 * skpo_gemm_pack_t and skpo_gemm_tn below, or OpenBLAS where it is faster
 * (ops_cpu.c says which, per shape).
 */
#ifndef SKPO_GEMM_CPU_H
#define SKPO_GEMM_CPU_H

#include <stddef.h>

enum { SKPO_GEMM_PANEL = 32 };

// A packed copy of a weight matrix; free with skpo_gemm_packed_free.
typedef struct skpo_gemm_packed {
    int K, O;
    int bf16;        // panels hold bf16 (uint16_t) instead of float
    void *panels;    // (ceil(O / 32), K, 32) elements
    void *raw;       // the allocation panels points into
} skpo_gemm_packed;

// w (O, K) packed for out = in @ w^T; bf16 panels when every element of w is
// a bf16 value (and bf16_ok).
skpo_gemm_packed *skpo_gemm_pack(const float *w, int K, int O, int bf16_ok);
// w (K, O) packed for out = in @ w (the transpose's product): the backward's
// din = dout @ W packs W (O, K) this way with (K, O) = (O, K).
skpo_gemm_packed *skpo_gemm_pack_t(const float *w, int K, int O, int bf16_ok);
void skpo_gemm_packed_free(skpo_gemm_packed *p);

// The product above; wp may be NULL (then w is packed per call, panel by
// panel), otherwise w is ignored and wp must have been packed for (K, O).
// Parallel over output panels with OpenMP.
void skpo_gemm_invariant(float *out, const float *in, const float *w, const skpo_gemm_packed *wp, const float *bias,
                         int N, int K, int O, int accumulate);

// dw (O, K) += dout^T (O, N) @ in (N, K), dout (N, O): the weight gradient,
// through the same kernels (a transposed copy of dout, in packed as panels).
void skpo_gemm_tn(float *dw, const float *dout, const float *in, int N, int K, int O);

// For tests: the same product on the calling thread with one kernel, isa 0
// portable, 1 AVX2+FMA, 2 AVX-512, with bf16 panels when bf16 (w must then be
// bf16-exact); returns 0 (and does nothing) where this CPU lacks that
// instruction set.
int skpo_gemm_invariant_isa(int isa, int bf16, float *out, const float *in, const float *w, const float *bias, int N,
                            int K, int O, int accumulate);

#endif
