// test_cuda_dnn.c - attention through cuDNN (cuda/cuda_dnn.h) against a
// double-precision CPU reference on the same bf16 inputs: the training forward
// (out, log-sum-exp) and backward (dq, dk, dv) over packed batches of causal
// grouped-query attention with variable lengths (one token, shorter and longer
// than cuDNN's tiles) at the head shapes of Qwen2.5-0.5B (14/2 heads, head_dim
// 64) and 1.5B (12/2, 128); prefill over the paged KV pool (cached prefixes, a
// block two sequences share, a decode row among prefill rows); and the choice
// of path by SKPO_ATTN. Tolerances: bf16 outputs relative 2e-2 (of the largest
// reference value), gradients cosine 0.999 and relative 3e-2, log-sum-exp
// 1e-2 absolute. Without a GPU, or without cuDNN on it, the GPU tests print a
// visible SKIP line saying why; the path choice runs in every CUDA build.
#include "harness.h"
#include "base/common.h"

#ifndef SKPO_HAVE_CUDA
SKIP_ONLY_MAIN(cudnn_attention_matches_cpu_reference, "built without CUDA (no nvcc)")
#else
#include "cuda/cuda.h"
#include "cuda/cuda_dnn.h"
#include "model/model_impl.h"

static skpo_cuda *G;
static char why_not[1100];   // why cuDNN cannot run here ("" when it can)

static uint64_t rs = 0x2545F4914F6CDD1Dull;
static float frand(void) {   // uniform in [-1, 1)
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return (float)((rs >> 40) * (1.0 / 16777216.0)) * 2.f - 1.f;
}

// n random bf16 values in [-a, a): the host copy (exactly what the device sees) and the device copy.
static float *rand_bf16(size_t n, float a, void **dev) {
    float *h = skpo_xmalloc(n * 4);
    skpo_bf16 *b = skpo_xmalloc(n * 2);
    for (size_t i = 0; i < n; i++) h[i] = a * frand();
    skpo_f32_to_bf16_host(b, h, n);
    skpo_bf16_to_f32_host(h, b, n);
    skpo_err e = {0};
    SKPO_ASSERT(skpo_cuda_malloc(G, dev, n * 2, "test", &e) == SKPO_OK && skpo_cuda_h2d(G, *dev, b, n * 2, &e) == SKPO_OK);
    free(b);
    return h;
}
static void *dev_copy(const void *h, size_t bytes) {
    skpo_err e = {0};
    void *d;
    SKPO_ASSERT(skpo_cuda_malloc(G, &d, bytes, "test", &e) == SKPO_OK && skpo_cuda_h2d(G, d, h, bytes, &e) == SKPO_OK);
    return d;
}
static void *dev_zeros(size_t bytes) {
    skpo_err e = {0};
    void *d;
    SKPO_ASSERT(skpo_cuda_malloc(G, &d, bytes, "test", &e) == SKPO_OK && skpo_cuda_memset0(G, d, bytes, &e) == SKPO_OK);
    return d;
}
static float *host_of(const void *d, size_t n, int bf16) {
    skpo_err e = {0};
    float *h = skpo_xmalloc(n * 4);
    if (bf16) {
        skpo_bf16 *b = skpo_xmalloc(n * 2);
        SKPO_ASSERT(skpo_cuda_d2h(G, b, d, n * 2, &e) == SKPO_OK);
        skpo_bf16_to_f32_host(h, b, n);
        free(b);
    } else {
        SKPO_ASSERT(skpo_cuda_d2h(G, h, d, n * 4, &e) == SKPO_OK);
    }
    return h;
}

// got against want: max |got - want| / max |want|, and the cosine.
static void agree(const char *what, const float *got, const double *want, size_t n, double tol, double min_cos) {
    double m = 0, s = 1e-30, gg = 0, ww = 0, gw = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) {
            CHECK_MSG(0, "%s: element %zu is %g", what, i, got[i]);
            return;
        }
        m = fmax(m, fabs(got[i] - want[i]));
        s = fmax(s, fabs(want[i]));
        gg += (double)got[i] * got[i], ww += want[i] * want[i], gw += got[i] * want[i];
    }
    double cs = gw / sqrt(gg * ww + 1e-300);
    printf("# %s: relative error %.2e, cosine %.6f\n", what, m / s, cs);
    CHECK_MSG(m / s <= tol && cs >= min_cos, "%s: relative error %.3g (tolerance %g), cosine %.6f", what, m / s, tol, cs);
}

