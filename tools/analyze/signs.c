/*
 * signs.c - empirical sign consistency (docs/analyses.md, analysis 2).
 *
 * A group is the G segments cut at one position from the G responses of one
 * source group (same src_gid, label and rel); each segment has N scored
 * continuations. The reference value of a segment is the mean outcome of its
 * continuations. For an estimate from k continuations (one block of k) the
 * reference leaves that block out (mean of the other N - k), so estimate and
 * reference are independent; every disjoint block b = 0 .. N/k - 1 is one
 * comparison. The GRPO row compares the source responses' own outcomes (one
 * sample per segment, independent of the continuations) with the reference
 * of all N. Signs are those of group-normalised values (v - mean), as in
 * core/rl/signsim.h; a comparison whose reference values are all equal has no
 * true sign and is counted under no_ref_signal instead.
 * adv_mae (the paper's Fig. 8 against k) is the mean absolute difference between
 * the estimate's and the reference's centred advantages (v_i - mean_j v_j, on the
 * success-rate scale; the std division is left out so that a group of equal
 * estimates has advantage 0, not 0/0), over every segment of every comparison,
 * including those whose reference has no signal (true advantages all 0).
 * Rows are per (label, position) for all groups ("all") and split by the
 * number c of correct source responses ("c=3/8"), as in the paper's Fig. 1.
 */
#include "analyze.h"
#include "rl/signsim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct sgroup {
    size_t *m;     // prefix indices
    int n, cap;
} sgroup;

enum { C_K, C_CMP, C_RIGHT_ALL, C_RIGHT, C_SIGNS, C_NOREF, C_AE, C_AEN, C_NCOLS };

static void tally(rows *out, const prefix *p0, const char *group, long k, const double *est, const double *ref, int G) {
    int all_right, degenerate = 1;
    for (int i = 1; i < G; i++) degenerate &= ref[i] == ref[0];
    row *r = rows_get(out, p0->label, p0->rel, group);
    r->v[C_K] = (double)k;
    double me = 0, mr = 0;
    for (int i = 0; i < G; i++) { me += est[i]; mr += ref[i]; }
    me /= G, mr /= G;
    for (int i = 0; i < G; i++) r->v[C_AE] += fabs((est[i] - me) - (ref[i] - mr));
    r->v[C_AEN] += G;
    if (degenerate) { r->v[C_NOREF]++; return; }
    int right = skpo_signsim_group_real(est, ref, G, 1e-9, &all_right);
    r->v[C_CMP]++;
    r->v[C_RIGHT_ALL] += all_right;
    r->v[C_RIGHT] += right;
    r->v[C_SIGNS] += G;
}

// One comparison under both the "all" and the per-outcome-count sub-group.
static void tally2(rows *out, const prefix *p0, const char *method, const char *cgroup, long k, const double *est,
                   const double *ref, int G) {
    char g[96];
    snprintf(g, sizeof g, "%s", method);
    tally(out, p0, g, k, est, ref, G);
    if (cgroup) {
        snprintf(g, sizeof g, "%s:%s", method, cgroup);
        tally(out, p0, g, k, est, ref, G);
    }
}

static void one_group(const prefixes *ps, const sgroup *sg, const long *ks, int nks, rows *out) {
    int G = sg->n, N = ps->p[sg->m[0]].n, c = 0, known = 1;
    if (G < 2) return;
    for (int i = 0; i < G; i++) {
        const prefix *p = &ps->p[sg->m[i]];
        if (p->n < N) N = p->n;
        if (p->src_ok < 0) known = 0;
        else c += p->src_ok;
    }
    if (N < 2) return;
    const prefix *p0 = &ps->p[sg->m[0]];
    char cg[48];
    snprintf(cg, sizeof cg, "c=%d/%d", c, G);
    double *est = skpo_xmalloc((size_t)G * sizeof *est), *ref = skpo_xmalloc((size_t)G * sizeof *ref);
    double *tot = skpo_xcalloc((size_t)G, sizeof *tot);
    for (int i = 0; i < G; i++)
        for (int j = 0; j < N; j++) tot[i] += ps->p[sg->m[i]].ok[j];
    if (known) {
        for (int i = 0; i < G; i++) { est[i] = ps->p[sg->m[i]].src_ok; ref[i] = tot[i] / N; }
        tally2(out, p0, "grpo", cg, 1, est, ref, G);
    }
    for (int q = 0; q < nks; q++) {
        long k = ks[q];
        if (2 * k > N) continue; // the leave-out reference must have at least k continuations
        char method[40];
        snprintf(method, sizeof method, "mc k=%ld", k);
        for (long b = 0; b + k <= N; b += k) {
            for (int i = 0; i < G; i++) {
                const prefix *p = &ps->p[sg->m[i]];
                double s = 0;
                for (long j = b; j < b + k; j++) s += p->ok[j];
                est[i] = s / (double)k;
                ref[i] = (tot[i] - s) / (double)(N - k);
            }
            tally2(out, p0, method, known ? cg : NULL, k, est, ref, G);
        }
    }
    free(est);
    free(ref);
    free(tot);
}

void analyze_signs(const prefixes *ps, const long *ks, int nks, rows *out) {
    skpo_strmap idx;
    skpo_strmap_init(&idx, SKPO_STRMAP_COPY);
    sgroup *gs = NULL;
    size_t ng = 0, cap = 0;
    for (size_t i = 0; i < ps->n; i++) {
        const prefix *p = &ps->p[i];
        char key[2048];
        if ((size_t)snprintf(key, sizeof key, "%s\x1f%s\x1f%.17g", p->label, p->src_gid, p->rel) >= sizeof key)
            skpo_die("source group '%.40s...' too long", p->src_gid);
        int added;
        size_t g = *skpo_strmap_add(&idx, key, ng, &added);
        if (added) {
            skpo_xgrow((void **)&gs, &cap, ng + 1, sizeof *gs);
            memset(&gs[ng++], 0, sizeof *gs);
        }
        sgroup *s = &gs[g];
        if (s->n == s->cap) {
            s->cap = s->cap ? 2 * s->cap : 8;
            s->m = skpo_xrealloc(s->m, (size_t)s->cap * sizeof *s->m);
        }
        s->m[s->n++] = i;
    }
    for (size_t g = 0; g < ng; g++) one_group(ps, &gs[g], ks, nks, out);
    for (size_t g = 0; g < ng; g++) free(gs[g].m);
    free(gs);
    skpo_strmap_free(&idx);
    // finalise: comparisons, fraction all right, sign accuracy, share without reference signal
    out->what = "signs";
    const char *cols[] = {"k", "comparisons", "correct", "sign_acc", "no_ref_signal", "adv_mae"};
    out->ncols = 6;
    memcpy(out->cols, cols, sizeof cols);
    for (size_t i = 0; i < out->n; i++) {
        double *v = out->r[i].v, cmp = v[C_CMP], noref = v[C_NOREF];
        double fin[6] = {v[C_K], cmp, cmp ? v[C_RIGHT_ALL] / cmp : 0, v[C_SIGNS] ? v[C_RIGHT] / v[C_SIGNS] : 0,
                         cmp + noref ? noref / (cmp + noref) : 0, v[C_AEN] ? v[C_AE] / v[C_AEN] : 0};
        memset(v, 0, ROW_MAX_COLS * sizeof *v);
        memcpy(v, fin, sizeof fin);
    }
}
