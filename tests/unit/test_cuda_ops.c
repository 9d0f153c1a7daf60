// test_cuda_ops.c - every CUDA op against a plain-C reference on random
// inputs (double accumulation). Tolerances are for bf16 storage (8 bits of
// mantissa): relative 2e-2 on outputs, stated per check. Any NaN/Inf fails.
// Without nvcc at build time or without a GPU at run time every test prints a
// visible SKIP line.
#include "harness.h"
#include "base/common.h"

#ifndef SKPO_HAVE_CUDA
SKIP_ONLY_MAIN(cuda_ops_match_cpu_reference, "built without CUDA (no nvcc)")
#else
#include "cuda/cuda.h"
#include "cuda/cuda_dnn.h"
#include "cuda/cuda_infer.h"
#include "cuda/cuda_train.h"
#include "cpu/ops.h"
#include "base/attn_mask.h"

#include <string.h>

// The CUDA emulator's block order (tests/emu): absent on a GPU, where blocks
// run in no set order by themselves.
extern void cuda_emu_block_order(unsigned long seed) __attribute__((weak));

static skpo_cuda *G;
static uint64_t rs = 0x9E3779B97F4A7C15ull;
static float frand(void) {  // uniform in [-1, 1)
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return (float)((rs >> 40) * (1.0 / 16777216.0)) * 2.f - 1.f;
}
static void fill(float *a, size_t n, float scale) { for (size_t i = 0; i < n; i++) a[i] = frand() * scale; }
// round-trip through bf16 so the reference sees exactly what the GPU sees
static void bfround(float *a, size_t n) {
    skpo_bf16 *b = skpo_xmalloc(n * 2);
    skpo_f32_to_bf16_host(b, a, n);
    skpo_bf16_to_f32_host(a, b, n);
    free(b);
}
static void *dup_bf16(const float *h, size_t n) {
    skpo_err e = {0};
    void *d;
    SKPO_ASSERT(skpo_cuda_malloc(G, &d, n * 2, "test", &e) == SKPO_OK);
    skpo_bf16 *b = skpo_xmalloc(n * 2);
    skpo_f32_to_bf16_host(b, h, n);
    SKPO_ASSERT(skpo_cuda_h2d(G, d, b, n * 2, &e) == SKPO_OK);
    free(b);
    return d;
}
static void *dup_raw(const void *h, size_t bytes) {
    skpo_err e = {0};
    void *d;
    SKPO_ASSERT(skpo_cuda_malloc(G, &d, bytes, "test", &e) == SKPO_OK);
    SKPO_ASSERT(skpo_cuda_h2d(G, d, h, bytes, &e) == SKPO_OK);
    return d;
}
static float *back_bf16(const void *d, size_t n) {
    skpo_err e = {0};
    skpo_bf16 *b = skpo_xmalloc(n * 2);
    SKPO_ASSERT(skpo_cuda_d2h(G, b, d, n * 2, &e) == SKPO_OK);
    float *f = skpo_xmalloc(n * 4);
    skpo_bf16_to_f32_host(f, b, n);
    free(b);
    return f;
}
static float *back_f32(const void *d, size_t n) {
    skpo_err e = {0};
    float *f = skpo_xmalloc(n * 4);
    SKPO_ASSERT(skpo_cuda_d2h(G, f, d, n * 4, &e) == SKPO_OK);
    return f;
}
// max |a-b| / (max|b| + tiny); fails on any non-finite value
static double relerr(const float *a, const float *b, size_t n) {
    double m = 0, s = 1e-12;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return INFINITY;
        m = fmax(m, fabs((double)a[i] - b[i]));
        s = fmax(s, fabs((double)b[i]));
    }
    return m / s;
}

static void linear_matches_cpu_with_bias(void) {
    int T = 37, K = 96, N = 80;
    float *x = skpo_xmalloc(T * K * 4), *w = skpo_xmalloc(N * K * 4), *b = skpo_xmalloc(N * 4), *y = skpo_xmalloc(T * N * 4);
    fill(x, T * K, 1); fill(w, N * K, 0.2f); fill(b, N, 0.5f);
    bfround(x, T * K); bfround(w, N * K); bfround(b, N);
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            double s = b[n];
            for (int k = 0; k < K; k++) s += (double)x[t * K + k] * w[n * K + k];
            y[t * N + n] = (float)s;
        }
    void *dx = dup_bf16(x, T * K), *dw = dup_bf16(w, N * K), *db = dup_bf16(b, N), *dy = dup_bf16(y, T * N);
    skpo_err e = {0};
    CHECK(skpo_cuda_linear(G, dy, dx, dw, db, T, K, N, 0.f, &e) == SKPO_OK);
    float *got = back_bf16(dy, T * N);
    CHECK_MSG(relerr(got, y, T * N) < 2e-2, "linear rel err %g", relerr(got, y, T * N));
    free(got); free(x); free(w); free(b); free(y);
    skpo_cuda_dfree(dx); skpo_cuda_dfree(dw); skpo_cuda_dfree(db); skpo_cuda_dfree(dy);
}

static void rmsnorm_forward_and_backward_match_cpu(void) {
    int T = 5, C = 200;
    float eps = 1e-6f;
    float *x = skpo_xmalloc(T * C * 4), *w = skpo_xmalloc(C * 4), *dy = skpo_xmalloc(T * C * 4);
    float *y = skpo_xmalloc(T * C * 4), *dx = skpo_xmalloc(T * C * 4), *dw = skpo_xcalloc(C, 4);
    fill(x, T * C, 2); fill(w, C, 1); fill(dy, T * C, 1);
    bfround(x, T * C); bfround(w, C); bfround(dy, T * C);
    for (int t = 0; t < T; t++) {
        double ss = 0, dot = 0;
        for (int i = 0; i < C; i++) ss += (double)x[t * C + i] * x[t * C + i];
        double r = 1.0 / sqrt(ss / C + eps);
        for (int i = 0; i < C; i++) {
            y[t * C + i] = (float)(x[t * C + i] * r * w[i]);
            dot += (double)dy[t * C + i] * w[i] * x[t * C + i];
        }
        dot /= C;
        for (int i = 0; i < C; i++) {
            dx[t * C + i] = (float)(r * w[i] * dy[t * C + i] - r * r * r * x[t * C + i] * dot);
            dw[i] += (float)(dy[t * C + i] * x[t * C + i] * r);
        }
    }
    skpo_err e = {0};
    void *gx = dup_bf16(x, T * C), *gw = dup_bf16(w, C), *gy = dup_bf16(y, T * C), *gdy = dup_bf16(dy, T * C);
    void *gdx = dup_bf16(dx, T * C), *grstd, *gdw;
    SKPO_ASSERT(skpo_cuda_malloc(G, &grstd, T * 4, "t", &e) == 0 && skpo_cuda_malloc(G, &gdw, C * 4, "t", &e) == 0);
    skpo_cuda_memset0(G, gdw, C * 4, &e);
    CHECK(skpo_cuda_rmsnorm(G, gy, grstd, gx, gw, T, C, eps, &e) == SKPO_OK);
    CHECK(skpo_cuda_rmsnorm_backward(G, gdx, gdw, gdy, gx, gw, grstd, T, C, &e) == SKPO_OK);
    float *a = back_bf16(gy, T * C), *b = back_bf16(gdx, T * C), *c = back_f32(gdw, C);
    CHECK_MSG(relerr(a, y, T * C) < 1e-2, "rmsnorm fwd %g", relerr(a, y, T * C));
    CHECK_MSG(relerr(b, dx, T * C) < 2e-2, "rmsnorm dx %g", relerr(b, dx, T * C));
    CHECK_MSG(relerr(c, dw, C) < 1e-3, "rmsnorm dw %g", relerr(c, dw, C));
    free(a); free(b); free(c); free(x); free(w); free(dy); free(y); free(dx); free(dw);
    skpo_cuda_dfree(gx); skpo_cuda_dfree(gw); skpo_cuda_dfree(gy); skpo_cuda_dfree(gdy); skpo_cuda_dfree(gdx);
    skpo_cuda_dfree(grstd); skpo_cuda_dfree(gdw);
}

