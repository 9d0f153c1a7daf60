/*
 * gemm_cpu.c - the batch-invariant product of gemm_cpu.h: weight packing
 * (float or bf16 panels), three kernels with the same per-element arithmetic
 * (AVX-512, AVX2+FMA, portable fmaf) picked per call from the running CPU,
 * and the OpenMP driver.
 *
 * Why the results cannot depend on the batch: a kernel computes a tile of R
 * rows x 32 outputs, and every element of it is its own chain of K fused
 * multiply-adds in k order (vectorised across outputs, never across k). A
 * smaller R or a partial panel only computes fewer chains; the chains
 * themselves are the same instructions on the same operands. A bf16 panel
 * widens each weight to the same float before the same FMA.
 */
#include "cpu/gemm_cpu.h"
#include "base/common.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum { P = SKPO_GEMM_PANEL };

// 64-byte aligned, from skpo_xmalloc; *raw is what to free.
static void *alloc64(size_t bytes, void **raw) {
    *raw = skpo_xmalloc(bytes + 64);
    return (void *)(((uintptr_t)*raw + 63) & ~(uintptr_t)63);
}

static uint16_t hi16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}

// Element (k, j) of panel p: w[p*32 + j][k] (w (O, K)), or w[k][p*32 + j]
// when transposed (w (K, O)); 0 past O. Written in blocks of 16 k so that,
// untransposed, each source row is read a cache line at a time while the
// 16 destination rows stay in L1.
#define PACK_BODY(T, CONV)                                                                                              \
    int nv = O - p * P < P ? O - p * P : P;                                                                             \
    for (int k0 = 0; k0 < K; k0 += 16) {                                                                                \
        int k1 = k0 + 16 < K ? k0 + 16 : K;                                                                             \
        for (int j = 0; j < nv; j++)                                                                                    \
            for (int k = k0; k < k1; k++) {                                                                             \
                float x = trans ? w[(size_t)k * O + (size_t)p * P + j] : w[((size_t)p * P + j) * K + k];                \
                dst[(size_t)k * P + j] = CONV(x);                                                                       \
            }                                                                                                           \
        for (int j = nv; j < P; j++)                                                                                    \
            for (int k = k0; k < k1; k++) dst[(size_t)k * P + j] = 0;                                                   \
    }
#define ID(x) (x)
static void pack_panel(float *dst, const float *w, int K, int O, int p, int trans) { PACK_BODY(float, ID) }
static void pack_panel_bf(uint16_t *dst, const float *w, int K, int O, int p, int trans) { PACK_BODY(uint16_t, hi16) }
#undef ID
#undef PACK_BODY

// Whether every element of w (n floats) is a bf16 value (low half zero);
// float weights fail at their first element, almost always.
static int bf16_exact(const float *w, size_t n) {
    const uint32_t *u = (const uint32_t *)(const void *)w;
    for (size_t i = 0; i < n; i++)
        if (u[i] & 0xFFFFu) return 0;
    return 1;
}

static skpo_gemm_packed *pack(const float *w, int K, int O, int trans, int bf16_ok) {
    SKPO_ASSERT(K > 0 && O > 0);
    skpo_gemm_packed *p = skpo_xmalloc(sizeof *p);
    int np = (O + P - 1) / P;
    p->K = K;
    p->O = O;
    p->bf16 = bf16_ok && bf16_exact(w, (size_t)K * O);
    size_t es = p->bf16 ? 2 : 4, per = (size_t)K * P;
    p->panels = alloc64((size_t)np * per * es, &p->raw);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < np; i++) {
        if (p->bf16) pack_panel_bf((uint16_t *)p->panels + (size_t)i * per, w, K, O, i, trans);
        else pack_panel((float *)p->panels + (size_t)i * per, w, K, O, i, trans);
    }
    return p;
}

skpo_gemm_packed *skpo_gemm_pack(const float *w, int K, int O, int bf16_ok) { return pack(w, K, O, 0, bf16_ok); }
skpo_gemm_packed *skpo_gemm_pack_t(const float *w, int K, int O, int bf16_ok) { return pack(w, K, O, 1, bf16_ok); }

void skpo_gemm_packed_free(skpo_gemm_packed *p) {
    if (!p) return;
    free(p->raw);
    free(p);
}

// --- kernels ---------------------------------------------------------------------------
//
// Arguments of every kernel: out (R rows, stride ldo) at the panel's first
// column, a (R rows of K, stride lda), the panel pn (K x 32 floats or bf16),
// nv valid columns (1..32), bias at the panel's first column (nullable),
// acc = add into out.

