// test_cuda_sample.c - the device sampler (skpo_cuda_sample) against the CPU
// sampler's contract (core/gen/sampler.h).
//
// Statistics: for each parameter set, 20000 draws from one fixed logit row
// (V = 4096, logits ~ N(0, 2.5^2), no ties) with coins from a fixed-seed
// generator, on the GPU and with skpo_sample on the CPU. The exact kept-set
// distribution is computed here independently in double (sort, top-k, top-p
// over the renormalised top-k, renormalise). Each sampler's counts must
// (a) never fall outside the kept set and (b) pass a chi-square goodness-of-fit
// test against it: bins are tokens in decreasing probability, the tail merged
// until every bin expects >= 5 draws, and the statistic must stay under the
// chi-square quantile at 1 - 1e-4 for its degrees of freedom (Wilson-Hilferty),
// and no single bin may be off by more than 5 standard deviations (the
// all-bins statistic alone is blind to one wrong head token among ~1000 bins:
// with 20000 draws a head token of p = 0.05 drawn 10% too often is z = 7).
// The coins are fixed, so a run is reproducible.
// Log-probs: every drawn token's log-prob equals log_softmax(z / T)[tok] from
// skpo_sample_logprob within 2e-4 (float sums over the vocabulary on the GPU).
// Without a GPU every test prints a visible SKIP line.
#include "harness.h"
#include "base/common.h"
#include "base/rng.h"
#include "gen/sampler.h"

#include <stdint.h>
#include <string.h>

#ifdef SKPO_HAVE_CUDA
#include "cuda/cuda.h"
#endif

enum { V = 4096, NDRAW = 20000, CHUNK = 5000 };

static void make_logits(float *z, int n, uint64_t seed, double scale) {
    skpo_rng r;
    skpo_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) z[i] = (float)(scale * skpo_rng_normal(&r));
}

static const double *P_;
static int by_p_desc(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    if (P_[i] != P_[j]) return P_[i] > P_[j] ? -1 : 1;
    return i - j;
}

// Exact kept-set distribution q (V), in double; returns the kept count.
// order receives token ids most likely first.
static int kept_distribution(const float *z, const skpo_sample_params *sp, double *q, int *order) {
    double *p = skpo_xmalloc(V * sizeof *p), m = -INFINITY, s = 0;
    for (int i = 0; i < V; i++) m = z[i] > m ? z[i] : m;
    for (int i = 0; i < V; i++) s += p[i] = exp(((double)z[i] - m) / sp->temperature);
    for (int i = 0; i < V; i++) { p[i] /= s; order[i] = i; }
    P_ = p;
    qsort(order, V, sizeof *order, by_p_desc);
    int n = sp->top_k > 0 && sp->top_k < V ? sp->top_k : V;
    double mass = 0;
    for (int i = 0; i < n; i++) mass += p[order[i]];
    if (sp->top_p < 1) {
        double cum = 0;
        for (int i = 0; i < n; i++) {
            cum += p[order[i]];
            if (cum >= sp->top_p * mass) { n = i + 1; break; }
        }
    }
    double kmass = 0;
    for (int i = 0; i < n; i++) kmass += p[order[i]];
    memset(q, 0, V * sizeof *q);
    for (int i = 0; i < n; i++) q[order[i]] = p[order[i]] / kmass;
    free(p);
    return n;
}

// Chi-square quantile at 1 - 1e-4 (z = 3.719) by Wilson-Hilferty.
static double chi2_crit(int df) {
    double a = 2.0 / (9.0 * df), t = 1 - a + 3.719 * sqrt(a);
    return df * t * t * t;
}

// Goodness of fit of counts (V) to q over the kept set (order[0..kept)).
// Returns 1 when it passes; prints the statistic either way.
static int gof(const char *who, const char *what, const int *count, const double *q, const int *order, int kept,
               int n) {
    int outside = 0;
    for (int i = 0; i < V; i++) if (q[i] == 0 && count[i]) outside += count[i];
    double *be = skpo_xcalloc((size_t)kept + 1, sizeof *be), *bo = skpo_xcalloc((size_t)kept + 1, sizeof *bo);
    int bins = 0;
    for (int i = 0; i < kept; i++) {
        be[bins] += n * q[order[i]];
        bo[bins] += count[order[i]];
        if (be[bins] >= 5) bins++;
    }
    if (bins < kept && be[bins] > 0) { // a tail short of 5 expected draws joins the last full bin
        if (bins > 0) { be[bins - 1] += be[bins]; bo[bins - 1] += bo[bins]; }
        else bins = 1;
    }
    double stat = 0, zmax = 0;
    for (int b = 0; b < bins; b++) {
        double d = bo[b] - be[b], zb = fabs(d) / sqrt(be[b] * (1 - be[b] / n));
        stat += d * d / be[b];
        if (!(zb <= zmax)) zmax = zb;
    }
    free(be);
    free(bo);
    int df = bins > 1 ? bins - 1 : 1;
    double crit = chi2_crit(df);
    int ok = outside == 0 && stat <= crit && zmax <= 5;
    fprintf(stderr, "  %s %s: kept %d, chi2 %.1f over %d bins (crit %.1f at p=1e-4), largest bin z %.2f (max 5), "
            "%d draws outside the kept set\n", who, what, kept, stat, bins, crit, zmax, outside);
    return ok;
}

