/*
 * skpo-signsim - the sign-consistency simulation of docs/algorithm.md section 8 (the
 * paper's appendix A) over a list of continuation counts N, with the GRPO
 * reference (one outcome per prefix) as the last row. core/rl/signsim.h holds
 * the method; this file parses flags and prints a table (stdout), or with
 * --records writes `metrics` records on stdout and the table on stderr.
 * It reads no input.
 */
#include "base/cli.h"
#include "base/common.h"
#include "record/record.h"
#include "rl/signsim.h"

#include <stdlib.h>
#include <string.h>

#define MAX_LIST 256

static const char synopsis[] =
    "[--group G] [--trials T] [--seed S] [--n N,N,...] [--records]\n"
    "       [--dist uniform [--lo A] [--hi B] | --dist band|normal --centre C --spread S | --dist beta --a A --b B\n"
    "        | --p P1,...,PG]";
static const char about[] =
    "Simulates G prefixes with true success rates p_i, N Monte Carlo continuations each, group-normalised\n"
    "advantages, and prints for each N the fraction of groups whose G signs all match the true advantages\n"
    "p_i - mean(p) (\"correct\"), its standard error, the per-prefix sign accuracy and the fraction of\n"
    "groups with all-equal estimates (no signal). The last row, N = 1, is the GRPO reference.\n"
    "Distributions: uniform p ~ U[lo, hi] (default [0, 1]); band p ~ U[C - S/2, C + S/2]; normal\n"
    "p ~ N(C, S^2) truncated to [0, 1]; beta p ~ Beta(A, B); --p fixes the G rates.";

// Comma-separated list of numbers in [min, max]; dies naming the flag.
static int parse_list(const char *flag, const char *s, double min, double max, int integer, double *out) {
    int n = 0;
    char *copy = skpo_xstrdup(s), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == MAX_LIST) skpo_cli_usage_error(synopsis, "--%s: more than %d values", flag, MAX_LIST);
        long l;
        if (integer ? skpo_parse_long(tok, (long)min, (long)max, &l) : skpo_parse_double(tok, min, max, &out[n]))
            skpo_cli_usage_error(synopsis, "--%s: '%s' is not a number in [%g, %g]", flag, tok, min, max);
        if (integer) out[n] = (double)l;
        n++;
    }
    free(copy);
    if (n == 0) skpo_cli_usage_error(synopsis, "--%s: empty list", flag);
    return n;
}

static skpo_signsim_dist parse_dist(const char *s) {
    static const char *names[] = {"uniform", "band", "normal", "beta"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, names[i])) return (skpo_signsim_dist)i;
    skpo_cli_usage_error(synopsis, "--dist: '%s' is not uniform, band, normal or beta", s);
}

// The distribution with its parameters, as it appears in the table and records.
static void describe(const skpo_signsim_cfg *c, char *buf, size_t n) {
    switch (c->dist) {
    case SKPO_SIGNSIM_UNIFORM: snprintf(buf, n, "uniform(%g,%g)", c->lo, c->hi); break;
    case SKPO_SIGNSIM_BAND: snprintf(buf, n, "band(centre=%g,spread=%g)", c->centre, c->spread); break;
    case SKPO_SIGNSIM_NORMAL: snprintf(buf, n, "normal(centre=%g,sd=%g)", c->centre, c->spread); break;
    case SKPO_SIGNSIM_BETA: snprintf(buf, n, "beta(%g,%g)", c->centre, c->spread); break;
    case SKPO_SIGNSIM_FIXED: snprintf(buf, n, "fixed(G=%d)", c->G); break;
    }
}

static void print_table(FILE *f, const skpo_signsim_cfg *c, const char *dist, const skpo_signsim_row *rows, int n) {
    fprintf(f, "# sign consistency: G=%d trials=%lld seed=%llu dist=%s\n", c->G, (long long)c->trials,
            (unsigned long long)c->seed, dist);
    fprintf(f, "%-8s %10s %10s %10s %10s %10s\n", "N", "correct", "se", "sign_acc", "no_signal", "method");
    for (int i = 0; i < n; i++)
        fprintf(f, "%-8lld %10.5f %10.5f %10.5f %10.5f %10s\n", (long long)rows[i].n, rows[i].frac, rows[i].se,
                rows[i].sign_acc, (double)rows[i].degenerate / (double)rows[i].trials, i == n - 1 ? "grpo" : "mc");
}

