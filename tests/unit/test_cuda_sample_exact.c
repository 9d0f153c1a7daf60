// test_cuda_sample_exact.c - the device sampler (skpo_cuda_sample) against its
// exact contract, coin by coin: for a coin u the token must be the one whose
// interval of the cumulative distribution, walked in index order over the kept
// set, holds u * (kept mass). The kept set is computed here in double with
// core/gen/sampler.c's semantics (top-k most likely first, ties by lower id, then
// top-p over the renormalised top-k mass with cum >= top_p * mass). Every
// token must match (coins closer than 1e-5 of the kept mass to a boundary are
// excused: float rounding may fall either way), and every log-prob must be
// log_softmax(z / T)[token] within 1e-4. Deterministic, unlike the statistics
// of test_cuda_sample.c, so one wrong token anywhere fails it. Without nvcc or
// a GPU it prints a visible SKIP line.
#include "harness.h"
#include "base/common.h"
#include "base/rng.h"

#include <string.h>

#ifndef SKPO_HAVE_CUDA
static void device_tokens_follow_the_inverse_cdf_of_the_kept_set(void) { SKIP("built without CUDA (no nvcc): skipped: no GPU"); }
static void crowded_and_tied_thresholds_follow_the_inverse_cdf(void) { SKIP("built without CUDA (no nvcc): skipped: no GPU"); }
#else
#include "cuda/cuda.h"

enum { V = 4096, NC = 48 };

static const double *P_;
static int by_p_desc(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    if (P_[i] != P_[j]) return P_[i] > P_[j] ? -1 : 1;
    return i - j;
}

typedef struct scase { float temp; int top_k; float top_p; } scase;

// Kept set (flags) and its mass; p (V) = softmax(z / T) in double, logZ its log-normaliser.
static double kept_set(const float *z, const scase *c, double *p, char *kept, double *logZ) {
    double m = -INFINITY, s = 0;
    for (int i = 0; i < V; i++) m = z[i] > m ? z[i] : m;
    for (int i = 0; i < V; i++) s += p[i] = exp(((double)z[i] - m) / c->temp);
    for (int i = 0; i < V; i++) p[i] /= s;
    *logZ = m / c->temp + log(s);
    int *ord = skpo_xmalloc(V * sizeof *ord);
    for (int i = 0; i < V; i++) ord[i] = i;
    P_ = p;
    qsort(ord, V, sizeof *ord, by_p_desc);
    int n = c->top_k > 0 && c->top_k < V ? c->top_k : V;
    double mass = 0;
    for (int i = 0; i < n; i++) mass += p[ord[i]];
    if (c->top_p < 1) {
        double cum = 0;
        for (int i = 0; i < n; i++) {
            cum += p[ord[i]];
            if (cum >= c->top_p * mass) { n = i + 1; break; }
        }
    }
    memset(kept, 0, V);
    double km = 0;
    for (int i = 0; i < n; i++) kept[ord[i]] = 1, km += p[ord[i]];
    free(ord);
    return km;
}

// Device buffers of one run: nc rows of logits, the coins, tokens, log-probs.
typedef struct dbufs { void *z, *c, *t, *l; } dbufs;
static void dbufs_new(skpo_cuda *cu, dbufs *b, size_t zbytes, int nc) {
    skpo_err e = {0};
    memset(b, 0, sizeof *b);
    CHECK(skpo_cuda_malloc(cu, &b->z, zbytes, "logits", &e) == SKPO_OK);
    CHECK(skpo_cuda_malloc(cu, &b->c, (size_t)nc * 4, "coins", &e) == SKPO_OK);
    CHECK(skpo_cuda_malloc(cu, &b->t, (size_t)nc * 4, "tokens", &e) == SKPO_OK);
    CHECK(skpo_cuda_malloc(cu, &b->l, (size_t)nc * 4, "logp", &e) == SKPO_OK);
}
static void dbufs_free(skpo_cuda *cu, dbufs *b) {
    skpo_cuda_dfree(b->z);
    skpo_cuda_dfree(b->c);
    skpo_cuda_dfree(b->t);
    skpo_cuda_dfree(b->l);
    skpo_cuda_free_ctx(cu);
}

