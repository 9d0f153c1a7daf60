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
#include "verify/sandbox.h"
#include "verify/verify.h"

#include <stdlib.h>
#include <string.h>

static const char synopsis[] =
    "[--task TASK] [--verifier math|boxed|dapo] [--reward pm1|01] [--overlong MAX:CACHE]\n"
    "       [--truncated wrong|keep] [--no-fallback] [--math-timeout T] [--code-timeout T] [--code-record-timeout T] [--code-jobs N] [--code-mem MB] [--code-batch N] [FILE]";
static const char about[] =
    "Reads records (FILE or stdin) and writes them to stdout. For each finished rollout (kind `down`,\n"
    "`full` or `self`) it extracts the final answer from `text`, compares it with the gold `answer` and sets `pred`\n"
    "(absent when no answer was found), `correct` and `reward` (+1/-1, or 1/0 with --reward 01), plus\n"
    "DAPO's soft overlong penalty on len(tokens) with --overlong. A response that stopped at the length\n"
    "limit (finish = \"length\") counts as wrong unless --truncated keep. Verifiers: math (default;\n"
    "mathematical equivalence), boxed (math, but only a \\boxed{} answer counts), dapo (verl math_dapo,\n"
    "exact). A rollout without `text` or `answer` is an error naming its uid.\n"
    "Tasks (--task, default auto: the rollout's `task` field): math (above); choice: the option letter the\n"
    "response commits to against the gold letter, several letters = wrong; code: the last fenced block run on\n"
    "the `tests` in a bubblewrap sandbox (docs/reward.md), `reason` and `tests_passed` set. Code rollouts\n"
    "are judged --code-batch at a time in parallel; records keep their order.\n"
    "Every record's judging is bounded in wall time (math: --math-timeout; code: --code-record-timeout).\n"
    "A record the verifier could not judge in its bound (or the sandbox failed on) gets the reward of a\n"
    "wrong answer and reward_status = timeout or error, which skpo-advantage and skpo-eval count.";

typedef struct args {
    const char *verifier, *reward, *overlong, *truncated, *cases, *input;
    int task;   // skpo_reward_tasks
    int no_fallback;
    long repeat, omax, ocache, code_jobs, code_mem, code_batch;
    double code_timeout, math_timeout, code_record;
} args;

static void parse(int argc, char **argv, args *a, skpo_reward_opts *o) {
    *a = (args){.verifier = "math", .reward = "pm1", .truncated = "wrong", .input = "-", .repeat = 0, .omax = 0, .ocache = -1,
                .task = SKPO_TASK_AUTO, .code_timeout = 6, .math_timeout = SKPO_VERIFY_TIMEOUT, .code_jobs = 0, .code_mem = 2048, .code_batch = 64};
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
        SKPO_OPT_ENUM("task", 0, &a->task, &skpo_reward_tasks, "the judge; auto (default): the record's task field"),
        SKPO_OPT_DOUBLE("math-timeout", 0, &a->math_timeout, 1e-3, 3600, "T", "math: wall seconds per record before it counts as a timeout (default 2)"),
        SKPO_OPT_DOUBLE("code-timeout", 0, &a->code_timeout, 0.1, 600, "T", "code: seconds per test, wall and CPU (default 6, LiveCodeBench's)"),
        SKPO_OPT_DOUBLE("code-record-timeout", 0, &a->code_record, 0.1, 1e6, "T",
                        "code: wall seconds per record (default: (--code-timeout + 1) per test + 5)"),
        SKPO_OPT_LONG("code-jobs", 0, &a->code_jobs, 1, 64, "N", "code: programs run at once (default: online CPUs)"),
        SKPO_OPT_LONG("code-mem", 0, &a->code_mem, 64, 1 << 20, "MB", "code: address-space limit per process (default 2048)"),
        SKPO_OPT_LONG("code-batch", 0, &a->code_batch, 1, 1 << 20, "N", "code: rollouts judged together (default 64)"),
        {0},
    };
    a->input = skpo_cli_parse_input(synopsis, about, opts, argc, argv, a->input);
    skpo_reward_opts_default(o);
    if (!skpo_verifier_parse(a->verifier, &o->verify.mode)) skpo_cli_usage_error(synopsis, "--verifier: unknown verifier '%s'", a->verifier);
    o->task = (skpo_task)a->task;
    o->code_timeout = a->code_timeout;
    o->code_record = a->code_record;
    if (strcmp(a->reward, "pm1") && strcmp(a->reward, "01")) skpo_cli_usage_error(synopsis, "--reward: '%s' is not pm1 or 01", a->reward);
    o->zero_one = !strcmp(a->reward, "01");
    if (strcmp(a->truncated, "wrong") && strcmp(a->truncated, "keep")) skpo_cli_usage_error(synopsis, "--truncated: '%s' is not wrong or keep", a->truncated);
    o->keep_truncated = !strcmp(a->truncated, "keep");
    o->verify.fallback = !a->no_fallback;
    o->verify.timeout_s = a->math_timeout;
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
    int nk = 0, tot[128] = {0}, ok[128] = {0}, kfp[128] = {0}, kfn[128] = {0}, right = 0, fp = 0, fn = 0, to = 0;
    for (size_t i = 0; i < n; i++) {
        skpo_verify_result r;
        skpo_verify(&o->verify, c[i].response, c[i].rlen, c[i].gold, c[i].glen, &r);
        int k = 0;
        while (k < nk && strcmp(kinds[k], c[i].kind)) k++;
        if (k == nk && nk < 128) kinds[nk++] = c[i].kind;
        if (k >= 128) k = 127;
        tot[k]++;
        if (r.timed_out) { to++; printf("timeout %s\n", c[i].id); }
        if (r.correct == c[i].expect) { ok[k]++; right++; }
        else if (r.correct) { fp++; kfp[k]++; printf("false-positive %s pred=%s\n", c[i].id, r.pred); }
        else { fn++; kfn[k]++; printf("false-negative %s pred=%s\n", c[i].id, r.found ? r.pred : "(none)"); }
    }
    for (int k = 0; k < nk; k++)
        printf("kind %-20s %4d/%-4d %6.1f%% fp %d fn %d\n", kinds[k], ok[k], tot[k], 100.0 * ok[k] / tot[k], kfp[k], kfn[k]);
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
    printf("accuracy %d/%zu %.2f%% false_positives %d false_negatives %d timeouts %d\n", right, n, 100.0 * right / (double)n,
           fp, fn, to);
    printf("speed %.1f verifications/s (%ld passes, %.3f s, 1 thread)\n", (double)passes * (double)n / el, passes, el);
    skpo_verify_cases_free(c, n);
    skpo_close_stdout_or_die();
    return 0;
}

