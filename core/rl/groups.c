/*
 * groups.c - see groups.h. One pass collects the groups (pid -> index in
 * first-seen order, skpo_strmap); the filters then mark groups and copy the
 * mark to the records.
 */
#include "rl/groups.h"
#include "base/strmap.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct group {
    int has_first, mixed;
    int first_kind;      // 1: correct, 0: reward
    double first;        // its value
    size_t n, correct;   // records, records with correct = true
} group;

typedef struct groups {
    skpo_strmap map;     // pid -> index into g (borrowed keys: the records outlive it)
    group *g;
    size_t n;
    size_t *of;          // (nrec) group index of each full record, SIZE_MAX for the others
} groups;

static void outcome(const skpo_rec *r, int *kind, double *v) {
    bool c;
    if (skpo_rec_bool(r, F_CORRECT, &c)) {
        *kind = 1, *v = c;
        return;
    }
    *kind = 0, *v = 0;
    skpo_rec_float(r, F_REWARD, v);
}

static void groups_build(groups *G, const skpo_rec *recs, size_t n) {
    memset(G, 0, sizeof *G);
    skpo_strmap_init(&G->map, SKPO_STRMAP_BORROW);
    G->g = skpo_xcalloc(n + 1, sizeof *G->g);
    G->of = skpo_xmalloc((n + 1) * sizeof *G->of);
    for (size_t i = 0; i < n; i++) {
        const char *pid = skpo_rec_str(&recs[i], F_PID);
        G->of[i] = SIZE_MAX;
        if (!skpo_rec_is_kind(&recs[i], SKPO_KIND_FULL)) continue;
        size_t k = *skpo_strmap_add(&G->map, pid ? pid : "", G->n, NULL);
        if (k == G->n) G->n++;
        G->of[i] = k;
        group *g = &G->g[k];
        int kind;
        double v;
        outcome(&recs[i], &kind, &v);
        if (!g->has_first) g->has_first = 1, g->first_kind = kind, g->first = v;
        else if (kind != g->first_kind || v != g->first) g->mixed = 1;
        g->n++;
        bool c;
        g->correct += skpo_rec_bool(&recs[i], F_CORRECT, &c) && c;
    }
}

static void groups_free(groups *G) {
    skpo_strmap_free(&G->map);
    free(G->g);
    free(G->of);
}

// keep[i] = the mark of record i's group (other kinds: 1).
static void mark_records(const groups *G, const unsigned char *gkeep, size_t n, unsigned char *keep) {
    for (size_t i = 0; i < n; i++) keep[i] = G->of[i] == SIZE_MAX ? 1 : gkeep[G->of[i]];
}

size_t skpo_groups_count_informative(const skpo_rec *recs, size_t n) {
    groups G;
    groups_build(&G, recs, n);
    size_t k = 0;
    for (size_t j = 0; j < G.n; j++) k += G.g[j].mixed;
    groups_free(&G);
    return k;
}

void skpo_groups_keep_informative(const skpo_rec *recs, size_t n, size_t max_groups, unsigned char *keep) {
    groups G;
    groups_build(&G, recs, n);
    unsigned char *gk = skpo_xmalloc(G.n + 1);
    size_t k = 0;
    for (size_t j = 0; j < G.n; j++) gk[j] = !G.g[j].mixed || ++k <= max_groups;
    mark_records(&G, gk, n, keep);
    free(gk);
    groups_free(&G);
}

void skpo_groups_keep_accuracy(const skpo_rec *recs, size_t n, size_t max_groups, double lo, double hi,
                               unsigned char *keep) {
    groups G;
    groups_build(&G, recs, n);
    unsigned char *gk = skpo_xcalloc(G.n + 1, 1);
    size_t m = 0;
    for (int pass = 1; pass >= 0; pass--)
        for (size_t j = 0; j < G.n && m < max_groups; j++) {
            double a = (double)G.g[j].correct / (double)G.g[j].n;
            int in = a >= lo - 1e-9 && a <= hi + 1e-9;
            if (in == pass) gk[j] = 1, m++;
        }
    mark_records(&G, gk, n, keep);
    free(gk);
    groups_free(&G);
}
