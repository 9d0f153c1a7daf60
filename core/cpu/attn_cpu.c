/*
 * attn_cpu.c - see attn_cpu.h. The portable loop spends its time in
 * latency-bound single-accumulator dot products, an output accumulated
 * through memory and a libm expf per position; the AVX-512 path keeps the
 * query and the output row in zmm registers (head sizes multiple of 16 up
 * to 256), uses two dot-product accumulators and computes the exponentials
 * 16 at a time. The backward (no invariance needed) works on 16 x 16 tiles.
 */
#include "cpu/attn_cpu.h"
#include "base/common.h"

#include "cpu/simd_impl.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

// --- portable -----------------------------------------------------------------------------
//
// Compiled twice (SKPO_SIMD_CLONES, simd_impl.h); every caller gets the same
// clone on one machine.
SKPO_SIMD_CLONES
static float row_portable(float *o, const float *q, const skpo_kv_span *sp, int nsp, int HS, float scale, float *p) {
    float mx = -INFINITY;
    int n = 0;
    for (int s = 0; s < nsp; s++)
        for (int j = 0; j < sp[s].n; j++, n++) {
            float z = dot(q, sp[s].k + (size_t)j * sp[s].stride, HS) * scale;
            p[n] = z;
            if (z > mx) mx = z;
        }
    float sum = 0;
    for (int j = 0; j < n; j++) sum += (p[j] = expf(p[j] - mx));
    float inv = 1.0f / sum;
    memset(o, 0, (size_t)HS * sizeof(float));
    n = 0;
    for (int s = 0; s < nsp; s++)
        for (int j = 0; j < sp[s].n; j++, n++) {
            const float *vj = sp[s].v + (size_t)j * sp[s].stride;
            float w = p[n] * inv;
#pragma omp simd
            for (int i = 0; i < HS; i++) o[i] += w * vj[i];
        }
    return mx + logf(sum);
}

// --- AVX-512 ---------------------------------------------------------------------------------

#if defined(__x86_64__)
T512 __attribute__((always_inline)) static inline float row512(float *o, const float *qr, const skpo_kv_span *sp,
                                                               int nsp, const int NV, float scale, float *p) {
    __m512 q[16];
#pragma GCC unroll 16
    for (int i = 0; i < NV; i++) q[i] = _mm512_loadu_ps(qr + 16 * i);
    float mx = -INFINITY;
    int n = 0;
    for (int s = 0; s < nsp; s++)
        for (int j = 0; j < sp[s].n; j++, n++) {
            const float *kj = sp[s].k + (size_t)j * sp[s].stride;
            __m512 a0 = _mm512_mul_ps(q[0], _mm512_loadu_ps(kj)), a1 = _mm512_setzero_ps();
#pragma GCC unroll 16
            for (int i = 1; i < NV; i++) {
                if (i & 1) a1 = _mm512_fmadd_ps(q[i], _mm512_loadu_ps(kj + 16 * i), a1);
                else a0 = _mm512_fmadd_ps(q[i], _mm512_loadu_ps(kj + 16 * i), a0);
            }
            float z = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1)) * scale;
            p[n] = z;
            mx = z > mx ? z : mx;
        }
    __m512 vm = _mm512_set1_ps(mx), vs = _mm512_setzero_ps();
    for (int j = 0; j < n; j += 16) {
        int left = n - j;
        __mmask16 m = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
        __m512 e = _mm512_maskz_mov_ps(m, exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, p + j), vm)));
        _mm512_mask_storeu_ps(p + j, m, e);
        vs = _mm512_add_ps(vs, e);
    }
    float sum = _mm512_reduce_add_ps(vs), inv = 1.0f / sum;
    __m512 acc[16];
