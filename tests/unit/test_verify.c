// test_verify.c - the math verifier against the case set (per-kind pass
// rates, known failures, zero false positives), behaviours beyond the case
// set, and generated hostile inputs that must not crash or hang.
#include "harness.h"
#include "record/record.h"
#include "verify/verify.h"

#include <stdlib.h>
#include <string.h>

#define CASES "tests/fixtures/verify/cases.jsonl"
#define KNOWN "tests/fixtures/verify/known-failures.txt"

static bool verify_math(const char *resp, size_t rlen, const char *gold) {
    skpo_verify_opts o;
    skpo_verify_opts_default(&o);
    skpo_verify_result r;
    skpo_verify(&o, resp, rlen, gold, strlen(gold), &r);
    return r.correct;
}
static bool V(const char *resp, const char *gold) { return verify_math(resp, strlen(resp), gold); }
static bool EQ(const char *gold, const char *pred) { return skpo_verify_equal(gold, strlen(gold), pred, strlen(pred)); }

static bool known_failure(const char *known, const char *id) {
    size_t l = strlen(id);
    for (const char *p = known; p && *p;) {
        if (*p != '#' && !strncmp(p, id, l) && (p[l] == ' ' || p[l] == '\t')) return true;
        p = strchr(p, '\n');
        if (p) p++;
    }
    return false;
}

static void case_set_passes_with_no_false_positive(void) {
    skpo_verify_case *c;
    size_t n;
    char err[512];
    CHECK_MSG(skpo_verify_cases_load(CASES, &c, &n, err, sizeof err) == 0, "%s", err);
    if (n == 0) return;
    FILE *f = fopen(KNOWN, "r");
    char known[65536] = "";
    if (f) { size_t k = fread(known, 1, sizeof known - 1, f); known[k] = 0; fclose(f); }
    const char *kinds[64];
    int nk = 0, tot[64] = {0}, ok[64] = {0}, right = 0;
    for (size_t i = 0; i < n; i++) {
        bool got = verify_math(c[i].response, c[i].rlen, c[i].gold);
        int k = 0;
        while (k < nk && strcmp(kinds[k], c[i].kind)) k++;
        if (k == nk && nk < 64) kinds[nk++] = c[i].kind;
        tot[k]++;
        if (got == c[i].expect) { ok[k]++; right++; continue; }
        CHECK_MSG(!got, "false positive on case %s (gold '%s')", c[i].id, c[i].gold);
        CHECK_MSG(known_failure(known, c[i].id), "case %s fails and is not in %s", c[i].id, KNOWN);
    }
    for (int k = 0; k < nk; k++) printf("  kind %-20s %3d/%-3d %5.1f%%\n", kinds[k], ok[k], tot[k], 100.0 * ok[k] / tot[k]);
    printf("  all %d/%zu %.1f%%\n", right, n, 100.0 * right / (double)n);
    CHECK(n == 488);
    skpo_verify_cases_free(c, n);
}

// tests/fixtures/verify/extra_cases.jsonl: skpo's own probes around every kind
// (equal forms, near misses, extraction formats); all must be decided right.
static void extra_probe_cases_are_all_right(void) {
    skpo_verify_case *c;
    size_t n;
    char err[512];
    CHECK_MSG(skpo_verify_cases_load("tests/fixtures/verify/extra_cases.jsonl", &c, &n, err, sizeof err) == 0, "%s", err);
    for (size_t i = 0; i < n; i++) {
        bool got = verify_math(c[i].response, c[i].rlen, c[i].gold);
        CHECK_MSG(got == c[i].expect, "%s: gold '%s', got %d", c[i].id, c[i].gold, got);
    }
    CHECK(n > 250);
    skpo_verify_cases_free(c, n);
}

static void hedged_and_truncated_answers_are_wrong(void) {
    CHECK(!V("so \\boxed{12} or maybe \\boxed{13}", "12"));
    CHECK(!V("\\boxed{12, 13}", "12"));
    CHECK(!V("Answer: 12 or 13", "13"));
    CHECK(V("First \\boxed{4}. After checking again, the count is \\boxed{5}.", "5"));
    CHECK(!V("Let us compute. The answer is", "5"));
    CHECK(!V("", "5"));
    CHECK(!V("\\boxed{5}", ""));
    CHECK(!V("\\boxed{}", "5"));
}

