/*
 * test_signsim.c - core/rl/signsim: binomial sampling against exact moments and
 * pmfs, the sign test's edge cases, and the simulation against closed forms
 * (G = 2 by convolution, the GRPO reference as a product) and against the
 * behaviour docs/algorithm.md section 8 reports. Every statistical check uses a fixed
 * seed and a tolerance of about 5 standard errors, stated next to it.
 */
#include "harness.h"
#include "rl/signsim.h"

#include <omp.h>
#include <string.h>

// Exact Binomial(n, p) pmf by the product recurrence (n small).
static void binom_pmf(int n, double p, double *pmf) {
    pmf[0] = pow(1 - p, n);
    for (int k = 0; k < n; k++) pmf[k + 1] = pmf[k] * (double)(n - k) / (double)(k + 1) * p / (1 - p);
}

// Sample mean and variance of M draws of Binomial(n, p) against np and npq:
// mean within 5 se = 5 sqrt(npq / M); variance within 5 % (M = 200000 gives a
// relative sd of the sample variance of about sqrt(2 / M) = 0.3 %).
static int moments_ok(int64_t n, double p, uint64_t seed) {
    const int M = 200000;
    skpo_rng r;
    skpo_signsim_rng_seed(&r, seed, 7);
    double s = 0, s2 = 0;
    int64_t lo = n, hi = 0;
    for (int i = 0; i < M; i++) {
        int64_t x = skpo_signsim_binomial(&r, n, p);
        if (x < lo) lo = x;
        if (x > hi) hi = x;
        s += (double)x;
        s2 += (double)x * (double)x;
    }
    double mean = s / M, var = s2 / M - mean * mean, mu = (double)n * p, v = mu * (1 - p);
    int ok = lo >= 0 && hi <= n && fabs(mean - mu) <= 5 * sqrt(v / M) + 1e-12 && fabs(var - v) <= 0.05 * v + 1e-12;
    if (!ok) fprintf(stderr, "  n=%lld p=%g: mean %.6g (want %.6g) var %.6g (want %.6g) range [%lld, %lld]\n",
                     (long long)n, p, mean, mu, var, v, (long long)lo, (long long)hi);
    return ok;
}

static void binomial_has_exact_moments_in_both_regimes(void) {
    CHECK(moments_ok(8, 0.3, 1));           // inversion
    CHECK(moments_ok(40, 0.1, 2));          // inversion, np = 4
    CHECK(moments_ok(30, 0.4, 3));          // BTRS, np = 12
    CHECK(moments_ok(8192, 0.5, 4));        // BTRS at the paper's largest N
    CHECK(moments_ok(8192, 0.97, 5));       // p > 1/2 by symmetry
    CHECK(moments_ok(8192, 0.0005, 6));     // inversion at large n, np = 4.1
    CHECK(moments_ok(1000000000, 0.3, 7));  // O(1) cost in n
}

static void binomial_edge_probabilities_are_exact(void) {
    skpo_rng r;
    skpo_signsim_rng_seed(&r, 1, 1);
    for (int i = 0; i < 100; i++) {
        CHECK(skpo_signsim_binomial(&r, 50, 0.0) == 0);
        CHECK(skpo_signsim_binomial(&r, 50, 1.0) == 50);
        CHECK(skpo_signsim_binomial(&r, 0, 0.4) == 0);
    }
}

// Pearson chi-square of M draws against the exact pmf, cells with expected
// count >= 5 (tails pooled). The 0.999 quantile of chi-square with the
// resulting ~20 degrees of freedom is about 45; we allow 60.
static double chi_square(int n, double p, uint64_t seed, int *df) {
    const int M = 200000;
    double pmf[64], obs[64] = {0};
    binom_pmf(n, p, pmf);
    skpo_rng r;
    skpo_signsim_rng_seed(&r, seed, 0);
    for (int i = 0; i < M; i++) obs[skpo_signsim_binomial(&r, n, p)]++;
    double chi = 0, eo = 0, oo = 0;
    *df = -1;
    for (int k = 0; k <= n; k++) {
        eo += M * pmf[k];
        oo += obs[k];
        if (eo >= 5 || k == n) { chi += (oo - eo) * (oo - eo) / (eo > 0 ? eo : 1); (*df)++; eo = oo = 0; }
    }
    return chi;
}

