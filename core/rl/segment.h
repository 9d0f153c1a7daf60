/*
 * segment.h - the SKPO upstream pieces (docs/algorithm.md sections 3, Q9, Q13,
 * Q14): where a candidate is cut (t_q), which of the G candidates becomes the
 * segment (median NLL; the ablations' extreme pick and fixed split), and the
 * prioritized draw of prompts by the tracker's weights (tracker.h).
 *
 * Pure like the sampler: random numbers come from the caller's generator (rng.h).
 * Not here: decoding the candidates (gen/), the record fields (tools/sample).
 */
#ifndef SKPO_SEGMENT_H
#define SKPO_SEGMENT_H

#include "base/common.h"
#include "base/rng.h"

#include <stddef.h>
#include <stdint.h>

// --- split position and candidate selection ------------------------------------------

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

// --- the prioritized draw of prompts ----------------------------------------------------

// Prioritized sampling: draw B distinct indices of [0, n) with probability
// proportional to w, without replacement (successive draws, each from the
// remaining weights, as numpy.random.choice(replace=False, p=w)). Weights must
// be finite and >= 0 with at least B positive. out receives B indices in draw
// order.
skpo_status skpo_prio_draw(const double *w, size_t n, size_t B, skpo_rng *r, size_t *out, skpo_err *err);

#endif