static void equal_values_in_other_forms_are_right(void) {
    CHECK(EQ("\\frac12", "\\frac{2}{4}"));
    CHECK(EQ("\\frac{1}{2}", "0.5"));
    CHECK(EQ("3\\sqrt{2}", "\\sqrt{18}"));
    CHECK(EQ("\\frac{\\sqrt{3}}{3}", "\\frac{1}{\\sqrt3}"));
    CHECK(EQ("1{,}234{,}567", "1234567"));
    CHECK(EQ("x^2-2x+1", "(x-1)^2"));
    CHECK(EQ("(1,2]", "\\left(1, 2\\right]"));
    CHECK(EQ("\\{3, 1, 2\\}", "\\{1,2,3\\}"));
    CHECK(EQ("y = 3x - 1", "3x - y - 1 = 0"));
    CHECK(EQ("x \\ge -2", "[-2, \\infty)"));
    CHECK(EQ("2\\frac{3}{4}", "\\frac{11}{4}"));
    CHECK(EQ("45^\\circ", "45"));
    CHECK(EQ("12\\%", "0.12"));
    CHECK(EQ("\\begin{bmatrix} 1 & 0 \\\\ 0 & 1 \\end{bmatrix}", "\\begin{pmatrix} 1 & 0 \\\\ 0 & 1 \\end{pmatrix}"));
    CHECK(EQ("0.333", "\\frac13"));          // a rounded gold accepts the exact value
    CHECK(EQ("-\\frac{7}{2}", "-3\\frac{1}{2}"));
}

static void different_values_and_forms_that_matter_are_wrong(void) {
    CHECK(!EQ("\\frac13", "0.333"));         // approximation of an exact gold
    CHECK(!EQ("\\sqrt{2}", "1.414"));
    CHECK(!EQ("2.5", "\\frac{49}{20}"));     // 2.45 has its own short decimal
    CHECK(!EQ("(1,2]", "(1,2)"));
    CHECK(!EQ("(1,2)", "(2,1)"));
    CHECK(!EQ("\\{1,2\\}", "[1,2]"));
    CHECK(!EQ("123_4", "27"));
    CHECK(!EQ("x^2-2x+1", "(x+1)^2"));
    CHECK(!EQ("x > 1", "x \\ge 1"));
    CHECK(!EQ("1000000", "1000001"));
    CHECK(!EQ("2\\frac{1}{2}", "1"));
    CHECK(!EQ("5 \\text{ minutes}", "5 \\text{ hours}"));
    CHECK(!EQ("\\pm 2", "2"));
    CHECK(!EQ("3", "\\frac{10}{3}"));
    CHECK(!EQ("\\text{Monday}", "\\text{Friday}"));
    CHECK(!EQ("A", "B"));
}

static void lcg_fill(unsigned char *p, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (unsigned char)(seed >> 56);
    }
}

// Build a string of `reps` copies of `unit` between `pre` and `post`.
static char *rep(const char *pre, const char *unit, size_t reps, const char *post, size_t *len) {
    size_t u = strlen(unit), a = strlen(pre), b = strlen(post);
    char *s = malloc(a + u * reps + b + 1);
    memcpy(s, pre, a);
    for (size_t i = 0; i < reps; i++) memcpy(s + a + i * u, unit, u);
    memcpy(s + a + u * reps, post, b + 1);
    *len = a + u * reps + b;
    return s;
}

// A scored case set: at least min_n cases, accuracy >= min_acc, no false positive.
static void scored_set(const char *path, double min_acc, size_t min_n) {
    skpo_verify_case *c;
    size_t n;
    char err[512];
    CHECK_MSG(skpo_verify_cases_load(path, &c, &n, err, sizeof err) == 0, "%s", err);
    size_t right = 0, fp = 0;
    for (size_t i = 0; i < n; i++) {
        bool got = verify_math(c[i].response, c[i].rlen, c[i].gold);
        right += got == c[i].expect;
        if (got && !c[i].expect && fp++ < 5) fprintf(stderr, "  false positive %s\n", c[i].id);
    }
    printf("  %s: %zu/%zu %.2f%%, %zu false positives\n", path, right, n, 100.0 * (double)right / (double)n, fp);
    CHECK(n >= min_n);
    CHECK_MSG(fp == 0, "%zu false positives on %s", fp, path);
    CHECK_MSG((double)right >= min_acc * (double)n, "%s: accuracy %.4f below %.2f", path, (double)right / (double)n, min_acc);
    skpo_verify_cases_free(c, n);
}