typedef struct draw_case {
    float z[V];
    float coin[NDRAW];       // the GPU takes float coins
    double coin_d[NDRAW];    // the CPU sampler takes the generator's doubles
    double q[V];             // exact kept-set distribution
    int order[V], kept;
} draw_case;

static draw_case *case_new(const skpo_sample_params *sp, uint64_t seed) {
    draw_case *c = skpo_xmalloc(sizeof *c);
    make_logits(c->z, V, seed, 2.5);
    skpo_rng r;
    skpo_rng_seed(&r, seed ^ 0xC0FFEE);
    for (int i = 0; i < NDRAW; i++) {
        c->coin_d[i] = skpo_rng_uniform(&r);
        c->coin[i] = (float)c->coin_d[i];
    }
    c->kept = kept_distribution(c->z, sp, c->q, c->order);
    return c;
}

static void cpu_case(const char *what, const skpo_sample_params *sp, uint64_t seed) {
    draw_case *c = case_new(sp, seed);
    int *cc = skpo_xcalloc(V, sizeof *cc);
    skpo_sampler s;
    skpo_sampler_init(&s, V);
    for (int i = 0; i < NDRAW; i++) {
        float l;
        int t = skpo_sample(&s, c->z, sp, c->coin_d[i], &l);
        if (t >= 0) cc[t]++;
    }
    skpo_sampler_destroy(&s);
    CHECK_MSG(gof("cpu", what, cc, c->q, c->order, c->kept, NDRAW), "the CPU sampler does not fit the reference (%s)",
              what);
    free(cc);
    free(c);
}

static const skpo_sample_params CASES[4] = {{1.0, 1.0, 0}, {0.7, 1.0, 50}, {1.3, 0.9, 0}, {1.0, 0.8, 40}};
static const char *const CASE_NAMES[4] = {"T=1", "T=0.7 top_k=50", "T=1.3 top_p=0.9", "T=1 top_k=40 top_p=0.8"};

// The reference and the statistic themselves, on the CPU sampler (runs
// everywhere): if this failed, the GPU comparison below would mean nothing.
static void cpu_sampler_fits_exact_kept_distribution(void) {
    for (int k = 0; k < 4; k++) cpu_case(CASE_NAMES[k], &CASES[k], 11 + k);
}

#ifndef SKPO_HAVE_CUDA
static void cuda_sampler_matches_cpu_distribution(void) { SKIP("built without CUDA (no nvcc): skipped: no GPU"); }
int main(void) {
    RUN(cpu_sampler_fits_exact_kept_distribution);
    RUN(cuda_sampler_matches_cpu_distribution);
    return TEST_SUMMARY();
}
#else
static skpo_cuda *G;