static void rope_rotates_half_and_inverse_restores(void) {
    int T = 6, nh = 4, nkv = 2, hs = 64;
    float *q = skpo_xmalloc(T * nh * hs * 4), *ref = skpo_xmalloc(T * nh * hs * 4), invf[32];
    int32_t pos[6] = {0, 1, 2, 7, 100, 4095};
    for (int i = 0; i < hs / 2; i++) invf[i] = (float)pow(10000.0, -2.0 * i / hs);
    fill(q, T * nh * hs, 1);
    bfround(q, T * nh * hs);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++)
            for (int d = 0; d < hs / 2; d++) {
                float *p = q + (t * nh + h) * hs, *r = ref + (t * nh + h) * hs;
                double a = (double)pos[t] * invf[d];
                r[d] = (float)(p[d] * cos(a) - p[d + hs / 2] * sin(a));
                r[d + hs / 2] = (float)(p[d + hs / 2] * cos(a) + p[d] * sin(a));
            }
    skpo_err e = {0};
    void *gq = dup_bf16(q, T * nh * hs), *gp = dup_raw(pos, sizeof pos), *gf = dup_raw(invf, sizeof invf);
    CHECK(skpo_cuda_rope(G, gq, NULL, gp, gf, T, nh, nkv, hs, 0, &e) == SKPO_OK);
    float *a = back_bf16(gq, T * nh * hs);
    CHECK_MSG(relerr(a, ref, T * nh * hs) < 2e-2, "rope %g", relerr(a, ref, T * nh * hs));
    CHECK(skpo_cuda_rope(G, gq, NULL, gp, gf, T, nh, nkv, hs, 1, &e) == SKPO_OK);
    float *b = back_bf16(gq, T * nh * hs);
    CHECK_MSG(relerr(b, q, T * nh * hs) < 3e-2, "rope inverse %g", relerr(b, q, T * nh * hs));
    free(a); free(b); free(q); free(ref);
    skpo_cuda_dfree(gq); skpo_cuda_dfree(gp); skpo_cuda_dfree(gf);
}

// naive causal GQA attention over packed sequences, double accumulation
static void attn_ref(float *out, const float *q, const float *k, const float *v, const int *ss, int nseq, int nh,
                     int nkv, int hs) {
    for (int s = 0; s < nseq; s++)
        for (int t = ss[s]; t < ss[s + 1]; t++)
            for (int h = 0; h < nh; h++) {
                int hk = h / (nh / nkv);
                double mx = -1e300, den = 0, *sc = skpo_xmalloc(sizeof(double) * (size_t)(t - ss[s] + 1));
                for (int j = ss[s]; j <= t; j++) {
                    double d = 0;
                    for (int i = 0; i < hs; i++) d += (double)q[(t * nh + h) * hs + i] * k[(j * nkv + hk) * hs + i];
                    sc[j - ss[s]] = d / sqrt(hs);
                    mx = fmax(mx, sc[j - ss[s]]);
                }
                for (int j = ss[s]; j <= t; j++) den += exp(sc[j - ss[s]] - mx);
                for (int i = 0; i < hs; i++) {
                    double o = 0;
                    for (int j = ss[s]; j <= t; j++) o += exp(sc[j - ss[s]] - mx) / den * v[(j * nkv + hk) * hs + i];
                    out[(t * nh + h) * hs + i] = (float)o;
                }
                free(sc);
            }
}

static void prefill_attention_matches_naive_causal_gqa(void) {
    int nh = 4, nkv = 2, hs = 64, ss[3] = {0, 9, 23}, T = 23;
    size_t nq = (size_t)T * nh * hs, nk = (size_t)T * nkv * hs;
    float *q = skpo_xmalloc(nq * 4), *k = skpo_xmalloc(nk * 4), *v = skpo_xmalloc(nk * 4), *o = skpo_xmalloc(nq * 4);
    fill(q, nq, 1); fill(k, nk, 1); fill(v, nk, 1);
    bfround(q, nq); bfround(k, nk); bfround(v, nk);
    attn_ref(o, q, k, v, ss, 2, nh, nkv, hs);
    skpo_err e = {0};
    void *gq = dup_bf16(q, nq), *gk = dup_bf16(k, nk), *gv = dup_bf16(v, nk), *go = dup_bf16(o, nq), *gs = dup_raw(ss, sizeof ss);
    CHECK(skpo_cuda_attention(G, go, NULL, gq, gk, gv, gs, 2, T, nh, nkv, hs, &e) == SKPO_OK);
    float *a = back_bf16(go, nq);
    CHECK_MSG(relerr(a, o, nq) < 2e-2, "attention %g", relerr(a, o, nq));
    free(a); free(q); free(k); free(v); free(o);
    skpo_cuda_dfree(gq); skpo_cuda_dfree(gk); skpo_cuda_dfree(gv); skpo_cuda_dfree(go); skpo_cuda_dfree(gs);
}