static inline float wget(const void *pn, size_t i, int bf) {
    if (!bf) return ((const float *)pn)[i];
    uint32_t u = (uint32_t)((const uint16_t *)pn)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// Portable: the same chains with fmaf (a library call where the CPU has no FMA).
static void kern_portable(float *out, size_t ldo, const float *a, size_t lda, const void *pn, int bf, int K, int R,
                          int nv, const float *bias, int acc) {
    for (int r = 0; r < R; r++) {
        float t[P] = {0};
        const float *ar = a + (size_t)r * lda;
        for (int k = 0; k < K; k++)
            for (int j = 0; j < P; j++) t[j] = fmaf(ar[k], wget(pn, (size_t)k * P + j, bf), t[j]);
        float *y = out + (size_t)r * ldo;
        for (int j = 0; j < nv; j++) y[j] = ((acc ? y[j] : 0.0f) + (bias ? bias[j] : 0.0f)) + t[j];
    }
}

#if defined(__x86_64__)
// Per-function target attributes (not #pragma GCC target: clang, used by the
// fuzz build, ignores it).
#define T512 __attribute__((target("avx512f")))
#define T256 __attribute__((target("avx2,fma")))

// One row-tile size of a kernel, float or bf16 panels: a case of the kernels' switch.
#define KCASE(fn, r_)                                                                                                  \
    case r_:                                                                                                           \
        if (bf) fn(out, ldo, a, lda, pn, 1, K, r_, nv, bias, acc);                                                     \
        else fn(out, ldo, a, lda, pn, 0, K, r_, nv, bias, acc);                                                        \
        break;

T512 static inline __m512 load_part(const float *x, int n) { // lanes >= n are zero
    return _mm512_maskz_loadu_ps(n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? 0 : (__mmask16)((1u << n) - 1), x);
}

// Up to 8 rows x 32 outputs in 16 zmm accumulators; per k one panel row
// and R broadcasts feed 2R FMAs. A float panel row is 2 loads; a bf16 one is
// 1 load whose 32-bit lanes hold columns (2i, 2i+1): a shift and a mask
// widen them into c0 = even, c1 = odd columns, re-interleaved at the end.
// Either way every output is the same chain of FMAs on the same floats.
T512 __attribute__((always_inline)) static inline void kern512(float *out, size_t ldo, const float *a, size_t lda,
                                                              const void *pn, const int BF, int K, const int R, int nv,
                                                              const float *bias, int acc) {
    __m512 c0[8], c1[8];
    const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) c0[r] = c1[r] = _mm512_setzero_ps();
    for (int k = 0; k < K; k++) {
        __m512 w0, w1;
        if (BF) {
            __m512i x = _mm512_load_si512((const void *)((const uint16_t *)pn + (size_t)k * P));
            w0 = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
            w1 = _mm512_castsi512_ps(_mm512_and_si512(x, hi));
        } else {
            w0 = _mm512_load_ps((const float *)pn + (size_t)k * P);
            w1 = _mm512_load_ps((const float *)pn + (size_t)k * P + 16);
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m512 x = _mm512_set1_ps(a[(size_t)r * lda + k]);
            c0[r] = _mm512_fmadd_ps(x, w0, c0[r]);
            c1[r] = _mm512_fmadd_ps(x, w1, c1[r]);
        }
    }
    if (BF) { // even/odd columns back to 0..15, 16..31
        const __m512i lo_idx = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
        const __m512i hi_idx = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m512 e = c0[r], o = c1[r];
            c0[r] = _mm512_permutex2var_ps(e, lo_idx, o);
            c1[r] = _mm512_permutex2var_ps(e, hi_idx, o);
        }
    }
    int n1 = nv - 16;
    __mmask16 m0 = nv >= 16 ? 0xFFFF : (__mmask16)((1u << nv) - 1);
    __mmask16 m1 = n1 >= 16 ? 0xFFFF : n1 <= 0 ? 0 : (__mmask16)((1u << n1) - 1);
    __m512 b0 = bias ? load_part(bias, nv) : _mm512_setzero_ps();
    __m512 b1 = bias ? load_part(bias + 16, n1) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        float *y = out + (size_t)r * ldo;
        __m512 y0 = acc ? load_part(y, nv) : _mm512_setzero_ps(), y1 = acc ? load_part(y + 16, n1) : _mm512_setzero_ps();
        _mm512_mask_storeu_ps(y, m0, _mm512_add_ps(_mm512_add_ps(y0, b0), c0[r]));
        _mm512_mask_storeu_ps(y + 16, m1, _mm512_add_ps(_mm512_add_ps(y1, b1), c1[r]));
    }
}

