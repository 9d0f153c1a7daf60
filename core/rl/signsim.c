/*
 * signsim.c - the sign-consistency simulation of signsim.h: RNG, binomial
 * sampling, the per-group sign test and the OpenMP trial loop.
 */
#include "rl/signsim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// --- random numbers ---------------------------------------------------------------

void skpo_signsim_rng_seed(skpo_rng *r, uint64_t seed, uint64_t stream) {
    // seed_derive mixes seed, label and stream, so (seed, t) and (seed + 1, t - 1)
    // give unrelated states.
    skpo_rng_seed(r, skpo_seed_derive(seed, "signsim", stream));
}

// Marsaglia-Tsang (2000) for shape >= 1; shape < 1 boosted by U^(1/shape).
static double gamma_draw(skpo_rng *r, double shape) {
    if (shape < 1.0) {
        double u = 1.0 - skpo_rng_uniform(r);
        return gamma_draw(r, shape + 1.0) * pow(u, 1.0 / shape);
    }
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = skpo_rng_normal(r), v = 1.0 + c * x;
        if (v <= 0) continue;
        v = v * v * v;
        double u = 1.0 - skpo_rng_uniform(r);
        if (log(u) < 0.5 * x * x + d - d * v + d * log(v)) return d * v;
    }
}

// --- binomial --------------------------------------------------------------------------

static double lgam(double x) {
    int sign;
    return lgamma_r(x, &sign); // lgamma() writes the global signgam: not thread-safe
}

// Inversion by sequential search; expected n p + 1 steps, used for n p < 10 (p <= 1/2).
static int64_t binom_inversion(skpo_rng *r, int64_t n, double p) {
    double q = 1.0 - p, s = p / q, a = (double)(n + 1) * s;
    for (;;) {
        double f = pow(q, (double)n), u = skpo_rng_uniform(r);
        for (int64_t k = 0; k <= n; k++) {
            if (u < f) return k;
            u -= f;
            f *= a / (double)(k + 1) - s;
        }
        // u fell into the rounding gap at the far tail: draw again (probability ~1e-16)
    }
}

// Hormann (1993) BTRS, for n p >= 10 with p <= 1/2.
static int64_t binom_btrs(skpo_rng *r, int64_t n, double p) {
    double q = 1.0 - p, spq = sqrt((double)n * p * q);
    double b = 1.15 + 2.53 * spq, a = -0.0873 + 0.0248 * b + 0.01 * p, c = (double)n * p + 0.5;
    double vr = 0.92 - 4.2 / b, alpha = (2.83 + 5.1 / b) * spq;
    double m = floor((double)(n + 1) * p), lpq = 0, h = 0;
    int slow_ready = 0; // the exact test's constants cost two lgammas: only when the squeeze fails
    for (;;) {
        double u = skpo_rng_uniform(r) - 0.5, v = skpo_rng_uniform(r);
        double us = 0.5 - fabs(u);
        double k = floor((2 * a / us + b) * u + c);
        if (k < 0 || k > (double)n) continue;
        if (us >= 0.07 && v <= vr) return (int64_t)k;
        if (v <= 0) continue;
        if (!slow_ready) {
            lpq = log(p / q);
            h = lgam(m + 1) + lgam((double)n - m + 1);
            slow_ready = 1;
        }
        v = log(v * alpha / (a / (us * us) + b));
        if (v <= h - lgam(k + 1) - lgam((double)n - k + 1) + (k - m) * lpq) return (int64_t)k;
    }
}

int64_t skpo_signsim_binomial(skpo_rng *r, int64_t n, double p) {
    SKPO_ASSERT(n >= 0 && p >= 0 && p <= 1);
    if (n == 0 || p == 0) return 0;
    if (p == 1) return n;
    if (p > 0.5) return n - skpo_signsim_binomial(r, n, 1.0 - p);
    if ((double)n * p < 10) return binom_inversion(r, n, p);
    return binom_btrs(r, n, p);
}