static void put_records(const skpo_signsim_cfg *c, const char *dist, const skpo_signsim_row *rows, int n, int argc,
                        char **argv) {
    skpo_err err = {{0}};
    skpo_writer *w;
    if (skpo_writer_open_fd(1, 0, &w, &err) || skpo_writer_meta(w, argc, argv, NULL, &err)) skpo_die("%s", err.msg);
    for (int i = 0; i < n; i++) {
        skpo_rec r;
        skpo_rec_init(&r);
        skpo_rec_set_str(&r, F_KIND, SKPO_KIND_METRICS);
        skpo_rec_set_str(&r, F_TOOL, "skpo-signsim");
        skpo_rec_set_str(&r, "method", i == n - 1 ? "grpo" : "mc");
        skpo_rec_set_str(&r, "dist", dist);
        skpo_rec_set_int(&r, "group", c->G);
        skpo_rec_set_int(&r, "n", rows[i].n);
        skpo_rec_set_int(&r, "trials", rows[i].trials);
        skpo_rec_set_float(&r, "correct_frac", rows[i].frac);
        skpo_rec_set_float(&r, "se", rows[i].se);
        skpo_rec_set_float(&r, "sign_acc", rows[i].sign_acc);
        skpo_rec_set_float(&r, "no_signal", (double)rows[i].degenerate / (double)rows[i].trials);
        if (skpo_writer_put(w, &r, &err)) skpo_die("%s", err.msg);
        skpo_rec_free(&r);
    }
    if (skpo_writer_close(w, &err)) skpo_die("%s", err.msg);
}

int main(int argc, char **argv) {
    long G = 8, trials = 20000, seed = 0;
    int records = 0;
    const char *dist_s = "uniform", *ns_s = "8,16,32,64,128,256,512,1024,2048,4096,8192", *p_s = NULL;
    skpo_signsim_cfg c = {.lo = 0, .hi = 1, .centre = -1, .spread = -1};
    const skpo_opt opts[] = {
        SKPO_OPT_LONG("group", 0, &G, 2, MAX_LIST, "G", "prefixes per group (default 8)"),
        SKPO_OPT_LONG("trials", 0, &trials, 1, 1e12, "T", "groups simulated per N (default 20000)"),
        SKPO_OPT_LONG("seed", 0, &seed, 0, 9007199254740992.0, "S", "RNG seed (default 0)"),
        SKPO_OPT_STR("n", 0, &ns_s, "LIST", "continuation counts (default 8,16,...,8192)"),
        SKPO_OPT_STR("dist", 0, &dist_s, "D", "uniform (default), band, normal or beta"),
        SKPO_OPT_DOUBLE("lo", 0, &c.lo, 0, 1, "A", "uniform: lower end (default 0)"),
        SKPO_OPT_DOUBLE("hi", 0, &c.hi, 0, 1, "B", "uniform: upper end (default 1)"),
        SKPO_OPT_DOUBLE("centre", 0, &c.centre, 0, 1, "C", "band/normal: centre of the rates"),
        SKPO_OPT_DOUBLE("spread", 0, &c.spread, 1e-9, 1, "S", "band: width; normal: standard deviation"),
        SKPO_OPT_DOUBLE("a", 0, &c.centre, 1e-6, 1e6, "A", "beta: first shape"),
        SKPO_OPT_DOUBLE("b", 0, &c.spread, 1e-6, 1e6, "B", "beta: second shape"),
        SKPO_OPT_STR("p", 0, &p_s, "LIST", "fixed rates, G values (sets --group)"),
        SKPO_OPT_FLAG("records", 0, &records, "metrics records on stdout, table on stderr"),
        {0},
    };
    skpo_cli_parse(synopsis, about, opts, argc, argv, NULL);

    double nsd[MAX_LIST], fixed[MAX_LIST];
    int64_t ns[MAX_LIST];
    int n_ns = parse_list("n", ns_s, 1, 1e12, 1, nsd);
    for (int i = 0; i < n_ns; i++) ns[i] = (int64_t)nsd[i];
    c.dist = parse_dist(dist_s);
    if (p_s) {
        G = parse_list("p", p_s, 0, 1, 0, fixed);
        if (G < 2) skpo_cli_usage_error(synopsis, "--p: need at least 2 rates");
        c.dist = SKPO_SIGNSIM_FIXED;
        c.fixed = fixed;
        dist_s = "fixed";
    }
    if ((c.dist == SKPO_SIGNSIM_BAND || c.dist == SKPO_SIGNSIM_NORMAL || c.dist == SKPO_SIGNSIM_BETA) &&
        (c.centre < 0 || c.spread < 0))
        skpo_cli_usage_error(synopsis, "--dist %s needs %s", dist_s, c.dist == SKPO_SIGNSIM_BETA ? "--a and --b" : "--centre and --spread");
    c.G = (int)G;
    c.trials = trials;
    c.seed = (uint64_t)seed;
    c.ns = ns;
    c.n_ns = n_ns;

    char desc[128];
    describe(&c, desc, sizeof desc);
    skpo_err err = {{0}};
    skpo_signsim_row *rows = skpo_xcalloc((size_t)n_ns + 1, sizeof *rows);
    if (skpo_signsim_run(&c, rows, &err) != SKPO_OK) skpo_die_code(SKPO_EXIT_USAGE, "%s", err.msg);
    print_table(records ? stderr : stdout, &c, desc, rows, n_ns + 1);
    if (records) put_records(&c, desc, rows, n_ns + 1, argc, argv);
    skpo_close_stdout_or_die();
    free(rows);
    return SKPO_EXIT_OK;
}
