// test_evalstats.c - pass@k, maj@k and the reported k list against hand values
// (docs/algorithm.md section 6) and against the binomial definition computed exactly.
#include "verify/evalstats.h"
#include "harness.h"

static double binom(long n, long k) { // exact for the small n used here
    if (k < 0 || k > n) return 0;
    double r = 1;
    for (long i = 1; i <= k; i++) r = r * (double)(n - k + i) / (double)i;
    return r;
}

static void pass_at_k_matches_spec_check_value(void) {
    CHECK_NEAR(skpo_pass_at_k(32, 4, 8), 0.704505, 5e-7);
}

static void pass_at_k_equals_binomial_definition(void) {
    for (long n = 1; n <= 40; n++)
        for (long c = 0; c <= n; c++)
            for (long k = 1; k <= n; k++)
                CHECK_NEAR(skpo_pass_at_k(n, c, k), 1.0 - binom(n - c, k) / binom(n, k), 1e-12);
}

static void pass_at_1_is_fraction_correct_and_edges_are_exact(void) {
    CHECK_NEAR(skpo_pass_at_k(3, 1, 1), 1.0 / 3.0, 1e-15);
    CHECK(skpo_pass_at_k(8, 0, 8) == 0.0);
    CHECK(skpo_pass_at_k(8, 1, 8) == 1.0);
    CHECK(skpo_pass_at_k(8, 8, 1) == 1.0);
}

static void maj_ties_go_to_the_answer_seen_first(void) {
    const char *p[] = {"7", "5", "5", "7", "9"};
    CHECK(skpo_maj_index(p, 4) == 0);  // 7 and 5 both twice: 7 came first
    CHECK(skpo_maj_index(p, 3) == 1);  // 5 twice beats 7 once
    CHECK(skpo_maj_index(p, 1) == 0);
}

static void maj_groups_answers_the_verifier_calls_equal(void) {
    // three forms of 1/2 outvote two identical strings "3"
    const char *p[] = {"3", "\\frac{1}{2}", "3", "0.5", "x = \\frac12"};
    int ok[] = {0, 1, 0, 1, 1};
    CHECK(skpo_maj_index(p, 5) == 1);
    CHECK(skpo_maj_at_k(p, ok, 5) == 1.0);
    CHECK(skpo_maj_index(p, 3) == 0); // before the third form: 3 twice
    long cls[5];
    skpo_answer_classes(p, 5, cls);
    CHECK(cls[0] == 0 && cls[1] == 1 && cls[2] == 0 && cls[3] == 1 && cls[4] == 1);
    CHECK(!skpo_same_answer("0.5", "0.6"));
    CHECK(skpo_same_answer("(1, 2)", "\\left(1,2\\right)"));
    CHECK(!skpo_same_answer("(1, 2)", "(2, 1)"));
}

static void maj_ignores_samples_without_an_answer(void) {
    const char *p[] = {NULL, "3", NULL, NULL};
    int ok[] = {1, 0, 1, 1};
    CHECK(skpo_maj_index(p, 4) == 1);
    CHECK(skpo_maj_at_k(p, ok, 4) == 0.0);
    const char *none[] = {NULL, NULL};
    CHECK(skpo_maj_index(none, 2) == -1);
    CHECK(skpo_maj_at_k(none, ok, 2) == 0.0);
}

static void reported_ks_are_powers_of_two_then_K(void) {
    long ks[16];
    int n = skpo_eval_ks(32, ks, 16);
    CHECK(n == 6 && ks[0] == 1 && ks[3] == 8 && ks[5] == 32);
    n = skpo_eval_ks(3, ks, 16);
    CHECK(n == 3 && ks[0] == 1 && ks[1] == 2 && ks[2] == 3);
    n = skpo_eval_ks(1, ks, 16);
    CHECK(n == 1 && ks[0] == 1);
}

int main(void) {
    RUN(pass_at_k_matches_spec_check_value);
    RUN(pass_at_k_equals_binomial_definition);
    RUN(pass_at_1_is_fraction_correct_and_edges_are_exact);
    RUN(maj_ties_go_to_the_answer_seen_first);
    RUN(maj_groups_answers_the_verifier_calls_equal);
    RUN(maj_ignores_samples_without_an_answer);
    RUN(reported_ks_are_powers_of_two_then_K);
    return TEST_SUMMARY();
}
