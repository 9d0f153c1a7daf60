/*
 * softmax.c - see softmax.h.
 */
#include "base/softmax.h"

#include <math.h>
#include <stdint.h>

// The exponential is Cephes expf for x <= 0 (range reduction by ln 2, degree-6
// minimax polynomial, ~1 ulp), inlined so the vocabulary loop vectorises:
// glibc's expf is not vectorised without -ffast-math, and sampling a 32k-152k
// vocabulary is otherwise as slow as a small model's forward pass (and
// scoring would spend more in its log-softmax than in its lm_head). The clamp
// and rounding use integer bit operations because float compare/convert steps
// keep GCC from vectorising under the default -ftrapping-math. AVX-512 and
// AVX2 clones are picked at load time where the CPU has them. The AVX2 and
// default clones round alike (no FMA) and differ only in the order of the
// double sum; the AVX-512 one may fuse the polynomial's multiply-adds, so a
// probability can differ in its last bit between CPUs (never between runs or
// batch layouts on one CPU).
__attribute__((target_clones("avx512f", "avx2", "default")))
static double softmax_exp(float *restrict prob, const float *restrict logits, int V, float m, float inv) {
#pragma omp simd
    for (int i = 0; i < V; i++) {
        float x0 = (logits[i] - m) * inv;
        union { float f; int32_t i; } xb = {.f = x0}, t;
        // x = max(x0, -87) without a float compare-and-select (those keep
        // GCC from vectorising under the default -ftrapping-math): for
        // x0 <= 0, more negative means a larger bit pattern.
        int32_t lim = (int32_t)0xC2AE0000; // bits of -87.0f
        int32_t over = -(int32_t)((uint32_t)xb.i > (uint32_t)lim); // all ones when x0 < -87
        union { int32_t i; float f; } xc = {.i = (xb.i & ~over) | (lim & over)};
        float x = xc.f;
        t.f = x * 1.44269504088896341f + 12582912.0f; // round to nearest via 1.5 * 2^23
        float n = t.f - 12582912.0f;
        int32_t ni = t.i - 0x4B400000;
        float r = x - n * 0.693359375f + n * 2.12194440e-4f;
        float q = 1.9875691500e-4f;
        q = q * r + 1.3981999507e-3f;
        q = q * r + 8.3334519073e-3f;
        q = q * r + 4.1665795894e-2f;
        q = q * r + 1.6666665459e-1f;
        q = q * r + 5.0000001201e-1f;
        q = q * r * r + r + 1.0f;
        union { int32_t i; float f; } sc = {.i = ((ni + 127) << 23) & ~over}; // 0 below e^-87
        prob[i] = q * sc.f;
    }
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < V; i++) sum += prob[i];
    return sum;
}

// Exported through a plain function: clang (the fuzz build) does not emit an
// externally visible target_clones resolver.
double skpo_softmax_exp(float *prob, const float *logits, int V, float m, float inv) {
    return softmax_exp(prob, logits, V, m, inv);
}

float skpo_logits_max(const float *x, int n) {
    float m = -INFINITY;
    int bad = 0;
#pragma omp simd reduction(max : m) reduction(| : bad)
    for (int i = 0; i < n; i++) {
        m = x[i] > m ? x[i] : m;
        bad |= (x[i] != x[i]) | (x[i] == INFINITY);
    }
    return bad || m == -INFINITY ? NAN : m;
}

float skpo_softmax_logp(const float *logits, int tok, float m, float inv, double sum) {
    return (float)((double)((logits[tok] - m) * inv) - log(sum));
}