static void paged_decode_attention_matches_contiguous(void) {
    // two sequences of 21 and 9 positions sharing their first block (block size 8)
    int nh = 4, nkv = 2, hs = 64, kd = nkv * hs, L = 2, layer = 1, bs = 8, nblocks = 8, B = 2, maxb = 3;
    int32_t table[6] = {0, 1, 2, 0, 3, 0}, len[2] = {21, 9};
    size_t pool = (size_t)nblocks * L * bs * kd;
    float *pk = skpo_xmalloc(pool * 4), *pv = skpo_xmalloc(pool * 4), *q = skpo_xmalloc(B * nh * hs * 4);
    fill(pk, pool, 1); fill(pv, pool, 1); fill(q, B * nh * hs, 1);
    bfround(pk, pool); bfround(pv, pool); bfround(q, B * nh * hs);
    float *ref = skpo_xmalloc(B * nh * hs * 4);
    for (int b = 0; b < B; b++) {  // gather contiguous K/V, then the naive reference for the last row
        int n = len[b], ss[2] = {0, n};
        float *K = skpo_xmalloc((size_t)n * kd * 4), *V = skpo_xmalloc((size_t)n * kd * 4);
        float *Q = skpo_xcalloc((size_t)n * nh * hs, 4), *O = skpo_xmalloc((size_t)n * nh * hs * 4);
        for (int j = 0; j < n; j++) {
            size_t o = (((size_t)table[b * maxb + j / bs] * L + layer) * bs + j % bs) * kd;
            memcpy(K + j * kd, pk + o, kd * 4);
            memcpy(V + j * kd, pv + o, kd * 4);
        }
        memcpy(Q + (size_t)(n - 1) * nh * hs, q + b * nh * hs, nh * hs * 4);
        attn_ref(O, Q, K, V, ss, 1, nh, nkv, hs);
        memcpy(ref + b * nh * hs, O + (size_t)(n - 1) * nh * hs, nh * hs * 4);
        free(K); free(V); free(Q); free(O);
    }
    skpo_err e = {0};
    void *gk = dup_bf16(pk, pool), *gv = dup_bf16(pv, pool), *gq = dup_bf16(q, B * nh * hs), *go = dup_bf16(q, B * nh * hs);
    void *gt = dup_raw(table, sizeof table), *gl = dup_raw(len, sizeof len);
    CHECK(skpo_cuda_attention_decode(G, go, gq, gk, gv, gt, maxb, gl, B, L, layer, bs, nh, nkv, hs, &e) == SKPO_OK);
    float *a = back_bf16(go, B * nh * hs);
    CHECK_MSG(relerr(a, ref, B * nh * hs) < 2e-2, "decode %g", relerr(a, ref, B * nh * hs));
    free(a); free(pk); free(pv); free(q); free(ref);
    skpo_cuda_dfree(gk); skpo_cuda_dfree(gv); skpo_cuda_dfree(gq); skpo_cuda_dfree(go); skpo_cuda_dfree(gt); skpo_cuda_dfree(gl);
}

// skpo_cuda_attention_paged against a double reference, for each kernel it
// dispatches to: tensor cores (head_dim 64 and 128; 7, 4 and 1 query heads
// per KV head) and CUDA cores (head_dim 96). Rows of two sequences at
// positions 0..150 over a scattered block table (block size 16, pages of one
// sequence not adjacent), unsplit and split (flash-decoding scratch). Outputs
// are convex combinations of bf16 values in [-1, 1]: absolute tolerance 1e-2.
static void paged_attention_kernels_match_reference_with_and_without_splits(void) {
    static const int shapes[4][3] = {{14, 2, 64}, {8, 2, 128}, {4, 4, 64}, {6, 2, 96}};
    enum { N = 4, L = 2, LAYER = 1, BS = 16, MB = 12, NB = 2 * MB };
    int32_t pos[N] = {0, 15, 70, 150}, rseq[N] = {0, 1, 0, 1}, bt[2 * MB];
    for (int i = 0; i < 2 * MB; i++) bt[i] = (int32_t)((i * 7 + 5) % NB);   // a permutation (7, 24 coprime)
    for (int sh = 0; sh < 4; sh++) {
        int nh = shapes[sh][0], nkv = shapes[sh][1], hs = shapes[sh][2], kd = nkv * hs, qd = nh * hs, grp = nh / nkv;
        size_t pool = (size_t)NB * L * BS * kd;
        float *pk = skpo_xmalloc(pool * 4), *pv = skpo_xmalloc(pool * 4), *q = skpo_xmalloc((size_t)N * qd * 4);
        float *ref = skpo_xmalloc((size_t)N * qd * 4);
        fill(pk, pool, 1); fill(pv, pool, 1); fill(q, (size_t)N * qd, 2);
        bfround(pk, pool); bfround(pv, pool); bfround(q, (size_t)N * qd);
        for (int r = 0; r < N; r++)
            for (int h = 0; h < nh; h++) {
                int n = pos[r] + 1;
                double *sc = skpo_xmalloc((size_t)n * sizeof *sc), mx = -1e300, den = 0;
                for (int j = 0; j < n; j++) {
                    size_t o = (((size_t)bt[rseq[r] * MB + j / BS] * L + LAYER) * BS + j % BS) * kd + (size_t)(h / grp) * hs;
                    double d = 0;
                    for (int i = 0; i < hs; i++) d += (double)q[(size_t)r * qd + h * hs + i] * pk[o + i];
                    sc[j] = d / sqrt(hs);
                    mx = fmax(mx, sc[j]);
                }
                for (int j = 0; j < n; j++) den += (sc[j] = exp(sc[j] - mx));
                for (int i = 0; i < hs; i++) {
                    double a = 0;
                    for (int j = 0; j < n; j++) {
                        size_t o = (((size_t)bt[rseq[r] * MB + j / BS] * L + LAYER) * BS + j % BS) * kd + (size_t)(h / grp) * hs;
                        a += sc[j] * pv[o + i];
                    }
                    ref[(size_t)r * qd + h * hs + i] = (float)(a / den);
                }
                free(sc);
            }
        skpo_err e = {0};
        void *gk = dup_bf16(pk, pool), *gv = dup_bf16(pv, pool), *gq = dup_bf16(q, (size_t)N * qd);
        void *go = dup_bf16(q, (size_t)N * qd), *gt = dup_raw(bt, sizeof bt), *gp = dup_raw(pos, sizeof pos);
        void *gs = dup_raw(rseq, sizeof rseq), *gw;
        size_t wb = skpo_cuda_attention_paged_work(G, nh, nkv, hs);
        SKPO_ASSERT(skpo_cuda_malloc(G, &gw, wb, "t", &e) == SKPO_OK);
        CHECK(skpo_cuda_attention_paged_mma_fits(gq, gk, gv, nh, nkv, hs, MB, BS) == (hs != 96));
        for (int split = 0; split < 2; split++) {
            CHECK_MSG(skpo_cuda_attention_paged(G, go, gq, gk, gv, gt, MB, gs, gp, N, L, LAYER, BS, nh, nkv, hs,
                                                split ? gw : NULL, split ? wb : 0, &e) == SKPO_OK, "%s", e.msg);
            float *a = back_bf16(go, (size_t)N * qd);
            double worst = 0;
            for (size_t i = 0; i < (size_t)N * qd; i++) worst = fmax(worst, isfinite(a[i]) ? fabs(a[i] - ref[i]) : INFINITY);
            CHECK_MSG(worst <= 1e-2, "heads %d/%d hs %d split %d: max abs error %g", nh, nkv, hs, split, worst);
            free(a);
        }
        free(pk); free(pv); free(q); free(ref);
        skpo_cuda_dfree(gk); skpo_cuda_dfree(gv); skpo_cuda_dfree(gq); skpo_cuda_dfree(go); skpo_cuda_dfree(gt);
        skpo_cuda_dfree(gp); skpo_cuda_dfree(gs); skpo_cuda_dfree(gw);
    }
}

