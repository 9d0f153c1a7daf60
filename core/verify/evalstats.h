/*
 * evalstats.h - evaluation metrics over k samples per problem (docs/algorithm.md section 6,
 * SPO App.D definitions), per problem; callers average over problems.
 *
 *   avg@k (Mean@k)  c / n, the fraction of a problem's n samples that are correct
 *   pass@k          unbiased estimator 1 - C(n - c, k) / C(n, k), n >= k, in the
 *                   stable product form 1 - prod_{j=n-c+1..n} (1 - k / j)
 *                   (1 when n - c < k)
 *   maj@k           correctness of the most frequent extracted answer among the
 *                   first k samples; ties go to the answer seen first; samples
 *                   with no answer do not vote; no votes at all counts as wrong
 * Not here: reading records and grouping (tools/eval).
 */
#ifndef SKPO_EVALSTATS_H
#define SKPO_EVALSTATS_H

#include <stddef.h>

// Unbiased pass@k for n samples with c correct. Requires 1 <= k <= n, 0 <= c <= n.
double skpo_pass_at_k(long n, long c, long k);

// Index (< k) of the sample whose answer wins the majority vote over preds[0..k)
// (NULL = no answer), or -1 when none of them has an answer.
long skpo_maj_index(const char *const *preds, long k);

// maj@k of one problem: correct[maj index] or 0 when there is none.
double skpo_maj_at_k(const char *const *preds, const int *correct, long k);

// The k values to report for K samples: 1, 2, 4, ... (powers of two < K) and K.
// Writes at most cap values into ks and returns how many.
int skpo_eval_ks(long K, long *ks, int cap);

#endif
