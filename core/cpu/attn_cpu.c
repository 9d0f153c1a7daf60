/*
 * attn_cpu.c - see attn_cpu.h. The portable loop spends its time in
 * latency-bound single-accumulator dot products, an output accumulated
 * through memory and a libm expf per position; the AVX-512 path keeps the
 * query and the output row in zmm registers (head sizes 32, 64, 128, 256),
 * uses two dot-product accumulators and computes the exponentials 16 at a
 * time.
 */
#include "cpu/attn_cpu.h"
#include "base/common.h"

#include "cpu/simd_impl.h"

#include <math.h>
#include <string.h>

// --- portable -----------------------------------------------------------------------------
//
// Compiled twice (target_clones): x86-64-v3 and plain x86-64, picked at load
// time; every caller gets the same clone on one machine. FMA contraction
// only makes a*b+c more accurate; it is not fast-math.
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define SKPO_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define SKPO_SIMD_CLONES
#endif

__attribute__((always_inline)) static inline float dotp(const float *a, const float *b, int n) {
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

SKPO_SIMD_CLONES
static float row_portable(float *o, const float *q, const skpo_kv_span *sp, int nsp, int HS, float scale, float *p) {
    float mx = -INFINITY;
    int n = 0;
    for (int s = 0; s < nsp; s++)
        for (int j = 0; j < sp[s].n; j++, n++) {
            float z = dotp(q, sp[s].k + (size_t)j * sp[s].stride, HS) * scale;
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
    switch (HS) {
    case 32: return row512(o, q, sp, nsp, 2, scale, p);
    case 64: return row512(o, q, sp, nsp, 4, scale, p);
    case 128: return row512(o, q, sp, nsp, 8, scale, p);
    case 256: return row512(o, q, sp, nsp, 16, scale, p);
    default: SKPO_ASSERT(0); return 0;
    }
}

int skpo_attn_fast_ok(int HS) {
    return (HS == 32 || HS == 64 || HS == 128 || HS == 256) && __builtin_cpu_supports("avx512f");
}
#else
int skpo_attn_fast_ok(int HS) { return 0; }
#endif

float skpo_attn_row(float *o, const float *q, const skpo_kv_span *sp, int nsp, int HS, float scale, float *p) {
#if defined(__x86_64__)
    if (skpo_attn_fast_ok(HS)) return row512_any(o, q, sp, nsp, HS, scale, p);
#endif
    return row_portable(o, q, sp, nsp, HS, scale, p);
}
