/*
 * segment.c - see segment.h.
 */
#include "rl/segment.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// --- split position and candidate selection ----------------------------------------------

int skpo_seg_cut(double L, skpo_rng *r) {
    SKPO_ASSERT(isfinite(L) && L > 0 && L < 1e9);
    long lo = (long)ceil(L / 6), hi = (long)floor(L / 2);
    if (lo < 1) lo = 1;
    if (hi < lo) return (int)lo;
    return (int)skpo_rng_int(r, lo, hi);
}

int skpo_seg_cut_fixed(double L, int64_t step) {
    SKPO_ASSERT(isfinite(L) && L > 0 && L < 1e9);
    long lo = (long)ceil(L / 6), hi = (long)floor(L / 2);
    if (lo < 1) lo = 1;
    if (hi < lo) hi = lo;
    return (int)(step % 2 ? lo : hi);
}

int skpo_seg_cut_frac(double L, double f) {
    SKPO_ASSERT(isfinite(L) && L > 0 && L < 1e9 && f > 0 && f <= 1);
    long t = lround(f * L);
    return (int)(t < 1 ? 1 : t);
}

int skpo_seg_len(int n, int t_q, int stopped) {
    SKPO_ASSERT(n >= 0 && t_q >= 1 && n <= t_q);
    return stopped ? n / 2 : n;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int skpo_median_pick(const double *d, int g) {
    SKPO_ASSERT(d && g >= 1);
    double *s = skpo_xmalloc((size_t)g * sizeof *s);
    memcpy(s, d, (size_t)g * sizeof *s);
    qsort(s, (size_t)g, sizeof *s, cmp_double);
    double med = g % 2 ? s[g / 2] : 0.5 * (s[g / 2 - 1] + s[g / 2]);
    free(s);
    // With even g the two middle values are equally far from the median in
    // exact arithmetic; rounding must not decide between them (it differs
    // with batch composition), so distances within 1e-12 relative are ties.
    double tol = 1e-12 * (fabs(med) > 1 ? fabs(med) : 1);
    int best = 0;
    for (int i = 1; i < g; i++)
        if (fabs(d[i] - med) < fabs(d[best] - med) - tol) best = i;
    return best;
}

int skpo_extreme_pick(const double *d, int g, int want_max) {
    SKPO_ASSERT(d && g >= 1);
    int best = 0;
    for (int i = 1; i < g; i++)
        if (want_max ? d[i] > d[best] : d[i] < d[best]) best = i;
    return best;
}

double skpo_mean_nll(const float *logp, int n) {
    if (n <= 0) return 0;
    double s = 0;
    for (int i = 0; i < n; i++) s -= logp[i];
    return s / n;
}

// --- the prioritized draw of prompts ------------------------------------------------------

skpo_status skpo_prio_draw(const double *w, size_t n, size_t B, skpo_rng *r, size_t *out, skpo_err *err) {
    size_t npos = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(w[i]) || w[i] < 0)
            return skpo_err_set(err, SKPO_ENUMERIC, "sampling weight %zu is %g (want finite, >= 0)", i, w[i]);
        npos += w[i] > 0;
    }
    if (B > npos)
        return skpo_err_set(err, SKPO_ERANGE, "cannot draw %zu distinct prompts: %zu have positive weight", B, npos);
    unsigned char *taken = skpo_xcalloc(n ? n : 1, 1);
    for (size_t b = 0; b < B; b++) {
        // Recompute the remaining total each draw so rounding never accumulates.
        double rem = 0;
        for (size_t i = 0; i < n; i++) if (!taken[i]) rem += w[i];
        double target = skpo_rng_uniform(r) * rem, cum = 0;
        size_t pick = n, last = n;
        for (size_t i = 0; i < n; i++) {
            if (taken[i] || w[i] <= 0) continue;
            cum += w[i];
            last = i;
            if (cum > target) { pick = i; break; }
        }
        if (pick == n) pick = last;
        taken[pick] = 1;
        out[b] = pick;
    }
    free(taken);
    return SKPO_OK;
}
