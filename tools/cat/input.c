/*
 * input.c - skpo-cat inputs: record streams through core/record/record, or JSON lines
 * for --pack, several files read one after another; and the --where filter.
 */
#define _GNU_SOURCE
#include "cat.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool is_regular(int fd) {
    struct stat sb;
    return fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode);
}

void cat_in_init(cat_in *in, const char **paths, int n, bool json) {
    memset(in, 0, sizeof *in);
    in->paths = paths;
    in->npaths = n;
    in->json = json;
}

static void open_next(cat_in *in) {
    const char *p = in->paths[in->cur];
    if (in->json) {
        in->jf = strcmp(p, "-") ? fopen(p, "r") : stdin;
        if (!in->jf) skpo_die("cannot open '%s': %s", p, strerror(errno));
        in->lineno = 0;
        if (!is_regular(fileno(in->jf))) in->live = true;
        return;
    }
    skpo_err e = {0};
    if (skpo_reader_open(p, &in->rd, &e)) skpo_die("%s", e.msg);
    struct stat sb;
    if (strcmp(p, "-") ? stat(p, &sb) != 0 || !S_ISREG(sb.st_mode) : !is_regular(0)) in->live = true;
}

static void close_cur(cat_in *in) {
    if (in->rd) skpo_reader_close(in->rd);
    if (in->jf && in->jf != stdin) fclose(in->jf);
    in->rd = NULL;
    in->jf = NULL;
    in->cur++;
}

static bool next_json(cat_in *in, skpo_rec *r) {
    ssize_t k;
    const char *name = strcmp(in->paths[in->cur], "-") ? in->paths[in->cur] : "stdin";
    while ((k = getline(&in->line, &in->line_cap, in->jf)) >= 0) {
        in->lineno++;
        size_t n = (size_t)k;
        while (n && (in->line[n - 1] == '\n' || in->line[n - 1] == '\r' || in->line[n - 1] == ' ')) n--;
        if (!n) continue; // blank lines separate nothing; skip them
        skpo_err e = {0};
        if (skpo_rec_from_json(in->line, n, r, &e))
            skpo_die("%s at line %llu of '%s'", e.msg, (unsigned long long)in->lineno, name);
        return true;
    }
    if (ferror(in->jf)) skpo_die("cannot read '%s': %s", name, strerror(errno));
    return false;
}

bool cat_in_next(cat_in *in, skpo_rec *r) {
    while (in->cur < in->npaths) {
        if (!in->rd && !in->jf) open_next(in);
        if (in->json) {
            if (next_json(in, r)) return true;
        } else {
            skpo_err e = {0};
            skpo_status st = skpo_reader_next(in->rd, r, &e);
            if (st == SKPO_OK) return true;
            if (st != SKPO_EOF) skpo_die("%s", e.msg);
        }
        close_cur(in);
    }
    return false;
}

void cat_in_free(cat_in *in) {
    if (in->rd || in->jf) close_cur(in);
    free(in->line);
}

// --- --where ----------------------------------------------------------------------

void cat_where_check(const skpo_strlist *where, const char *synopsis) {
    for (int i = 0; i < where->n; i++) {
        const char *eq = strchr(where->v[i], '=');
        if (!eq || eq == where->v[i]) skpo_cli_usage_error(synopsis, "--where: '%s' is not FIELD=VALUE", where->v[i]);
    }
}

// Does value v equal the text `want`? Numbers compare as numbers, anything
// else by its JSON text (so --where 'tokens=[1,2]' works).
static bool value_is(const skpo_value *v, const char *want, skpo_jbuf *tmp) {
    char *end;
    switch (v->type) {
    case SKPO_V_STR: return strlen(want) == v->len && !memcmp(v->data, want, v->len);
    case SKPO_V_INT: {
        errno = 0;
        long long x = strtoll(want, &end, 10);
        if (!errno && *want && !*end) return x == v->i;
        double d = strtod(want, &end);
        return *want && !*end && d == (double)v->i;
    }
    case SKPO_V_F32:
    case SKPO_V_F64: {
        double d = strtod(want, &end);
        if (!*want || *end) return false;
        return v->type == SKPO_V_F32 ? (float)d == (float)v->f : d == v->f;
    }
    case SKPO_V_BOOL: return !strcmp(want, v->b ? "true" : "false");
    case SKPO_V_NIL: return !strcmp(want, "null");
    default:
        tmp->n = 0;
        skpo_value_to_json(v, tmp);
        return !strcmp(skpo_jbuf_cstr(tmp), want);
    }
}

bool cat_where_match(const skpo_rec *r, const skpo_strlist *where, skpo_jbuf *tmp) {
    for (int i = 0; i < where->n; i++) {
        const char *w = where->v[i], *eq = strchr(w, '=');
        char key[256];
        size_t kl = (size_t)(eq - w);
        if (kl >= sizeof key) return false;
        memcpy(key, w, kl);
        key[kl] = 0;
        const skpo_value *v = skpo_rec_get(r, key);
        if (!v || !value_is(v, eq + 1, tmp)) return false;
    }
    return true;
}
