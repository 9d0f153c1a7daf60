// test_verify_dapo.c - the dapo verifier (verl math_dapo port) against the
// Python reference port's outputs (tests/ref/make_dapo_fixtures.py):
// same verdict and byte-identical normalized prediction on every fixture.
#include "harness.h"
#include "verify/verify.h"

#include <string.h>

static void dapo_matches_python_reference_on_every_fixture(void) {
    skpo_verify_case *c;
    size_t n;
    char err[512];
    CHECK_MSG(skpo_verify_cases_load("tests/fixtures/verify/dapo_cases.jsonl", &c, &n, err, sizeof err) == 0, "%s", err);
    skpo_verify_opts o;
    skpo_verify_opts_default(&o);
    o.mode = SKPO_VERIFIER_DAPO;
    int bad = 0, right = 0;
    for (size_t i = 0; i < n; i++) {
        skpo_verify_result r;
        skpo_verify(&o, c[i].response, c[i].rlen, c[i].gold, c[i].glen, &r);
        bool ok = r.correct == c[i].expect && c[i].pred && !strcmp(r.pred, c[i].pred);
        if (ok) { right += c[i].expect; continue; }
        if (bad++ < 10)
            CHECK_MSG(0, "fixture %s: got (%d, '%s'), reference (%d, '%s')", c[i].id, r.correct, r.pred, c[i].expect,
                      c[i].pred ? c[i].pred : "(none)");
    }
    printf("  %zu fixtures, %d correct, %d mismatches\n", n, right, bad);
    CHECK(n > 1500 && bad == 0);
    skpo_verify_cases_free(c, n);
}

static void normalize_applies_substitutions_in_order(void) {
    char out[256];
    skpo_verify_dapo_normalize("x = \\frac12", 11, out, sizeof out);
    CHECK(!strcmp(out, "\\frac{1}{2}"));
    skpo_verify_dapo_normalize("a banana a 5", 12, out, sizeof out);
    CHECK(!strcmp(out, "banan5"));            // "a " is removed (even inside words) before spaces
    skpo_verify_dapo_normalize("1,000 dollars", 13, out, sizeof out);
    CHECK(!strcmp(out, "1000"));
    skpo_verify_dapo_normalize("$5$ and $6$", 11, out, sizeof out);
    CHECK(!strcmp(out, "5"));
}

// The fuzzer's find: gold "" and a response whose answer "x=" normalises to "".
static void an_empty_gold_rewards_nothing(void) {
    skpo_verify_opts o;
    skpo_verify_opts_default(&o);
    o.mode = SKPO_VERIFIER_DAPO;
    skpo_verify_result r;
    static const char resp[] = "we\0r: 12\nAnswer:x=";
    skpo_verify(&o, resp, sizeof resp - 1, "", 0, &r);
    CHECK(r.found && !r.correct);
    skpo_verify(&o, "Answer: 5", 9, "5", 1, &r);
    CHECK(r.correct);
}

int main(void) {
    RUN(dapo_matches_python_reference_on_every_fixture);
    RUN(normalize_applies_substitutions_in_order);
    RUN(an_empty_gold_rewards_nothing);
    return TEST_SUMMARY();
}