static void chunked_logprob_and_entropy_match_cpu_on_large_vocab(void) {
    int T = 3, V = 151936;
    float temp = 0.7f;
    float *z = skpo_xmalloc((size_t)T * V * 4), lp[3], ent[3];
    int32_t tgt[3] = {0, 4242, V - 1};
    fill(z, (size_t)T * V, 8);
    bfround(z, (size_t)T * V);
    for (int t = 0; t < T; t++) {
        double m = -1e300, s = 0, w = 0;
        for (int i = 0; i < V; i++) m = fmax(m, z[(size_t)t * V + i] / temp);
        for (int i = 0; i < V; i++) {
            double u = z[(size_t)t * V + i] / temp;
            s += exp(u - m);
            w += exp(u - m) * u;
        }
        double logZ = m + log(s);
        lp[t] = (float)(z[(size_t)t * V + tgt[t]] / temp - logZ);
        ent[t] = (float)(logZ - w / s);
    }
    skpo_err e = {0};
    void *gz = dup_bf16(z, (size_t)T * V), *gt = dup_raw(tgt, sizeof tgt), *gl, *ge;
    SKPO_ASSERT(skpo_cuda_malloc(G, &gl, 12, "t", &e) == 0 && skpo_cuda_malloc(G, &ge, 12, "t", &e) == 0);
    CHECK(skpo_cuda_logprob(G, gl, ge, gz, gt, T, V, temp, &e) == SKPO_OK);
    float *a = back_f32(gl, 3), *b = back_f32(ge, 3);
    for (int t = 0; t < T; t++) {
        CHECK_NEAR(a[t], lp[t], 1e-3);
        CHECK_NEAR(b[t], ent[t], 1e-3);
    }
    free(a); free(b); free(z);
    skpo_cuda_dfree(gz); skpo_cuda_dfree(gt); skpo_cuda_dfree(gl); skpo_cuda_dfree(ge);
}

static void sampler_is_greedy_at_zero_temperature_and_matches_topk_mass(void) {
    int V = 1000, B = 1;
    float *z = skpo_xmalloc(V * 4);
    for (int i = 0; i < V; i++) z[i] = -10.f;
    z[3] = 2.f; z[7] = 1.f; z[11] = 0.f;  // three tokens carry almost all mass
    skpo_err e = {0};
    void *gz = dup_raw(z, V * 4), *gtok, *glp, *gc;
    SKPO_ASSERT(skpo_cuda_malloc(G, &gtok, 4, "t", &e) == 0 && skpo_cuda_malloc(G, &glp, 4, "t", &e) == 0);
    float coin = 0.5f;
    gc = dup_raw(&coin, 4);
    CHECK(skpo_cuda_sample(G, gtok, glp, gz, B, V, 0.f, 0, 1.f, gc, &e) == SKPO_OK);
    int32_t tok;
    skpo_cuda_d2h(G, &tok, gtok, 4, &e);
    CHECK(tok == 3);
    // top-k 2 at T=1: p(3) = e^2/(e^2+e^1) = 0.731; coins below that pick 3, above pick 7
    int counts[3] = {0, 0, 0};
    for (int i = 0; i < 200; i++) {
        coin = (i + 0.5f) / 200.f;
        skpo_cuda_h2d(G, gc, &coin, 4, &e);
        CHECK(skpo_cuda_sample(G, gtok, glp, gz, B, V, 1.f, 2, 1.f, gc, &e) == SKPO_OK);
        skpo_cuda_d2h(G, &tok, gtok, 4, &e);
        counts[tok == 3 ? 0 : tok == 7 ? 1 : 2]++;
    }
    CHECK_MSG(counts[2] == 0 && abs(counts[0] - 146) <= 2, "top-k counts %d %d %d", counts[0], counts[1], counts[2]);
    free(z);
    skpo_cuda_dfree(gz); skpo_cuda_dfree(gtok); skpo_cuda_dfree(glp); skpo_cuda_dfree(gc);
}

static void adamw_step_matches_pytorch_formula(void) {
    size_t n = 1000;
    float *w = skpo_xmalloc(n * 4), *m = skpo_xmalloc(n * 4), *v = skpo_xmalloc(n * 4), *g = skpo_xmalloc(n * 4);
    fill(w, n, 1); fill(m, n, 0.01f); fill(g, n, 1);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(frand()) * 1e-3f;
    float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
    int step = 3;
    float *rw = skpo_xmalloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        double gi = g[i] * gs, wi = w[i] * (1 - lr * wd);
        double mi = b1 * m[i] + (1 - b1) * gi, vi = b2 * v[i] + (1 - b2) * gi * gi;
        rw[i] = (float)(wi - lr * (mi / (1 - pow(b1, step))) / (sqrt(vi / (1 - pow(b2, step))) + eps));
    }
    skpo_err e = {0};
    void *gw = dup_raw(w, n * 4), *gm = dup_raw(m, n * 4), *gv = dup_raw(v, n * 4), *gg = dup_raw(g, n * 4);
    CHECK(skpo_cuda_adamw(G, gw, NULL, gm, gv, gg, n, lr, b1, b2, eps, wd, step, gs, &e) == SKPO_OK);
    float *a = back_f32(gw, n);
    CHECK_MSG(relerr(a, rw, n) < 1e-5, "adamw %g", relerr(a, rw, n));
    free(a); free(w); free(m); free(v); free(g); free(rw);
    skpo_cuda_dfree(gw); skpo_cuda_dfree(gm); skpo_cuda_dfree(gv); skpo_cuda_dfree(gg);
}

