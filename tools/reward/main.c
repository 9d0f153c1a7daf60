/*
 * skpo-reward - the reward stage: verifies each finished rollout (`down` and
 * `full` records) against its gold `answer` and adds `pred`, `correct` and
 * `reward` (core/verify/verify.h). Every other record and field passes through
 * unchanged. A swappable stage: docs/reward.md states the record contract a
 * replacement must honour. Hidden report mode --verify-cases FILE runs the
 * verifier over a case file (tests/fixtures/verify/cases.jsonl) and prints
 * accuracy per kind and verifications per second, for bench/b_verify.sh.
 */
#include "base/cli.h"
#include "base/common.h"
#include "record/record.h"
#include "verify/verify.h"

#include <stdlib.h>
#include <string.h>

static const char synopsis[] =
    "[--verifier math|boxed|dapo] [--reward pm1|01] [--overlong MAX:CACHE] [--truncated wrong|keep]\n"
    "       [--no-fallback] [FILE]";
static const char about[] =
    "Reads records (FILE or stdin) and writes them to stdout. For each finished rollout (kind `down` or\n"
    "`full`) it extracts the final answer from `text`, compares it with the gold `answer` and sets `pred`\n"
    "(absent when no answer was found), `correct` and `reward` (+1/-1, or 1/0 with --reward 01), plus\n"
    "DAPO's soft overlong penalty on len(tokens) with --overlong. A response that stopped at the length\n"
    "limit (finish = \"length\") counts as wrong unless --truncated keep. Verifiers: math (default;\n"
    "mathematical equivalence), boxed (math, but only a \\boxed{} answer counts), dapo (verl math_dapo,\n"
    "exact). A rollout without `text` or `answer` is an error naming its uid.";

typedef struct args {
    const char *verifier, *reward, *overlong, *truncated, *cases, *input;
    int no_fallback;
    long repeat, omax, ocache;
} args;

static void parse(int argc, char **argv, args *a, skpo_reward_opts *o) {
    *a = (args){.verifier = "math", .reward = "pm1", .truncated = "wrong", .input = "-", .repeat = 0, .omax = 0, .ocache = -1};
    const skpo_opt opts[] = {
        SKPO_OPT_STR("verifier", 0, &a->verifier, "NAME", "math (default), boxed or dapo"),
        SKPO_OPT_STR("reward", 0, &a->reward, "R", "pm1: +1/-1 (default); 01: 1/0"),
        SKPO_OPT_STR("overlong", 0, &a->overlong, "MAX:CACHE", "add DAPO's soft overlong penalty (e.g. 16384:4096)"),
        SKPO_OPT_LONG("overlong-max", 0, &a->omax, 1, 1 << 30, "N", "the same as --overlong N:CACHE (with --overlong-cache)"),
        SKPO_OPT_LONG("overlong-cache", 0, &a->ocache, 1, 1 << 30, "N", "L_cache of the overlong penalty (with --overlong-max)"),
        SKPO_OPT_STR("truncated", 0, &a->truncated, "RULE", "finish=length: wrong (default) or keep the verdict"),
        SKPO_OPT_FLAG("no-fallback", 0, &a->no_fallback, "math: no last-math/last-number fallback"),
        SKPO_OPT_STR("verify-cases", 0, &a->cases, "FILE", "report accuracy and speed on a case file (no records)"),
        SKPO_OPT_LONG("repeat", 0, &a->repeat, 0, 1000000, "N", "--verify-cases: passes over the file for timing (default: >= 1 s)"),
        {0},
    };
    const char **pos = skpo_xcalloc((size_t)argc, sizeof *pos);
    int npos = skpo_cli_parse(synopsis, about, opts, argc, argv, pos);
    if (npos > 1) skpo_cli_usage_error(synopsis, "at most one input file");
    if (npos == 1) a->input = pos[0];
    free(pos);
    skpo_reward_opts_default(o);
    if (!skpo_verifier_parse(a->verifier, &o->verify.mode)) skpo_cli_usage_error(synopsis, "--verifier: unknown verifier '%s'", a->verifier);
    if (strcmp(a->reward, "pm1") && strcmp(a->reward, "01")) skpo_cli_usage_error(synopsis, "--reward: '%s' is not pm1 or 01", a->reward);
    o->zero_one = !strcmp(a->reward, "01");
    if (strcmp(a->truncated, "wrong") && strcmp(a->truncated, "keep")) skpo_cli_usage_error(synopsis, "--truncated: '%s' is not wrong or keep", a->truncated);
    o->keep_truncated = !strcmp(a->truncated, "keep");
    o->verify.fallback = !a->no_fallback;
    if ((a->omax > 0) != (a->ocache >= 0) || (a->omax > 0 && a->overlong))
        skpo_cli_usage_error(synopsis, "give --overlong MAX:CACHE, or both --overlong-max and --overlong-cache");
    if (a->omax > 0) {
        if (a->ocache > a->omax) skpo_cli_usage_error(synopsis, "--overlong-cache %ld exceeds --overlong-max %ld", a->ocache, a->omax);
        o->overlong_max = a->omax;
        o->overlong_cache = a->ocache;
    }
    if (a->overlong) {
        const char *colon = strchr(a->overlong, ':');
        char max[32];
        if (!colon || (size_t)(colon - a->overlong) >= sizeof max) skpo_cli_usage_error(synopsis, "--overlong: '%s' is not MAX:CACHE", a->overlong);
        memcpy(max, a->overlong, (size_t)(colon - a->overlong));
        max[colon - a->overlong] = 0;
        if (skpo_parse_long(max, 1, 1L << 30, &o->overlong_max) || skpo_parse_long(colon + 1, 1, 1L << 30, &o->overlong_cache) ||
            o->overlong_cache > o->overlong_max)
            skpo_cli_usage_error(synopsis, "--overlong: '%s' needs 1 <= CACHE <= MAX", a->overlong);
    }
}