T512 static void kern_avx512(float *out, size_t ldo, const float *a, size_t lda, const void *pn, int bf, int K, int R,
                             int nv, const float *bias, int acc) {
    switch (R) {
        KCASE(kern512, 1) KCASE(kern512, 2) KCASE(kern512, 3) KCASE(kern512, 4)
        KCASE(kern512, 5) KCASE(kern512, 6) KCASE(kern512, 7) KCASE(kern512, 8)
    default: SKPO_ASSERT(0);
    }
}

// Up to 4 rows x 16 outputs (half a panel) in 8 ymm accumulators, run for
// each half; the epilogue is scalar (same additions, lane by lane). bf16
// panels as in kern512: one load, even/odd columns in c0/c1.
T256 __attribute__((always_inline)) static inline void kern256(float *out, size_t ldo, const float *a, size_t lda,
                                                              const void *pn, const int BF, int K, const int R, int nv,
                                                              const float *bias, int acc) {
    const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
    for (int h = 0; h < 2 && h * 16 < nv; h++) {
        __m256 c0[4], c1[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) c0[r] = c1[r] = _mm256_setzero_ps();
        for (int k = 0; k < K; k++) {
            __m256 w0, w1;
            if (BF) {
                __m256i x = _mm256_load_si256((const __m256i *)((const uint16_t *)pn + (size_t)k * P + h * 16));
                w0 = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
                w1 = _mm256_castsi256_ps(_mm256_and_si256(x, hi));
            } else {
                w0 = _mm256_load_ps((const float *)pn + (size_t)k * P + h * 16);
                w1 = _mm256_load_ps((const float *)pn + (size_t)k * P + h * 16 + 8);
            }
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                __m256 x = _mm256_broadcast_ss(a + (size_t)r * lda + k);
                c0[r] = _mm256_fmadd_ps(x, w0, c0[r]);
                c1[r] = _mm256_fmadd_ps(x, w1, c1[r]);
            }
        }
        int n = nv - h * 16 < 16 ? nv - h * 16 : 16;
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            float t[16], u[16], *y = out + (size_t)r * ldo + h * 16;
            _mm256_storeu_ps(u, c0[r]);
            _mm256_storeu_ps(u + 8, c1[r]);
            for (int j = 0; j < 16; j++) t[j] = BF ? u[(j & 1) * 8 + j / 2] : u[j];
            for (int j = 0; j < n; j++) y[j] = ((acc ? y[j] : 0.0f) + (bias ? bias[h * 16 + j] : 0.0f)) + t[j];
        }
    }
}

T256 static void kern_avx2(float *out, size_t ldo, const float *a, size_t lda, const void *pn, int bf, int K, int R,
                           int nv, const float *bias, int acc) {
    switch (R) {
        KCASE(kern256, 1) KCASE(kern256, 2) KCASE(kern256, 3) KCASE(kern256, 4)
    default: SKPO_ASSERT(0);
    }
}
#endif

typedef void kern_fn(float *, size_t, const float *, size_t, const void *, int, int, int, int, const float *, int);

// Kernel `isa` (2 AVX-512, 1 AVX2+FMA, 0 portable; -1 = the best this CPU
// has) and its largest row tile; NULL if the CPU lacks it.
static kern_fn *pick_kernel(int isa, int *rows) {
#if defined(__x86_64__)
    int has512 = __builtin_cpu_supports("avx512f"), has2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (isa == 2 || isa < 0) {
        if (has512) return *rows = 8, kern_avx512;
        if (isa == 2) return NULL;
    }
    if (isa == 1 || isa < 0) {
        if (has2) return *rows = 4, kern_avx2;
        if (isa == 1) return NULL;
    }
#else
    if (isa > 0) return NULL;
#endif
    *rows = 4;
    return kern_portable;
}

// --- driver ------------------------------------------------------------------------------
//
// Threads take contiguous ranges of panels. With a packed copy, rows go in
// blocks so a block's inputs stay in cache while the thread's panels stream
// past; packing per call does all rows per panel instead, so each panel is
// packed once. Long prefills use blocks of 16 rows when the matrix fits in
// L3 (re-reading its panels is cheap there): measured on Zen 5, 2048 x 768
// @ 768 x 2048 ran at 247 GFLOP/s instead of 209 with 128-row blocks; a matrix
// that lives in DRAM keeps 128-row blocks, as does decode (N <= 128: one block).
enum { ROWS_BLOCK = 128, ROWS_BLOCK_L3 = 16 };
static const size_t L3_MATRIX_BYTES = (size_t)8 << 20;

