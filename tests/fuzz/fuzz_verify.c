// fuzz_verify.c - the verifier on arbitrary response and gold strings, every
// mode. Byte 0 picks the mode and fallback; the rest is "gold NUL response"
// (the response may hold more NULs; no NUL means an empty response). The
// verifier must return within the fuzzer's timeout with a NUL-terminated pred,
// and skpo_verify_equal(gold, pred) must agree with itself when run twice
// (the module promises no global state).
#include "verify/verify.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Seed export (tests/fuzz/seeds.sh): with SKPO_FUZZ_EXPORT_CASES=file.jsonl and
// SKPO_FUZZ_EXPORT_DIR=dir, write each case as an input in every mode and exit.
static void export_cases(const char *path, const char *dir) {
    skpo_verify_case *c;
    size_t n;
    char err[256];
    if (skpo_verify_cases_load(path, &c, &n, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    for (size_t i = 0; i < n; i++) {
        char name[512];
        snprintf(name, sizeof name, "%s/verify-%s-%zu", dir, base, i);
        FILE *f = fopen(name, "wb");
        if (!f) exit(1);
        fputc((int)(i % 8), f);  // mode and fallback cycle over the cases
        fwrite(c[i].gold, 1, c[i].glen, f);
        fputc(0, f);
        fwrite(c[i].response, 1, c[i].rlen, f);
        if (fclose(f) != 0) exit(1);
    }
    skpo_verify_cases_free(c, n);
    exit(0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *cases = getenv("SKPO_FUZZ_EXPORT_CASES"), *dir = getenv("SKPO_FUZZ_EXPORT_DIR");
    if (cases && dir) export_cases(cases, dir);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    skpo_verify_opts o;
    skpo_verify_opts_default(&o);
    o.mode = (skpo_verifier)(data[0] % 3);
    o.fallback = (data[0] >> 2) & 1;
    const char *gold = (const char *)data + 1;
    size_t rest = size - 1;
    const char *nul = memchr(gold, 0, rest);
    size_t glen = nul ? (size_t)(nul - gold) : rest;
    const char *resp = nul ? nul + 1 : gold + rest;
    size_t rlen = nul ? rest - glen - 1 : 0;
    skpo_verify_result r1, r2;
    double t0 = skpo_now();
    skpo_verify(&o, resp, rlen, gold, glen, &r1);
    // the wall-clock bound holds (the slack covers one bounded comparison under ASan)
    if (skpo_now() - t0 > o.timeout_s + 3.0) abort();
    if (!memchr(r1.pred, 0, sizeof r1.pred)) abort();
    if (r1.correct && glen == 0) abort();  // an empty gold never matches
    if (r1.correct && r1.timed_out) abort(); // a call stopped at the bound has no verdict
    skpo_verify(&o, resp, rlen, gold, glen, &r2);
    // same verdict twice unless one of them met the bound (time is the one hidden input)
    if (!r1.timed_out && !r2.timed_out && (r1.correct != r2.correct || r1.found != r2.found || strcmp(r1.pred, r2.pred) != 0))
        abort();
    bool eq = skpo_verify_equal(gold, glen, resp, rlen);
    if (eq != skpo_verify_equal(gold, glen, resp, rlen)) abort();
    char norm[512];
    skpo_verify_dapo_normalize(resp, rlen, norm, sizeof norm);
    if (!memchr(norm, 0, sizeof norm)) abort();
    return 0;
}