// SKPO_DETERMINISTIC=1's backward kernels (the embedding's sorted segment
// sum, attention's two-pass dK/dV): the same bits whatever order the blocks
// run in, and the default (atomic) kernels' results to rounding. On the
// emulator each run shuffles the blocks another way, and the default kernels
// must then differ somewhere (what makes bit-exact GPU tests fail without the
// mode); on a GPU the runs are just repeated.
static void deterministic_backward_kernels_give_the_same_bits_in_any_block_order(void) {
    enum { T = 70, NS = 3, NH = 14, NKV = 2, HS = 64, V = 9, C = 96, RUNS = 3 };
    int32_t ss[NS + 1] = {0, 45, 46, 70}, sof[T], ids[T], order[T], seg[V + 1];
    size_t nq = (size_t)T * NH * HS, nk = (size_t)T * NKV * HS, ne = (size_t)V * C;
    float *q = skpo_xmalloc(nq * 4), *k = skpo_xmalloc(nk * 4), *v = skpo_xmalloc(nk * 4), *g = skpo_xmalloc(nq * 4);
    float *de = skpo_xmalloc((size_t)T * C * 4);
    fill(q, nq, 1), fill(k, nk, 1), fill(v, nk, 1), fill(g, nq, 0.5f), fill(de, (size_t)T * C, 1);
    for (int s = 0; s < NS; s++)
        for (int t = ss[s]; t < ss[s + 1]; t++) sof[t] = s;
    for (int t = 0; t < T; t++) ids[t] = (int32_t)((t * 7 + t / 5) % V);   // every id some 8 times
    int nseg = 0, n = 0;
    for (int id = 0; id < V; id++) {   // rows by (id, row): what the model hands the kernel
        int first = n;
        for (int t = 0; t < T; t++)
            if (ids[t] == id) order[n++] = t;
        if (n > first) seg[nseg++] = first;
    }
    seg[nseg] = n;
    skpo_err e = {0};
    void *gq = dup_bf16(q, nq), *gk = dup_bf16(k, nk), *gv = dup_bf16(v, nk), *gg = dup_bf16(g, nq);
    void *gde = dup_bf16(de, (size_t)T * C), *gss = dup_raw(ss, sizeof ss), *gsof = dup_raw(sof, sizeof sof);
    void *gids = dup_raw(ids, sizeof ids), *gord = dup_raw(order, sizeof order), *gseg = dup_raw(seg, sizeof seg);
    void *go = dup_bf16(q, nq), *glse = dup_raw(q, (size_t)T * NH * 4), *gdq = dup_bf16(q, nq);
    void *gdk = dup_raw(k, nk * 4), *gdv = dup_raw(k, nk * 4), *gwork = dup_raw(q, (size_t)T * NH * 4);
    void *gdw = dup_raw(de, ne * 4);
    CHECK(skpo_cuda_attention(G, go, glse, gq, gk, gv, gss, NS, T, NH, NKV, HS, &e) == SKPO_OK);
    // [run][det, atomic] of dk | dv | dwte, and dq
    size_t nb = 2 * nk + ne;
    float *got[RUNS][2], *dq[RUNS][2];
    for (int r = 0; r < RUNS; r++)
        for (int a = 0; a < 2; a++) {
            if (cuda_emu_block_order) cuda_emu_block_order((unsigned long)(7 * r + a + 1));
            CHECK(skpo_cuda_memset0(G, gdw, ne * 4, &e) == SKPO_OK);
            if (a == 0) {
                CHECK_MSG(skpo_cuda_attention_backward_det(G, gdq, gdk, gdv, gg, go, glse, gq, gk, gv, gsof, gss, T, NH, NKV,
                                                           HS, gwork, &e) == SKPO_OK, "%s", e.msg);
                CHECK(skpo_cuda_embed_backward_sorted(G, gdw, gde, gids, gord, gseg, nseg, C, &e) == SKPO_OK);
            } else {
                CHECK(skpo_cuda_memset0(G, gdk, nk * 4, &e) == SKPO_OK && skpo_cuda_memset0(G, gdv, nk * 4, &e) == SKPO_OK);
                CHECK(skpo_cuda_attention_backward(G, gdq, gdk, gdv, gg, go, glse, gq, gk, gv, gss, NS, T, NH, NKV, HS, &e) ==
                      SKPO_OK);
                CHECK(skpo_cuda_embed_backward(G, gdw, gde, gids, T, C, &e) == SKPO_OK);
            }
            float *x = skpo_xmalloc(nb * 4), *y = back_f32(gdk, nk), *z = back_f32(gdv, nk), *w = back_f32(gdw, ne);
            memcpy(x, y, nk * 4), memcpy(x + nk, z, nk * 4), memcpy(x + 2 * nk, w, ne * 4);
            free(y), free(z), free(w);
            got[r][a] = x;
            dq[r][a] = back_bf16(gdq, nq);
        }
    if (cuda_emu_block_order) cuda_emu_block_order(0);
    int same_det = 1, same_atomic = 1;
    for (int r = 1; r < RUNS; r++) {
        same_det &= !memcmp(got[r][0], got[0][0], nb * 4) && !memcmp(dq[r][0], dq[0][0], nq * 4);
        same_atomic &= !memcmp(got[r][1], got[0][1], nb * 4);
    }
    CHECK_MSG(same_det, "the deterministic kernels gave other bits in another block order");
    if (cuda_emu_block_order) CHECK_MSG(!same_atomic, "the atomic kernels gave the same bits in every block order");
    double rk = relerr(got[0][0], got[0][1], nk), rv = relerr(got[0][0] + nk, got[0][1] + nk, nk);
    double re = relerr(got[0][0] + 2 * nk, got[0][1] + 2 * nk, ne), rq = relerr(dq[0][0], dq[0][1], nq);
    CHECK_MSG(rk < 1e-4 && rv < 1e-4 && re < 1e-5 && rq < 2e-2, "vs atomics: dk %g dv %g dwte %g dq %g", rk, rv, re, rq);
    printf("# deterministic vs atomic kernels: dk %.1e dv %.1e dwte %.1e dq %.1e; atomic runs %s\n", rk, rv, re, rq,
           same_atomic ? "identical" : "differ");
    for (int r = 0; r < RUNS; r++) free(got[r][0]), free(got[r][1]), free(dq[r][0]), free(dq[r][1]);
    void *bufs[] = {gq, gk, gv, gg, gde, gss, gsof, gids, gord, gseg, go, glse, gdq, gdk, gdv, gwork, gdw};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) skpo_cuda_dfree(bufs[i]);
    free(q), free(k), free(v), free(g), free(de);
}