// --verify-cases: accuracy per kind, false positives, verifications per second.
static int verify_cases(const args *a, const skpo_reward_opts *o) {
    skpo_verify_case *c;
    size_t n;
    char err[512];
    if (skpo_verify_cases_load(a->cases, &c, &n, err, sizeof err)) skpo_die("%s", err);
    if (n == 0) skpo_die("no cases in '%s'", a->cases);
    const char *kinds[128];
    int nk = 0, tot[128] = {0}, ok[128] = {0}, right = 0, fp = 0;
    for (size_t i = 0; i < n; i++) {
        skpo_verify_result r;
        skpo_verify(&o->verify, c[i].response, c[i].rlen, c[i].gold, c[i].glen, &r);
        int k = 0;
        while (k < nk && strcmp(kinds[k], c[i].kind)) k++;
        if (k == nk && nk < 128) kinds[nk++] = c[i].kind;
        if (k >= 128) k = 127;
        tot[k]++;
        if (r.correct == c[i].expect) { ok[k]++; right++; }
        else if (r.correct) { fp++; printf("false-positive %s\n", c[i].id); }
    }
    for (int k = 0; k < nk; k++) printf("kind %-20s %4d/%-4d %6.1f%%\n", kinds[k], ok[k], tot[k], 100.0 * ok[k] / tot[k]);
    double t0 = skpo_now(), el = 0;
    long passes = 0;
    while (a->repeat ? passes < a->repeat : el < 1.0) {
        for (size_t i = 0; i < n; i++) {
            skpo_verify_result r;
            skpo_verify(&o->verify, c[i].response, c[i].rlen, c[i].gold, c[i].glen, &r);
        }
        passes++;
        el = skpo_now() - t0;
    }
    printf("accuracy %d/%zu %.2f%% false_positives %d\n", right, n, 100.0 * right / (double)n, fp);
    printf("speed %.1f verifications/s (%ld passes, %.3f s, 1 thread)\n", (double)passes * (double)n / el, passes, el);
    skpo_verify_cases_free(c, n);
    skpo_close_stdout_or_die();
    return 0;
}

int main(int argc, char **argv) {
    args a;
    skpo_reward_opts o;
    parse(argc, argv, &a, &o);
    if (a.cases) return verify_cases(&a, &o);
    skpo_err err = {{0}};
    skpo_reader *rd;
    skpo_writer *w;
    if (skpo_reader_open(a.input, &rd, &err)) skpo_die("%s", err.msg);
    if (skpo_writer_open_fd(1, 0, &w, &err) || skpo_writer_meta(w, argc, argv, NULL, &err)) skpo_die("%s", err.msg);
    skpo_rec r;
    skpo_rec_init(&r);
    char gid[256] = "";
    skpo_status st;
    while ((st = skpo_reader_next(rd, &r, &err)) == SKPO_OK) {
        bool changed;
        // a new group (or a meta/metrics record) ends a batch: let downstream start on it
        const char *g = skpo_rec_str(&r, F_GID);
        bool boundary = skpo_rec_is_kind(&r, SKPO_KIND_META) || skpo_rec_is_kind(&r, SKPO_KIND_METRICS) ||
                        (g && strncmp(g, gid, sizeof gid - 1) && gid[0]);
        if (boundary && skpo_writer_flush(w, &err)) skpo_die("%s", err.msg);
        if (g) snprintf(gid, sizeof gid, "%s", g);
        if (skpo_reward_record(&o, &r, &changed, &err))
            skpo_die("%s (%s record %llu)", err.msg, skpo_reader_name(rd), (unsigned long long)skpo_reader_count(rd));
        if (skpo_writer_put(w, &r, &err)) skpo_die("%s", err.msg);
    }
    if (st != SKPO_EOF) skpo_die("%s", err.msg);
    skpo_reader_close(rd);
    skpo_rec_free(&r);
    if (skpo_writer_close(w, &err)) skpo_die("%s", err.msg);
    skpo_close_stdout_or_die();
    return 0;
}