static void binomial_matches_exact_pmf(void) {
    int df;
    double c1 = chi_square(20, 0.2, 11, &df);
    CHECK_MSG(c1 < 60, "inversion n=20 p=0.2: chi2 %.1f df %d", c1, df);
    double c2 = chi_square(40, 0.45, 12, &df);
    CHECK_MSG(c2 < 60, "btrs n=40 p=0.45: chi2 %.1f df %d", c2, df);
    double c3 = chi_square(60, 0.8, 13, &df);
    CHECK_MSG(c3 < 60, "btrs n=60 p=0.8: chi2 %.1f df %d", c3, df);
}

static void rng_streams_are_reproducible_and_distinct(void) {
    skpo_rng a, b, c;
    skpo_signsim_rng_seed(&a, 42, 3);
    skpo_signsim_rng_seed(&b, 42, 3);
    skpo_signsim_rng_seed(&c, 42, 4);
    int same = 1, diff = 0;
    for (int i = 0; i < 100; i++) {
        uint64_t x = skpo_rng_u64(&a), y = skpo_rng_u64(&b), z = skpo_rng_u64(&c);
        same &= x == y;
        diff += x != z;
    }
    CHECK(same);
    CHECK(diff == 100);
    double u = skpo_rng_uniform(&a);
    CHECK(u >= 0 && u < 1);
}

static void group_with_all_equal_estimates_is_wrong(void) {
    double p[4] = {0.2, 0.4, 0.6, 0.8};
    int64_t x[4] = {5, 5, 5, 5};
    int all;
    CHECK(skpo_signsim_group(x, p, 4, &all) == 0);
    CHECK(!all);
}

static void group_needs_every_sign_right(void) {
    double p[4] = {0.2, 0.4, 0.6, 0.8};
    int64_t good[4] = {1, 2, 7, 9}, bad[4] = {1, 6, 7, 9}; // mean 5.75: 6 > mean but p = 0.4 < 0.5
    int all;
    CHECK(skpo_signsim_group(good, p, 4, &all) == 4 && all);
    CHECK(skpo_signsim_group(bad, p, 4, &all) == 3 && !all);
}

static void group_true_zero_advantage_needs_zero_estimate(void) {
    double p[3] = {0.2, 0.5, 0.8};      // p[1] is exactly the mean
    int64_t x0[3] = {1, 5, 9}, x1[3] = {1, 6, 9};
    int all;
    CHECK(skpo_signsim_group(x0, p, 3, &all) == 3 && all);
    CHECK(skpo_signsim_group(x1, p, 3, &all) == 2 && !all);
}

static void group_real_uses_tolerance_around_the_mean(void) {
    double est[3] = {0.1, 0.5 + 1e-12, 0.9}, ref[3] = {0.0, 0.5, 1.0};
    int all;
    CHECK(skpo_signsim_group_real(est, ref, 3, 1e-9, &all) == 3 && all);
    CHECK(skpo_signsim_group_real(est, ref, 3, 0, &all) == 2 && !all);
}

static skpo_signsim_cfg base_cfg(int64_t *ns, int n_ns) {
    return (skpo_signsim_cfg){.G = 8, .trials = 40000, .seed = 1, .dist = SKPO_SIGNSIM_UNIFORM, .lo = 0, .hi = 1,
                              .ns = ns, .n_ns = n_ns};
}

// G = 2, p = (0.4, 0.6): a group is right iff X2 > X1, X_i ~ Bin(16, p_i)
// independent. Exact value by convolution; 200000 trials, se ~0.0011, tol 0.006.
static void two_prefixes_match_exact_convolution(void) {
    int64_t ns[1] = {16};
    double p[2] = {0.4, 0.6}, f1[17], f2[17];
    binom_pmf(16, 0.4, f1);
    binom_pmf(16, 0.6, f2);
    double exact = 0;
    for (int a = 0; a <= 16; a++)
        for (int b = a + 1; b <= 16; b++) exact += f1[a] * f2[b];
    skpo_signsim_cfg c = base_cfg(ns, 1);
    c.G = 2;
    c.trials = 200000;
    c.dist = SKPO_SIGNSIM_FIXED;
    c.fixed = p;
    skpo_signsim_row rows[2];
    skpo_err err = {{0}};
    CHECK(skpo_signsim_run(&c, rows, &err) == SKPO_OK);
    CHECK_NEAR(rows[0].frac, exact, 0.006);
    // GRPO reference (N = 1): right iff X1 = 0 and X2 = 1.
    CHECK_NEAR(rows[1].frac, 0.6 * 0.6, 0.006);
    CHECK(rows[1].n == 1);
    // both prefixes right or both wrong when G = 2: sign accuracy equals frac
    CHECK_NEAR(rows[0].sign_acc, rows[0].frac, 1e-12);
}