// --- reference -----------------------------------------------------------------------

typedef struct shape {
    int nseq, T, nh, nkv, hs;
    const int32_t *ss;   // sequence offsets (nseq + 1)
} shape;

// Causal attention of row t, head h over keys s0..t: p (t - s0 + 1), returns the log-sum-exp.
static double ref_probs(const shape *s, const float *q, const float *k, int t, int h, int s0, double *p) {
    int hk = h / (s->nh / s->nkv), hs = s->hs;
    double scale = 1.0 / sqrt((double)hs), m = -INFINITY, l = 0;
    for (int j = s0; j <= t; j++) {
        double d = 0;
        for (int e = 0; e < hs; e++)
            d += (double)q[((size_t)t * s->nh + h) * hs + e] * k[((size_t)j * s->nkv + hk) * hs + e];
        p[j - s0] = d * scale;
        m = fmax(m, p[j - s0]);
    }
    for (int j = s0; j <= t; j++) l += (p[j - s0] = exp(p[j - s0] - m));
    for (int j = s0; j <= t; j++) p[j - s0] /= l;
    return m + log(l);
}

// out, lse and the gradients of sum(out * dout) in double.
static void reference(const shape *s, const float *q, const float *k, const float *v, const float *dout, double *out,
                      double *lse, double *dq, double *dk, double *dv) {
    int hs = s->hs, G = s->nh / s->nkv;
    double scale = 1.0 / sqrt((double)hs), *p = skpo_xmalloc((size_t)s->T * sizeof *p);
    memset(dk, 0, (size_t)s->T * s->nkv * hs * sizeof *dk);
    memset(dv, 0, (size_t)s->T * s->nkv * hs * sizeof *dv);
    for (int b = 0; b < s->nseq; b++)
        for (int t = s->ss[b]; t < s->ss[b + 1]; t++)
            for (int h = 0; h < s->nh; h++) {
                int s0 = s->ss[b], hk = h / G;
                size_t qo = ((size_t)t * s->nh + h) * hs;
                lse[(size_t)t * s->nh + h] = ref_probs(s, q, k, t, h, s0, p);
                double D = 0;
                for (int e = 0; e < hs; e++) {
                    double o = 0;
                    for (int j = s0; j <= t; j++) o += p[j - s0] * v[((size_t)j * s->nkv + hk) * hs + e];
                    out[qo + e] = o;
                    D += o * dout[qo + e];
                    dq[qo + e] = 0;
                }
                for (int j = s0; j <= t; j++) {
                    size_t ko = ((size_t)j * s->nkv + hk) * hs;
                    double dp = 0;
                    for (int e = 0; e < hs; e++) dp += (double)dout[qo + e] * v[ko + e];
                    double ds = p[j - s0] * (dp - D) * scale;
                    for (int e = 0; e < hs; e++) {
                        dq[qo + e] += ds * k[ko + e];
                        dk[ko + e] += ds * q[qo + e];
                        dv[ko + e] += p[j - s0] * dout[qo + e];
                    }
                }
            }
    free(p);
}

static int cudnn_here(void) { return !why_not[0]; }
#define NEED_CUDNN() do { if (!G) SKIP("skipped: no GPU"); if (!cudnn_here()) SKIP(why_not); } while (0)

// --- training: forward and backward --------------------------------------------------

