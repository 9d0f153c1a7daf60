/*
 * skpo-eval - evaluation metrics from rewarded `full` records (skpo-sample --n K
 * | skpo-reward): per benchmark (`source`, or per problem with --by pid) the
 * Mean@k (avg@k), unbiased pass@k and maj@k of core/verify/evalstats.h, as a table on
 * stderr (stdout with --table) and one `metrics` record per group on stdout.
 * It is a sink: input records are not passed on.
 * A sample is correct when its `correct` field is true (or, without one, when its
 * reward is > 0). maj@k votes over the `pred` fields of a problem's first k
 * samples in input order. Problems that carry a `category` (MMLU-Pro) or a
 * `difficulty` (LiveCodeBench) also get one row per value under their source
 * ("mmlu_pro/biology", "livecodebench/easy"): accuracy per category, pass@1
 * per difficulty. Samples whose reward has no verdict (reward_status timeout or
 * error: the verifier ran out of its bound, or the sandbox failed) count as wrong,
 * are counted per group (reward_timeouts, reward_errors), and above
 * --max-reward-failures of all samples the evaluation fails instead of
 * reporting accuracies the verifier did not decide.
 */
#include "base/cli.h"
#include "base/common.h"
#include "verify/evalstats.h"
#include "record/record.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_KS 32

static const char synopsis[] = "[--by source|pid] [--table] [--max-reward-failures F] [FILE...]";
static const char about[] =
    "Prints Mean@k, pass@k (unbiased, k = 1, 2, 4, ... and K) and maj@k per benchmark source (or per problem)\n"
    "for rewarded `full` records. K is the smallest number of samples any problem of the group has.\n"
    "The table goes to stderr (to stdout with --table, then no records are written); `metrics` records,\n"
    "one per group (plus group `all` when there are several sources), go to stdout.";

typedef struct problem {
    char *pid, *source;
    char *sub;     // "source/category" or "source/difficulty", NULL when neither
    char **pred;   // (n) extracted answers, NULL = none
    int *ok;       // (n)
    long n, cap;
    long timeouts, errors; // samples whose reward has no verdict (reward_status)
} problem;

typedef struct evalset {
    problem *p; size_t np, cap;
} evalset;

// --- reading -------------------------------------------------------------------------

static problem *problem_of(evalset *es, const char *pid, const char *source) {
    for (size_t i = es->np; i-- > 0;) // records of one problem usually arrive together
        if (strcmp(es->p[i].pid, pid) == 0) {
            if (strcmp(es->p[i].source, source) != 0)
                skpo_die("problem '%s' appears with sources '%s' and '%s'", pid, es->p[i].source, source);
            return &es->p[i];
        }
    skpo_xgrow((void **)&es->p, &es->cap, es->np + 1, sizeof *es->p);
    problem *p = &es->p[es->np++];
    memset(p, 0, sizeof *p);
    p->pid = skpo_xstrdup(pid);
    p->source = skpo_xstrdup(source);
    return p;
}

static skpo_status add_sample(const skpo_rec *r, const char *where, void *ctx, skpo_err *err) {
    evalset *es = ctx;
    const char *pid = skpo_rec_str(r, F_PID), *src = skpo_rec_str(r, F_SOURCE), *pred = skpo_rec_str(r, F_PRED);
    const char *uid = skpo_rec_str(r, F_UID) ? skpo_rec_str(r, F_UID) : "(no uid)";
    bool c;
    double rew;
    if (!pid) skpo_die("full record '%s' has no pid (%s)", uid, where);
    // A NaN reward would count as wrong (NaN > 0 is false) and pass unnoticed.
    if (skpo_rec_get(r, F_REWARD) && skpo_rec_float(r, F_REWARD, &rew) && !isfinite(rew))
        skpo_die("full record '%s': reward is %g, not a finite number (%s)", uid, rew, where);
    if (!skpo_rec_bool(r, F_CORRECT, &c)) {
        if (!skpo_rec_float(r, F_REWARD, &rew))
            skpo_die("full record '%s' has neither 'correct' nor 'reward' (%s; run skpo-reward first)", uid, where);
        c = rew > 0;
    }
    problem *p = problem_of(es, pid, src ? src : "unknown");
    const char *sub = skpo_rec_str(r, F_CATEGORY) ? skpo_rec_str(r, F_CATEGORY) : skpo_rec_str(r, F_DIFFICULTY);
    if (sub && !p->sub) {
        p->sub = skpo_xmalloc(strlen(p->source) + strlen(sub) + 2);
        sprintf(p->sub, "%s/%s", p->source, sub);
    }
    if (p->n == p->cap) {
        size_t cap = (size_t)p->cap;
        skpo_xgrow((void **)&p->pred, &cap, (size_t)p->n + 1, sizeof *p->pred);
        p->ok = skpo_xrealloc(p->ok, cap * sizeof *p->ok);
        p->cap = (long)cap;
    }
    const char *rs = skpo_rec_str(r, F_REWARD_STATUS);
    if (rs && !strcmp(rs, "timeout")) p->timeouts++;
    else if (rs) p->errors++;
    p->pred[p->n] = pred ? skpo_xstrdup(pred) : NULL;
    p->ok[p->n++] = c;
    return SKPO_OK;
}