// Draw n tokens on the GPU, each from a copy of the row z with its own coin[i].
static int gpu_draw(const float *z, int vocab, int n, const skpo_sample_params *p, const float *coin, int32_t *tok,
                    float *lp) {
    skpo_err e = {0};
    int chunk = n < CHUNK ? n : CHUNK;
    float *rep = skpo_xmalloc((size_t)chunk * vocab * sizeof *rep);
    for (int i = 0; i < chunk; i++) memcpy(rep + (size_t)i * vocab, z, (size_t)vocab * sizeof *z);
    void *dz = NULL, *dc = NULL, *dt = NULL, *dl = NULL;
    int ok = skpo_cuda_malloc(G, &dz, (size_t)chunk * vocab * 4, "logits", &e) == SKPO_OK &&
             skpo_cuda_malloc(G, &dc, (size_t)chunk * 4, "coins", &e) == SKPO_OK &&
             skpo_cuda_malloc(G, &dt, (size_t)chunk * 4, "tokens", &e) == SKPO_OK &&
             skpo_cuda_malloc(G, &dl, (size_t)chunk * 4, "logp", &e) == SKPO_OK &&
             skpo_cuda_h2d(G, dz, rep, (size_t)chunk * vocab * 4, &e) == SKPO_OK;
    for (int i0 = 0; ok && i0 < n; i0 += chunk) {
        int b = n - i0 < chunk ? n - i0 : chunk;
        ok = skpo_cuda_h2d(G, dc, coin + i0, (size_t)b * 4, &e) == SKPO_OK &&
             skpo_cuda_sample(G, dt, dl, dz, b, vocab, (float)p->temperature, p->top_k, (float)p->top_p, dc, &e) ==
                 SKPO_OK &&
             skpo_cuda_sync(G, &e) == SKPO_OK && skpo_cuda_d2h(G, tok + i0, dt, (size_t)b * 4, &e) == SKPO_OK &&
             skpo_cuda_d2h(G, lp + i0, dl, (size_t)b * 4, &e) == SKPO_OK;
    }
    if (!ok) fprintf(stderr, "  gpu_draw: %s\n", e.msg);
    skpo_cuda_dfree(dz); skpo_cuda_dfree(dc); skpo_cuda_dfree(dt); skpo_cuda_dfree(dl);
    free(rep);
    return ok;
}

static void gpu_case(const char *what, const skpo_sample_params *sp, uint64_t seed) {
    draw_case *c = case_new(sp, seed);
    int32_t *tok = skpo_xmalloc(NDRAW * sizeof *tok);
    float *lp = skpo_xmalloc(NDRAW * sizeof *lp);
    int *cg = skpo_xcalloc(V, sizeof *cg);
    CHECK(gpu_draw(c->z, V, NDRAW, sp, c->coin, tok, lp));
    double worst = 0;
    for (int i = 0; i < NDRAW; i++) {
        if (tok[i] < 0 || tok[i] >= V) { CHECK_MSG(0, "draw %d gave token %d", i, (int)tok[i]); break; }
        cg[tok[i]]++;
        double d = fabs(skpo_sample_logprob(c->z, V, sp->temperature, tok[i]) - lp[i]);
        if (!(d <= worst)) worst = d;  // NaN propagates
    }
    fprintf(stderr, "  gpu %s: largest |logp - cpu logp| = %.2e\n", what, worst);
    CHECK_MSG(worst <= 2e-4, "log-prob differs from skpo_sample_logprob by %g", worst);
    CHECK_MSG(gof("gpu", what, cg, c->q, c->order, c->kept, NDRAW),
              "the GPU sampler does not fit the CPU distribution (%s)", what);
    free(tok); free(lp); free(cg); free(c);
}

static int have_gpu(void) { return G != NULL; }

static void cuda_sampler_matches_cpu_distribution(void) {
    if (!have_gpu()) SKIP("skipped: no GPU");
    for (int k = 0; k < 4; k++) gpu_case(CASE_NAMES[k], &CASES[k], 11 + k);
}

// A tiny top-p keeps a single token; top-k 1 likewise: the draw is the argmax.
static void cuda_sampler_degenerate_truncation_is_argmax(void) {
    if (!have_gpu()) SKIP("skipped: no GPU");
    float z[V];
    make_logits(z, V, 21, 1.0);
    int am = 0;
    for (int i = 1; i < V; i++) if (z[i] > z[am]) am = i;
    skpo_sample_params k1 = {1.0, 1.0, 1}, p0 = {1.0, 1e-6, 0};
    float coin[4] = {0.f, 0.3f, 0.7f, 0.9999f};
    int32_t tok[4];
    float lp[4];
    CHECK(gpu_draw(z, V, 4, &k1, coin, tok, lp));
    for (int i = 0; i < 4; i++) CHECK(tok[i] == am);
    CHECK(gpu_draw(z, V, 4, &p0, coin, tok, lp));
    for (int i = 0; i < 4; i++) CHECK(tok[i] == am);
}

