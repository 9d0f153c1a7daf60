/*
 * signsim.h - sign consistency of group-normalised Monte Carlo advantages
 * (docs/algorithm.md section 8, the paper's appendix A), and the small exact pieces it
 * is built from: an explicit RNG, exact binomial sampling for any n, and the
 * "are all G signs right" test that the empirical analysis shares.
 *
 * The simulation: per trial, G prefixes get true success rates p_i drawn from
 * a distribution; each is continued N times (X_i ~ Binomial(N, p_i)); the MC
 * advantages (X_i/N - mean)/std are compared in sign with the true advantages
 * p_i - mean(p). A trial (group) is correct only if all G signs match. The
 * GRPO reference is the same with one 0/1 outcome per prefix (N = 1).
 *
 * Normalising by the group std never changes a sign, so signs are computed
 * exactly on integer counts: sign(G * X_i - sum_j X_j). A group whose
 * estimates are all equal (std 0) gets advantage 0 everywhere, which matches
 * no nonzero true sign: such a group is wrong. A true advantage counts as 0
 * when |G p_i - sum p| <= 1e-12 G (only fixed --p lists can hit this); it is
 * then right only if the estimate is exactly 0 too.
 *
 * Reproducibility: trial t uses its own RNG stream seeded from (seed, t), so
 * results do not depend on the number of OpenMP threads. All N values of one
 * trial share the trial's p_i (common random numbers across N).
 *
 * Deliberately not here: reading records, output formatting (tools/signsim,
 * tools/analyze).
 */
#ifndef SKPO_SIGNSIM_H
#define SKPO_SIGNSIM_H

#include "base/common.h"
#include "base/rng.h"

#include <stdint.h>

// --- random numbers: core/base/rng.h's xoshiro256** ------------------------------------

// Independent stream `stream` of run `seed` (one per trial block / thread).
void skpo_signsim_rng_seed(skpo_rng *r, uint64_t seed, uint64_t stream);

// Exact draw from Binomial(n, p), n >= 0, p in [0, 1]: inversion when
// n min(p, 1-p) < 10, else Hormann's BTRS transformed rejection (1993), the
// method of TensorFlow and NumPy's Generator. Cost O(1) in n.
int64_t skpo_signsim_binomial(skpo_rng *r, int64_t n, double p);

// --- one group ----------------------------------------------------------------------

// Compare the signs of group-normalised estimates x[0..G) (counts of successes,
// all out of the same number of trials) with those of the true advantages of
// p[0..G). Returns the number of prefixes whose sign is right; *all_right is 1
// when that is G. Exact (integer) for the estimates; see the header comment.
int skpo_signsim_group(const int64_t *x, const double *p, int G, int *all_right);

// Same for real-valued estimates est[0..G) (e.g. means over continuations)
// against real-valued reference values ref[0..G): signs of v - mean(v), with a
// difference within tol of the mean counted as 0. Used by the empirical analysis.
int skpo_signsim_group_real(const double *est, const double *ref, int G, double tol, int *all_right);

// --- the simulation --------------------------------------------------------------------

typedef enum skpo_signsim_dist {
    SKPO_SIGNSIM_UNIFORM = 0, // p ~ U[lo, hi]
    SKPO_SIGNSIM_BAND,        // p ~ U[centre - spread/2, centre + spread/2] (must stay inside [0,1])
    SKPO_SIGNSIM_NORMAL,      // p ~ N(centre, spread^2) truncated to [0,1] (redrawn outside)
    SKPO_SIGNSIM_BETA,        // p ~ Beta(a, b) with a = centre, b = spread (via two gammas)
    SKPO_SIGNSIM_FIXED,       // p_i = fixed[i] every trial
} skpo_signsim_dist;

typedef struct skpo_signsim_cfg {
    int G;                    // prefixes per group (>= 2)
    int64_t trials;           // groups simulated per N
    uint64_t seed;
    skpo_signsim_dist dist;
    double lo, hi;            // UNIFORM
    double centre, spread;    // BAND, NORMAL; BETA: a, b
    const double *fixed;      // FIXED: G values
    const int64_t *ns;        // continuation counts N to evaluate (each >= 1)
    int n_ns;
} skpo_signsim_cfg;

typedef struct skpo_signsim_row {
    int64_t n;                // continuations per prefix (1 = the GRPO reference)
    int64_t trials;
    int64_t correct;          // groups with all G signs right
    int64_t right_signs;      // prefixes with the right sign, over all trials
    int64_t degenerate;       // groups whose estimates were all equal (std 0)
    double frac;              // correct / trials
    double se;                // binomial standard error of frac
    double sign_acc;          // right_signs / (trials G)
} skpo_signsim_row;

// Check a configuration; SKPO_ERANGE with a message naming the bad value.
skpo_status skpo_signsim_check(const skpo_signsim_cfg *c, skpo_err *err);

// Draw one trial's true success rates p[0..G) from stream `trial`.
void skpo_signsim_draw_p(const skpo_signsim_cfg *c, skpo_rng *r, double *p);

// Run the simulation: rows[0..n_ns) for c->ns in order, then rows[n_ns] = the
// GRPO reference (N = 1). rows must hold n_ns + 1 entries. OpenMP over trials.
skpo_status skpo_signsim_run(const skpo_signsim_cfg *c, skpo_signsim_row *rows, skpo_err *err);

#endif
