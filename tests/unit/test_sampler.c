/*
 * test_sampler.c - the pure pieces of sampling: the generator, token choice
 * (temperature, top-k, top-p, greedy, behaviour log-probs), stop strings, and
 * the SKPO upstream helpers (t_q, median-NLL pick, prioritized draw).
 */
#include "harness.h"
#include "base/rng.h"
#include "gen/sampler.h"
#include "rl/segment.h"

#include <math.h>
#include <string.h>

// A fixed 5-token distribution.
static const double P5[5] = {0.4, 0.3, 0.15, 0.1, 0.05};

static void logits_of(const double *p, int n, float *out) {
    for (int i = 0; i < n; i++) out[i] = (float)log(p[i]) + 3.0f; // shift: softmax ignores it
}

// Fraction of a uniform grid of coins that picks each token: the exact masses
// the sampler assigns, without sampling noise.
static void grid_masses(const float *logits, int n, const skpo_sample_params *sp, double *mass) {
    skpo_sampler s;
    skpo_sampler_init(&s, n);
    memset(mass, 0, (size_t)n * sizeof *mass);
    const int N = 200000;
    for (int i = 0; i < N; i++) {
        int t = skpo_sample(&s, logits, sp, (i + 0.5) / N, NULL);
        mass[t] += 1.0 / N;
    }
    skpo_sampler_destroy(&s);
}

static void plain_sampling_follows_softmax(void) {
    float lg[5];
    logits_of(P5, 5, lg);
    skpo_sample_params sp = {1.0, 1.0, 0};
    double m[5];
    grid_masses(lg, 5, &sp, m);
    for (int i = 0; i < 5; i++) CHECK_NEAR(m[i], P5[i], 1e-4);
}

static void temperature_sharpens_and_flattens(void) {
    float lg[5];
    logits_of(P5, 5, lg);
    for (int k = 0; k < 2; k++) {
        double T = k ? 2.0 : 0.5, z = 0, want[5], m[5];
        for (int i = 0; i < 5; i++) z += pow(P5[i], 1 / T);
        for (int i = 0; i < 5; i++) want[i] = pow(P5[i], 1 / T) / z;
        skpo_sample_params sp = {T, 1.0, 0};
        grid_masses(lg, 5, &sp, m);
        for (int i = 0; i < 5; i++) CHECK_NEAR(m[i], want[i], 1e-4);
    }
}

static void top_p_keeps_shortest_prefix_reaching_p(void) {
    float lg[5];
    logits_of(P5, 5, lg);
    skpo_sample_params sp = {1.0, 0.65, 0}; // 0.4 + 0.3 >= 0.65: two tokens kept
    double m[5];
    grid_masses(lg, 5, &sp, m);
    CHECK_NEAR(m[0], 0.4 / 0.7, 1e-4);
    CHECK_NEAR(m[1], 0.3 / 0.7, 1e-4);
    CHECK(m[2] == 0 && m[3] == 0 && m[4] == 0);
    sp.top_p = 0.71; // crossing token (0.15) is kept
    grid_masses(lg, 5, &sp, m);
    CHECK_NEAR(m[2], 0.15 / 0.85, 1e-4);
    CHECK(m[3] == 0);
}

static void top_k_keeps_k_most_likely(void) {
    float lg[5];
    logits_of(P5, 5, lg);
    skpo_sample_params sp = {1.0, 1.0, 3};
    double m[5];
    grid_masses(lg, 5, &sp, m);
    for (int i = 0; i < 3; i++) CHECK_NEAR(m[i], P5[i] / 0.85, 1e-4);
    CHECK(m[3] == 0 && m[4] == 0);
    sp.top_p = 0.8; // top-p on the renormalised top-3: .47 + .35 >= .8
    grid_masses(lg, 5, &sp, m);
    CHECK_NEAR(m[0], 0.4 / 0.7, 1e-4);
    CHECK_NEAR(m[1], 0.3 / 0.7, 1e-4);
    CHECK(m[2] == 0);
}

