/*
 * skpo-cat - any record stream to JSON lines, a readable view, a count or a
 * summary; and back (--pack: JSON lines to records). It reads its inputs one
 * after another, filters (--where), and prints each record as soon as it is
 * read when stdout is not a regular file, so it can end a live pipeline.
 * Bad input stops it with "skpo-cat: <what> at record N (byte offset B)" after
 * every good record before the damage has been printed.
 */
#include "cat.h"

#include "base/rng.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char SYNOPSIS[] =
    "[--where FIELD=VALUE]... [--fields A,B,C] [--shuffle SEED] [--head N] [--count | --stats | --view | --pack [--no-meta]]\n"
    "       [FILE|-]...\n"
    "       skpo-cat --schema | --needs";
static const char ABOUT[] =
    "Print skpo record streams (zstd-compressed msgpack) as JSON lines, one record per line.\n"
    "Inputs are read one after another; none or '-' means standard input.\n"
    "int32/float32 schema fields print as JSON arrays, other bins as {\"$bin\":\"<base64>\"},\n"
    "non-finite floats as the strings \"NaN\", \"Infinity\", \"-Infinity\" (see docs/records.md).\n"
    "--pack reads JSON lines and writes records (schema fields get their binary types).\n"
    "--where compares numbers as numbers, strings exactly, anything else by its JSON text.\n"
    "--shuffle reads every selected record, then prints them in a uniformly random order drawn from\n"
    "SEED (the pipelines' prompt draws: the same SEED gives the same order on every machine).";

typedef struct cat_opts {
    skpo_strlist where;
    const char *fields;
    long head, shuffle;
    int count, stats, view, pack, no_meta, schema, needs;
} cat_opts;

typedef struct cat_out {
    const cat_opts *o;
    char **fields;
    size_t nfields;
    bool flush_each;      // stdout is a pipe or terminal: print as records arrive
    skpo_jbuf buf, tmp;
    skpo_writer *w;       // --pack
    cat_view view;
    cat_stats stats;
    uint64_t n;           // records selected
} cat_out;

static char **split_fields(const char *s, size_t *n) {
    char **v = NULL;
    size_t cap = 0;
    *n = 0;
    for (const char *p = s;;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (len) {
            skpo_xgrow((void **)&v, &cap, *n + 1, sizeof *v);
            v[(*n)++] = skpo_xstrndup(p, len);
        }
        if (!c) return v;
        p = c + 1;
    }
}

static void print_schema(void) {
    static const char *const tn[] = {"", "str", "int", "float", "bool", "int32[]", "float32[]", "any"};
    for (const skpo_field_def *d = skpo_schema; d->name; d++) printf("%-12s %-10s %s\n", d->name, tn[d->type], d->doc);
    skpo_close_stdout_or_die();
    exit(SKPO_EXIT_OK);
}

// One line per row of skpo_needs[]: TOOL, WHEN, KINDS, FIELDS, COND, NOTE,
// tab-separated, "-" for an empty column (tests/sh/t_needs.sh reads it).
static void print_needs(void) {
    for (const skpo_need *d = skpo_needs; d->tool; d++)
        printf("%s\t%s\t%s\t%s\t%s\t%s\n", d->tool, d->when && *d->when ? d->when : "-", d->kinds, d->fields,
               d->cond ? d->cond : "-", d->note ? d->note : "-");
    skpo_close_stdout_or_die();
    exit(SKPO_EXIT_OK);
}

static void check_opts(const cat_opts *o, cat_out *out) {
    if (o->schema) print_schema();
    if (o->needs) print_needs();
    if (o->count + o->stats + o->view + o->pack > 1)
        skpo_cli_usage_error(SYNOPSIS, "--count, --stats, --view and --pack exclude each other");
    if (o->fields && (o->count || o->stats || o->view))
        skpo_cli_usage_error(SYNOPSIS, "--fields only applies to JSON or --pack output");
    if (o->no_meta && !o->pack) skpo_cli_usage_error(SYNOPSIS, "--no-meta only applies to --pack");
    cat_where_check(&o->where, SYNOPSIS);
    if (o->fields) {
        out->fields = split_fields(o->fields, &out->nfields);
        if (!out->nfields) skpo_cli_usage_error(SYNOPSIS, "--fields: no field names in '%s'", o->fields);
    }
    struct stat sb;
    out->flush_each = fstat(1, &sb) != 0 || !S_ISREG(sb.st_mode);
}

// --fields for --pack: keep only the named fields, in the named order.
static void project(const cat_out *out, const skpo_rec *r, skpo_rec *dst) {
    skpo_rec_clear(dst);
    for (size_t i = 0; i < out->nfields; i++) {
        const skpo_value *v = skpo_rec_get(r, out->fields[i]);
        if (v) skpo_rec_set_value(dst, v);
    }
}

static void emit(cat_out *out, const skpo_rec *r, bool live_in) {
    const cat_opts *o = out->o;
    skpo_err e = {0};
    if (o->count) return;
    if (o->stats) { cat_stats_add(&out->stats, r); return; }
    if (o->view) cat_view_put(&out->view, r, stdout);
    else if (o->pack) {
        skpo_rec p;
        skpo_rec_init(&p);
        if (out->nfields) project(out, r, &p);
        skpo_status st = skpo_writer_put(out->w, out->nfields ? &p : r, &e);
        if (!st && live_in) st = skpo_writer_flush(out->w, &e);
        skpo_rec_free(&p);
        if (st) skpo_die("%s", e.msg);
        return;
    } else {
        out->buf.n = 0;
        skpo_rec_to_json(r, (const char *const *)out->fields, out->nfields, &out->buf);
        skpo_jbuf_put(&out->buf, "\n", 1);
        fwrite(out->buf.p, 1, out->buf.n, stdout);
    }
    if (out->flush_each) fflush(stdout);
}