static void train_case(int nh, int nkv, int hs, const int *len, int nseq) {
    int32_t ss[16] = {0};
    int max_len = 0;
    for (int b = 0; b < nseq; b++) ss[b + 1] = ss[b] + len[b], max_len = len[b] > max_len ? len[b] : max_len;
    shape s = {nseq, ss[nseq], nh, nkv, hs, ss};
    size_t nq = (size_t)s.T * nh * hs, nk = (size_t)s.T * nkv * hs, nl = (size_t)s.T * nh;
    void *dq_, *dk_, *dv_, *ddo;
    float *q = rand_bf16(nq, 1.f, &dq_), *k = rand_bf16(nk, 1.f, &dk_), *v = rand_bf16(nk, 1.f, &dv_);
    float *dout = rand_bf16(nq, 0.5f, &ddo);
    void *dss = dev_copy(ss, (size_t)(nseq + 1) * 4), *dout_ = dev_zeros(nq * 2), *dlse = dev_zeros(nl * 4);
    void *gq = dev_zeros(nq * 2), *gk = dev_zeros(nk * 2), *gv = dev_zeros(nk * 2);
    void *gq2 = dev_zeros(nq * 2), *gk32 = dev_zeros(nk * 4), *gv32 = dev_zeros(nk * 4);
    double *ro = skpo_xmalloc(nq * 8), *rl = skpo_xmalloc(nl * 8), *rq = skpo_xmalloc(nq * 8);
    double *rk = skpo_xmalloc(nk * 8), *rv = skpo_xmalloc(nk * 8);
    reference(&s, q, k, v, dout, ro, rl, rq, rk, rv);
    skpo_err e = {0};
    for (int rep = 0; rep < 2; rep++)   // the second call takes the cached graphs
        CHECK_MSG(skpo_cudnn_attention(G, dout_, dlse, dq_, dk_, dv_, dss, nseq, max_len, s.T, nh, nkv, hs, &e) ==
                  SKPO_OK, "%s", e.msg);
    CHECK_MSG(skpo_cudnn_attention_backward(G, gq, gk, gv, ddo, dout_, dlse, dq_, dk_, dv_, dss, nseq, max_len, s.T, nh,
                                            nkv, hs, &e) == SKPO_OK, "%s", e.msg);
    // cuDNN's out and log-sum-exp feed the own backward as well (a fallback mid-pass mixes them).
    CHECK_MSG(skpo_cuda_attention_backward(G, gq2, gk32, gv32, ddo, dout_, dlse, dq_, dk_, dv_, dss, nseq, s.T, nh, nkv,
                                           hs, &e) == SKPO_OK, "%s", e.msg);
    CHECK_MSG(skpo_cuda_sync(G, &e) == SKPO_OK, "%s", e.msg);
    char what[64];
    float *o = host_of(dout_, nq, 1), *l = host_of(dlse, nl, 0), *a = host_of(gq, nq, 1), *bk = host_of(gk, nk, 1);
    float *bv = host_of(gv, nk, 1), *a2 = host_of(gq2, nq, 1), *bk2 = host_of(gk32, nk, 0), *bv2 = host_of(gv32, nk, 0);
    snprintf(what, sizeof what, "hs %d, %d/%d heads: out", hs, nh, nkv);
    agree(what, o, ro, nq, 2e-2, 0.9999);
    double wl = 0;
    for (size_t i = 0; i < nl; i++) wl = fmax(wl, isfinite(l[i]) ? fabs(l[i] - rl[i]) : INFINITY);
    CHECK_MSG(wl <= 1e-2, "hs %d: log-sum-exp off by %g", hs, wl);
    const char *names[] = {"dq", "dk", "dv", "dq (own backward)", "dk (own backward)", "dv (own backward)"};
    float *got[] = {a, bk, bv, a2, bk2, bv2};
    double *want[] = {rq, rk, rv, rq, rk, rv};
    size_t n[] = {nq, nk, nk, nq, nk, nk};
    for (int i = 0; i < 6; i++) {
        snprintf(what, sizeof what, "hs %d, %d/%d heads: %s", hs, nh, nkv, names[i]);
        agree(what, got[i], want[i], n[i], 3e-2, 0.999);
    }
    void *d[] = {dq_, dk_, dv_, ddo, dss, dout_, dlse, gq, gk, gv, gq2, gk32, gv32};
    for (size_t i = 0; i < sizeof d / sizeof *d; i++) skpo_cuda_dfree(d[i]);
    float *f[] = {q, k, v, dout, o, l, a, bk, bv, a2, bk2, bv2};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) free(f[i]);
    free(ro), free(rl), free(rq), free(rk), free(rv);
}

// 5 sequences: a graph for a bucket of 6 (one empty sequence), then the exact batch.
static void training_attention_matches_reference_at_05b_heads(void) {
    NEED_CUDNN();
    int len[] = {150, 1, 77, 300, 5};
    train_case(14, 2, 64, len, 5);
    setenv("SKPO_CUDNN_EXACT_BATCH", "1", 1);
    train_case(14, 2, 64, len, 5);
    unsetenv("SKPO_CUDNN_EXACT_BATCH");
}

static void training_attention_matches_reference_at_15b_heads(void) {
    NEED_CUDNN();
    int len[] = {200, 129, 1, 64};
    train_case(12, 2, 128, len, 4);
}

// --- prefill over the paged pool -----------------------------------------------------

