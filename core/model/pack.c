/*
 * pack.c - see pack.h. Grouping: a hash of each prompt, then a linear look-up
 * among the groups opened so far (a micro-batch holds tens to hundreds of
 * sequences); token comparison decides, the hash only skips. The plan and the
 * counts both group through one tally (skpo_pack_tally_add), so the size the
 * update budgets a micro-batch by is the size the pass computes.
 */
#include "model/pack.h"

#include "base/strmap.h"

#include <stdlib.h>
#include <string.h>

typedef struct group_plan {
    int *grp;     // (nseq) group of each sequence
    int *lead;    // (ngroups) first member
    int *size;    // (ngroups) members
    int *share;   // (ngroups) prefix length P (0 when the group is one sequence)
    int ngroups;
} group_plan;

static int lcp(const skpo_seq *a, const skpo_seq *b) {
    int n = a->n < b->n ? a->n : b->n, t = 0;
    while (t < n && a->ids[t] == b->ids[t]) t++;
    return t;
}

static void group_free(group_plan *g) {
    free(g->grp);
    free(g->lead);
    free(g->size);
    free(g->share);
}

void skpo_pack_tally_init(skpo_pack_tally *t, int pack) {
    memset(t, 0, sizeof *t);
    t->pack = pack;
}

void skpo_pack_tally_free(skpo_pack_tally *t) {
    free(t->lead);
    free(t->first);
    free(t->hash);
    free(t->size);
    free(t->share);
    free(t->sum);
    skpo_pack_tally_init(t, t->pack);
}

// Tokens group k computes: the prefix once, then each member's own part; a
// group of one, or one whose members share no token, is its members whole.
static long group_tokens(const skpo_pack_tally *t, int k) {
    return t->size[k] >= 2 && t->share[k] >= 1 ? t->sum[k] - (long)(t->size[k] - 1) * t->share[k] : t->sum[k];
}

long skpo_pack_tally_group(const skpo_pack_tally *t, int k) { return group_tokens(t, k); }

int skpo_pack_tally_add(skpo_pack_tally *t, const skpo_seq *s) {
    // unpacked, every sequence is a group of its own: no prompt to hash
    uint64_t h = t->pack ? skpo_hash_bytes(0, s->ids, (size_t)s->start * sizeof *s->ids) : 0;
    int k = -1;
    for (int q = 0; t->pack && q < t->ngroups && k < 0; q++) {
        const skpo_seq *l = &t->lead[q];
        if (t->hash[q] == h && l->start == s->start && !memcmp(l->ids, s->ids, (size_t)s->start * sizeof *s->ids))
            k = q;
    }
    if (k < 0) {
        if (t->ngroups == t->cap) {
            t->cap = t->cap ? 2 * t->cap : 16;
            t->lead = skpo_xrealloc(t->lead, (size_t)t->cap * sizeof *t->lead);
            t->first = skpo_xrealloc(t->first, (size_t)t->cap * sizeof *t->first);
            t->hash = skpo_xrealloc(t->hash, (size_t)t->cap * sizeof *t->hash);
            t->size = skpo_xrealloc(t->size, (size_t)t->cap * sizeof *t->size);
            t->share = skpo_xrealloc(t->share, (size_t)t->cap * sizeof *t->share);
            t->sum = skpo_xrealloc(t->sum, (size_t)t->cap * sizeof *t->sum);
        }
        k = t->ngroups++;
        t->lead[k] = *s, t->first[k] = t->nseq, t->hash[k] = h;
        t->size[k] = 0, t->share[k] = s->n, t->sum[k] = 0;
    }
    long before = t->size[k] ? group_tokens(t, k) : 0;
    t->size[k]++;
    t->sum[k] += s->n;
    int c = t->size[k] > 1 ? lcp(&t->lead[k], s) : s->n;   // members share at least the prompt
    if (c < t->share[k]) t->share[k] = c;
    if (s->n - 1 < t->share[k]) t->share[k] = s->n - 1;   // every continuation keeps a token
    t->packed += group_tokens(t, k) - before;
    t->raw += s->n;
    t->nseq++;
    return k;
}