// tests/fixtures/verify/gen_{dev,heldout}.jsonl (make_gen_cases.py): labelled by
// construction from real benchmark golds and per-class variants. Rules were
// tuned on dev only; the held-out third is checked here in aggregate.
static void generated_dev_set_is_right_with_no_false_positive(void) { scored_set("tests/fixtures/verify/gen_dev.jsonl", 0.99, 3000); }
static void generated_heldout_set_meets_the_target(void) { scored_set("tests/fixtures/verify/gen_heldout.jsonl", 0.97, 3000); }

// tests/fixtures/verify/unseen_{dev,heldout,fresh}.jsonl (make_unseen_cases.py):
// hand-judged answers in the forms issue 36 names (labelled golds and bare
// values, boxed lists against labelled golds, percent and interval ends in
// words, units with powers, choice letters with explanations, \approx). Rules
// were changed looking at dev only; held-out and fresh are scored here.
static void unseen_forms_dev_set_is_all_right(void) { scored_set("tests/fixtures/verify/unseen_dev.jsonl", 1.0, 100); }
static void unseen_forms_held_out_sets_have_no_false_positive(void) {
    scored_set("tests/fixtures/verify/unseen_heldout.jsonl", 0.95, 60);
    scored_set("tests/fixtures/verify/unseen_fresh.jsonl", 0.95, 40);
}

// The rules behind them, and what they must not turn into.
static void labelled_lists_ratios_and_approximations(void) {
    CHECK(V("\\boxed{3}, \\boxed{2}", "x=2, x=3"));          // roots of one unknown: any order
    CHECK(!V("\\boxed{3}, \\boxed{2}", "x=2, y=3"));         // two unknowns: the labels give the order
    CHECK(V("$p = \\boxed{7}$ and $q = \\boxed{11}$", "p=7, q=11"));
    CHECK(!V("\\boxed{x=2} or \\boxed{y=3}", "x=2, y=3"));   // a hedge between unknowns
    CHECK(V("x = \\boxed{3} or x = \\boxed{-3}", "3, -3"));
    CHECK(!V("\\boxed{y = 1}", "x = 1"));
    CHECK(EQ("a:b:c = 3:4:5", "6:8:10") && !EQ("a:b:c = 3:4:5", "3:5:4"));
    CHECK(EQ("2.5", "x \\approx 2.5") && !EQ("\\frac13", "\\approx 0.333") && !EQ("6.93", "4\\sqrt3 \\approx 6.98"));
    CHECK(!EQ("60\\%", "60 \\text{ degrees}") && EQ("60^\\circ", "60 \\text{ degrees}"));
    CHECK(EQ("9.8", "9.8\\ \\mathrm{m}/\\mathrm{s}^{2}") && !EQ("9.8 \\text{ m/s}^2", "9.8\\ \\mathrm{m}/\\mathrm{s}"));
    CHECK(!V("\\boxed{B because A is smaller}", "B") && !V("\\boxed{CD}", "C") && !V("\\boxed{A = 5}", "A"));
    CHECK(V("See (item 3, page 4).", "4"));                  // not an interval: only infinity words widen a number
}

static void integers_and_rationals_are_exact_beyond_128_bits(void) {
    const char *p200 = "1606938044258990275541962092341162602522202993782792835301376";
    CHECK(EQ(p200, "2^{200}"));
    CHECK(EQ("2^{200}", p200));
    CHECK(!EQ(p200, "2^{200}+1"));
    CHECK(!EQ("1606938044258990275541962092341162602522202993782792835301377", "2^{200}"));
    CHECK(EQ("(10^{40}+1)^2", "10^{80}+2\\cdot 10^{40}+1"));
    CHECK(!EQ("(10^{40}+1)^2", "10^{80}+2\\cdot 10^{40}"));
    CHECK(EQ("\\frac{3^{100}}{3^{98}}", "9"));
    CHECK(EQ("30!", "265252859812191058636308480000000"));
    CHECK(!EQ("30!", "265252859812191058636308480000001"));
    CHECK(V("\\boxed{\\sum_{k=1}^{100} k}", "5050"));
    CHECK(!V("\\boxed{\\sum_{k=1}^{100} k}", "5051"));
    CHECK(V("\\boxed{\\prod_{i=1}^{5} i}", "120"));
}

