/*
 * rows.c - the result table of skpo-analyze (analyze.h, "result rows"): rows
 * keyed by (label, group, position), filled by the analyses (signs.c,
 * outcomes.c) and printed by main.c. Its own file so that the analyses and
 * main.c both depend on it and not on each other.
 */
#include "analyze.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

row *rows_get(rows *t, const char *label, double rel, const char *group) {
    char key[2048];
    if ((size_t)snprintf(key, sizeof key, "%s\x1f%s\x1f%.17g", label, group, rel) >= sizeof key)
        skpo_die("label '%.40s...' too long for a table row", label);
    const size_t *i = skpo_strmap_get(&t->idx, key);
    if (i) return &t->r[*i];
    skpo_xgrow((void **)&t->r, &t->cap, t->n + 1, sizeof *t->r);
    row *r = &t->r[t->n];
    memset(r, 0, sizeof *r);
    r->label = skpo_xstrdup(label);
    r->group = skpo_xstrdup(group);
    r->rel = rel;
    skpo_strmap_add(&t->idx, key, t->n++, NULL);
    return r;
}

static int row_cmp(const void *a, const void *b) {
    const row *x = a, *y = b;
    int c = strcmp(x->label, y->label);
    if (!c) c = strcmp(x->group, y->group);
    if (!c) c = (x->rel > y->rel) - (x->rel < y->rel);
    return c;
}

void rows_sort(rows *t) {
    if (t->n) qsort(t->r, t->n, sizeof *t->r, row_cmp);
    skpo_strmap_free(&t->idx); // indices are stale now
}

void rows_free(rows *t) {
    for (size_t i = 0; i < t->n; i++) { free(t->r[i].label); free(t->r[i].group); }
    free(t->r);
    skpo_strmap_free(&t->idx);
}
