/*
 * attn_cpu.c - see attn_cpu.h. The portable loop spends its time in
 * latency-bound single-accumulator dot products, an output accumulated
 * through memory and a libm expf per position; the AVX-512 path keeps the
 * query and the output row in zmm registers (head sizes multiple of 16 up
 * to 256), uses two dot-product accumulators and computes the exponentials
 * 16 at a time; several rows at once share each key's loads and do their
 * horizontal sums 16 at a time, in the same order. The backward (no
 * invariance needed) works on 16 x 16 tiles.
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
// A row's softmax after its scores p[0..n): the largest score (lane-wise
// over 16 at a time from index 0, then across lanes: one order for every
// caller, so ties of +0 and -0 and NaN scores resolve alike), then
// p[j] = exp(p[j] - max) 16 at a time. Returns log(sum) + max; *inv = 1 / sum.
T512 static float softmax512(float *p, int n, float *inv) {
    __m512 vmx = _mm512_set1_ps(-INFINITY);
    for (int j = 0; j < n; j += 16) {
        int left = n - j;
        __mmask16 m = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
        vmx = _mm512_mask_max_ps(vmx, m, _mm512_maskz_loadu_ps(m, p + j), vmx);
    }
    float mx = _mm512_reduce_max_ps(vmx);
    __m512 vm = _mm512_set1_ps(mx), vs = _mm512_setzero_ps();
    for (int j = 0; j < n; j += 16) {
        int left = n - j;
        __mmask16 m = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
        __m512 e = _mm512_maskz_mov_ps(m, exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, p + j), vm)));
        _mm512_mask_storeu_ps(p + j, m, e);
        vs = _mm512_add_ps(vs, e);
    }
    float sum = _mm512_reduce_add_ps(vs);
    *inv = 1.0f / sum;
    return mx + logf(sum);
}

// q . k before its horizontal sum: two accumulators over alternate 16-float
// chunks, added lane-wise. Every score is this, then _mm512_reduce_add_ps
// (or hsum16, the same additions), then * scale.
T512 __attribute__((always_inline)) static inline __m512 dot16(const __m512 *q, const float *kj, const int NV) {
    __m512 a0 = _mm512_mul_ps(q[0], _mm512_loadu_ps(kj)), a1 = _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int i = 1; i < NV; i++) {
        if (i & 1) a1 = _mm512_fmadd_ps(q[i], _mm512_loadu_ps(kj + 16 * i), a1);
        else a0 = _mm512_fmadd_ps(q[i], _mm512_loadu_ps(kj + 16 * i), a0);
    }
    return _mm512_add_ps(a0, a1);
}

// Lane m: _mm512_reduce_add_ps(a[m]), the same additions in the same pairs
// (GCC's order: lanes i and i+8, then i and i+4, then 0+2 and 1+3, then the
// two), for 16 vectors at once: ~3 instructions a sum instead of 8.
T512 __attribute__((always_inline)) static inline __m512 hsum16(const __m512 *a) {
    __m512 x[8], z[4], w[2];
#pragma GCC unroll 8
    for (int m = 0; m < 8; m++) // 2m, 2m+1: [lo halves] + [hi halves] -> 8 partial sums each
        x[m] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0xEE),
                             _mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0x44));
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) // 128-bit lane t of z[m]: 4m + t, 4 partial sums
        z[m] = _mm512_add_ps(_mm512_shuffle_f32x4(x[2 * m], x[2 * m + 1], 0xDD),
                             _mm512_shuffle_f32x4(x[2 * m], x[2 * m + 1], 0x88));
#pragma GCC unroll 2
    for (int m = 0; m < 2; m++) // lane t: [8m+t: 0+2, 1+3; 8m+4+t: 0+2, 1+3]
        w[m] = _mm512_add_ps(_mm512_shuffle_ps(z[2 * m], z[2 * m + 1], 0x44),
                             _mm512_shuffle_ps(z[2 * m], z[2 * m + 1], 0xEE));
    __m512 v = _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], 0x88), _mm512_shuffle_ps(w[0], w[1], 0xDD));
    // v[4t + u] is the sum of a[t + 4u]
    const __m512i idx = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    return _mm512_permutexvar_ps(idx, v);
}

// One query row (decode, prefill): scores one key at a time.
T512 __attribute__((always_inline)) static inline float row512(float *o, const float *qr, const skpo_kv_span *sp,
                                                               int nsp, const int NV, float scale, float *p) {
    __m512 q[16];
#pragma GCC unroll 16
    for (int i = 0; i < NV; i++) q[i] = _mm512_loadu_ps(qr + 16 * i);
    int n = 0;
    for (int s = 0; s < nsp; s++)
        for (int j = 0; j < sp[s].n; j++, n++)
            p[n] = _mm512_reduce_add_ps(dot16(q, sp[s].k + (size_t)j * sp[s].stride, NV)) * scale;
    float inv, lse = softmax512(p, n, &inv);
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
    return lse;
}

// R consecutive query rows of one segment (a whole-sequence pass): row u sees
// the keys of sp[] and then the u keys that follow its last span. Each key
// and value is loaded once for the R rows and the scores' horizontal sums go
// 16 at a time (hsum16); every row's arithmetic is row512's, in its order.
T512 __attribute__((always_inline)) static inline void rows512(float *o, size_t os, const float *qr, size_t qs,
                                                               const skpo_kv_span *sp, int nsp, const int NV,
                                                               const int R, float scale, float *p, size_t ps,
                                                               float *lse) {
    enum { KM = 16 };
    const int K = KM / R; // keys per hsum16
    __m512 q[4][16];
    for (int u = 0; u < R; u++)
#pragma GCC unroll 16
        for (int i = 0; i < NV; i++) q[u][i] = _mm512_loadu_ps(qr + (size_t)u * qs + 16 * i);
    const __m512 vsc = _mm512_set1_ps(scale);
    int n = 0;
    for (int s = 0; s < nsp; s++) {
        const float *kb = sp[s].k;
        size_t st = sp[s].stride;
        int j = 0;
        for (; j + K <= sp[s].n; j += K, n += K) {
            __m512 part[16];
#pragma GCC unroll 16
            for (int jj = 0; jj < K; jj++)
#pragma GCC unroll 4
                for (int u = 0; u < R; u++) part[u * K + jj] = dot16(q[u], kb + (size_t)(j + jj) * st, NV);
            __m512 z = _mm512_mul_ps(hsum16(part), vsc);
            if (R == 1) _mm512_storeu_ps(p + n, z);
            else if (R == 2) {
                _mm256_storeu_ps(p + n, _mm512_castps512_ps256(z));
                _mm256_storeu_ps(p + ps + n, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(z), 1)));
            } else {
                _mm_storeu_ps(p + n, _mm512_castps512_ps128(z));
                _mm_storeu_ps(p + ps + n, _mm512_extractf32x4_ps(z, 1));
                _mm_storeu_ps(p + 2 * ps + n, _mm512_extractf32x4_ps(z, 2));
                _mm_storeu_ps(p + 3 * ps + n, _mm512_extractf32x4_ps(z, 3));
            }
        }
        for (; j < sp[s].n; j++, n++)
            for (int u = 0; u < R; u++)
                p[(size_t)u * ps + n] = _mm512_reduce_add_ps(dot16(q[u], kb + (size_t)j * st, NV)) * scale;
    }
    const float *kx = sp[nsp - 1].k + (size_t)sp[nsp - 1].n * sp[nsp - 1].stride, *vx;
    size_t sx = sp[nsp - 1].stride;
    for (int u = 1; u < R; u++)
        for (int e = 0; e < u; e++)
            p[(size_t)u * ps + n + e] = _mm512_reduce_add_ps(dot16(q[u], kx + (size_t)e * sx, NV)) * scale;
    float inv[4];
    for (int u = 0; u < R; u++) lse[u] = softmax512(p + (size_t)u * ps, n + u, &inv[u]);
    __m512 acc[4][16];
    for (int u = 0; u < R; u++)
#pragma GCC unroll 16
        for (int i = 0; i < NV; i++) acc[u][i] = _mm512_setzero_ps();
    n = 0;
    for (int s = 0; s < nsp; s++)
        for (int j = 0; j < sp[s].n; j++, n++) {
            const float *vj = sp[s].v + (size_t)j * sp[s].stride;
#pragma GCC unroll 16
            for (int i = 0; i < NV; i++) {
                __m512 vv = _mm512_loadu_ps(vj + 16 * i);
#pragma GCC unroll 4
                for (int u = 0; u < R; u++)
                    acc[u][i] = _mm512_fmadd_ps(_mm512_set1_ps(p[(size_t)u * ps + n] * inv[u]), vv, acc[u][i]);
            }
        }
    vx = sp[nsp - 1].v + (size_t)sp[nsp - 1].n * sx;
    for (int u = 1; u < R; u++)
        for (int e = 0; e < u; e++) {
            __m512 w = _mm512_set1_ps(p[(size_t)u * ps + n + e] * inv[u]);
#pragma GCC unroll 16
            for (int i = 0; i < NV; i++) acc[u][i] = _mm512_fmadd_ps(w, _mm512_loadu_ps(vx + (size_t)e * sx + 16 * i), acc[u][i]);
        }
    for (int u = 0; u < R; u++)
#pragma GCC unroll 16
        for (int i = 0; i < NV; i++) _mm512_storeu_ps(o + (size_t)u * os + 16 * i, acc[u][i]);
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

// Rows at once by head size: as many as keep R x NV accumulators in 16 registers.
static int rows_at_once(int HS) { return HS <= 64 ? 4 : HS <= 128 ? 2 : 1; }

T512 static void rows512_any(float *o, size_t os, const float *q, size_t qs, const skpo_kv_span *sp, int nsp, int HS,
                             float scale, float *p, size_t ps, float *lse) {
    switch (HS / 16) {
#define W512(nv_) case nv_: rows512(o, os, q, qs, sp, nsp, nv_, nv_ <= 4 ? 4 : nv_ <= 8 ? 2 : 1, scale, p, ps, lse); break;
        W512(1) W512(2) W512(3) W512(4) W512(5) W512(6) W512(7) W512(8)
        W512(9) W512(10) W512(11) W512(12) W512(13) W512(14) W512(15) W512(16)
#undef W512
    default: SKPO_ASSERT(0);
    }
}

int skpo_attn_fast_ok(int HS) { return HS % 16 == 0 && HS <= 256 && __builtin_cpu_supports("avx512f"); }

// Queries of the tile that starts at i0: up to 16, all of one segment (a
// tile straddling two continuations would compute the key tiles of both
// for all its rows).
static inline int tile_rows(const skpo_attn_runs *ru, int i0, int n) {
    int ni = 1;
    while (ni < 16 && i0 + ni < n && (!ru || ru->own0[i0 + ni] == ru->own0[i0])) ni++;
    return ni;
}

// Key blocks of the backward: 16 keys each, laid out segment by segment
// (base/attn_mask.h), so every segment starts a fresh block. A query tile's
// visible keys are then whole blocks, the prefix's then its own segment's up
// to the diagonal, with only the last block of each run partial, and no block
// of another continuation is ever visited. (Blocks at multiples of 16 from the
// row start cut both runs at unaligned places and walked every other
// continuation's tiles to find them empty: the packed backward ran at 0.91 of
// the unpacked one's time for 0.86 of its pairs.)
//
// The cursor: walking tokens i in order, *sg is the first token of i's
// segment and *bk its first block.
static inline void seg_cursor(const skpo_attn_runs *ru, int i, int *sg, int *bk) {
    int s = ru ? ru->own0[i] - ru->s0 : 0;
    if (s != *sg) *bk += (s - *sg + 15) / 16, *sg = s;
}

size_t skpo_attn_bwd_scratch(int n, const skpo_attn_runs *ru, int HS) {
    int sg = 0, bk = 0;
    for (int i = 0; i < n; i++) seg_cursor(ru, i, &sg, &bk);
    return 2 * (size_t)HS * 16 * (size_t)(bk + (n - sg + 15) / 16) + 16;
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
    size_t qs = (size_t)NH * HS, ks = (size_t)NKV * HS;
    // kt, vt (vt follows kt): per key block, HS rows of 16 (block-major, so a
    // tile's K^T is 16 HS contiguous floats); zero past each segment's end.
    memset(kt, 0, (size_t)(vt - kt) * 2 * sizeof(float));
    for (int j = 0, sg = 0, bk = 0; j < n; j++) {
        seg_cursor(ru, j, &sg, &bk);
        size_t b = (size_t)(bk + (j - sg) / 16) * HS * 16 + (size_t)((j - sg) % 16);
        for (int d = 0; d < HS; d++) {
            kt[b + (size_t)d * 16] = k[(size_t)j * ks + (size_t)g * HS + d];
            vt[b + (size_t)d * 16] = v[(size_t)j * ks + (size_t)g * HS + d];
        }
    }
    for (int j = 0; j < n; j++) {
        memset(dk + (size_t)j * ks + (size_t)g * HS, 0, (size_t)HS * sizeof(float));
        memset(dv + (size_t)j * ks + (size_t)g * HS, 0, (size_t)HS * sizeof(float));
        for (int h = g * grp; h < (g + 1) * grp; h++) memset(dq + (size_t)j * qs + (size_t)h * HS, 0, (size_t)HS * sizeof(float));
    }
    __m512 vscale = _mm512_set1_ps(scale);
    for (int h = g * grp; h < (g + 1) * grp; h++)
        for (int i0 = 0, ni, sg = 0, bk = 0; i0 < n; i0 += ni) {
            seg_cursor(ru, i0, &sg, &bk);
            ni = tile_rows(ru, i0, n);
            // The prefix run [0, pl) (blocks 0 ..), then the own run [sg, i0 + ni).
            int pl = ru ? ru->pre_end[i0] - ru->s0 : 0, npre = (pl + 15) / 16, nown = (i0 + ni - 1 - sg) / 16 + 1;
            for (int t = 0; t < npre + nown; t++) {
                int pre = t < npre, kj0 = pre ? 16 * t : sg + 16 * (t - npre);
                int nj = (pre ? pl : i0 + ni) - kj0;
                nj = nj < 16 ? nj : 16;
                __mmask16 vis[16];
                for (int u = 0; u < ni; u++) { // prefix keys: all; own keys: up to the query
                    int hi = pre ? nj : i0 + u + 1 - kj0;
                    vis[u] = hi <= 0 ? 0 : hi >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << hi) - 1);
                }
                const float *ktb = kt + (size_t)(pre ? t : bk + t - npre) * HS * 16;
                const float *vtb = vt + (size_t)(pre ? t : bk + t - npre) * HS * 16;
                float P[16][16] __attribute__((aligned(64))), DS[16][16] __attribute__((aligned(64)));
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
                for (int jj = 0; jj < nj; jj++) { // dv_j += sum_i P_ij dO_i; dk_j += sum_i dS_ij q_i (dS scaled)
                    float *dvj = dv + (size_t)(kj0 + jj) * ks + (size_t)g * HS, *dkj = dk + (size_t)(kj0 + jj) * ks + (size_t)g * HS;
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
                        const float *kj = k + (size_t)(kj0 + jj) * ks + (size_t)g * HS;
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
    size_t nfl = (skpo_attn_bwd_scratch(n, runs, HS) - 16) / 2;
    float *kt = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63); // 64-byte aligned tiles
    bwd512_any(dq, dk, dv, dout, lse, D, q, k, v, n, runs, NH, NKV, g, NH / NKV, HS, scale, kt, kt + nfl);
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

int skpo_attn_rows_max(int HS) {
#if defined(__x86_64__)
    if (skpo_attn_fast_ok(HS)) return rows_at_once(HS);
#endif
    return 1;
}

void skpo_attn_rows(float *o, size_t os, const float *q, size_t qs, const skpo_kv_span *sp, int nsp, int R, int HS,
                    float scale, float *p, size_t ps, float *lse) {
    SKPO_ASSERT(nsp >= 1 && nsp <= SKPO_ATTN_ROWS_SPANS && R >= 1 && R <= skpo_attn_rows_max(HS));
#if defined(__x86_64__)
    if (R > 1 && R == rows_at_once(HS) && skpo_attn_fast_ok(HS)) {
        rows512_any(o, os, q, qs, sp, nsp, HS, scale, p, ps, lse);
        return;
    }
#endif
    skpo_kv_span s2[SKPO_ATTN_ROWS_SPANS];
    memcpy(s2, sp, (size_t)nsp * sizeof *sp);
    for (int u = 0; u < R; u++, s2[nsp - 1].n++)
        lse[u] = skpo_attn_row(o + (size_t)u * os, q + (size_t)u * qs, s2, nsp, HS, scale, p);
}
