/*
 * gemm_cpu.h - the CPU backend's batch-invariant matrix product (private to
 * core/cpu/): out (N, O) = in (N, K) @ w^T (+ bias), w (O, K), where every
 * output element is ONE fixed-order sum that does not depend on N, on where
 * its row sits in the batch, on the thread count or on the output tiling:
 *     t = fma(in[k], w[k], t) for k = 0 .. K-1, starting from t = 0;
 *     out = ((accumulate ? out : 0) + (bias ? bias : 0)) + t.
 * Every code path (AVX-512, AVX2+FMA, portable fmaf) performs exactly those
 * roundings, so the dispatch choice never changes a result either.
 *
 * Speed comes from the weight layout: w is repacked into panels of 32 output
 * columns, panel p holding w[p*32 + j][k] at [k][j] (K x 32 floats, 64-byte
 * aligned, zero past O), so the kernel streams one panel and keeps a tile of
 * up to 8 rows x 32 outputs in registers: vectorised over outputs, not over
 * K, hence no horizontal reduction and no dependence on N. A packed copy made
 * once (skpo_gemm_pack) serves every later product; without one, each thread
 * packs the panel it works on per call (same numbers, slower).
 *
 * Not here: training products (plain sgemm, ops_cpu.c), which need no
 * invariance and use OpenBLAS.
 */
#ifndef SKPO_GEMM_CPU_H
#define SKPO_GEMM_CPU_H

#include <stddef.h>

enum { SKPO_GEMM_PANEL = 32 };

// A packed copy of w (O, K); free with skpo_gemm_packed_free.
typedef struct skpo_gemm_packed {
    int K, O;
    float *panels; // (ceil(O / 32), K, 32)
    void *raw;     // the allocation panels points into
} skpo_gemm_packed;

skpo_gemm_packed *skpo_gemm_pack(const float *w, int K, int O);
void skpo_gemm_packed_free(skpo_gemm_packed *p);

// The product above; wp may be NULL (then w is packed per call, panel by
// panel), otherwise w is ignored and wp must have been packed from (K, O).
// Parallel over output panels with OpenMP.
void skpo_gemm_invariant(float *out, const float *in, const float *w, const skpo_gemm_packed *wp, const float *bias,
                         int N, int K, int O, int accumulate);

// For tests: the same product on the calling thread with one kernel, isa 0
// portable, 1 AVX2+FMA, 2 AVX-512; returns 0 (and does nothing) where this
// CPU lacks that instruction set.
int skpo_gemm_invariant_isa(int isa, float *out, const float *in, const float *w, const float *bias, int N, int K,
                            int O, int accumulate);

#endif