// GRPO reference for fixed rates: all signs right iff every above-mean prefix
// succeeds and every below-mean one fails: prod(p_i or 1 - p_i).
static void grpo_reference_matches_product_formula(void) {
    double p[8] = {0.1, 0.25, 0.3, 0.45, 0.6, 0.7, 0.8, 0.95}, mean = 0, exact = 1;
    for (int i = 0; i < 8; i++) mean += p[i] / 8;
    for (int i = 0; i < 8; i++) exact *= p[i] > mean ? p[i] : 1 - p[i];
    int64_t ns[1] = {8};
    skpo_signsim_cfg c = base_cfg(ns, 1);
    c.trials = 400000;
    c.dist = SKPO_SIGNSIM_FIXED;
    c.fixed = p;
    skpo_signsim_row rows[2];
    skpo_err err = {{0}};
    CHECK(skpo_signsim_run(&c, rows, &err) == SKPO_OK);
    double se = sqrt(exact * (1 - exact) / 400000.0);
    CHECK_NEAR(rows[1].frac, exact, 5 * se);
    // and per-prefix accuracy is the mean of max(p, 1 - p) on the right side
    double acc = 0;
    for (int i = 0; i < 8; i++) acc += (p[i] > mean ? p[i] : 1 - p[i]) / 8;
    CHECK_NEAR(rows[1].sign_acc, acc, 0.003);
}

// docs/algorithm.md section 8: for a small quality spread even N = 512 stays below 50 %;
// for reasonable spreads sign accuracy is near perfect at N = 8192; MC with
// N = 8 already beats the one-outcome GRPO reference; more N never hurts.
static void small_spread_stays_below_half_at_512(void) {
    int64_t ns[2] = {512, 8192};
    skpo_signsim_cfg c = base_cfg(ns, 2);
    c.dist = SKPO_SIGNSIM_BAND;
    c.centre = 0.5;
    c.spread = 0.1;
    skpo_signsim_row rows[3];
    skpo_err err = {{0}};
    CHECK(skpo_signsim_run(&c, rows, &err) == SKPO_OK);
    CHECK_MSG(rows[0].frac < 0.5, "band 0.1, N=512: %.4f", rows[0].frac);
    CHECK_MSG(rows[0].frac > 0.1, "band 0.1, N=512: %.4f (implausibly low)", rows[0].frac);
    CHECK(rows[1].frac > rows[0].frac + 10 * rows[0].se);
}

static void wide_spread_is_near_perfect_at_8192(void) {
    int64_t ns[11] = {8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};
    skpo_signsim_cfg c = base_cfg(ns, 11);
    skpo_signsim_row rows[12];
    skpo_err err = {{0}};
    CHECK(skpo_signsim_run(&c, rows, &err) == SKPO_OK);
    CHECK_MSG(rows[10].frac > 0.95, "uniform, N=8192: %.4f", rows[10].frac);
    CHECK_MSG(rows[10].sign_acc > 0.99, "uniform, N=8192 sign acc: %.4f", rows[10].sign_acc);
    for (int i = 1; i < 11; i++) CHECK_MSG(rows[i].frac > rows[i - 1].frac, "N=%lld not above N=%lld",
                                           (long long)ns[i], (long long)ns[i - 1]);
    CHECK(rows[0].frac > rows[11].frac + 10 * rows[0].se);
    CHECK(rows[11].n == 1 && rows[11].degenerate > 0);
}

static void result_does_not_depend_on_thread_count(void) {
    int64_t ns[3] = {8, 100, 5000};
    skpo_signsim_cfg c = base_cfg(ns, 3);
    c.dist = SKPO_SIGNSIM_BETA;
    c.centre = 2;
    c.spread = 3;
    c.trials = 3000;
    skpo_signsim_row a[4], b[4];
    skpo_err err = {{0}};
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    CHECK(skpo_signsim_run(&c, a, &err) == SKPO_OK);
    omp_set_num_threads(3);
    CHECK(skpo_signsim_run(&c, b, &err) == SKPO_OK);
    omp_set_num_threads(saved);
    for (int i = 0; i < 4; i++) {
        CHECK(a[i].correct == b[i].correct);
        CHECK(a[i].right_signs == b[i].right_signs);
    }
    c.seed = 2;
    CHECK(skpo_signsim_run(&c, b, &err) == SKPO_OK);
    CHECK(a[1].right_signs != b[1].right_signs);
}