// --- sign tests ---------------------------------------------------------------------------

static int true_sign(const double *p, int G, int i, double sum) {
    double d = (double)G * p[i] - sum;
    if (fabs(d) <= 1e-12 * G) return 0;
    return d > 0 ? 1 : -1;
}

int skpo_signsim_group(const int64_t *x, const double *p, int G, int *all_right) {
    int64_t sx = 0;
    double sp = 0;
    for (int i = 0; i < G; i++) { sx += x[i]; sp += p[i]; }
    int right = 0;
    for (int i = 0; i < G; i++) {
        int64_t d = (int64_t)G * x[i] - sx;
        int se = (d > 0) - (d < 0);
        right += se == true_sign(p, G, i, sp);
    }
    *all_right = right == G;
    return right;
}

static int real_sign(const double *v, int G, int i, double mean, double tol) {
    double d = v[i] - mean;
    if (fabs(d) <= tol) return 0;
    return d > 0 ? 1 : -1;
}

int skpo_signsim_group_real(const double *est, const double *ref, int G, double tol, int *all_right) {
    double me = 0, mr = 0;
    for (int i = 0; i < G; i++) { me += est[i]; mr += ref[i]; }
    me /= G;
    mr /= G;
    int right = 0;
    for (int i = 0; i < G; i++) right += real_sign(est, G, i, me, tol) == real_sign(ref, G, i, mr, tol);
    *all_right = right == G;
    return right;
}

// --- the simulation ---------------------------------------------------------------------------

skpo_status skpo_signsim_check(const skpo_signsim_cfg *c, skpo_err *err) {
    if (c->G < 2) return skpo_err_set(err, SKPO_ERANGE, "group size %d: need at least 2 prefixes", c->G);
    if (c->trials < 1) return skpo_err_set(err, SKPO_ERANGE, "trials %lld: need at least 1", (long long)c->trials);
    if (c->n_ns < 1) return skpo_err_set(err, SKPO_ERANGE, "no continuation counts N given");
    for (int i = 0; i < c->n_ns; i++)
        if (c->ns[i] < 1) return skpo_err_set(err, SKPO_ERANGE, "continuation count %lld: need N >= 1", (long long)c->ns[i]);
    switch (c->dist) {
    case SKPO_SIGNSIM_UNIFORM:
        if (!(c->lo >= 0 && c->hi <= 1 && c->lo < c->hi))
            return skpo_err_set(err, SKPO_ERANGE, "uniform range [%g, %g]: need 0 <= lo < hi <= 1", c->lo, c->hi);
        break;
    case SKPO_SIGNSIM_BAND:
        if (!(c->spread > 0 && c->centre - c->spread / 2 >= 0 && c->centre + c->spread / 2 <= 1))
            return skpo_err_set(err, SKPO_ERANGE, "band centre %g spread %g: the band [%g, %g] must lie inside [0, 1]",
                                c->centre, c->spread, c->centre - c->spread / 2, c->centre + c->spread / 2);
        break;
    case SKPO_SIGNSIM_NORMAL:
        if (!(c->spread > 0 && c->centre >= 0 && c->centre <= 1))
            return skpo_err_set(err, SKPO_ERANGE, "normal centre %g spread %g: need centre in [0, 1], spread > 0",
                                c->centre, c->spread);
        break;
    case SKPO_SIGNSIM_BETA:
        if (!(c->centre > 0 && c->spread > 0 && isfinite(c->centre) && isfinite(c->spread)))
            return skpo_err_set(err, SKPO_ERANGE, "beta(%g, %g): need both parameters > 0", c->centre, c->spread);
        break;
    case SKPO_SIGNSIM_FIXED:
        if (!c->fixed) return skpo_err_set(err, SKPO_ERANGE, "fixed distribution without values");
        for (int i = 0; i < c->G; i++)
            if (!(c->fixed[i] >= 0 && c->fixed[i] <= 1))
                return skpo_err_set(err, SKPO_ERANGE, "success rate %g: need a value in [0, 1]", c->fixed[i]);
        break;
    default:
        return skpo_err_set(err, SKPO_ERANGE, "unknown distribution %d", (int)c->dist);
    }
    return SKPO_OK;
}

