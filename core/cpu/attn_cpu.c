/*
 * attn_cpu.c - see attn_cpu.h. The portable loop spends its time in
 * latency-bound single-accumulator dot products, an output accumulated
 * through memory and a libm expf per position; here the query and the output
 * row live in zmm registers (head sizes 32, 64, 128, 256), dot products use
 * two accumulators, and the exponentials are computed 16 at a time.
 */
#include "cpu/attn_cpu.h"
#include "base/common.h"

#include "cpu/simd_impl.h"

#include <math.h>

#if defined(__x86_64__)
T512 __attribute__((always_inline)) static inline void row512(float *o, const float *qr, const skpo_paged_kv *kv,
                                                              const int *blocks, int layer, int pos, size_t goff,
                                                              const int NV, float scale, float *p) {
    size_t bs = (size_t)kv->block_size, lstride = bs * (size_t)kv->kv_dim;
    size_t bstride = (size_t)kv->n_layers * lstride, loff = (size_t)layer * lstride + goff;
    __m512 q[16];
#pragma GCC unroll 16
    for (int i = 0; i < NV; i++) q[i] = _mm512_loadu_ps(qr + 16 * i);
    float mx = -INFINITY;
    for (int j0 = 0; j0 <= pos; j0 += (int)bs) { // block by block: no division per position
        const float *kb = kv->pool_k + (size_t)blocks[j0 / bs] * bstride + loff;
        int n = pos - j0 + 1 < (int)bs ? pos - j0 + 1 : (int)bs;
        for (int j = 0; j < n; j++) {
            const float *kj = kb + (size_t)j * kv->kv_dim;
            __m512 a0 = _mm512_mul_ps(q[0], _mm512_loadu_ps(kj)), a1 = _mm512_setzero_ps();
#pragma GCC unroll 16
            for (int i = 1; i < NV; i++) {
                if (i & 1) a1 = _mm512_fmadd_ps(q[i], _mm512_loadu_ps(kj + 16 * i), a1);
                else a0 = _mm512_fmadd_ps(q[i], _mm512_loadu_ps(kj + 16 * i), a0);
            }
            float z = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1)) * scale;
            p[j0 + j] = z;
            mx = z > mx ? z : mx;
        }
    }
    __m512 vm = _mm512_set1_ps(mx), vs = _mm512_setzero_ps();
    for (int j = 0; j <= pos; j += 16) {
        int n = pos + 1 - j;
        __mmask16 m = n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
        __m512 e = _mm512_maskz_mov_ps(m, exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, p + j), vm)));
        _mm512_mask_storeu_ps(p + j, m, e);
        vs = _mm512_add_ps(vs, e);
    }
    float inv = 1.0f / _mm512_reduce_add_ps(vs);
    __m512 acc[16];
#pragma GCC unroll 16
    for (int i = 0; i < NV; i++) acc[i] = _mm512_setzero_ps();
    for (int j0 = 0; j0 <= pos; j0 += (int)bs) {
        const float *vb = kv->pool_v + (size_t)blocks[j0 / bs] * bstride + loff;
        int n = pos - j0 + 1 < (int)bs ? pos - j0 + 1 : (int)bs;
        for (int j = 0; j < n; j++) {
            __m512 w = _mm512_set1_ps(p[j0 + j] * inv);
            const float *vj = vb + (size_t)j * kv->kv_dim;
        #pragma GCC unroll 16
    for (int i = 0; i < NV; i++) acc[i] = _mm512_fmadd_ps(w, _mm512_loadu_ps(vj + 16 * i), acc[i]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < NV; i++) _mm512_storeu_ps(o + 16 * i, acc[i]);
}

T512 static void row512_any(float *o, const float *qr, const skpo_paged_kv *kv, const int *blocks, int layer, int pos,
                            size_t goff, int HS, float scale, float *p) {
    switch (HS) {
    case 32: row512(o, qr, kv, blocks, layer, pos, goff, 2, scale, p); break;
    case 64: row512(o, qr, kv, blocks, layer, pos, goff, 4, scale, p); break;
    case 128: row512(o, qr, kv, blocks, layer, pos, goff, 8, scale, p); break;
    case 256: row512(o, qr, kv, blocks, layer, pos, goff, 16, scale, p); break;
    default: SKPO_ASSERT(0);
    }
}

int skpo_attn_fast_ok(int HS) {
    return (HS == 32 || HS == 64 || HS == 128 || HS == 256) && __builtin_cpu_supports("avx512f");
}

void skpo_attn_row_paged(float *o, const float *qr, const skpo_paged_kv *kv, const int *blocks, int layer, int pos,
                         size_t goff, int HS, float scale, float *p) {
    row512_any(o, qr, kv, blocks, layer, pos, goff, HS, scale, p);
}

#else
int skpo_attn_fast_ok(int HS) { return 0; }
void skpo_attn_row_paged(float *o, const float *qr, const skpo_paged_kv *kv, const int *blocks, int layer, int pos,
                         size_t goff, int HS, float scale, float *p) {
    SKPO_ASSERT(0);
}
#endif
