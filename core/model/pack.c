/*
 * pack.c - see pack.h. Grouping: a hash of each prompt, then a linear look-up
 * among the groups opened so far (a micro-batch holds tens to hundreds of
 * sequences); token comparison decides, the hash only skips.
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

static void group(const skpo_seq *seqs, int nseq, int pack, group_plan *g) {
    size_t n = nseq ? (size_t)nseq : 1;
    g->grp = skpo_xmalloc(n * sizeof(int));
    g->lead = skpo_xmalloc(n * sizeof(int));
    g->size = skpo_xmalloc(n * sizeof(int));
    g->share = skpo_xmalloc(n * sizeof(int));
    g->ngroups = 0;
    uint64_t *h = skpo_xmalloc(n * sizeof *h);
    for (int i = 0; i < nseq; i++) {
        const skpo_seq *s = &seqs[i];
        h[i] = skpo_hash_bytes(0, s->ids, (size_t)s->start * sizeof *s->ids);
        int k = -1;
        for (int q = 0; pack && q < g->ngroups && k < 0; q++) {
            const skpo_seq *l = &seqs[g->lead[q]];
            if (h[g->lead[q]] == h[i] && l->start == s->start && !memcmp(l->ids, s->ids, (size_t)s->start * sizeof *s->ids))
                k = q;
        }
        if (k < 0) {
            k = g->ngroups++;
            g->lead[k] = i, g->size[k] = 0, g->share[k] = s->n;
        }
        g->grp[i] = k;
        g->size[k]++;
        int c = lcp(&seqs[g->lead[k]], s);   // members share at least the prompt
        if (c < g->share[k]) g->share[k] = c;
        if (s->n - 1 < g->share[k]) g->share[k] = s->n - 1;   // every continuation keeps a token
    }
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
    free(h);
}

void skpo_pack_count(const skpo_seq *seqs, int nseq, int pack, long *raw, long *packed) {
    group_plan g;
    group(seqs, nseq, pack, &g);
    *raw = *packed = 0;
    for (int i = 0; i < nseq; i++) {
        *raw += seqs[i].n;
        *packed += seqs[i].n - g.share[g.grp[i]];
    }
    for (int k = 0; k < g.ngroups; k++) *packed += g.share[k];
    group_free(&g);
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