// A packed batch (model/pack.h): the own kernels with the runs mask against
// the CPU reference with the same segments (cpu/ops.h, tested against the
// mask by test_pack.c). Row 0: a prefix of 5 and continuations of 4, 19 and 3
// (one longer than a 16-row warp group); row 1 a plain sequence. Forward,
// the atomic backward and the deterministic one.
static void packed_rows_attention_kernels_match_cpu_mask(void) {
    enum { T = 39, NR = 2, NH = 4, NKV = 2, HS = 64 };
    int32_t off[NR + 1] = {0, 31, 39}, seg[T], sof[T], runs[3 * T];
    int lay[][2] = {{0, 5}, {1, 4}, {2, 19}, {3, 3}, {0, 8}};
    for (int i = 0, t = 0; i < 5; i++)
        for (int u = 0; u < lay[i][1]; u++, t++) seg[t] = lay[i][0], sof[t] = t < 31 ? 0 : 1;
    skpo_mask_runs(off, NR, seg, runs, runs + T, runs + 2 * T);
    size_t nq = (size_t)T * NH * HS, nk = (size_t)T * NKV * HS;
    float *q = skpo_xmalloc(nq * 4), *k = skpo_xmalloc(nk * 4), *v = skpo_xmalloc(nk * 4), *g = skpo_xmalloc(nq * 4);
    float *o = skpo_xmalloc(nq * 4), *lse = skpo_xmalloc((size_t)T * NH * 4);
    float *dq = skpo_xmalloc(nq * 4), *dk = skpo_xmalloc(nk * 4), *dv = skpo_xmalloc(nk * 4);
    fill(q, nq, 1), fill(k, nk, 1), fill(v, nk, 1), fill(g, nq, 0.5f);
    bfround(q, nq), bfround(k, nk), bfround(v, nk), bfround(g, nq);
    const skpo_ops *op = skpo_ops_cpu();
    op->attention(o, lse, q, k, v, off, NR, seg, NH, NKV, HS);
    bfround(o, nq);   // the device's out is bf16, and the backward reads it
    op->attention_backward(dq, dk, dv, g, o, lse, q, k, v, off, NR, seg, NH, NKV, HS);
    skpo_err e = {0};
    void *gq = dup_bf16(q, nq), *gk = dup_bf16(k, nk), *gv = dup_bf16(v, nk), *gg = dup_bf16(g, nq);
    void *goff = dup_raw(off, sizeof off), *gsof = dup_raw(sof, sizeof sof), *gru = dup_raw(runs, sizeof runs);
    void *go = dup_bf16(q, nq), *glse = dup_raw(q, (size_t)T * NH * 4), *gdq = dup_bf16(q, nq);
    void *gdk = dup_raw(k, nk * 4), *gdv = dup_raw(k, nk * 4), *gwork = dup_raw(q, (size_t)T * NH * 4);
    const int32_t *r = gru;
    skpo_cuda_runs ru = {r, r + T, r + 2 * T};
    CHECK(skpo_cuda_attention_runs(G, go, glse, gq, gk, gv, goff, NR, &ru, T, NH, NKV, HS, &e) == SKPO_OK);
    float *got = back_bf16(go, nq), *gl = back_f32(glse, (size_t)T * NH);
    double ro = relerr(got, o, nq), rl = relerr(gl, lse, (size_t)T * NH);
    CHECK_MSG(ro < 2e-2 && rl < 1e-4, "forward: out %g lse %g", ro, rl);
    free(got), free(gl);
    for (int det = 0; det < 2; det++) {
        CHECK(skpo_cuda_memset0(G, gdk, nk * 4, &e) == SKPO_OK && skpo_cuda_memset0(G, gdv, nk * 4, &e) == SKPO_OK);
        if (det)
            CHECK_MSG(skpo_cuda_attention_backward_det_runs(G, gdq, gdk, gdv, gg, go, glse, gq, gk, gv, gsof, goff, &ru, T,
                                                            NH, NKV, HS, gwork, &e) == SKPO_OK, "%s", e.msg);
        else
            CHECK(skpo_cuda_attention_backward_runs(G, gdq, gdk, gdv, gg, go, glse, gq, gk, gv, goff, NR, &ru, T, NH, NKV,
                                                    HS, &e) == SKPO_OK);
        float *a = back_bf16(gdq, nq), *b = back_f32(gdk, nk), *c = back_f32(gdv, nk);
        double rq = relerr(a, dq, nq), rk = relerr(b, dk, nk), rv = relerr(c, dv, nk);
        CHECK_MSG(rq < 2e-2 && rk < 1e-3 && rv < 1e-3, "%s backward: dq %g dk %g dv %g", det ? "deterministic" : "atomic",
                  rq, rk, rv);
        printf("# packed rows, %s backward vs cpu: dq %.1e dk %.1e dv %.1e (forward out %.1e)\n",
               det ? "deterministic" : "atomic", rq, rk, rv, ro);
        free(a), free(b), free(c);
    }
    void *bufs[] = {gq, gk, gv, gg, goff, gsof, gru, go, glse, gdq, gdk, gdv, gwork};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) skpo_cuda_dfree(bufs[i]);
    free(q), free(k), free(v), free(g), free(o), free(lse), free(dq), free(dk), free(dv);
}

// The index tensors cuDNN attention reads (cuda_dnn.h), from offsets
// (training, an empty sequence among them) and from the last rows and positions
// of a prefill step (a prefix already cached, a decode row).
static void sdpa_index_gives_lengths_and_element_offsets(void) {
    enum { B = 4, BP = 6, NH = 6, NKV = 2, HS = 8 };   // padded to a bucket of 6: two empty sequences at the end
    int32_t ss[B + 1] = {0, 5, 5, 12, 40}, want[5 * BP + 3];
    for (int b = 0; b <= BP; b++) {
        int first = ss[b < B ? b : B];
        if (b < BP) want[b] = want[BP + b] = b < B ? ss[b + 1] - ss[b] : 0;
        want[2 * BP + b] = first * NH * HS, want[3 * BP + 1 + b] = first * NKV * HS, want[4 * BP + 2 + b] = first * NH;
    }
    skpo_err e = {0};
    void *dss = dup_raw(ss, sizeof ss), *di;
    CHECK(skpo_cuda_malloc(G, &di, sizeof want, "test", &e) == SKPO_OK);
    CHECK_MSG(skpo_cuda_sdpa_index(G, di, dss, B, BP, NH, NKV, HS, &e) == SKPO_OK, "%s", e.msg);
    int32_t got[5 * BP + 3];
    CHECK(skpo_cuda_d2h(G, got, di, sizeof got, &e) == SKPO_OK);
    for (int i = 0; i < 5 * BP + 3; i++) CHECK_MSG(got[i] == want[i], "index %d: %d, want %d", i, got[i], want[i]);
    // prefill: 3 sequences of 4, 1 and 6 new rows after 10, 44 and 0 cached positions
    int32_t last[3] = {3, 4, 10}, pos[11] = {10, 11, 12, 13, 44, 0, 1, 2, 3, 4, 5};
    int32_t wantp[5 * 3 + 3] = {4, 1, 6, 14, 45, 6, 0, 4 * NH * HS, 5 * NH * HS, 11 * NH * HS,
                                0, 4 * NKV * HS, 5 * NKV * HS, 11 * NKV * HS, 0, 4 * NH, 5 * NH, 11 * NH};
    void *dl = dup_raw(last, sizeof last), *dp = dup_raw(pos, sizeof pos);
    CHECK_MSG(skpo_cuda_sdpa_index_paged(G, di, dl, dp, 3, 3, NH, NKV, HS, &e) == SKPO_OK, "%s", e.msg);
    CHECK(skpo_cuda_d2h(G, got, di, sizeof wantp, &e) == SKPO_OK);
    for (int i = 0; i < 18; i++) CHECK_MSG(got[i] == wantp[i], "paged index %d: %d, want %d", i, got[i], wantp[i]);
    skpo_cuda_dfree(dss), skpo_cuda_dfree(di), skpo_cuda_dfree(dl), skpo_cuda_dfree(dp);
}