static void distributions_stay_in_their_ranges(void) {
    int64_t ns[1] = {8};
    skpo_signsim_cfg c = base_cfg(ns, 1);
    double p[8];
    skpo_rng r;
    skpo_signsim_rng_seed(&r, 3, 0);
    c.dist = SKPO_SIGNSIM_BAND; c.centre = 0.3; c.spread = 0.2;
    double mn = 1, mx = 0, s = 0;
    for (int t = 0; t < 2000; t++) {
        skpo_signsim_draw_p(&c, &r, p);
        for (int i = 0; i < 8; i++) { mn = fmin(mn, p[i]); mx = fmax(mx, p[i]); s += p[i]; }
    }
    CHECK(mn >= 0.2 && mx <= 0.4 && mn < 0.201 && mx > 0.399);
    CHECK_NEAR(s / 16000, 0.3, 0.003); // sd of the mean 0.2/sqrt(12*16000) = 0.00046
    c.dist = SKPO_SIGNSIM_NORMAL; c.centre = 0.05; c.spread = 0.3;
    mn = 1; mx = 0;
    for (int t = 0; t < 2000; t++) {
        skpo_signsim_draw_p(&c, &r, p);
        for (int i = 0; i < 8; i++) { mn = fmin(mn, p[i]); mx = fmax(mx, p[i]); }
    }
    CHECK(mn >= 0 && mx <= 1);
    c.dist = SKPO_SIGNSIM_BETA; c.centre = 0.5; c.spread = 2; // mean a/(a+b) = 0.2, var 0.0457
    s = 0;
    for (int t = 0; t < 5000; t++) {
        skpo_signsim_draw_p(&c, &r, p);
        for (int i = 0; i < 8; i++) s += p[i];
    }
    CHECK_NEAR(s / 40000, 0.2, 0.006); // 5 sd = 5 sqrt(0.0457/40000) = 0.0053
}

static void bad_configurations_are_rejected(void) {
    int64_t ns[1] = {8}, bad_ns[1] = {0};
    skpo_signsim_cfg c = base_cfg(ns, 1);
    skpo_err err = {{0}};
    c.G = 1;
    CHECK(skpo_signsim_check(&c, &err) == SKPO_ERANGE && strstr(err.msg, "group size"));
    c = base_cfg(ns, 1);
    c.dist = SKPO_SIGNSIM_BAND; c.centre = 0.9; c.spread = 0.4;
    CHECK(skpo_signsim_check(&c, &err) == SKPO_ERANGE && strstr(err.msg, "inside [0, 1]"));
    c = base_cfg(bad_ns, 1);
    CHECK(skpo_signsim_check(&c, &err) == SKPO_ERANGE && strstr(err.msg, "N >= 1"));
    c = base_cfg(ns, 1);
    c.lo = 0.6; c.hi = 0.5;
    CHECK(skpo_signsim_check(&c, &err) == SKPO_ERANGE);
    c = base_cfg(ns, 1);
    CHECK(skpo_signsim_check(&c, &err) == SKPO_OK);
}

int main(void) {
    RUN(binomial_has_exact_moments_in_both_regimes);
    RUN(binomial_edge_probabilities_are_exact);
    RUN(binomial_matches_exact_pmf);
    RUN(rng_streams_are_reproducible_and_distinct);
    RUN(group_with_all_equal_estimates_is_wrong);
    RUN(group_needs_every_sign_right);
    RUN(group_true_zero_advantage_needs_zero_estimate);
    RUN(group_real_uses_tolerance_around_the_mean);
    RUN(two_prefixes_match_exact_convolution);
    RUN(grpo_reference_matches_product_formula);
    RUN(small_spread_stays_below_half_at_512);
    RUN(wide_spread_is_near_perfect_at_8192);
    RUN(result_does_not_depend_on_thread_count);
    RUN(distributions_stay_in_their_ranges);
    RUN(bad_configurations_are_rejected);
    return TEST_SUMMARY();
}