// Tokens drawn with coins coin[0..nc) from one row z(n) against the inverse
// CDF of the kept set (p, kept, kept mass km): counts wrong tokens (coins
// within 1e-5 of a boundary excused, counted in *edge) and the worst log-prob
// error against log_softmax(z / temp).
static int off_the_cdf(const float *z, int n, float temp, double logZ, const double *p, const char *kept, double km,
                       const float *coin, const int32_t *tok, const float *lp, int nc, int *edge, double *worst_lp) {
    int wrong = 0;
    *edge = 0;
    *worst_lp = 0;
    for (int i = 0; i < nc; i++) {
        double target = coin[i] * km, cum = 0, gap = 1;
        int want = -1;
        for (int t = 0; t < n && want < 0; t++) {
            if (!kept[t]) continue;
            double lo = cum;
            cum += p[t];
            if (cum > target) want = t, gap = fmin(target - lo, cum - target) / km;
        }
        if (tok[i] != want) {
            if (gap < 1e-5) (*edge)++;
            else wrong++;
        }
        if (tok[i] < 0 || tok[i] >= n) { wrong++; continue; }
        *worst_lp = fmax(*worst_lp, fabs(lp[i] - ((double)z[tok[i]] / temp - logZ)));
    }
    return wrong;
}

static void device_tokens_follow_the_inverse_cdf_of_the_kept_set(void) {
    if (skpo_cuda_device_count() == 0) SKIP("skipped: no GPU");
    static const scase cases[] = {{1.0f, 0, 1.0f}, {0.7f, 50, 1.0f}, {1.3f, 0, 0.9f}, {1.0f, 40, 0.8f}};
    skpo_cuda *cu = NULL;
    skpo_err e = {0};
    CHECK_MSG(skpo_cuda_init(0, &cu, &e) == SKPO_OK, "%s", e.msg);
    if (!cu) return;
    float *z = skpo_xmalloc((size_t)V * NC * sizeof *z), coin[NC], lp[NC];
    int32_t tok[NC];
    skpo_rng r;
    skpo_rng_seed(&r, 5);
    for (int i = 0; i < V; i++) z[i] = (float)(2.5 * skpo_rng_normal(&r));
    for (int c = 1; c < NC; c++) memcpy(z + (size_t)c * V, z, V * sizeof *z);
    for (int c = 0; c < NC; c++) coin[c] = (c + 0.37f) / NC;
    dbufs d;
    dbufs_new(cu, &d, (size_t)V * NC * 4, NC);
    void *dz = d.z, *dc = d.c, *dt = d.t, *dl = d.l;
    CHECK(skpo_cuda_h2d(cu, dz, z, (size_t)V * NC * 4, &e) == SKPO_OK);
    CHECK(skpo_cuda_h2d(cu, dc, coin, NC * 4, &e) == SKPO_OK);
    double *p = skpo_xmalloc(V * sizeof *p);
    char *kept = skpo_xmalloc(V);
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        const scase *c = &cases[k];
        double logZ, km = kept_set(z, c, p, kept, &logZ);
        CHECK_MSG(skpo_cuda_sample(cu, dt, dl, dz, NC, V, c->temp, c->top_k, c->top_p, dc, &e) == SKPO_OK, "%s", e.msg);
        CHECK(skpo_cuda_d2h(cu, tok, dt, NC * 4, &e) == SKPO_OK && skpo_cuda_d2h(cu, lp, dl, NC * 4, &e) == SKPO_OK);
        int edge;
        double worst_lp;
        int wrong = off_the_cdf(z, V, c->temp, logZ, p, kept, km, coin, tok, lp, NC, &edge, &worst_lp);
        printf("# T=%.1f top_k=%d top_p=%.2f: %d wrong, %d at a CDF boundary, worst |logp error| %.2e\n", c->temp,
               c->top_k, c->top_p, wrong, edge, worst_lp);
        CHECK_MSG(wrong == 0, "T=%.1f top_k=%d top_p=%.2f: %d of %d tokens off the inverse CDF", c->temp, c->top_k,
                  c->top_p, wrong, NC);
        CHECK_MSG(worst_lp <= 1e-4, "log-prob off by %g", worst_lp);
    }
    free(p);
    free(kept);
    free(z);
    dbufs_free(cu, &d);
}