enum { NL = 2, LAYER = 1, BS = 16, NB = 40, MB = 16, PNH = 14, PNKV = 2, PHS = 64 };

// Row r (of sequence seq_of[r], at position pos[r]) over positions 0..pos[r]
// of its sequence through its block table, in double.
static void paged_reference(double *ro, const float *q, const float *pk, const float *pv, const int32_t *table,
                            const int32_t *seq_of, const int32_t *pos, int N) {
    int KVD = PNKV * PHS;
    double *p = skpo_xmalloc((size_t)(pos[N - 1] + 512) * 8), scale = 1.0 / sqrt((double)PHS);
    for (int r = 0; r < N; r++)
        for (int h = 0; h < PNH; h++) {
            int hk = h / (PNH / PNKV), len = pos[r] + 1;
            const int32_t *tb = table + seq_of[r] * MB;
            double m = -INFINITY, l = 0;
            for (int j = 0; j < len; j++) {
                size_t ko = (((size_t)tb[j / BS] * NL + LAYER) * BS + j % BS) * KVD + (size_t)hk * PHS;
                double d = 0;
                for (int x = 0; x < PHS; x++) d += (double)q[((size_t)r * PNH + h) * PHS + x] * pk[ko + x];
                m = fmax(m, p[j] = d * scale);
            }
            for (int j = 0; j < len; j++) l += (p[j] = exp(p[j] - m));
            for (int x = 0; x < PHS; x++) {
                double a = 0;
                for (int j = 0; j < len; j++)
                    a += p[j] * pv[(((size_t)tb[j / BS] * NL + LAYER) * BS + j % BS) * KVD + (size_t)hk * PHS + x];
                ro[((size_t)r * PNH + h) * PHS + x] = a / l;
            }
        }
    free(p);
}

// Sequences b = 0..nseq-1 with rows[b] new rows after first[b] cached
// positions, through the given block tables, against the reference.
static void paged_case(const char *what, const float *pk, const float *pv, void *dpk, void *dpv, const int32_t *table,
                       const int *first, const int *rows, int nseq) {
    int N = 0, max_q = 0;
    int32_t last[8], pos[1024], seq_of[1024];
    for (int b = 0; b < nseq; b++) {
        for (int r = 0; r < rows[b]; r++) pos[N + r] = first[b] + r, seq_of[N + r] = b;
        N += rows[b], last[b] = N - 1, max_q = rows[b] > max_q ? rows[b] : max_q;
    }
    size_t nq = (size_t)N * PNH * PHS;
    void *dq_;
    float *q = rand_bf16(nq, 1.f, &dq_);
    void *dt = dev_copy(table, (size_t)nseq * MB * 4), *dl = dev_copy(last, (size_t)nseq * 4);
    void *dp = dev_copy(pos, (size_t)N * 4), *dout = dev_zeros(nq * 2);
    skpo_err e = {0};
    CHECK_MSG(skpo_cudnn_attention_paged(G, dout, dq_, dpk, dpv, dt, MB, dl, dp, nseq, max_q, N, NL, LAYER, NB, BS, PNH,
                                         PNKV, PHS, &e) == SKPO_OK, "%s", e.msg);
    CHECK_MSG(skpo_cuda_sync(G, &e) == SKPO_OK, "%s", e.msg);
    float *o = host_of(dout, nq, 1);
    double *ro = skpo_xmalloc(nq * 8);
    paged_reference(ro, q, pk, pv, table, seq_of, pos, N);
    agree(what, o, ro, nq, 2e-2, 0.9999);
    void *d[] = {dq_, dt, dl, dp, dout};
    for (size_t i = 0; i < sizeof d / sizeof *d; i++) skpo_cuda_dfree(d[i]);
    free(q), free(o), free(ro);
}