static void top_k_and_top_p_on_a_large_vocabulary(void) {
    // 1000 tokens, geometric probabilities in shuffled positions: the
    // quickselect + llama2.c filter path must agree with the exact answer.
    enum { V = 1000 };
    static float lg[V];
    static double p[V];
    double z = 0;
    for (int i = 0; i < V; i++) { int pos = (i * 389) % V; p[pos] = pow(0.97, i); z += p[pos]; }
    for (int i = 0; i < V; i++) { p[i] /= z; lg[i] = (float)log(p[i]); }
    static double m[V];
    skpo_sample_params sp = {1.0, 1.0, 20};
    grid_masses(lg, V, &sp, m);
    double kept = 0, mk = 0;
    for (int i = 0; i < 20; i++) kept += pow(0.97, i);
    for (int i = 0; i < V; i++) mk += m[i];
    CHECK_NEAR(mk, 1.0, 1e-9);
    CHECK_NEAR(m[(19 * 389) % V], pow(0.97, 19) / kept, 2e-4);
    CHECK(m[(20 * 389) % V] == 0);
    sp.top_k = 0;
    sp.top_p = 0.5; // geometric mass 0.5 is reached after 23 tokens (sum of 0.97^i / z)
    grid_masses(lg, V, &sp, m);
    double cum = 0;
    int n = 0;
    while (cum < 0.5) cum += pow(0.97, n++) / z;
    CHECK(m[((n - 1) * 389) % V] > 0);
    CHECK(m[(n * 389) % V] == 0);
}

static void greedy_takes_argmax_lowest_id_on_ties(void) {
    float lg[5] = {1, 3, 3, -INFINITY, 2};
    skpo_sampler s;
    skpo_sampler_init(&s, 5);
    skpo_sample_params sp = {0, 1.0, 0};
    float lp;
    CHECK(skpo_sample(&s, lg, &sp, 0.99, &lp) == 1);
    CHECK_NEAR(lp, skpo_sample_logprob(lg, 5, 1.0, 1), 1e-6);
    skpo_sampler_destroy(&s);
}

static void behaviour_logprob_is_untruncated_log_softmax_over_T(void) {
    float lg[5];
    logits_of(P5, 5, lg);
    skpo_sampler s;
    skpo_sampler_init(&s, 5);
    skpo_sample_params sp = {0.7, 0.5, 2};
    for (int i = 0; i < 20; i++) {
        float lp;
        int t = skpo_sample(&s, lg, &sp, i / 20.0, &lp);
        double z = 0;
        for (int j = 0; j < 5; j++) z += pow(P5[j], 1 / 0.7);
        CHECK_NEAR(lp, log(pow(P5[t], 1 / 0.7) / z), 1e-5);
    }
    skpo_sampler_destroy(&s);
}

static void nan_or_inf_logits_are_refused(void) {
    float lg[3] = {0, NAN, 1};
    skpo_sampler s;
    skpo_sampler_init(&s, 3);
    skpo_sample_params sp = {1, 1, 0};
    CHECK(skpo_sample(&s, lg, &sp, 0.5, NULL) == -1);
    lg[1] = INFINITY;
    CHECK(skpo_sample(&s, lg, &sp, 0.5, NULL) == -1);
    float ninf[3] = {-INFINITY, -INFINITY, -INFINITY};
    CHECK(skpo_sample(&s, ninf, &sp, 0.5, NULL) == -1);
    float one[3] = {-INFINITY, 0, -INFINITY};
    CHECK(skpo_sample(&s, one, &sp, 0.999, NULL) == 1);
    skpo_sampler_destroy(&s);
}

static void random_draws_match_distribution(void) {
    float lg[5];
    logits_of(P5, 5, lg);
    skpo_sampler s;
    skpo_sampler_init(&s, 5);
    skpo_rng r;
    skpo_rng_seed(&r, 7);
    skpo_sample_params sp = {1.0, 1.0, 0};
    int cnt[5] = {0};
    const int N = 100000;
    for (int i = 0; i < N; i++) cnt[skpo_sample(&s, lg, &sp, skpo_rng_uniform(&r), NULL)]++;
    for (int i = 0; i < 5; i++) { // within 5 standard deviations
        double sd = sqrt(N * P5[i] * (1 - P5[i]));
        CHECK_MSG(fabs(cnt[i] - N * P5[i]) < 5 * sd, "token %d: %d of %d", i, cnt[i], N);
    }
    skpo_sampler_destroy(&s);
}

// --- generator and seeds ---

static void same_seed_same_stream_and_derived_seeds_differ(void) {
    skpo_rng a, b;
    skpo_rng_seed(&a, 42);
    skpo_rng_seed(&b, 42);
    for (int i = 0; i < 100; i++) CHECK(skpo_rng_u64(&a) == skpo_rng_u64(&b));
    CHECK(skpo_seed_derive(1, "p1", 0) == skpo_seed_derive(1, "p1", 0));
    CHECK(skpo_seed_derive(1, "p1", 0) != skpo_seed_derive(1, "p1", 1));
    CHECK(skpo_seed_derive(1, "p1", 0) != skpo_seed_derive(1, "p2", 0));
    CHECK(skpo_seed_derive(1, "p1", 0) != skpo_seed_derive(2, "p1", 0));
    skpo_rng_seed(&a, 0);
    uint64_t x = skpo_rng_u64(&a);
    CHECK(x != 0 || skpo_rng_u64(&a) != 0);
}