// x_out = x + y + b (y fp32, one rounding) and ln = rmsnorm(x_out) w: the
// 16-byte path (C % 8 == 0), the scalar one (C = 203), in place, and the add
// alone (ln NULL). x_out must equal the host's rounding of the same float sum.
static void residual_add_and_rmsnorm_match_cpu(void) {
    static const int Cs[2] = {200, 203};
    for (int k = 0; k < 2; k++) {
        int T = 5, C = Cs[k];
        float eps = 1e-6f;
        float *x = skpo_xmalloc(T * C * 4), *y = skpo_xmalloc(T * C * 4), *b = skpo_xmalloc(C * 4), *w = skpo_xmalloc(C * 4);
        float *xo = skpo_xmalloc(T * C * 4), *ln = skpo_xmalloc(T * C * 4), rstd[5];
        fill(x, T * C, 2); fill(y, T * C, 1); fill(b, C, 0.5f); fill(w, C, 1);
        bfround(x, T * C); bfround(b, C); bfround(w, C);
        for (int t = 0; t < T; t++) {
            for (int i = 0; i < C; i++) xo[t * C + i] = x[t * C + i] + y[t * C + i] + b[i];
            bfround(xo + t * C, C);
            double ss = 0;
            for (int i = 0; i < C; i++) ss += (double)xo[t * C + i] * xo[t * C + i];
            rstd[t] = (float)(1.0 / sqrt(ss / C + eps));
            for (int i = 0; i < C; i++) ln[t * C + i] = xo[t * C + i] * rstd[t] * w[i];
        }
        skpo_err e = {0};
        void *gx = dup_bf16(x, T * C), *gy = dup_raw(y, T * C * 4), *gb = dup_bf16(b, C), *gw = dup_bf16(w, C);
        void *go = dup_bf16(x, T * C), *gl = dup_bf16(x, T * C), *gr;
        SKPO_ASSERT(skpo_cuda_malloc(G, &gr, T * 4, "t", &e) == SKPO_OK);
        CHECK(skpo_cuda_add_rmsnorm(G, go, gl, gr, gx, gy, gb, gw, T, C, eps, &e) == SKPO_OK);
        float *ao = back_bf16(go, T * C), *al = back_bf16(gl, T * C), *ar = back_f32(gr, T);
        CHECK_MSG(relerr(ao, xo, T * C) < 1e-6, "C %d: residual %g", C, relerr(ao, xo, T * C));
        CHECK_MSG(relerr(al, ln, T * C) < 2e-2, "C %d: norm %g", C, relerr(al, ln, T * C));
        CHECK_MSG(relerr(ar, rstd, T) < 1e-5, "C %d: rstd %g", C, relerr(ar, rstd, T));
        CHECK(skpo_cuda_add_rmsnorm(G, gx, NULL, NULL, gx, gy, gb, NULL, T, C, eps, &e) == SKPO_OK);   // in place, add only
        float *ax = back_bf16(gx, T * C);
        CHECK_MSG(relerr(ax, xo, T * C) < 1e-6, "C %d: in-place residual %g", C, relerr(ax, xo, T * C));
        free(ao); free(al); free(ar); free(ax); free(x); free(y); free(b); free(w); free(xo); free(ln);
        skpo_cuda_dfree(gx); skpo_cuda_dfree(gy); skpo_cuda_dfree(gb); skpo_cuda_dfree(gw); skpo_cuda_dfree(go);
        skpo_cuda_dfree(gl); skpo_cuda_dfree(gr);
    }
}

// The fused q|k|v row: bias, RoPE on q and k, split into q, k, v (training)
// or q and the paged pool (decode), against a double reference; then the
// backward (inverse rotations packed with dv) of the split's own output gives
// the biased input back.
static void qkv_rope_split_and_its_backward_match_cpu(void) {
    enum { T = 4, NH = 4, NKV = 2, HS = 16, QD = NH * HS, KD = NKV * HS, W = QD + 2 * KD, L = 2, BS = 4 };
    float *in = skpo_xmalloc(T * W * 4), *b = skpo_xmalloc(W * 4), *ref = skpo_xmalloc(T * W * 4), invf[HS / 2];
    int32_t pos[T] = {0, 3, 17, 1000}, sb[T] = {2, 0, 1, 2}, sr[T] = {1, 3, 0, 2};
    for (int i = 0; i < HS / 2; i++) invf[i] = (float)pow(10000.0, -2.0 * i / HS);
    fill(in, T * W, 1); fill(b, W, 0.3f);
    bfround(in, T * W); bfround(b, W);
    for (int t = 0; t < T; t++) {   // ref row = [rope(q + bq) | rope(k + bk) | v + bv]
        for (int i = 0; i < W; i++) ref[t * W + i] = in[t * W + i] + b[i];
        for (int h = 0; h < NH + NKV; h++)
            for (int d = 0; d < HS / 2; d++) {
                float *r = ref + t * W + h * HS;
                double a = r[d], c = r[d + HS / 2], ang = (double)pos[t] * invf[d];
                r[d] = (float)(a * cos(ang) - c * sin(ang));
                r[d + HS / 2] = (float)(c * cos(ang) + a * sin(ang));
            }
    }
    skpo_err e = {0};
    size_t pool = (size_t)3 * L * BS * KD;
    void *gin = dup_bf16(in, T * W), *gb = dup_bf16(b, W), *gp = dup_raw(pos, sizeof pos), *gf = dup_raw(invf, sizeof invf);
    void *gsb = dup_raw(sb, sizeof sb), *gsr = dup_raw(sr, sizeof sr), *gq, *gk, *gv, *gpk, *gpv, *gd;
    SKPO_ASSERT(skpo_cuda_malloc(G, &gq, T * QD * 2, "t", &e) == 0 && skpo_cuda_malloc(G, &gk, T * KD * 2, "t", &e) == 0);
    SKPO_ASSERT(skpo_cuda_malloc(G, &gv, T * KD * 2, "t", &e) == 0 && skpo_cuda_malloc(G, &gd, T * W * 2, "t", &e) == 0);
    SKPO_ASSERT(skpo_cuda_malloc(G, &gpk, pool * 2, "t", &e) == 0 && skpo_cuda_malloc(G, &gpv, pool * 2, "t", &e) == 0);
    CHECK(skpo_cuda_qkv_rope(G, gq, gk, gv, gin, gb, gp, gf, NULL, NULL, T, NH, NKV, HS, 0, 0, 0, &e) == SKPO_OK);
    float *q = back_bf16(gq, T * QD), *k = back_bf16(gk, T * KD), *v = back_bf16(gv, T * KD);
    float *got = skpo_xmalloc(T * W * 4);
    for (int t = 0; t < T; t++) {
        memcpy(got + t * W, q + t * QD, QD * 4);
        memcpy(got + t * W + QD, k + t * KD, KD * 4);
        memcpy(got + t * W + QD + KD, v + t * KD, KD * 4);
    }
    CHECK_MSG(relerr(got, ref, T * W) < 2e-2, "split %g", relerr(got, ref, T * W));
    CHECK(skpo_cuda_qkv_rope(G, gq, gpk, gpv, gin, gb, gp, gf, gsb, gsr, T, NH, NKV, HS, L, 1, BS, &e) == SKPO_OK);
    float *pk = back_bf16(gpk, pool), *pv = back_bf16(gpv, pool);
    double worst = 0;
    for (int t = 0; t < T; t++) {
        size_t o = (((size_t)sb[t] * L + 1) * BS + sr[t]) * KD;
        for (int i = 0; i < KD; i++) {
            worst = fmax(worst, fabs(pk[o + i] - ref[t * W + QD + i]));
            worst = fmax(worst, fabs(pv[o + i] - ref[t * W + QD + KD + i]));
        }
    }
    CHECK_MSG(worst < 3e-2, "pool rows: max abs error %g", worst);
    CHECK(skpo_cuda_qkv_rope_backward(G, gd, gq, gk, gv, gp, gf, T, NH, NKV, HS, &e) == SKPO_OK);
    float *back = back_bf16(gd, T * W);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < W; i++) ref[t * W + i] = in[t * W + i] + b[i];
    CHECK_MSG(relerr(back, ref, T * W) < 3e-2, "backward (inverse rotation) %g", relerr(back, ref, T * W));
    free(in); free(b); free(ref); free(q); free(k); free(v); free(got); free(pk); free(pv); free(back);
    void *bufs[] = {gin, gb, gp, gf, gsb, gsr, gq, gk, gv, gpk, gpv, gd};
    for (int i = 0; i < 12; i++) skpo_cuda_dfree(bufs[i]);
}

