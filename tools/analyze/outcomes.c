/*
 * outcomes.c - shortcut validation and implicit advantage (docs/analyses.md,
 * analyses 3 and 4): per-segment outcome statistics aggregated per label
 * (layout or method) and relative position.
 */
#include "analyze.h"
#include "base/common.h"
#include "verify/evalstats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double mean_ok(const prefix *p) {
    double s = 0;
    for (int j = 0; j < p->n; j++) s += p->ok[j];
    return p->n ? s / p->n : 0;
}

// Distinct extracted answers among the continuations, equal answers in another
// form counted once (the math verifier's equality); a missing answer is one value.
static int distinct_preds(const prefix *p) {
    if (p->n <= 0) return 0;
    long *cls = skpo_xmalloc(sizeof(long) * (size_t)p->n);
    skpo_answer_classes((const char *const *)p->pred, p->n, cls);
    int d = 0, none = 0;
    for (int j = 0; j < p->n; j++) {
        if (cls[j] < 0) none = 1;
        else d += cls[j] == j;
    }
    free(cls);
    return d + none;
}

enum { S_PREF, S_DIST, S_SAME, S_ACC, S_LEN, S_SEG, S_CONT };

void analyze_shortcut(const prefixes *ps, rows *out) {
    for (size_t i = 0; i < ps->n; i++) {
        const prefix *p = &ps->p[i];
        if (p->n == 0) continue;
        row *r = rows_get(out, p->label, p->rel, "all");
        int same = 1;
        double len = 0;
        for (int j = 0; j < p->n; j++) { same &= p->ok[j] == p->ok[0]; len += (double)p->len[j]; }
        r->v[S_PREF]++;
        r->v[S_DIST] += distinct_preds(p);
        r->v[S_SAME] += same;
        r->v[S_ACC] += mean_ok(p);
        r->v[S_LEN] += len / p->n;
        r->v[S_SEG] += p->seg > 0 ? (double)p->seg : 0;
        r->v[S_CONT] += p->n;
    }
    out->what = "shortcut";
    const char *cols[] = {"segments", "distinct", "all_same", "accuracy", "length", "seg_len", "conts"};
    out->ncols = 7;
    memcpy(out->cols, cols, sizeof cols);
    for (size_t i = 0; i < out->n; i++) {
        double *v = out->r[i].v, n = v[S_PREF];
        for (int c = S_DIST; c <= S_CONT; c++) v[c] /= n; // means per segment
    }
}

// --- implicit advantage ---------------------------------------------------------------

typedef struct cell {          // one (problem, position)
    const char *pid;
    double rel;
    double *sum;               // (nlabels) success rate summed over that label's segments
    int *cnt;                  // (nlabels)
} cell;

enum { I_CELLS, I_RATE, I_CENTER, I_Z, I_SEGS };

void analyze_implicit(const prefixes *ps, rows *out) {
    skpo_strmap labels = {0}, cells; // labels borrows the prefixes' strings; cells' keys are built below
    skpo_strmap_init(&cells, SKPO_STRMAP_COPY);
    const char **lname = NULL;
    size_t nl = 0, lcap = 0, nc = 0, ccap = 0;
    for (size_t i = 0; i < ps->n; i++)
        if (!skpo_strmap_get(&labels, ps->p[i].label)) {
            skpo_strmap_add(&labels, ps->p[i].label, nl, NULL);
            skpo_xgrow((void **)&lname, &lcap, nl + 1, sizeof *lname);
            lname[nl++] = ps->p[i].label;
        }
    cell *cs = NULL;
    for (size_t i = 0; i < ps->n; i++) {
        const prefix *p = &ps->p[i];
        if (p->n == 0) continue;
        char key[2048];
        if ((size_t)snprintf(key, sizeof key, "%s\x1f%.17g", p->pid, p->rel) >= sizeof key)
            skpo_die("pid '%.40s...' too long", p->pid);
        int added;
        size_t c = *skpo_strmap_add(&cells, key, nc, &added);
        if (added) {
            skpo_xgrow((void **)&cs, &ccap, nc + 1, sizeof *cs);
            cs[nc++] = (cell){p->pid, p->rel, skpo_xcalloc(nl, sizeof(double)), skpo_xcalloc(nl, sizeof(int))};
        }
        size_t l = *skpo_strmap_get(&labels, p->label);
        cs[c].sum[l] += mean_ok(p);
        cs[c].cnt[l]++;
    }
    // per cell: label rates, normalised across the labels present (>= 2 needed)
    double *rate = skpo_xmalloc((nl + 1) * sizeof *rate);
    for (size_t c = 0; c < nc; c++) {
        int present = 0;
        double m = 0, var = 0;
        for (size_t l = 0; l < nl; l++)
            if (cs[c].cnt[l]) { rate[l] = cs[c].sum[l] / cs[c].cnt[l]; m += rate[l]; present++; }
        if (present >= 2) {
            m /= present;
            for (size_t l = 0; l < nl; l++)
                if (cs[c].cnt[l]) var += (rate[l] - m) * (rate[l] - m);
            double sd = sqrt(var / present);
            for (size_t l = 0; l < nl; l++) {
                if (!cs[c].cnt[l]) continue;
                row *r = rows_get(out, lname[l], cs[c].rel, "all");
                r->v[I_CELLS]++;
                r->v[I_RATE] += rate[l];
                r->v[I_CENTER] += rate[l] - m;
                r->v[I_Z] += (rate[l] - m) / (sd + 1e-6);
                r->v[I_SEGS] += cs[c].cnt[l];
            }
        }
        free(cs[c].sum);
        free(cs[c].cnt);
    }
    free(rate);
    free(cs);
    free(lname);
    skpo_strmap_free(&labels);
    skpo_strmap_free(&cells);
    out->what = "implicit";
    const char *cols[] = {"problems", "rate", "adv_center", "adv_z", "segments"};
    out->ncols = 5;
    memcpy(out->cols, cols, sizeof cols);
    for (size_t i = 0; i < out->n; i++) {
        double *v = out->r[i].v, n = v[I_CELLS];
        for (int c = I_RATE; c <= I_Z; c++) v[c] /= n;
    }
}
