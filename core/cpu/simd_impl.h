/*
 * simd_impl.h - helpers shared by the CPU kernels (private to core/cpu/): the
 * portable clones and dot product, and AVX-512 helpers, which carry target attributes, not a global -m flag, so
 * callers must check __builtin_cpu_supports("avx512f") before using them.
 */
#ifndef SKPO_SIMD_CPU_H
#define SKPO_SIMD_CPU_H

// The portable per-item kernels are compiled twice (target_clones): for
// x86-64-v3 (AVX2 + FMA) and plain x86-64, picked at load time, since the
// build has no -march flag. FMA contraction only makes a*b+c more accurate;
// it is not fast-math (no reassociation beyond explicit `omp simd` reductions).
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define SKPO_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define SKPO_SIMD_CLONES
#endif

__attribute__((always_inline)) static inline float dot(const float *a, const float *b, int n) {
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

#if defined(__x86_64__)
#include <immintrin.h>

#define T512 __attribute__((target("avx512f")))

// e^x (Cephes expf: reduction by ln 2 in two parts, degree-6 polynomial,
// ~1 ulp); 0 below -87, +inf above 88.8, NaN stays NaN (max/min return their
// second operand when one is NaN).
T512 static inline __m512 exp512(__m512 x) {
    __m512 lo = _mm512_set1_ps(-87.0f);
    __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_set1_ps(88.8f), _mm512_max_ps(lo, x));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 q = _mm512_set1_ps(1.9875691500e-4f);
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.3981999507e-3f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(8.3334519073e-3f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(4.1665795894e-2f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.6666665459e-1f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(5.0000001201e-1f));
    q = _mm512_fmadd_ps(_mm512_mul_ps(q, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_maskz_scalef_ps((__mmask16)~under, q, n);
}

#endif

#endif