static void rational_functions_compare_exactly(void) {
    CHECK(EQ("\\frac{x^2-1}{x-1}", "x+1"));
    CHECK(EQ("(a+b)^3", "a^3+3a^2b+3ab^2+b^3"));
    CHECK(EQ("\\frac{1}{x}+\\frac{1}{y}", "\\frac{x+y}{xy}"));
    // off by 10^{-12}: doubles at sample points cannot see it, exact polynomials do
    CHECK(!EQ("(a+b)^3", "a^3+3a^2b+3ab^2+b^3+10^{-12}"));
    CHECK(!EQ("x^{2}+2x+1", "(x+1)^2 + 10^{-15}x"));
}

static void near_coincidences_are_told_apart(void) {
    // e^{pi sqrt 163} = 262537412640768743.99999999999925...: equal to 1e-30, not equal
    CHECK(!EQ("262537412640768744", "e^{\\pi\\sqrt{163}}"));
    CHECK(!EQ("\\pi", "\\frac{355}{113}"));
    CHECK(EQ("\\sqrt{2}\\sqrt{3}", "\\sqrt{6}"));
    CHECK(EQ("\\frac{\\sqrt{6}+\\sqrt{2}}{4}", "\\cos\\frac{\\pi}{12}"));
    CHECK(EQ("2\\sqrt[3]{2}", "\\sqrt[3]{16}"));
}

static void graders_extraction_no_digit_from_noise(void) {
    CHECK(!V("id=user12; session=qwe", "12"));
    CHECK(!V("The hash is x7f12q9z and the token is q12z.", "12"));
    CHECK(!V("We compute 2 + 3 = 5. Then we multiply", "5"));
    CHECK(V("We compute 2 + 3 = 5. I hope it is correct.", "5"));
    CHECK(V("Therefore, she has 42 apples left.", "42"));
    CHECK(!V("The answer is either $3$ or $4$.", "3"));
    CHECK(V("The answer is (C) because the area is 12.", "C"));
    CHECK(!V("The answer is (B) or (C).", "C"));
    CHECK(V("Thus the correct option is D, since 7 is the only value that works.", "\\text{(D)}"));
    CHECK(V("\\boxed{{{{5}}", "5"));
    CHECK(V("\\boxed{f(2) = 13}", "13"));
    CHECK(V("\\boxed{|AB| = 5}", "5"));
    CHECK(V("\\boxed{x=3 \\quad x=-1}", "-1, 3"));
    CHECK(V("\\boxed{2,5}", "2.5"));
    CHECK(!V("\\boxed{2,500}", "2.5"));
    CHECK(V("\\boxed{2\\begin{pmatrix} 1 \\\\ 3 \\end{pmatrix}}", "\\begin{pmatrix} 2 \\\\ 6 \\end{pmatrix}"));
    CHECK(!V("\\boxed{3\\begin{pmatrix} 1 \\\\ 3 \\end{pmatrix}}", "\\begin{pmatrix} 2 \\\\ 6 \\end{pmatrix}"));
    CHECK(!V("\\boxed{5\\text{ m}}", "5\\text{ m}^2"));
    CHECK(V("\\boxed{5\\,\\text{m}}", "5"));
    CHECK(V("\\boxed{(1, \\text{infinity})}", "(1, \\infty)"));
}

// Exact arithmetic and polynomial expansion stay within budgets: huge powers,
// factorials and expansions are "not modelled" (fall back), never a hang.
static void exact_arithmetic_stays_within_budget(void) {
    double t0 = skpo_now();
    CHECK(!EQ("1", "(a+b+c+d+e+f+g+h)^{50}"));
    CHECK(!EQ("1", "(10^{100000})^{100000}"));
    CHECK(!EQ("1", "2^{2^{2^{2^{2^{2}}}}}"));
    CHECK(!EQ("1", "100000!"));
    CHECK(!EQ("1", "(x+y)^{100000}"));
    CHECK(!EQ("1", "\\sum_{k=1}^{10^{9}} k"));
    CHECK(!EQ("1", "\\binom{100000}{50000}"));
    CHECK(skpo_now() - t0 < 30.0);
}