static void group(const skpo_seq *seqs, int nseq, int pack, group_plan *g) {
    size_t n = nseq ? (size_t)nseq : 1;
    g->grp = skpo_xmalloc(n * sizeof(int));
    g->lead = skpo_xmalloc(n * sizeof(int));
    g->size = skpo_xmalloc(n * sizeof(int));
    g->share = skpo_xmalloc(n * sizeof(int));
    skpo_pack_tally t;
    skpo_pack_tally_init(&t, pack);
    for (int i = 0; i < nseq; i++) g->grp[i] = skpo_pack_tally_add(&t, &seqs[i]);
    g->ngroups = t.ngroups;
    for (int k = 0; k < g->ngroups; k++) g->lead[k] = t.first[k], g->size[k] = t.size[k], g->share[k] = t.share[k];
    skpo_pack_tally_free(&t);
    for (int k = 0; k < g->ngroups; k++)
        if (g->size[k] < 2 || g->share[k] < 1) g->share[k] = 0;
    // a group whose prefix is empty is no group: its members become rows of their own
    for (int i = 0; i < nseq; i++) {
        int k = g->grp[i];
        if (g->size[k] >= 2 && g->share[k] == 0 && g->lead[k] != i) {
            int r = g->ngroups++;
            g->lead[r] = i, g->size[r] = 1, g->share[r] = 0, g->grp[i] = r;
        }
    }
}

void skpo_pack_count(const skpo_seq *seqs, int nseq, int pack, long *raw, long *packed) {
    skpo_pack_tally t;
    skpo_pack_tally_init(&t, pack);
    for (int i = 0; i < nseq; i++) skpo_pack_tally_add(&t, &seqs[i]);
    *raw = t.raw, *packed = t.packed;
    skpo_pack_tally_free(&t);
}

void skpo_pack_plan(const skpo_seq *seqs, int nseq, int pack, skpo_pack *p) {
    group_plan g;
    group(seqs, nseq, pack, &g);
    memset(p, 0, sizeof *p);
    p->nseq = nseq;
    p->nrows = g.ngroups;
    for (int i = 0; i < nseq; i++) {
        p->raw += seqs[i].n;
        p->N += seqs[i].n - g.share[g.grp[i]];
        p->S += seqs[i].n - seqs[i].start;
    }
    for (int k = 0; k < g.ngroups; k++) p->N += g.share[k];
    size_t N = p->N ? (size_t)p->N : 1, S = p->S ? (size_t)p->S : 1;
    p->row_off = skpo_xmalloc(((size_t)g.ngroups + 1) * sizeof(int));
    p->ids = skpo_xmalloc(N * sizeof *p->ids);
    p->pos = skpo_xmalloc(N * sizeof(int));
    p->seg = skpo_xmalloc(N * sizeof(int));
    p->srow = skpo_xmalloc(S * sizeof(int));
    p->stgt = skpo_xmalloc(S * sizeof *p->stgt);
    // rows in order of their first member; each member's continuation after the prefix, in sequence order
    int *cont = skpo_xmalloc((nseq ? (size_t)nseq : 1) * sizeof(int));   // token where sequence i's own part starts
    int *nseg = skpo_xcalloc((size_t)(g.ngroups ? g.ngroups : 1), sizeof(int));
    int r = 0;
    for (int k = 0; k < g.ngroups; k++) {
        p->row_off[k] = r;
        const skpo_seq *l = &seqs[g.lead[k]];
        int P = g.share[k];
        for (int t = 0; t < P; t++) p->ids[r + t] = l->ids[t], p->pos[r + t] = t, p->seg[r + t] = 0;
        r += P;
        for (int i = g.lead[k]; i < nseq; i++) {
            if (g.grp[i] != k) continue;
            const skpo_seq *s = &seqs[i];
            int sg = P ? ++nseg[k] : 0;
            cont[i] = r;
            for (int t = P; t < s->n; t++, r++) p->ids[r] = s->ids[t], p->pos[r] = t, p->seg[r] = sg;
        }
    }
    p->row_off[g.ngroups] = r;
    SKPO_ASSERT(r == p->N);
    int sk = 0;
    for (int i = 0; i < nseq; i++) {
        const skpo_seq *s = &seqs[i];
        int P = g.share[g.grp[i]], a = p->row_off[g.grp[i]];
        for (int t = s->start; t < s->n; t++, sk++) {   // token t is predicted by the output at position t - 1
            p->srow[sk] = t - 1 < P ? a + t - 1 : cont[i] + (t - 1 - P);
            p->stgt[sk] = s->ids[t];
        }
        if (P) p->packed = 1;
    }
    free(cont);
    free(nseg);
    group_free(&g);
}

void skpo_pack_free(skpo_pack *p) {
    free(p->row_off);
    free(p->ids);
    free(p->pos);
    free(p->seg);
    free(p->srow);
    free(p->stgt);
    memset(p, 0, sizeof *p);
}