typedef struct code_batch {
    const skpo_reward_opts *o;
    const args *a;
    skpo_writer *w;
    skpo_sandbox *sb;   // made when the first code rollout comes
    skpo_rec *pend;
    size_t n, cap, ncode;
} code_batch;

static void batch_add(code_batch *b, const skpo_rec *r, bool code) {
    skpo_xgrow((void **)&b->pend, &b->cap, b->n + 1, sizeof *b->pend);
    skpo_rec_init(&b->pend[b->n]);
    skpo_rec_copy(&b->pend[b->n++], r);
    b->ncode += code;
}

static void batch_run(code_batch *b, skpo_reader *rd) {
    skpo_err err = {{0}};
    if (!b->n) return;
    if (b->ncode && !b->sb) {
        skpo_sandbox_opts so;
        skpo_sandbox_opts_default(&so);
        if (b->a->code_jobs > 0) so.jobs = (int)b->a->code_jobs;
        so.mem_mb = b->a->code_mem;
        so.cpu_s = 3600; // the driver's own budget; each program gets the per-test limit
        so.wall_s = 3600;
        if (skpo_sandbox_new(&so, &b->sb, &err)) skpo_die("%s", err.msg);
    }
    if (b->ncode && skpo_reward_code(b->o, b->sb, b->pend, b->n, &err))
        skpo_die("%s (%s, before record %llu)", err.msg, skpo_reader_name(rd), (unsigned long long)skpo_reader_count(rd));
    for (size_t i = 0; i < b->n; i++) {
        if (skpo_writer_put(b->w, &b->pend[i], &err)) skpo_die("%s", err.msg);
        skpo_rec_free(&b->pend[i]);
    }
    b->n = b->ncode = 0;
    if (skpo_writer_flush(b->w, &err)) skpo_die("%s", err.msg);
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
    // code rollouts wait in `pend` (with every record after the first of them,
    // to keep the order) until --code-batch of them are there, then run together
    code_batch cb = {.o = &o, .a = &a, .w = w};
    while ((st = skpo_reader_next(rd, &r, &err)) == SKPO_OK) {
        bool changed;
        // a new group (or a meta/metrics record) ends a batch: let downstream start on it
        const char *g = skpo_rec_str(&r, F_GID);
        bool boundary = skpo_rec_is_kind(&r, SKPO_KIND_META) || skpo_rec_is_kind(&r, SKPO_KIND_METRICS) ||
                        (g && strncmp(g, gid, sizeof gid - 1) && gid[0]);
        if (boundary && (skpo_rec_is_kind(&r, SKPO_KIND_META) || skpo_rec_is_kind(&r, SKPO_KIND_METRICS))) batch_run(&cb, rd);
        if (boundary && !cb.n && skpo_writer_flush(w, &err)) skpo_die("%s", err.msg);
        if (g) snprintf(gid, sizeof gid, "%s", g);
        const char *on[4];
        int non = 0;
        bool code = skpo_reward_task(&o, &r) == SKPO_TASK_CODE;
        on[non++] = code ? "code" : "answer";
        if (o.overlong_max > 0) on[non++] = "overlong";
        on[non] = NULL;
        if (skpo_rec_check_needs(&r, "skpo-reward", on, skpo_reader_name(rd), skpo_reader_count(rd), &err))
            skpo_die("%s", err.msg);
        if (skpo_reward_record(&o, &r, &changed, &err))
            skpo_die("%s (%s record %llu)", err.msg, skpo_reader_name(rd), (unsigned long long)skpo_reader_count(rd));
        if (code || cb.n) {
            batch_add(&cb, &r, code);
            if (cb.ncode >= (size_t)a.code_batch) batch_run(&cb, rd);
        } else if (skpo_writer_put(w, &r, &err)) skpo_die("%s", err.msg);
    }
    if (st != SKPO_EOF) skpo_die("%s", err.msg);
    batch_run(&cb, rd);
    free(cb.pend);
    skpo_sandbox_free(cb.sb);
    skpo_reader_close(rd);
    skpo_rec_free(&r);
    if (skpo_writer_close(w, &err)) skpo_die("%s", err.msg);
    skpo_close_stdout_or_die();
    return 0;
}