#pragma GCC unroll 16
    for (int i = 0; i < NV; i++) acc[i] = _mm512_setzero_ps();
    n = 0;
    for (int s = 0; s < nsp; s++)
        for (int j = 0; j < sp[s].n; j++, n++) {
            __m512 w = _mm512_set1_ps(p[n] * inv);
            const float *vj = sp[s].v + (size_t)j * sp[s].stride;
#pragma GCC unroll 16
            for (int i = 0; i < NV; i++) acc[i] = _mm512_fmadd_ps(w, _mm512_loadu_ps(vj + 16 * i), acc[i]);
        }
#pragma GCC unroll 16
    for (int i = 0; i < NV; i++) _mm512_storeu_ps(o + 16 * i, acc[i]);
    return mx + logf(sum);
}

T512 static float row512_any(float *o, const float *q, const skpo_kv_span *sp, int nsp, int HS, float scale, float *p) {
    switch (HS / 16) {
#define R512(nv_) case nv_: return row512(o, q, sp, nsp, nv_, scale, p);
        R512(1) R512(2) R512(3) R512(4) R512(5) R512(6) R512(7) R512(8)
        R512(9) R512(10) R512(11) R512(12) R512(13) R512(14) R512(15) R512(16)
#undef R512
    default: SKPO_ASSERT(0); return 0;
    }
}

int skpo_attn_fast_ok(int HS) { return HS % 16 == 0 && HS <= 256 && __builtin_cpu_supports("avx512f"); }

// Bits of the keys j0 .. j0+15 in [lo, hi) (row-relative).
static inline unsigned run_bits(int lo, int hi, int j0) {
    lo = lo < j0 ? 0 : lo - j0;
    hi = hi > j0 + 16 ? 16 : hi - j0;
    if (hi <= lo) return 0;
    return (hi >= 16 ? 0xFFFFu : (1u << hi) - 1) & ~((1u << lo) - 1);
}

// vis[u]: the keys j0 .. j0+15 query i0 + u (u < ni) sees (base/attn_mask.h:
// causal, or a packed row's two runs); returns whether any bit is set.
static inline int tile_mask(__mmask16 *vis, const skpo_attn_runs *ru, int i0, int ni, int j0) {
    unsigned any = 0;
    for (int u = 0; u < ni; u++) {
        int i = i0 + u;
        unsigned b = ru ? run_bits(0, ru->pre_end[i] - ru->s0, j0) | run_bits(ru->own0[i] - ru->s0, i + 1, j0)
                        : run_bits(0, i + 1, j0);
        vis[u] = (__mmask16)b;
        any |= b;
    }
    return any != 0;
}

