/*
 * skpo-analyze - the aggregations behind pipelines/analysis (docs/analyses.md):
 *   signs     empirical sign consistency of MC advantages (signs.c)
 *   shortcut  answer diversity, all-same-outcome rate, accuracy and length of
 *             continuations per layout and cut position (outcomes.c)
 *   implicit  per-position success rate of continuations, normalised across
 *             methods per problem (outcomes.c)
 * Input: rewarded down records of skpo-cut segments continued by skpo-splice.
 * Output: a whitespace table on stdout ("#" header, one row per label, group
 * and position: gnuplot reads it as is), or with --records `metrics` records
 * on stdout and the table on stderr. A sink: input records are not passed on.
 */
#include "analyze.h"
#include "base/cli.h"

#include <stdlib.h>
#include <string.h>

static const char synopsis[] = "signs|shortcut|implicit [--k K,K,...] [--records] [FILE...]";
static const char about[] =
    "Aggregates rewarded continuations of cut segments (skpo-cut | skpo-splice | skpo-reward) into the table\n"
    "of one analysis: signs (sign agreement of k-continuation MC advantages and of GRPO outcomes with a\n"
    "leave-out reference), shortcut (diversity, all-same rate, accuracy, length per label and position) or\n"
    "implicit (success rate per method and position, normalised across methods per problem).";

// Groups print with '_' for spaces so every column is one word for awk/gnuplot.
static void print_rows(FILE *f, const rows *t) {
    fprintf(f, "# %s\n# %-14s %-16s %8s", t->what, "label", "group", "rel");
    for (int c = 0; c < t->ncols; c++) fprintf(f, " %12s", t->cols[c]);
    fputc('\n', f);
    for (size_t i = 0; i < t->n; i++) {
        const row *r = &t->r[i];
        char g[64];
        snprintf(g, sizeof g, "%s", r->group);
        for (char *s = g; *s; s++) if (*s == ' ') *s = '_';
        fprintf(f, "  %-14s %-16s %8.4f", r->label, g, r->rel);
        for (int c = 0; c < t->ncols; c++) fprintf(f, " %12.6g", r->v[c]);
        fputc('\n', f);
    }
}

static void put_rows(const rows *t, int argc, char **argv) {
    skpo_err err = {{0}};
    skpo_writer *w;
    if (skpo_writer_open_fd(1, 0, &w, &err) || skpo_writer_meta(w, argc, argv, NULL, &err)) skpo_die("%s", err.msg);
    for (size_t i = 0; i < t->n; i++) {
        skpo_rec r;
        skpo_rec_init(&r);
        skpo_rec_set_str(&r, F_KIND, SKPO_KIND_METRICS);
        skpo_rec_set_str(&r, F_TOOL, "skpo-analyze");
        skpo_rec_set_str(&r, "analysis", t->what);
        skpo_rec_set_str(&r, "label", t->r[i].label);
        skpo_rec_set_str(&r, "group", t->r[i].group);
        skpo_rec_set_float(&r, "rel", t->r[i].rel);
        for (int c = 0; c < t->ncols; c++) skpo_rec_set_float(&r, t->cols[c], t->r[i].v[c]);
        if (skpo_writer_put(w, &r, &err)) skpo_die("%s", err.msg);
        skpo_rec_free(&r);
    }
    if (skpo_writer_close(w, &err)) skpo_die("%s", err.msg);
}

static int parse_ks(const char *s, long *ks, int max) {
    int n = 0;
    char *copy = skpo_xstrdup(s), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == max) skpo_cli_usage_error(synopsis, "--k: more than %d values", max);
        if (skpo_parse_long(tok, 1, 1L << 30, &ks[n++])) skpo_cli_usage_error(synopsis, "--k: '%s' is not a count >= 1", tok);
    }
    free(copy);
    if (!n) skpo_cli_usage_error(synopsis, "--k: empty list");
    return n;
}

int main(int argc, char **argv) {
    const char *ks_s = "1,2,4,8,16,32,64,128,256,512,1024,2048,4096";
    int records = 0;
    const skpo_opt opts[] = {
        SKPO_OPT_STR("k", 0, &ks_s, "LIST", "signs: estimate sizes k (default powers of 2 up to N/2)"),
        SKPO_OPT_FLAG("records", 0, &records, "metrics records on stdout, table on stderr"),
        {0},
    };
    const char **pos = skpo_xcalloc((size_t)argc, sizeof *pos);
    int npos = skpo_cli_parse(synopsis, about, opts, argc, argv, pos);
    if (npos < 1) skpo_cli_usage_error(synopsis, "which analysis: signs, shortcut or implicit");
    const char *what = pos[0];
    long ks[64];
    int nks = parse_ks(ks_s, ks, 64);
    if (strcmp(what, "signs") && strcmp(what, "shortcut") && strcmp(what, "implicit"))
        skpo_cli_usage_error(synopsis, "'%s' is not signs, shortcut or implicit", what);
    prefixes ps = {.by_gid.copy = SKPO_STRMAP_COPY};
    if (npos == 1) prefixes_read(&ps, "-");
    for (int i = 1; i < npos; i++) prefixes_read(&ps, pos[i]);
    if (ps.n == 0) skpo_die("no down records of cut segments in the input");
    rows t = {.idx.copy = SKPO_STRMAP_COPY};
    if (!strcmp(what, "signs")) analyze_signs(&ps, ks, nks, &t);
    else if (!strcmp(what, "shortcut")) analyze_shortcut(&ps, &t);
    else analyze_implicit(&ps, &t);
    if (t.n == 0) skpo_die("%s: no group had enough data (signs needs >= 2 segments with >= 2 continuations; implicit >= 2 labels)", what);
    rows_sort(&t);
    print_rows(records ? stderr : stdout, &t);
    if (records) put_rows(&t, argc, argv);
    skpo_close_stdout_or_die();
    rows_free(&t);
    prefixes_free(&ps);
    free(pos);
    return SKPO_EXIT_OK;
}