void skpo_gemm_invariant(float *out, const float *in, const float *w, const skpo_gemm_packed *wp, const float *bias,
                         int N, int K, int O, int accumulate) {
    if (N <= 0) return;
    SKPO_ASSERT(K > 0 && O > 0 && (wp ? wp->K == K && wp->O == O : w != NULL));
    int np = (O + P - 1) / P, rt, bf = wp && wp->bf16;
    size_t per = (size_t)K * P, es = bf ? 2 : 4;
    kern_fn *kern = pick_kernel(-1, &rt);
    int rb = !wp ? N : N > ROWS_BLOCK && (size_t)K * O * es <= L3_MATRIX_BYTES ? ROWS_BLOCK_L3 : ROWS_BLOCK;
#pragma omp parallel if ((long)N * K * O >= (1L << 15))
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        int p0 = (int)((long)np * t / nt), p1 = (int)((long)np * (t + 1) / nt);
        void *raw = NULL;
        float *buf = !wp && p1 > p0 ? alloc64(per * sizeof(float), &raw) : NULL;
        for (int r0 = 0; r0 < N; r0 += rb) {
            int nr = N - r0 < rb ? N - r0 : rb;
            for (int p = p0; p < p1; p++) {
                const void *pn = wp ? (const void *)((const char *)wp->panels + (size_t)p * per * es) : (const void *)buf;
                if (!wp) pack_panel(buf, w, K, O, p, 0);
                int o0 = p * P, nv = O - o0 < P ? O - o0 : P;
                for (int r = 0; r < nr; r += rt)
                    kern(out + (size_t)(r0 + r) * O + o0, (size_t)O, in + (size_t)(r0 + r) * K, (size_t)K, pn, bf, K,
                         nr - r < rt ? nr - r : rt, nv, bias ? bias + o0 : NULL, accumulate);
            }
        }
        free(raw);
    }
}

// The chain runs over tokens in blocks of TN_BLOCK, each block's sum added to
// dw: a block's panel (TN_BLOCK x 32 floats) and its 8 rows of dout^T stay in
// L2 however many tokens the batch has.
enum { TN_BLOCK = 512 };

void skpo_gemm_tn(float *dw, const float *dout, const float *in, int N, int K, int O) {
    if (N <= 0) return;
    int nb = N < TN_BLOCK ? N : TN_BLOCK;
    float *dt = skpo_xmalloc((size_t)O * nb * sizeof(float));
    for (int n0 = 0; n0 < N; n0 += nb) {
        int n = N - n0 < nb ? N - n0 : nb;
#pragma omp parallel for schedule(static) if ((long)n * O >= (1L << 15))
        for (int o0 = 0; o0 < O; o0 += 16) // dt (O, n) = dout[n0 .. n0+n)^T, 16 columns at a time
            for (int r = 0; r < n; r++)
                for (int o = o0; o < o0 + 16 && o < O; o++) dt[(size_t)o * n + r] = dout[(size_t)(n0 + r) * O + o];
        skpo_gemm_packed *pk = skpo_gemm_pack_t(in + (size_t)n0 * K, n, K, 0);
        skpo_gemm_invariant(dw, dt, NULL, pk, NULL, O, n, K, 1);
        skpo_gemm_packed_free(pk);
    }
    free(dt);
}

int skpo_gemm_invariant_isa(int isa, int bf16, float *out, const float *in, const float *w, const float *bias, int N,
                            int K, int O, int accumulate) {
    int rt;
    kern_fn *kern = pick_kernel(isa, &rt);
    if (!kern) return 0;
    skpo_gemm_packed *pk = skpo_gemm_pack(w, K, O, bf16);
    SKPO_ASSERT(pk->bf16 == bf16);
    size_t per = (size_t)K * P * (bf16 ? 2 : 4);
    for (int p = 0; p < (O + P - 1) / P; p++) {
        int o0 = p * P, nv = O - o0 < P ? O - o0 : P;
        for (int r = 0; r < N; r += rt)
            kern(out + (size_t)r * O + o0, (size_t)O, in + (size_t)r * K, (size_t)K, (const char *)pk->panels + p * per,
                 bf16, K, N - r < rt ? N - r : rt, nv, bias ? bias + o0 : NULL, accumulate);
    }
    skpo_gemm_packed_free(pk);
    return 1;
}