// Greedy: the argmax (lowest id on ties) and, as the CPU sampler, the
// temperature-1 log-prob (not 0).
static void cuda_greedy_token_and_logprob_match_cpu(void) {
    if (!have_gpu()) SKIP("skipped: no GPU");
    enum { B = 6 };
    float *z = skpo_xmalloc((size_t)B * V * sizeof *z);
    for (int b = 0; b < B; b++) make_logits(z + (size_t)b * V, V, 100 + b, 3.0);
    z[1 * V + 17] = z[1 * V + 900] = 40.f; // tie: id 17 wins
    z[2 * V + 5] = -INFINITY;
    skpo_err e = {0};
    void *dz, *dc, *dt, *dl;
    float coin[B] = {0};
    int32_t tok[B];
    float lp[B];
    CHECK(skpo_cuda_malloc(G, &dz, sizeof(float) * B * V, "z", &e) == SKPO_OK);
    CHECK(skpo_cuda_malloc(G, &dc, sizeof coin, "c", &e) == SKPO_OK);
    CHECK(skpo_cuda_malloc(G, &dt, sizeof tok, "t", &e) == SKPO_OK);
    CHECK(skpo_cuda_malloc(G, &dl, sizeof lp, "l", &e) == SKPO_OK);
    CHECK(skpo_cuda_h2d(G, dz, z, sizeof(float) * B * V, &e) == SKPO_OK);
    CHECK(skpo_cuda_h2d(G, dc, coin, sizeof coin, &e) == SKPO_OK);
    CHECK(skpo_cuda_sample(G, dt, dl, dz, B, V, 0.f, 0, 1.f, dc, &e) == SKPO_OK);
    CHECK(skpo_cuda_sync(G, &e) == SKPO_OK);
    CHECK(skpo_cuda_d2h(G, tok, dt, sizeof tok, &e) == SKPO_OK);
    CHECK(skpo_cuda_d2h(G, lp, dl, sizeof lp, &e) == SKPO_OK);
    skpo_sampler s;
    skpo_sampler_init(&s, V);
    skpo_sample_params greedy = {0, 1, 0};
    for (int b = 0; b < B; b++) {
        float clp;
        int ct = skpo_sample(&s, z + (size_t)b * V, &greedy, 0.5, &clp);
        CHECK_MSG(tok[b] == ct, "row %d: gpu %d cpu %d", b, (int)tok[b], ct);
        CHECK_NEAR(lp[b], clp, 1e-4);
        CHECK(lp[b] < 0);
    }
    CHECK(tok[1] == 17);
    skpo_sampler_destroy(&s);
    skpo_cuda_dfree(dz); skpo_cuda_dfree(dc); skpo_cuda_dfree(dt); skpo_cuda_dfree(dl);
    free(z);
}

// NaN or +Inf anywhere, or only -Inf: token -1 (the CPU sampler's contract);
// -Inf entries are never chosen.
static void cuda_sampler_reports_bad_rows_and_skips_neg_inf(void) {
    if (!have_gpu()) SKIP("skipped: no GPU");
    enum { B = 4, W = 64 };
    float z[B * W];
    for (int i = 0; i < B * W; i++) z[i] = -INFINITY;
    z[0 * W + 3] = NAN;
    z[1 * W + 7] = INFINITY;
    // row 2: all -Inf; row 3: two finite entries only
    z[3 * W + 10] = 1.f;
    z[3 * W + 50] = 0.f;
    skpo_sample_params hot = {1.0, 1.0, 0}, greedy = {0, 1, 0};
    float coin[B] = {0.5f, 0.5f, 0.5f, 0.99f};
    int32_t tok[B];
    float lp[B];
    for (int pass = 0; pass < 2; pass++) {
        // gpu_draw replicates row 0; draw rows one at a time instead
        for (int b = 0; b < B; b++) {
            CHECK(gpu_draw(z + b * W, W, 1, pass ? &greedy : &hot, coin + b, tok + b, lp + b));
        }
        CHECK(tok[0] == -1 && tok[1] == -1 && tok[2] == -1);
        CHECK(tok[3] == 10 || tok[3] == 50);
        if (pass) CHECK(tok[3] == 10);
        CHECK(isfinite(lp[3]));
    }
}

int main(void) {
    skpo_err e = {0};
    if (skpo_cuda_device_count() > 0 && skpo_cuda_init(0, &G, &e) != SKPO_OK) {
        fprintf(stderr, "cuda init: %s\n", e.msg);
        G = NULL;
    }
    RUN(cpu_sampler_fits_exact_kept_distribution);
    RUN(cuda_greedy_token_and_logprob_match_cpu);
    RUN(cuda_sampler_reports_bad_rows_and_skips_neg_inf);
    RUN(cuda_sampler_degenerate_truncation_is_argmax);
    RUN(cuda_sampler_matches_cpu_distribution);
    if (G) skpo_cuda_free_ctx(G);
    return TEST_SUMMARY();
}
#endif