// The device's rule at a threshold: every token tied with the k-th largest
// logit is kept, and every token tied at the top-p edge (groups of equal
// logits, largest first, until top_p of the top-k mass). kept[] and the kept
// mass as kept_set().
static const float *Z_;
static int by_z_desc(const void *a, const void *b) {
    float x = Z_[*(const int *)a], y = Z_[*(const int *)b];
    return x > y ? -1 : x < y ? 1 : 0;
}
static double kept_set_ties(const float *z, int n, const scase *c, double *p, char *kept, double *logZ) {
    double m = -INFINITY, s = 0, mass = 0, cut = -INFINITY;
    for (int i = 0; i < n; i++) m = z[i] > m ? z[i] : m;
    for (int i = 0; i < n; i++) s += p[i] = exp(((double)z[i] - m) / c->temp);
    for (int i = 0; i < n; i++) p[i] /= s;
    *logZ = m / c->temp + log(s);
    int *ord = skpo_xmalloc((size_t)n * sizeof *ord);
    for (int i = 0; i < n; i++) ord[i] = i;
    Z_ = z;
    qsort(ord, (size_t)n, sizeof *ord, by_z_desc);
    if (c->top_k > 0 && c->top_k < n) cut = z[ord[c->top_k - 1]];
    for (int i = 0; i < n; i++) mass += z[i] >= cut ? p[i] : 0;
    if (c->top_p < 1) {
        double cum = 0;
        for (int i = 0; i < n && z[ord[i]] >= cut; i++) {
            cum += p[ord[i]];
            if ((i + 1 == n || z[ord[i + 1]] != z[ord[i]]) && cum >= c->top_p * mass) {
                cut = z[ord[i]];
                break;
            }
        }
    }
    double km = 0;
    for (int i = 0; i < n; i++) km += (kept[i] = z[i] >= cut) ? p[i] : 0;
    free(ord);
    return km;
}