static void uniform_and_int_cover_their_range(void) {
    skpo_rng r;
    skpo_rng_seed(&r, 3);
    double sum = 0;
    int hit[7] = {0};
    for (int i = 0; i < 70000; i++) {
        double u = skpo_rng_uniform(&r);
        CHECK(u >= 0 && u < 1);
        sum += u;
        int64_t k = skpo_rng_int(&r, -3, 3);
        CHECK(k >= -3 && k <= 3);
        hit[k + 3]++;
    }
    CHECK_NEAR(sum / 70000, 0.5, 0.01);
    for (int i = 0; i < 7; i++) CHECK(hit[i] > 9000 && hit[i] < 11000);
}

// --- stop strings ---

static void stop_string_found_only_in_new_bytes(void) {
    const char *stops[2] = {"wor", "xyz"};
    const char *t = "hello world";
    CHECK(skpo_stop_find(t, strlen(t), 0, stops, 2) == 6);
    CHECK(skpo_stop_find(t, 8, 7, stops, 2) == -1);   // "wo" only so far
    CHECK(skpo_stop_find(t, 9, 8, stops, 2) == 6);    // completed by byte 8
    CHECK(skpo_stop_find(t, 11, 9, stops, 2) == -1);  // already reported
    CHECK(skpo_stop_find(t, 11, 0, stops, 0) == -1);
}

// --- SKPO upstream ---

static void split_position_is_uniform_on_L6_to_L2(void) {
    skpo_rng r;
    skpo_rng_seed(&r, 11);
    int lo = 1 << 30, hi = 0;
    for (int i = 0; i < 20000; i++) {
        int t = skpo_seg_cut(1024, &r);
        CHECK(t >= 171 && t <= 512);
        lo = t < lo ? t : lo;
        hi = t > hi ? t : hi;
    }
    CHECK(lo == 171 && hi == 512);
    for (int i = 0; i < 100; i++) {
        int t = skpo_seg_cut(13.5, &r); // ceil(2.25) = 3 .. floor(6.75) = 6
        CHECK(t >= 3 && t <= 6);
    }
    CHECK(skpo_seg_cut(1, &r) == 1);
    CHECK(skpo_seg_cut(3, &r) == 1);
}

static void candidate_ending_early_is_cut_at_half(void) {
    CHECK(skpo_seg_len(100, 100, 0) == 100);
    CHECK(skpo_seg_len(37, 100, 1) == 18);
    CHECK(skpo_seg_len(100, 100, 1) == 50); // EOS exactly at t_q: still half
    CHECK(skpo_seg_len(1, 100, 1) == 0);
}

// Split@Fixed: the two ends of the adaptive range, L/6 on odd steps, L/2 on even.
static void fixed_cut_alternates_one_sixth_and_one_half_by_step(void) {
    CHECK(skpo_seg_cut_fixed(1024, 1) == 171); // ceil(170.67)
    CHECK(skpo_seg_cut_fixed(1024, 2) == 512);
    CHECK(skpo_seg_cut_fixed(1024, 3) == 171);
    CHECK(skpo_seg_cut_fixed(24, 7) == 4 && skpo_seg_cut_fixed(24, 8) == 12);
    CHECK(skpo_seg_cut_fixed(13.5, 1) == 3 && skpo_seg_cut_fixed(13.5, 2) == 6);
    CHECK(skpo_seg_cut_fixed(1, 1) == 1 && skpo_seg_cut_fixed(1, 2) == 1); // never below one token
}

// Split-point sensitivity: t_q = round(F L), at least one token.
static void fraction_cut_is_the_rounded_fraction_of_l(void) {
    CHECK(skpo_seg_cut_frac(1024, 1.0 / 6) == 171 && skpo_seg_cut_frac(1024, 1.0 / 3) == 341);
    CHECK(skpo_seg_cut_frac(1024, 0.5) == 512 && skpo_seg_cut_frac(1024, 2.0 / 3) == 683);
    CHECK(skpo_seg_cut_frac(24, 2.0 / 3) == 16 && skpo_seg_cut_frac(1024, 1) == 1024);
    CHECK(skpo_seg_cut_frac(2, 1.0 / 6) == 1); // never below one token
}