static void prefill_over_paged_pool_matches_reference(void) {
    NEED_CUDNN();
    int KVD = PNKV * PHS;
    // sequence 0: 70 rows after 30 cached; 1: one decode row after 44 cached,
    // sharing sequence 0's first two blocks (a fork); 2: 130 rows from 0.
    int first[5] = {30, 44, 0, 17, 0}, rows[5] = {70, 1, 130, 3, 1};
    int32_t table[5 * MB] = {0}, perm[NB];
    for (int i = 0; i < NB; i++) perm[i] = i;
    for (int i = NB - 1; i > 0; i--) {
        int j = (int)((frand() + 1) * 0.5f * (i + 1)) % (i + 1), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    int used = 0;
    for (int b = 0; b < 5; b++)
        for (int j = 0; j * BS < first[b] + rows[b]; j++)
            table[b * MB + j] = b == 1 && j < 2 ? table[j] : perm[used++];
    size_t npool = (size_t)NB * NL * BS * KVD;
    void *dpk, *dpv;
    float *pk = rand_bf16(npool, 1.f, &dpk), *pv = rand_bf16(npool, 1.f, &dpv);
    paged_case("paged prefill, 14/2 heads, hs 64, 3 sequences", pk, pv, dpk, dpv, table, first, rows, 3);
    // 5 sequences: a bucket of 6 (an empty sequence and a zero table row at the end)
    paged_case("paged prefill, 5 sequences in a bucket of 6", pk, pv, dpk, dpv, table, first, rows, 5);
    skpo_cuda_dfree(dpk), skpo_cuda_dfree(dpv);
    free(pk), free(pv);
}

// --- the choice of path ----------------------------------------------------------------

static void attention_path_is_named_by_skpo_attn_or_chosen(void) {
    model_attn_path p = ATTN_NPATHS;
    int forced = -1;
    skpo_err e = {0};
    char *saved = getenv("SKPO_ATTN") ? strdup(getenv("SKPO_ATTN")) : NULL;
    setenv("SKPO_ATTN", "fast", 1);
    CHECK(model_cuda_attn_select(G, 1, 4, 2, 64, &p, &forced, &e) == SKPO_ERANGE && strstr(e.msg, "cudnn, flash or custom"));
    setenv("SKPO_ATTN", "flash", 1);
    CHECK(model_cuda_attn_select(G, 1, 4, 2, 80, &p, &forced, &e) == SKPO_EUNSUPPORTED && strstr(e.msg, "head_dim 80"));
    CHECK(model_cuda_attn_select(G, 1, 4, 2, 128, &p, &forced, &e) == SKPO_OK && p == ATTN_FLASH && forced == 1);
    CHECK(model_cuda_attn_select(G, 0, 4, 2, 128, &p, &forced, &e) == SKPO_OK && p == ATTN_CUSTOM);   // prefill
    setenv("SKPO_ATTN", "custom", 1);
    CHECK(model_cuda_attn_select(G, 1, 4, 2, 64, &p, &forced, &e) == SKPO_OK && p == ATTN_CUSTOM && forced == 1);
    setenv("SKPO_ATTN", "cudnn", 1);
    skpo_status st = model_cuda_attn_select(G, 1, 4, 2, 64, &p, &forced, &e);
    if (cudnn_here()) CHECK(st == SKPO_OK && p == ATTN_CUDNN);
    else CHECK_MSG(st == SKPO_EUNSUPPORTED && !strncmp(e.msg, "SKPO_ATTN=cudnn: ", 17), "%d: %s", (int)st, e.msg);
    printf("# SKPO_ATTN=cudnn here: %s\n", st ? e.msg : "available");
    unsetenv("SKPO_ATTN");
    CHECK(model_cuda_attn_select(G, 1, 4, 2, 64, &p, &forced, &e) == SKPO_OK && forced == 0 &&
          p == (cudnn_here() ? ATTN_CUDNN : ATTN_FLASH));
    CHECK(model_cuda_attn_select(G, 1, 4, 2, 80, &p, &forced, &e) == SKPO_OK && p == (cudnn_here() ? ATTN_CUDNN : ATTN_CUSTOM));
    CHECK(model_cuda_attn_select(G, 0, 4, 2, 64, &p, &forced, &e) == SKPO_OK && p == (cudnn_here() ? ATTN_CUDNN : ATTN_CUSTOM));
    if (saved) setenv("SKPO_ATTN", saved, 1);
    free(saved);
}

int main(void) {
    skpo_err e = {0};
    if (skpo_cuda_device_count() > 0 && skpo_cuda_init(0, &G, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    if (skpo_cudnn_check(G, &e)) snprintf(why_not, sizeof why_not, "skipped: %s", e.msg);
    else printf("# cuDNN %s\n", skpo_cudnn_version(G));
    RUN(attention_path_is_named_by_skpo_attn_or_chosen);
    RUN(training_attention_matches_reference_at_05b_heads);
    RUN(training_attention_matches_reference_at_15b_heads);
    RUN(prefill_over_paged_pool_matches_reference);
    skpo_cuda_free_ctx(G);
    return TEST_SUMMARY();
}
#endif