static void read_input(const char *path, evalset *es) {
    skpo_err err = {{0}};
    if (skpo_read_each_needed(path, SKPO_KIND_FULL, "skpo-eval", NULL, add_sample, es, &err)) skpo_die("%s", err.msg);
}

// --- one group's numbers ----------------------------------------------------------------

typedef struct gstats {
    const char *name;
    size_t problems;
    long kmin, kmax;
    double mean;
    long ks[MAX_KS]; int nk;
    double pass[MAX_KS], maj[MAX_KS];
    long timeouts, errors;
} gstats;

// Stats over the problems p[i] for which sel(p[i], key) holds.
static void group_stats(const evalset *es, int (*sel)(const problem *, const char *), const char *key, gstats *g) {
    memset(g, 0, sizeof *g);
    g->name = key;
    for (size_t i = 0; i < es->np; i++) {
        const problem *p = &es->p[i];
        if (!sel(p, key)) continue;
        long c = 0;
        for (long j = 0; j < p->n; j++) c += p->ok[j];
        g->mean += (double)c / (double)p->n;
        g->timeouts += p->timeouts;
        g->errors += p->errors;
        if (!g->problems || p->n < g->kmin) g->kmin = p->n;
        if (p->n > g->kmax) g->kmax = p->n;
        g->problems++;
    }
    g->nk = skpo_eval_ks(g->kmin, g->ks, MAX_KS);
    for (size_t i = 0; i < es->np; i++) {
        const problem *p = &es->p[i];
        if (!sel(p, key)) continue;
        long c = 0;
        for (long j = 0; j < p->n; j++) c += p->ok[j];
        for (int k = 0; k < g->nk; k++) {
            g->pass[k] += skpo_pass_at_k(p->n, c, g->ks[k]);
            g->maj[k] += skpo_maj_at_k((const char *const *)p->pred, p->ok, g->ks[k]);
        }
    }
    double m = (double)g->problems;
    g->mean /= m;
    for (int k = 0; k < g->nk; k++) { g->pass[k] /= m; g->maj[k] /= m; }
}

static int sel_source(const problem *p, const char *key) { return strcmp(p->source, key) == 0; }
static int sel_all(const problem *p, const char *key) { return 1; }
static int sel_sub(const problem *p, const char *key) { return p->sub && strcmp(p->sub, key) == 0; }

// --- output -----------------------------------------------------------------------------

static void print_row(FILE *f, const gstats *g, int header) {
    if (header) {
        fprintf(f, "%-24s %8s %6s %9s", "group", "problems", "k", "mean@k");
        char h[32];
        for (int k = 0; k < g->nk; k++) { snprintf(h, sizeof h, "pass@%ld", g->ks[k]); fprintf(f, " %10s", h); }
        for (int k = 0; k < g->nk; k++) { snprintf(h, sizeof h, "maj@%ld", g->ks[k]); fprintf(f, " %10s", h); }
        fputc('\n', f);
    }
    fprintf(f, "%-24s %8zu %6ld %9.2f", g->name, g->problems, g->kmin, 100 * g->mean);
    for (int k = 0; k < g->nk; k++) fprintf(f, " %10.2f", 100 * g->pass[k]);
    for (int k = 0; k < g->nk; k++) fprintf(f, " %10.2f", 100 * g->maj[k]);
    if (g->kmax != g->kmin) fprintf(f, "  (problems have %ld..%ld samples)", g->kmin, g->kmax);
    if (g->timeouts || g->errors) fprintf(f, "  (no verdict, counted wrong: %ld timed out, %ld failed)", g->timeouts, g->errors);
    fputc('\n', f);
}

static void put_record(skpo_writer *w, const gstats *g, const char *by) {
    skpo_err err = {{0}};
    skpo_rec r;
    char key[48];
    skpo_rec_init(&r);
    skpo_rec_set_str(&r, F_KIND, SKPO_KIND_METRICS);
    skpo_rec_set_str(&r, "tool", "skpo-eval");
    skpo_rec_set_str(&r, "by", by);
    skpo_rec_set_str(&r, "group", g->name);
    skpo_rec_set_int(&r, "problems", (int64_t)g->problems);
    skpo_rec_set_int(&r, "samples", g->kmin);
    snprintf(key, sizeof key, "mean@%ld", g->kmin);
    skpo_rec_set_float(&r, key, g->mean);
    for (int k = 0; k < g->nk; k++) {
        snprintf(key, sizeof key, "pass@%ld", g->ks[k]);
        skpo_rec_set_float(&r, key, g->pass[k]);
    }
    for (int k = 0; k < g->nk; k++) {
        snprintf(key, sizeof key, "maj@%ld", g->ks[k]);
        skpo_rec_set_float(&r, key, g->maj[k]);
    }
    skpo_rec_set_int(&r, "reward_timeouts", g->timeouts);
    skpo_rec_set_int(&r, "reward_errors", g->errors);
    if (skpo_writer_put(w, &r, &err)) skpo_die("%s", err.msg);
    skpo_rec_free(&r);
}