// Rows whose thresholds fall where the device's selection has more work:
// more than 4096 tokens in one bin of the top 12 key bits (6000 logits in
// [1, 1.1), so extra 8-bit passes), 5000 exactly tied logits at the top-k and
// top-p edges, half the row at -Inf with top-k past the finite tokens,
// top_p = 0 (the maximum's ties only), and a Qwen-sized vocabulary. Coin by
// coin against kept_set_ties as above (boundary coins within 1e-5 excused).
static void crowded_and_tied_thresholds_follow_the_inverse_cdf(void) {
    if (skpo_cuda_device_count() == 0) SKIP("skipped: no GPU");
    enum { NV = 20000, BIG = 151936, NC2 = 16 };
    typedef struct row { int kind, n; scase c; } row;
    static const row rows[] = {
        {0, NV, {1.0f, 3000, 1.0f}}, {0, NV, {1.0f, 0, 0.5f}},  {0, NV, {0.8f, 5000, 0.3f}}, {0, NV, {1.0f, 9000, 0.97f}},
        {1, NV, {1.0f, 2500, 1.0f}}, {1, NV, {1.0f, 0, 0.6f}},  {1, NV, {1.0f, 7000, 0.9f}}, {2, NV, {1.0f, NV - 10, 1.0f}},
        {2, NV, {0.5f, 0, 0.0f}},    {3, BIG, {1.0f, 50, 0.95f}}, {3, BIG, {0.6f, 0, 0.9f}}, {3, BIG, {1.0f, 0, 1.0f}},
    };
    skpo_cuda *cu = NULL;
    skpo_err e = {0};
    CHECK_MSG(skpo_cuda_init(0, &cu, &e) == SKPO_OK, "%s", e.msg);
    if (!cu) return;
    float *z = skpo_xmalloc((size_t)BIG * NC2 * sizeof *z), coin[NC2], lp[NC2];
    int32_t tok[NC2];
    double *p = skpo_xmalloc((size_t)BIG * sizeof *p);
    char *kept = skpo_xmalloc(BIG);
    for (int c = 0; c < NC2; c++) coin[c] = (c + 0.61f) / NC2;
    dbufs d;
    dbufs_new(cu, &d, (size_t)BIG * NC2 * 4, NC2);
    void *dz = d.z, *dc = d.c, *dt = d.t, *dl = d.l;
    CHECK(skpo_cuda_h2d(cu, dc, coin, NC2 * 4, &e) == SKPO_OK);
    for (size_t k = 0; k < sizeof rows / sizeof *rows; k++) {
        const row *w = &rows[k];
        int n = w->n;
        skpo_rng r;
        skpo_rng_seed(&r, 11 + (uint64_t)w->kind);
        for (int i = 0; i < n; i++) {
            double g = skpo_rng_normal(&r);
            switch (w->kind) {
            case 0: z[i] = i % 10 < 3 ? (float)(1.0 + 0.1 * skpo_rng_uniform(&r)) : (float)(g < 0.8 ? g : 0.8 - 0.1 * g); break;
            case 1: z[i] = i % 4 == 1 ? 2.0f : (float)(g < 1.9 ? g : 1.9 - g * 1e-3); break;
            case 2: z[i] = i % 2 ? -INFINITY : (float)g; break;
            default: z[i] = (float)(2.5 * g); break;
            }
        }
        for (int c = 1; c < NC2; c++) memcpy(z + (size_t)c * n, z, (size_t)n * sizeof *z);
        CHECK(skpo_cuda_h2d(cu, dz, z, (size_t)n * NC2 * 4, &e) == SKPO_OK);
        double logZ, km = kept_set_ties(z, n, &w->c, p, kept, &logZ);
        CHECK_MSG(skpo_cuda_sample(cu, dt, dl, dz, NC2, n, w->c.temp, w->c.top_k, w->c.top_p, dc, &e) == SKPO_OK, "%s",
                  e.msg);
        CHECK(skpo_cuda_d2h(cu, tok, dt, NC2 * 4, &e) == SKPO_OK && skpo_cuda_d2h(cu, lp, dl, NC2 * 4, &e) == SKPO_OK);
        int edge, nk = 0;
        double worst_lp;
        for (int i = 0; i < n; i++) nk += kept[i];
        int wrong = off_the_cdf(z, n, w->c.temp, logZ, p, kept, km, coin, tok, lp, NC2, &edge, &worst_lp);
        printf("# row kind %d, V=%d, T=%.1f top_k=%d top_p=%.2f: %d kept, %d wrong, %d at a CDF boundary, worst |logp "
               "error| %.2e\n", w->kind, n, w->c.temp, w->c.top_k, w->c.top_p, nk, wrong, edge, worst_lp);
        CHECK_MSG(wrong == 0, "row %zu: %d of %d tokens off the inverse CDF", k, wrong, NC2);
        CHECK_MSG(worst_lp <= 1e-4, "row %zu: log-prob off by %g", k, worst_lp);
    }
    free(p);
    free(kept);
    free(z);
    dbufs_free(cu, &d);
}
#endif

int main(void) {
    RUN(device_tokens_follow_the_inverse_cdf_of_the_kept_set);
    RUN(crowded_and_tied_thresholds_follow_the_inverse_cdf);
    return TEST_SUMMARY();
}
