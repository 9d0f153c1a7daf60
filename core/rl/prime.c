/*
 * prime.c - PRIME's token-level advantages (Cui et al. 2025, "Process
 * Reinforcement through Implicit Rewards", arXiv 2502.01456; the authors' code is
 * verl's recipe/prime: prime_dp_rm.py for the implicit rewards,
 * prime_core_algos.py compute_rloo_advantage_return for their combination).
 * See advantage.h for the formula; docs/baselines.md for the sources.
 */
#include "rl/advantage.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void skpo_prime_opts_default(skpo_prime_opts *o) {
    o->beta = 0.05;
    o->coef_process = 5;
    o->coef_outcome = 5;
    o->batch_norm = 1;
}

// In-group leave-one-out of verl's masked_rloo: x * k / (k - 1) - sum_j m_j / (k - 1)
// where m_j is member j's mean over its tokens (its one value for the outcome).
static double rloo(double x, double group_sum, size_t k) {
    return x * (double)k / (double)(k - 1) - group_sum / (double)(k - 1);
}

skpo_status skpo_adv_prime(const float *const *prm, const float *const *ref, const size_t *len, const double *acc,
                           size_t nseq, size_t k, const skpo_prime_opts *o, float **adv, skpo_err *err) {
    if (k < 2 || nseq % k)
        return skpo_err_set(err, SKPO_EFORMAT, "PRIME needs groups of k >= 2 responses (%zu responses, k = %zu)", nseq, k);
    size_t tot = 0;
    for (size_t i = 0; i < nseq; i++) {
        if (len[i] == 0) return skpo_err_set(err, SKPO_EFORMAT, "response %zu has no tokens", i);
        if (!(acc[i] == 0 || acc[i] == 1)) return skpo_err_set(err, SKPO_ERANGE, "outcome %g of response %zu is not 0 or 1", acc[i], i);
        for (size_t t = 0; t < len[i]; t++)
            if (!isfinite(prm[i][t]) || !isfinite(ref[i][t]))
                return skpo_err_set(err, SKPO_ENUMERIC, "response %zu token %zu: PRM log-prob %g, reference %g", i, t,
                                    (double)prm[i][t], (double)ref[i][t]);
        tot += len[i];
    }
    double **r = skpo_xcalloc(nseq, sizeof *r);
    // Implicit process rewards r_t = beta (log pi_phi - log pi_ref) ("token" granularity:
    // the last token's is left 0, it carries the outcome), and the batch normaliser of
    // prime_norm = batch_norm: the largest |return-to-go| of any token in the batch.
    double maxret = 0;
    for (size_t i = 0; i < nseq; i++) {
        r[i] = skpo_xcalloc(len[i], sizeof **r);
        for (size_t t = 0; t + 1 < len[i]; t++) r[i][t] = o->beta * ((double)prm[i][t] - (double)ref[i][t]);
        double g = 0;
        for (size_t t = len[i]; t-- > 0;) {
            g += r[i][t];
            maxret = fmax(maxret, fabs(g));
        }
    }
    double norm = o->batch_norm ? maxret + 1e-6 : 1.0;
    double sum = 0, sum2 = 0;
    for (size_t g0 = 0; g0 < nseq; g0 += k) {
        double psum = 0, osum = 0;   // the group's sums of per-response means
        for (size_t i = g0; i < g0 + k; i++) {
            double m = 0;
            for (size_t t = 0; t < len[i]; t++) m += r[i][t] / norm;
            psum += m / (double)len[i];
            osum += acc[i];
        }
        for (size_t i = g0; i < g0 + k; i++) {
            // combined token rewards, then returns-to-go (gamma = 1) into adv
            double G = 0;
            for (size_t t = len[i]; t-- > 0;) {
                double x = o->coef_process * rloo(r[i][t] / norm, psum, k);
                if (t + 1 == len[i]) x += o->coef_outcome * rloo(acc[i], osum, k);
                G += x;
                r[i][t] = G;
                sum += G;
            }
        }
    }
    // masked_whiten over every response token of the batch (unbiased variance, eps 1e-8)
    double mean = sum / (double)tot;
    for (size_t i = 0; i < nseq; i++)
        for (size_t t = 0; t < len[i]; t++) sum2 += (r[i][t] - mean) * (r[i][t] - mean);
    double var = tot > 1 ? sum2 / (double)(tot - 1) : 0;
    double inv = 1 / sqrt(var + 1e-8);
    for (size_t i = 0; i < nseq; i++) {
        for (size_t t = 0; t < len[i]; t++) adv[i][t] = (float)((r[i][t] - mean) * inv);
        free(r[i]);
    }
    free(r);
    return SKPO_OK;
}