void skpo_signsim_draw_p(const skpo_signsim_cfg *c, skpo_rng *r, double *p) {
    for (int i = 0; i < c->G; i++) {
        double u, x, y;
        switch (c->dist) {
        case SKPO_SIGNSIM_UNIFORM: p[i] = c->lo + (c->hi - c->lo) * skpo_rng_uniform(r); break;
        case SKPO_SIGNSIM_BAND: p[i] = c->centre + c->spread * (skpo_rng_uniform(r) - 0.5); break;
        case SKPO_SIGNSIM_NORMAL:
            do u = c->centre + c->spread * skpo_rng_normal(r); while (u < 0 || u > 1);
            p[i] = u;
            break;
        case SKPO_SIGNSIM_BETA:
            x = gamma_draw(r, c->centre);
            y = gamma_draw(r, c->spread);
            p[i] = x + y > 0 ? x / (x + y) : 0.5; // both underflowed (tiny shapes): a coin's midpoint
            break;
        case SKPO_SIGNSIM_FIXED: p[i] = c->fixed[i]; break;
        }
    }
}

typedef struct counts {
    int64_t correct, right, degenerate;
} counts;

skpo_status skpo_signsim_run(const skpo_signsim_cfg *c, skpo_signsim_row *rows, skpo_err *err) {
    skpo_status st = skpo_signsim_check(c, err);
    if (st != SKPO_OK) return st;
    int nr = c->n_ns + 1, G = c->G;
    counts *tot = skpo_xcalloc((size_t)nr, sizeof *tot);
#pragma omp parallel
    {
        counts *mine = skpo_xcalloc((size_t)nr, sizeof *mine);
        double *p = skpo_xmalloc((size_t)G * sizeof *p);
        int64_t *x = skpo_xmalloc((size_t)G * sizeof *x);
#pragma omp for schedule(dynamic, 64)
        for (int64_t t = 0; t < c->trials; t++) {
            skpo_rng r;
            skpo_signsim_rng_seed(&r, c->seed, (uint64_t)t);
            skpo_signsim_draw_p(c, &r, p);
            for (int k = 0; k < nr; k++) {
                int64_t n = k < c->n_ns ? c->ns[k] : 1;
                int all_same = 1, all_right;
                for (int i = 0; i < G; i++) {
                    x[i] = skpo_signsim_binomial(&r, n, p[i]);
                    all_same &= x[i] == x[0];
                }
                mine[k].right += skpo_signsim_group(x, p, G, &all_right);
                mine[k].correct += all_right;
                mine[k].degenerate += all_same;
            }
        }
#pragma omp critical
        for (int k = 0; k < nr; k++) {
            tot[k].correct += mine[k].correct;
            tot[k].right += mine[k].right;
            tot[k].degenerate += mine[k].degenerate;
        }
        free(mine);
        free(p);
        free(x);
    }
    for (int k = 0; k < nr; k++) {
        skpo_signsim_row *w = &rows[k];
        memset(w, 0, sizeof *w);
        w->n = k < c->n_ns ? c->ns[k] : 1;
        w->trials = c->trials;
        w->correct = tot[k].correct;
        w->right_signs = tot[k].right;
        w->degenerate = tot[k].degenerate;
        w->frac = (double)w->correct / (double)w->trials;
        w->se = sqrt(w->frac * (1 - w->frac) / (double)w->trials);
        w->sign_acc = (double)w->right_signs / ((double)w->trials * G);
    }
    free(tot);
    return SKPO_OK;
}
