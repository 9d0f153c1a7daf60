/*
 * sampler.h - choosing tokens from logits and stop conditions.
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
 * Not here: batching and the model (generate.h), record fields (tools), the
 * SKPO upstream pieces (split position, median-NLL selection, prioritized
 * draw: rl/segment.h).
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

#endif