static void finish(cat_out *out) {
    skpo_err e = {0};
    if (out->o->count) printf("%llu\n", (unsigned long long)out->n);
    if (out->o->stats) cat_stats_print(&out->stats, stdout);
    if (out->w && skpo_writer_close(out->w, &e)) skpo_die("%s", e.msg);
    skpo_close_stdout_or_die();
    for (size_t i = 0; i < out->nfields; i++) free(out->fields[i]);
    free(out->fields);
    skpo_jbuf_free(&out->buf);
    skpo_jbuf_free(&out->tmp);
    cat_view_free(&out->view);
    cat_stats_free(&out->stats);
}

static void open_pack(cat_out *out, int argc, char **argv) {
    skpo_err e = {0};
    if (isatty(1)) skpo_die("refusing to write binary records to a terminal (redirect or pipe standard output)");
    if (skpo_writer_open_fd(1, 0, &out->w, &e)) skpo_die("%s", e.msg);
    if (!out->o->no_meta && skpo_writer_meta(out->w, argc, argv, NULL, &e)) skpo_die("%s", e.msg);
}

// --shuffle: every selected record in memory, a Fisher-Yates shuffle from the
// seed's own stream, then --head of them out.
static void shuffled(cat_out *out, cat_in *in, skpo_rec *r) {
    skpo_rec *v = NULL;
    size_t n = 0, cap = 0;
    while (cat_in_next(in, r)) {
        if (!cat_where_match(r, &out->o->where, &out->tmp)) continue;
        skpo_xgrow((void **)&v, &cap, n + 1, sizeof *v);
        v[n++] = *r; // moved
        skpo_rec_init(r);
    }
    skpo_rng g;
    skpo_rng_seed(&g, skpo_seed_derive((uint64_t)out->o->shuffle, "shuffle", 0));
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)skpo_rng_int(&g, 0, (int64_t)i - 1);
        skpo_rec t = v[i - 1];
        v[i - 1] = v[j];
        v[j] = t;
    }
    for (size_t i = 0; i < n; i++) {
        if (out->o->head < 0 || out->n < (uint64_t)out->o->head) {
            out->n++;
            emit(out, &v[i], false);
        }
        skpo_rec_free(&v[i]);
    }
    free(v);
}

int main(int argc, char **argv) {
    cat_opts o = {.head = -1, .shuffle = -1};
    const skpo_opt opts[] = {
        SKPO_OPT_LIST("where", 'w', &o.where, "FIELD=VALUE", "keep records whose FIELD equals VALUE (repeatable, all must hold)"),
        SKPO_OPT_STR("fields", 'f', &o.fields, "A,B,C", "print only these fields, in this order"),
        SKPO_OPT_LONG("shuffle", 0, &o.shuffle, 0, 9.2e18, "SEED", "print the selected records in a random order drawn from SEED"),
        SKPO_OPT_LONG("head", 'n', &o.head, 0, 9.2e18, "N", "stop after N selected records"),
        SKPO_OPT_FLAG("count", 'c', &o.count, "print the number of selected records"),
        SKPO_OPT_FLAG("stats", 's', &o.stats, "per-kind counts, mean reward, length p50/p90/max, advantage mean/std"),
        SKPO_OPT_FLAG("view", 'v', &o.view, "readable rollouts: down records grouped under their up segment"),
        SKPO_OPT_FLAG("pack", 'p', &o.pack, "read JSON lines, write a record stream"),
        SKPO_OPT_FLAG("no-meta", 0, &o.no_meta, "with --pack: do not write skpo-cat's own meta record first"),
        SKPO_OPT_FLAG("schema", 0, &o.schema, "print the record schema (field, type, meaning) and exit"),
        SKPO_OPT_FLAG("needs", 0, &o.needs, "print what each tool needs from the records it reads (tool, options, kinds, fields) and exit"),
        {0},
    };
    const char **pos = skpo_xcalloc((size_t)argc, sizeof *pos);
    int n = skpo_cli_parse(SYNOPSIS, ABOUT, opts, argc, argv, pos);
    cat_out out = {.o = &o};
    check_opts(&o, &out);
    static const char *stdin_only[] = {"-"};
    cat_in in;
    cat_in_init(&in, n ? pos : stdin_only, n ? n : 1, o.pack);
    if (o.pack) open_pack(&out, argc, argv);
    skpo_rec r;
    skpo_rec_init(&r);
    if (o.shuffle >= 0) {
        shuffled(&out, &in, &r);
    } else {
        while ((o.head < 0 || out.n < (uint64_t)o.head) && cat_in_next(&in, &r)) {
            if (!cat_where_match(&r, &o.where, &out.tmp)) continue;
            out.n++;
            emit(&out, &r, in.live);
        }
    }
    skpo_rec_free(&r);
    cat_in_free(&in);
    free(pos);
    finish(&out);
    return SKPO_EXIT_OK;
}