// d[gate | up] of silu(gate) * up over the fused layout, against the formula.
static void swiglu_fused_backward_matches_cpu(void) {
    int T = 3, F = 37;
    float *gu = skpo_xmalloc(T * 2 * F * 4), *dh = skpo_xmalloc(T * F * 4), *ref = skpo_xmalloc(T * 2 * F * 4);
    fill(gu, T * 2 * F, 3); fill(dh, T * F, 1);
    bfround(gu, T * 2 * F); bfround(dh, T * F);
    for (int t = 0; t < T; t++)
        for (int f = 0; f < F; f++) {
            double a = gu[t * 2 * F + f], u = gu[t * 2 * F + F + f], d = dh[t * F + f], s = 1 / (1 + exp(-a));
            ref[t * 2 * F + f] = (float)(d * u * s * (1 + a * (1 - s)));
            ref[t * 2 * F + F + f] = (float)(d * a * s);
        }
    skpo_err e = {0};
    void *ggu = dup_bf16(gu, T * 2 * F), *gdh = dup_bf16(dh, T * F), *gd = dup_bf16(gu, T * 2 * F);
    CHECK(skpo_cuda_swiglu_fused_backward(G, gd, gdh, ggu, T, F, &e) == SKPO_OK);
    float *a = back_bf16(gd, T * 2 * F);
    CHECK_MSG(relerr(a, ref, T * 2 * F) < 2e-2, "swiglu backward %g", relerr(a, ref, T * 2 * F));
    free(a); free(gu); free(dh); free(ref);
    skpo_cuda_dfree(ggu); skpo_cuda_dfree(gdh); skpo_cuda_dfree(gd);
}

// One launch over three segments (moments at other offsets, two weight
// decays, one segment spanning several blocks) equals skpo_cuda_adamw per
// segment, bit for bit; elements outside every segment stay untouched.
static void adamw_over_segments_equals_one_launch_per_tensor(void) {
    enum { N = 9000 };
    skpo_adamw_seg segs[3] = {{.x = 0, .n = 5000, .mo = 100, .wd = 0.1f}, {.x = 5000, .n = 3, .mo = 0, .wd = 0.f},
                              {.x = 6000, .n = 2500, .mo = 5100, .wd = 0.1f}};
    float *w = skpo_xmalloc(N * 4), *m = skpo_xmalloc(N * 4), *v = skpo_xmalloc(N * 4), *g = skpo_xmalloc(N * 4);
    fill(w, N, 1); fill(m, N, 0.01f); fill(g, N, 1);
    for (int i = 0; i < N; i++) v[i] = fabsf(frand()) * 1e-3f;
    skpo_err e = {0};
    void *w1 = dup_raw(w, N * 4), *m1 = dup_raw(m, N * 4), *v1 = dup_raw(v, N * 4), *gg = dup_raw(g, N * 4);
    void *w2 = dup_raw(w, N * 4), *m2 = dup_raw(m, N * 4), *v2 = dup_raw(v, N * 4), *b1, *b2;
    SKPO_ASSERT(skpo_cuda_malloc(G, &b1, N * 2, "t", &e) == 0 && skpo_cuda_malloc(G, &b2, N * 2, "t", &e) == 0);
    skpo_cuda_memset0(G, b1, N * 2, &e);
    skpo_cuda_memset0(G, b2, N * 2, &e);
    skpo_cuda_adamw_plan *plan = NULL;
    CHECK(skpo_cuda_adamw_plan_new(G, segs, 3, &plan, &e) == SKPO_OK);
    if (!plan) return;
    CHECK(skpo_cuda_adamw_multi(G, plan, w1, b1, m1, v1, gg, 1e-3f, 0.9f, 0.999f, 1e-8f, 4, 0.7f, &e) == SKPO_OK);
    for (int i = 0; i < 3; i++) {
        const skpo_adamw_seg *s = &segs[i];
        CHECK(skpo_cuda_adamw(G, (float *)w2 + s->x, (skpo_bf16 *)b2 + s->x, (float *)m2 + s->mo, (float *)v2 + s->mo,
                              (float *)gg + s->x, s->n, 1e-3f, 0.9f, 0.999f, 1e-8f, s->wd, 4, 0.7f, &e) == SKPO_OK);
    }
    float *a1 = back_f32(w1, N), *a2 = back_f32(w2, N), *c1 = back_f32(m1, N), *c2 = back_f32(m2, N);
    float *d1 = back_f32(v1, N), *d2 = back_f32(v2, N), *e1 = back_bf16(b1, N), *e2 = back_bf16(b2, N);
    CHECK(!memcmp(a1, a2, N * 4) && !memcmp(c1, c2, N * 4) && !memcmp(d1, d2, N * 4) && !memcmp(e1, e2, N * 4));
    CHECK(a1[5500] == w[5500] && a1[N - 1] == w[N - 1]);   // between and after the segments
    skpo_cuda_adamw_plan_free(plan);
    free(a1); free(a2); free(c1); free(c2); free(d1); free(d2); free(e1); free(e2); free(w); free(m); free(v); free(g);
    void *bufs[] = {w1, m1, v1, gg, w2, m2, v2, b1, b2};
    for (int i = 0; i < 9; i++) skpo_cuda_dfree(bufs[i]);
}

static void no_gpu_present(void) { SKIP("skipped: no GPU"); }

int main(void) {
    if (skpo_cuda_device_count() == 0) {
        RUN(no_gpu_present);
        return TEST_SUMMARY();
    }
    skpo_err e = {0};
    if (skpo_cuda_init(0, &G, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    RUN(linear_matches_cpu_with_bias);
    RUN(rmsnorm_forward_and_backward_match_cpu);
    RUN(rope_rotates_half_and_inverse_restores);
    RUN(prefill_attention_matches_naive_causal_gqa);
    RUN(sdpa_index_gives_lengths_and_element_offsets);
    RUN(paged_decode_attention_matches_contiguous);
    RUN(paged_attention_kernels_match_reference_with_and_without_splits);
    RUN(chunked_logprob_and_entropy_match_cpu_on_large_vocab);
    RUN(sampler_is_greedy_at_zero_temperature_and_matches_topk_mass);
    RUN(adamw_step_matches_pytorch_formula);
    RUN(deterministic_backward_kernels_give_the_same_bits_in_any_block_order);
    RUN(packed_rows_attention_kernels_match_cpu_mask);
    RUN(residual_add_and_rmsnorm_match_cpu);
    RUN(qkv_rope_split_and_its_backward_match_cpu);
    RUN(swiglu_fused_backward_matches_cpu);
    RUN(adamw_over_segments_equals_one_launch_per_tensor);
    skpo_cuda_free_ctx(G);
    return TEST_SUMMARY();
}
#endif