// --- backward, AVX-512 ---------------------------------------------------------------------
//
// Tiles of 16 queries x 16 keys, vectorised over keys for the scores and
// dP = dO v^T (K and V transposed once per sequence and kv head, so each
// query's 16 scores are HS fused multiply-adds with no horizontal sum), and
// over the head dimension for the three accumulations dV += P^T dO,
// dK += dS^T Q, dQ += dS K. Per query-key pair about 5 HS / 16 vector FMAs
// instead of the row loop's four dot products, three axpys and two expf.
T512 __attribute__((always_inline)) static inline void bwd512(float *dq, float *dk, float *dv, const float *dout,
                                                              const float *lse, const float *D, const float *q,
                                                              const float *k, const float *v, int n,
                                                              const skpo_attn_runs *ru, int NH, int NKV, int g, int grp,
                                                              const int NV, float scale, float *kt, float *vt) {
    const int HS = NV * 16;
    size_t qs = (size_t)NH * HS, ks = (size_t)NKV * HS, Tp = ((size_t)n + 15) & ~(size_t)15;
    // kt, vt: per block of 16 keys, HS rows of 16 (key-block-major, so a
    // tile's K^T is 16 HS contiguous floats); zero past the sequence.
    for (size_t j = 0; j < Tp; j++)
        for (int d = 0; d < HS; d++) {
            size_t o = ((j / 16) * HS + (size_t)d) * 16 + j % 16;
            kt[o] = j < (size_t)n ? k[j * ks + (size_t)g * HS + d] : 0.0f;
            vt[o] = j < (size_t)n ? v[j * ks + (size_t)g * HS + d] : 0.0f;
        }
    for (int j = 0; j < n; j++) {
        memset(dk + (size_t)j * ks + (size_t)g * HS, 0, (size_t)HS * sizeof(float));
        memset(dv + (size_t)j * ks + (size_t)g * HS, 0, (size_t)HS * sizeof(float));
        for (int h = g * grp; h < (g + 1) * grp; h++) memset(dq + (size_t)j * qs + (size_t)h * HS, 0, (size_t)HS * sizeof(float));
    }
    __m512 vscale = _mm512_set1_ps(scale);
    for (int h = g * grp; h < (g + 1) * grp; h++)
        for (int i0 = 0; i0 < n; i0 += 16) {
            int ni = n - i0 < 16 ? n - i0 : 16;
            for (int j0 = 0; j0 < i0 + ni; j0 += 16) {
                __mmask16 vis[16];
                if (!tile_mask(vis, ru, i0, ni, j0)) continue; // no visible pair: P = dS = 0
                float P[16][16] __attribute__((aligned(64))), DS[16][16] __attribute__((aligned(64)));
                const float *ktb = kt + (size_t)(j0 / 16) * HS * 16, *vtb = vt + (size_t)(j0 / 16) * HS * 16;
                for (int ii0 = 0; ii0 < ni; ii0 += 4) { // 4 queries at once: 8 independent FMA chains
                    const float *qi[4], *doi[4];
                    for (int u = 0; u < 4; u++) {
                        size_t i = (size_t)(i0 + (ii0 + u < ni ? ii0 + u : ii0)); // past the tile: recomputed, unused
                        qi[u] = q + i * qs + (size_t)h * HS;
                        doi[u] = dout + i * qs + (size_t)h * HS;
                    }
                    __m512 s[4], dp[4];
                    for (int u = 0; u < 4; u++) s[u] = dp[u] = _mm512_setzero_ps();
                    for (int d = 0; d < HS; d++) {
                        __m512 kd = _mm512_load_ps(ktb + (size_t)d * 16), vd = _mm512_load_ps(vtb + (size_t)d * 16);
#pragma GCC unroll 4
                        for (int u = 0; u < 4; u++) {
                            s[u] = _mm512_fmadd_ps(_mm512_set1_ps(qi[u][d]), kd, s[u]);
                            dp[u] = _mm512_fmadd_ps(_mm512_set1_ps(doi[u][d]), vd, dp[u]);
                        }
                    }
                    for (int u = 0; u < 4 && ii0 + u < ni; u++) {
                        size_t i = (size_t)(i0 + ii0 + u);
                        __mmask16 m = vis[ii0 + u];
                        __m512 pr = _mm512_maskz_mov_ps(
                            m, exp512(_mm512_sub_ps(_mm512_mul_ps(s[u], vscale), _mm512_set1_ps(lse[i * NH + h]))));
                        _mm512_store_ps(P[ii0 + u], pr);
                        _mm512_store_ps(DS[ii0 + u],
                                        _mm512_mul_ps(_mm512_mul_ps(pr, _mm512_sub_ps(dp[u], _mm512_set1_ps(D[i * NH + h]))), vscale));
                    }
                }
                int nj = n - j0 < 16 ? n - j0 : 16;
                for (int jj = 0; jj < nj; jj++) { // dv_j += sum_i P_ij dO_i; dk_j += sum_i dS_ij q_i (dS scaled)
                    float *dvj = dv + (size_t)(j0 + jj) * ks + (size_t)g * HS, *dkj = dk + (size_t)(j0 + jj) * ks + (size_t)g * HS;
                    __m512 av[16], ak[16];
#pragma GCC unroll 16
                    for (int c = 0; c < NV; c++) av[c] = _mm512_loadu_ps(dvj + 16 * c), ak[c] = _mm512_loadu_ps(dkj + 16 * c);
                    for (int ii = 0; ii < ni; ii++) {
                        size_t i = (size_t)(i0 + ii);
                        const float *qi = q + i * qs + (size_t)h * HS, *doi = dout + i * qs + (size_t)h * HS;
                        __m512 bp = _mm512_set1_ps(P[ii][jj]), bd = _mm512_set1_ps(DS[ii][jj]);
#pragma GCC unroll 16
                        for (int c = 0; c < NV; c++) {
                            av[c] = _mm512_fmadd_ps(bp, _mm512_loadu_ps(doi + 16 * c), av[c]);
                            ak[c] = _mm512_fmadd_ps(bd, _mm512_loadu_ps(qi + 16 * c), ak[c]);
                        }
                    }
#pragma GCC unroll 16
                    for (int c = 0; c < NV; c++) _mm512_storeu_ps(dvj + 16 * c, av[c]), _mm512_storeu_ps(dkj + 16 * c, ak[c]);
                }
                for (int ii = 0; ii < ni; ii++) { // dq_i += sum_j dS_ij k_j
                    float *dqi = dq + (size_t)(i0 + ii) * qs + (size_t)h * HS;
                    __m512 a[16];
#pragma GCC unroll 16
                    for (int c = 0; c < NV; c++) a[c] = _mm512_loadu_ps(dqi + 16 * c);
                    for (int jj = 0; jj < nj; jj++) {
                        const float *kj = k + (size_t)(j0 + jj) * ks + (size_t)g * HS;
                        __m512 b = _mm512_set1_ps(DS[ii][jj]);
#pragma GCC unroll 16
                        for (int c = 0; c < NV; c++) a[c] = _mm512_fmadd_ps(b, _mm512_loadu_ps(kj + 16 * c), a[c]);
                    }
#pragma GCC unroll 16
                    for (int c = 0; c < NV; c++) _mm512_storeu_ps(dqi + 16 * c, a[c]);
                }
            }
        }
}