static void hostile_inputs_are_wrong_at_worst(void) {
    size_t n;
    char *s;
    unsigned char *junk = malloc(1 << 20);
    lcg_fill(junk, 1 << 20, 42); // 1 MB of random bytes: NULs, invalid UTF-8, stray braces
    CHECK(!verify_math((const char *)junk, 1 << 20, "5"));
    memcpy(junk + (1 << 20) - 12, "\\boxed{5}   ", 12);
    (void)verify_math((const char *)junk, 1 << 20, "5");
    free(junk);
    s = rep("\\boxed{", "{", 10000, "", &n); // 10,000 unclosed braces
    CHECK(!verify_math(s, n, "5"));
    free(s);
    char *t = rep("", "{", 10000, "5", &n), *u;
    size_t m;
    u = rep(t, "}", 10000, "", &m);
    s = malloc(m + 16);
    snprintf(s, m + 16, "\\boxed{%s}", u); // 10,000 nested braces around the answer
    CHECK(verify_math(s, strlen(s), "5"));
    free(s); free(t); free(u);
    const char *deep[] = {"\\frac{", "\\sqrt{", "(", "[", "\\{", "|", "\\left(", "-", "2^{", "\\begin{pmatrix}", "\\text{"};
    for (size_t k = 0; k < sizeof deep / sizeof deep[0]; k++) {
        char *a = rep("\\boxed{", deep[k], 10000, "5}", &n);
        CHECK(!verify_math(a, n, "7"));
        free(a);
    }
    s = rep("", "\\boxed{1}", 100000, "", &n); // 900 KB of boxes
    CHECK(verify_math(s, n, "1"));
    free(s);
    s = rep("\\boxed{", "9", 100000, "}", &n); // a 100,000-digit number
    CHECK(!verify_math(s, n, "9"));
    free(s);
    s = rep("\\boxed{", "1, ", 20000, "1}", &n); // a huge answer list
    CHECK(!verify_math(s, n, "1"));
    free(s);
    s = rep("\\boxed{", "\\pm 1", 200, "}", &n); // 2^200 sign choices
    CHECK(!verify_math(s, n, "1"));
    free(s);
    s = rep("\\boxed{", "10^{", 300, "2", &n); // power tower, unbalanced
    CHECK(!verify_math(s, n, "1"));
    free(s);
    const char nul[] = "abc\0\0\0 the answer is \\boxed{42}";
    CHECK(verify_math(nul, sizeof nul - 1, "42"));
    const char bad[] = "\xff\xfe\xed\xa0\x80\xc0\xaf \\boxed{7} \xed\xbf\xbf";
    CHECK(verify_math(bad, sizeof bad - 1, "7"));
    const char bad2[] = "\\boxed{\xed\xa0\x80" "7}";
    (void)verify_math(bad2, sizeof bad2 - 1, "7");
    CHECK(!verify_math("\\boxed{7}", 9, "\xff\xfe"));
    s = rep("", "}", 200000, "\\boxed{3}", &n);
    CHECK(verify_math(s, n, "3"));
    free(s);
    s = rep("", "Answer: ", 100000, "8", &n);
    CHECK(verify_math(s, n, "8"));
    free(s);
}

static void dapo_mode_is_exact_string_match(void) {
    skpo_verify_opts o;
    skpo_verify_opts_default(&o);
    o.mode = SKPO_VERIFIER_DAPO;
    skpo_verify_result r;
    skpo_verify(&o, "work...\nAnswer: 34", 18, "34", 2, &r);
    CHECK(r.correct && !strcmp(r.pred, "34"));
    skpo_verify(&o, "\\boxed{34}", 10, "34", 2, &r);
    CHECK(!r.correct && !strcmp(r.pred, "[INVALID]"));
    skpo_verify(&o, "Answer: 0.5", 11, "\\frac{1}{2}", 11, &r);
    CHECK(!r.correct);
}

static void boxed_mode_ignores_answer_lines(void) {
    skpo_verify_opts o;
    skpo_verify_opts_default(&o);
    o.mode = SKPO_VERIFIER_BOXED;
    skpo_verify_result r;
    skpo_verify(&o, "Answer: 34", 10, "34", 2, &r);
    CHECK(!r.correct && !r.found);
    skpo_verify(&o, "so \\boxed{34}.", 14, "34", 2, &r);
    CHECK(r.correct && !strcmp(r.pred, "34"));
}

