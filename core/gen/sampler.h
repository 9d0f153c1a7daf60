/*
 * sampler.h - choosing tokens from logits, stop conditions, and the SKPO
 * upstream pieces (split position, median-NLL selection, prioritized draw).
 *
 * Everything here is pure: the random number is an argument (`coin`, uniform
 * in [0, 1)) and generators live in the caller (rng.h), so a token can be
 * recomputed from (logits, params, coin) alone.
 *
 * Token choice (skpo_sample):
 *   temperature 0    greedy: the highest logit, lowest id on ties;
 *   temperature T>0  p = softmax(logits / T); then top-k (keep the k most
 *                    likely, 0 = off), then top-p on the top-k distribution
 *                    renormalised (keep the shortest most-likely-first prefix
 *                    whose mass reaches top_p; the token crossing it is kept),
 *                    as Hugging Face and vLLM order them; the token is drawn
 *                    from what is kept, renormalised.
 *   The behaviour log-prob returned is log_softmax(logits / T)[token] over the
 *   whole vocabulary: what the clipped objective needs as the old log-prob and
 *   what the trainer recomputes. Top-k/top-p truncation is NOT renormalised
 *   into it (verl does the same). At T = 0 it is log_softmax(logits)[token].
 *
 * Not here: batching and the model (generate.h), record fields (tools).
 */
#ifndef SKPO_SAMPLER_H
#define SKPO_SAMPLER_H

#include "base/common.h"
#include "base/rng.h"

#include <stddef.h>
#include <stdint.h>

// --- token choice ----------------------------------------------------------------

typedef struct skpo_sample_params {
    double temperature;  // >= 0; 0 = greedy
    double top_p;        // (0, 1]; 1 = off
    int top_k;           // >= 0; 0 = off
} skpo_sample_params;

// Scratch buffers for one vocabulary size; one per thread.
typedef struct skpo_sampler {
    int vocab;
    float *prob;   // (vocab) unnormalised probabilities
    int *idx;      // (vocab) candidate ids
} skpo_sampler;

void skpo_sampler_init(skpo_sampler *s, int vocab);
void skpo_sampler_destroy(skpo_sampler *s);

// Choose a token from logits (vocab floats). Returns the id and writes its
// behaviour log-prob to *logp (nullable), or returns -1 when a logit is NaN
// or +Inf or every logit is -Inf (the caller reports it; -Inf entries are
// allowed and never chosen).
int skpo_sample(skpo_sampler *s, const float *logits, const skpo_sample_params *p, double coin, float *logp);

// log_softmax(logits / T)[tok] (T = 1 when temperature is 0).
double skpo_sample_logprob(const float *logits, int vocab, double temperature, int tok);

// --- stop strings ---------------------------------------------------------------------

// Does any stop string occur in text[0..len) in a match that ends after byte
// `from` (the bytes before `from` were checked on earlier calls)? Returns the
// byte offset where the first such match starts, or -1.
long skpo_stop_find(const char *text, size_t len, size_t from, const char *const *stops, int nstops);

// --- SKPO upstream (docs/algorithm.md sections 3, Q9, Q13, Q14) ---------------------------------

// Split position t_q = uniform_int(ceil(L/6), floor(L/2)) drawn from r. L must
// be finite and > 0. For L < 6 the range is empty or starts at 0; the result is
// then max(1, ceil(L/6)) so a segment always has room for one token.
int skpo_seg_cut(double L, skpo_rng *r);
// Split position at a fixed fraction f of L (0 < f <= 1), rounded to the
// nearest integer, never below one token: the split-point sensitivity runs
// (pipelines/splitpoint.sh: f = 1/6, 1/3, 1/2, 2/3 against the adaptive U[L/6, L/2]).
int skpo_seg_cut_frac(double L, double f);
// Length a candidate is cut to: t_q when it reached t_q tokens without
// stopping, floor(n/2) when it stopped (EOS / stop string) after n <= t_q
// tokens (its EOS never enters a segment).
int skpo_seg_len(int n, int t_q, int stopped);
// Index of the value closest to the median of d[0..g) (numpy median: mean of
// the two middle values when g is even), lowest index on ties. Distances
// within 1e-12 (relative to the median) count as ties, so with even g the
// lower-index middle value wins however rounding falls. g >= 1.
int skpo_median_pick(const double *d, int g);
// The "Selection:Extreme" ablation: the first candidate with the lowest mean NLL
// (want_max = 0) or the highest (want_max = 1).
int skpo_extreme_pick(const double *d, int g, int want_max);
// The "Split@Fixed" ablation: t_q = max(1, ceil(L/6)) on odd steps and
// max(that, floor(L/2)) on even steps (the two ends of the adaptive range).
int skpo_seg_cut_fixed(double L, int64_t step);
// Mean of -logp over n tokens; 0 for an empty segment.
double skpo_mean_nll(const float *logp, int n);

// Prioritized sampling: draw B distinct indices of [0, n) with probability
// proportional to w, without replacement (successive draws, each from the
// remaining weights, as numpy.random.choice(replace=False, p=w)). Weights must
// be finite and >= 0 with at least B positive. out receives B indices in draw
// order.
skpo_status skpo_prio_draw(const double *w, size_t n, size_t B, skpo_rng *r, size_t *out, skpo_err *err);

#endif