T512 static void bwd512_any(float *dq, float *dk, float *dv, const float *dout, const float *lse, const float *D,
                            const float *q, const float *k, const float *v, int n, const skpo_attn_runs *ru, int NH,
                            int NKV, int g, int grp, int HS, float scale, float *kt, float *vt) {
    switch (HS / 16) {
#define B512(nv_) case nv_: bwd512(dq, dk, dv, dout, lse, D, q, k, v, n, ru, NH, NKV, g, grp, nv_, scale, kt, vt); break;
        B512(1) B512(2) B512(3) B512(4) B512(5) B512(6) B512(7) B512(8)
        B512(9) B512(10) B512(11) B512(12) B512(13) B512(14) B512(15) B512(16)
#undef B512
    default: SKPO_ASSERT(0);
    }
}

void skpo_attn_bwd_group(float *dq, float *dk, float *dv, const float *dout, const float *lse, const float *D,
                         const float *q, const float *k, const float *v, int n, const skpo_attn_runs *runs, int NH,
                         int NKV, int g, int HS, float scale, float *scratch) {
    size_t Tp = ((size_t)n + 15) & ~(size_t)15;
    float *kt = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63); // 64-byte aligned tiles
    bwd512_any(dq, dk, dv, dout, lse, D, q, k, v, n, runs, NH, NKV, g, NH / NKV, HS, scale, kt, kt + Tp * (size_t)HS);
}
#else
int skpo_attn_fast_ok(int HS) { return 0; }
void skpo_attn_bwd_group(float *dq, float *dk, float *dv, const float *dout, const float *lse, const float *D,
                         const float *q, const float *k, const float *v, int n, const skpo_attn_runs *runs, int NH,
                         int NKV, int g, int HS, float scale, float *scratch) {
    SKPO_ASSERT(0);
}
#endif

float skpo_attn_row(float *o, const float *q, const skpo_kv_span *sp, int nsp, int HS, float scale, float *p) {
#if defined(__x86_64__)
    if (skpo_attn_fast_ok(HS)) return row512_any(o, q, sp, nsp, HS, scale, p);
#endif
    return row_portable(o, q, sp, nsp, HS, scale, p);
}