static void overlong_penalty_follows_dapo(void) {
    skpo_reward_opts o;
    skpo_reward_opts_default(&o);
    CHECK(skpo_reward_overlong(&o, 1 << 20) == 0); // off
    o.overlong_max = 16384;
    o.overlong_cache = 4096;
    CHECK(skpo_reward_overlong(&o, 12288) == 0);
    CHECK_NEAR(skpo_reward_overlong(&o, 12289), -1.0 / 4096, 1e-15);
    CHECK_NEAR(skpo_reward_overlong(&o, 14336), -0.5, 1e-15);
    CHECK_NEAR(skpo_reward_overlong(&o, 16384), -1.0, 1e-15);
    CHECK(skpo_reward_overlong(&o, 16385) == -1.0);
}

static void reward_record_sets_fields_and_leaves_other_kinds(void) {
    skpo_reward_opts o;
    skpo_reward_opts_default(&o);
    skpo_rec r;
    skpo_rec_init(&r);
    skpo_err err = {{0}};
    bool changed, b;
    double v;
    skpo_rec_set_str(&r, F_KIND, "up");
    skpo_rec_set_str(&r, F_TEXT, "\\boxed{3}");
    CHECK(skpo_reward_record(&o, &r, &changed, &err) == SKPO_OK && !changed && !skpo_rec_get(&r, F_REWARD));
    skpo_rec_set_str(&r, F_KIND, "down");
    skpo_rec_set_str(&r, F_UID, "d-7");
    CHECK(skpo_reward_record(&o, &r, &changed, &err) == SKPO_ENOTFOUND && strstr(err.msg, "'d-7'"));
    skpo_rec_set_str(&r, F_ANSWER, "3");
    skpo_rec_set_str(&r, "extra", "kept");
    CHECK(skpo_reward_record(&o, &r, &changed, &err) == SKPO_OK && changed);
    CHECK(skpo_rec_bool(&r, F_CORRECT, &b) && b && skpo_rec_float(&r, F_REWARD, &v) && v == 1.0);
    CHECK(!strcmp(skpo_rec_str(&r, F_PRED), "3") && !strcmp(skpo_rec_str(&r, "extra"), "kept"));
    skpo_rec_set_str(&r, F_FINISH, "length");
    o.zero_one = true;
    CHECK(skpo_reward_record(&o, &r, &changed, &err) == SKPO_OK);
    CHECK(skpo_rec_bool(&r, F_CORRECT, &b) && !b && skpo_rec_float(&r, F_REWARD, &v) && v == 0.0);
    skpo_rec_set_str(&r, F_TEXT, "no answer here");
    skpo_rec_set_str(&r, F_FINISH, "stop");
    CHECK(skpo_reward_record(&o, &r, &changed, &err) == SKPO_OK && !skpo_rec_get(&r, F_PRED));
    o.overlong_max = 10;
    o.overlong_cache = 5;
    CHECK(skpo_reward_record(&o, &r, &changed, &err) == SKPO_ENOTFOUND && strstr(err.msg, "tokens"));
    int32_t toks[8] = {0};
    skpo_rec_set_i32s(&r, F_TOKENS, toks, 8);
    skpo_rec_set_str(&r, F_TEXT, "\\boxed{3}");
    CHECK(skpo_reward_record(&o, &r, &changed, &err) == SKPO_OK && skpo_rec_float(&r, F_REWARD, &v));
    CHECK_NEAR(v, 1.0 + (5.0 - 8.0) / 5.0, 1e-15);
    skpo_rec_free(&r);
}

int main(void) {
    RUN(case_set_passes_with_no_false_positive);
    RUN(extra_probe_cases_are_all_right);
    RUN(hedged_and_truncated_answers_are_wrong);
    RUN(equal_values_in_other_forms_are_right);
    RUN(different_values_and_forms_that_matter_are_wrong);
    RUN(generated_dev_set_is_right_with_no_false_positive);
    RUN(generated_heldout_set_meets_the_target);
    RUN(unseen_forms_dev_set_is_all_right);
    RUN(unseen_forms_held_out_sets_have_no_false_positive);
    RUN(labelled_lists_ratios_and_approximations);
    RUN(integers_and_rationals_are_exact_beyond_128_bits);
    RUN(rational_functions_compare_exactly);
    RUN(near_coincidences_are_told_apart);
    RUN(graders_extraction_no_digit_from_noise);
    RUN(exact_arithmetic_stays_within_budget);
    RUN(hostile_inputs_are_wrong_at_worst);
    RUN(dapo_mode_is_exact_string_match);
    RUN(boxed_mode_ignores_answer_lines);
    RUN(overlong_penalty_follows_dapo);
    RUN(reward_record_sets_fields_and_leaves_other_kinds);
    return TEST_SUMMARY();
}