// Emit group `key` (selected by sel) to the table and the record stream.
static void emit(const evalset *es, int (*sel)(const problem *, const char *), const char *key, const char *by,
                 FILE *table, skpo_writer *w, long *last_k) {
    gstats g;
    group_stats(es, sel, key, &g);
    print_row(table, &g, g.kmin != *last_k);
    *last_k = g.kmin;
    if (w) put_record(w, &g, by);
}

static void report(const evalset *es, const char *by, int table_out, int argc, char **argv) {
    skpo_err err = {{0}};
    skpo_writer *w = NULL;
    FILE *table = table_out ? stdout : stderr;
    if (!table_out && (skpo_writer_open_fd(1, 0, &w, &err) || skpo_writer_meta(w, argc, argv, NULL, &err)))
        skpo_die("%s", err.msg);
    long last_k = -1;
    size_t nsrc = 0;
    int by_pid = strcmp(by, "pid") == 0;
    for (size_t i = 0; i < es->np; i++) {
        const problem *p = &es->p[i];
        if (by_pid) { // problems are unique by pid: a one-problem view
            evalset one = {(problem *)p, 1, 1};
            emit(&one, sel_all, p->pid, by, table, w, &last_k);
            continue;
        }
        int first = 1; // each source once, in order of first appearance
        for (size_t j = 0; j < i && first; j++) first = strcmp(es->p[j].source, p->source) != 0;
        if (!first) continue;
        nsrc++;
        emit(es, sel_source, p->source, by, table, w, &last_k);
        // its categories / difficulties, in order of first appearance
        for (size_t j = i; j < es->np; j++) {
            const problem *q = &es->p[j];
            if (!q->sub || strcmp(q->source, p->source)) continue;
            int seen = 0;
            for (size_t k = i; k < j && !seen; k++) seen = es->p[k].sub && !strcmp(es->p[k].sub, q->sub);
            if (!seen) emit(es, sel_sub, q->sub, "sub", table, w, &last_k);
        }
    }
    if (nsrc > 1) emit(es, sel_all, "all", by, table, w, &last_k);
    if (w && skpo_writer_close(w, &err)) skpo_die("%s", err.msg);
    skpo_close_stdout_or_die();
}

int main(int argc, char **argv) {
    const char *by = "source";
    int table_out = 0;
    double max_fail = 0.05;
    const skpo_opt opts[] = {
        SKPO_OPT_STR("by", 0, &by, "source|pid", "group rows by benchmark source (default) or by problem"),
        SKPO_OPT_FLAG("table", 0, &table_out, "print the table on stdout instead of records"),
        SKPO_OPT_DOUBLE("max-reward-failures", 0, &max_fail, 0, 1, "F",
                        "fail when more than this fraction of the samples' rewards timed out or failed (default 0.05)"),
        {0},
    };
    const char **pos = skpo_xcalloc((size_t)argc, sizeof *pos);
    int npos = skpo_cli_parse(synopsis, about, opts, argc, argv, pos);
    if (strcmp(by, "source") && strcmp(by, "pid")) skpo_cli_usage_error(synopsis, "--by: '%s' is not source or pid", by);
    evalset es = {0};
    if (npos == 0) read_input("-", &es);
    for (int i = 0; i < npos; i++) read_input(pos[i], &es);
    if (es.np == 0) skpo_die("no full records in the input");
    long samples = 0, to = 0, er = 0;
    for (size_t i = 0; i < es.np; i++) samples += es.p[i].n, to += es.p[i].timeouts, er += es.p[i].errors;
    if (to + er > 0 && (double)(to + er) > max_fail * (double)samples)
        skpo_die("%ld of %ld samples' rewards have no verdict (%ld timed out, %ld failed), over --max-reward-failures %g: "
                 "the accuracies would count them as wrong (their records say why in reward_status and reason)",
                 to + er, samples, to, er, max_fail);
    report(&es, by, table_out, argc, argv);
    for (size_t i = 0; i < es.np; i++) {
        for (long j = 0; j < es.p[i].n; j++) free(es.p[i].pred[j]);
        free(es.p[i].pred); free(es.p[i].ok); free(es.p[i].pid); free(es.p[i].source); free(es.p[i].sub);
    }
    free(es.p);
    free(pos);
    return 0;
}