// Selection:Extreme: min or max mean NLL, first index on ties.
static void extreme_pick_takes_min_or_max_nll(void) {
    double a[5] = {2.0, 0.5, 3.0, 0.5, 3.0};
    CHECK(skpo_extreme_pick(a, 5, 0) == 1);
    CHECK(skpo_extreme_pick(a, 5, 1) == 2);
    CHECK(skpo_median_pick(a, 5) == 0); // and neither is the median one
    double b[1] = {7};
    CHECK(skpo_extreme_pick(b, 1, 0) == 0 && skpo_extreme_pick(b, 1, 1) == 0);
}

static void median_pick_is_closest_lowest_index(void) {
    double a[4] = {4, 1, 2, 3}; // median 2.5: 2 and 3 tie, index 2 first
    CHECK(skpo_median_pick(a, 4) == 2);
    double b[3] = {3, 1, 2};
    CHECK(skpo_median_pick(b, 3) == 2);
    double c[1] = {7};
    CHECK(skpo_median_pick(c, 1) == 0);
    double d[8] = {0.25, 1, 0, 0.75, 0.125, 2, 0.875, 0.375}; // median 0.5625: 0.75 and 0.375 tie
    CHECK(skpo_median_pick(d, 8) == 3);
    // 0.5 and 0.6 tie exactly but not in doubles (numpy picks index 6): lowest index here
    double e[8] = {0.5, 0.9, 0.1, 0.7, 0.3, 2.0, 0.6, 0.4};
    CHECK(skpo_median_pick(e, 8) == 0);
    double f[4] = {5.0, 1.0, 5.0 + 1e-9, 9.0}; // middle pair 1e-9 apart: still the lower index
    CHECK(skpo_median_pick(f, 4) == 0);
    float lp[3] = {-1, -2, -3};
    CHECK_NEAR(skpo_mean_nll(lp, 3), 2.0, 1e-12);
    CHECK(skpo_mean_nll(lp, 0) == 0);
}

static void prioritized_draw_is_distinct_and_proportional(void) {
    double w[4] = {0.05, 0.55, 0.3, 0.0};
    skpo_rng r;
    skpo_rng_seed(&r, 5);
    size_t out[3];
    int first[4] = {0};
    const int N = 40000;
    for (int i = 0; i < N; i++) {
        CHECK(skpo_prio_draw(w, 4, 3, &r, out, NULL) == SKPO_OK);
        CHECK(out[0] != out[1] && out[1] != out[2] && out[0] != out[2]);
        CHECK(out[0] != 3 && out[1] != 3 && out[2] != 3);
        first[out[0]]++;
    }
    for (int i = 0; i < 3; i++) {
        double p = w[i] / 0.9, sd = sqrt(N * p * (1 - p));
        CHECK_MSG(fabs(first[i] - N * p) < 5 * sd, "index %d first %d times", i, first[i]);
    }
    skpo_err err = {0};
    CHECK(skpo_prio_draw(w, 4, 4, &r, out, &err) == SKPO_ERANGE);
    double bad[2] = {1, NAN};
    CHECK(skpo_prio_draw(bad, 2, 1, &r, out, &err) == SKPO_ENUMERIC);
}

int main(void) {
    RUN(plain_sampling_follows_softmax);
    RUN(temperature_sharpens_and_flattens);
    RUN(top_p_keeps_shortest_prefix_reaching_p);
    RUN(top_k_keeps_k_most_likely);
    RUN(top_k_and_top_p_on_a_large_vocabulary);
    RUN(greedy_takes_argmax_lowest_id_on_ties);
    RUN(behaviour_logprob_is_untruncated_log_softmax_over_T);
    RUN(nan_or_inf_logits_are_refused);
    RUN(random_draws_match_distribution);
    RUN(same_seed_same_stream_and_derived_seeds_differ);
    RUN(uniform_and_int_cover_their_range);
    RUN(stop_string_found_only_in_new_bytes);
    RUN(split_position_is_uniform_on_L6_to_L2);
    RUN(candidate_ending_early_is_cut_at_half);
    RUN(median_pick_is_closest_lowest_index);
    RUN(fixed_cut_alternates_one_sixth_and_one_half_by_step);
    RUN(fraction_cut_is_the_rounded_fraction_of_l);
    RUN(extreme_pick_takes_min_or_max_nll);
    RUN(prioritized_draw_is_distinct_and_proportional);
    return TEST_SUMMARY();
}
