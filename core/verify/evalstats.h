/*
 * evalstats.h - evaluation metrics over k samples per problem (docs/algorithm.md section 6,
 * SPO App.D definitions), per problem; callers average over problems.
 *
 *   avg@k (Mean@k)  c / n, the fraction of a problem's n samples that are correct
 *   pass@k          unbiased estimator 1 - C(n - c, k) / C(n, k), n >= k, in the
 *                   stable product form 1 - prod_{j=n-c+1..n} (1 - k / j)
 *                   (1 when n - c < k)
 *   maj@k           correctness of the most frequent extracted answer among the
 *                   first k samples, answers grouped by the math verifier's
 *                   equality (\frac12 and 0.5 vote together); ties go to the answer seen first; samples
 *                   with no answer do not vote; no votes at all counts as wrong
 * Not here: reading records and grouping (tools/eval).
 */
#ifndef SKPO_EVALSTATS_H
#define SKPO_EVALSTATS_H

#include <stdbool.h>
#include <stddef.h>

// Unbiased pass@k for n samples with c correct. Requires 1 <= k <= n, 0 <= c <= n.
double skpo_pass_at_k(long n, long c, long k);

// Whether two extracted answers are one answer: the same string, or equal to
// the math verifier in either direction (skpo_verify_equal). NULL = no answer.
bool skpo_same_answer(const char *a, const char *b);

// Answer classes of preds[0..n): cls[i] = index of the first sample whose
// answer is the same as preds[i] (skpo_same_answer with that first sample),
// i for a new answer, -1 for no answer.
void skpo_answer_classes(const char *const *preds, long n, long *cls);

// Index (< k) of the sample whose answer wins the majority vote over preds[0..k)
// (NULL = no answer; equal answers in different forms vote together, see
// skpo_answer_classes), or -1 when none of them has an answer.
long skpo_maj_index(const char *const *preds, long k);

// maj@k of one problem: correct[maj index] or 0 when there is none.
double skpo_maj_at_k(const char *const *preds, const int *correct, long k);

// The k values to report for K samples: 1, 2, 4, ... (powers of two < K) and K.
// Writes at most cap values into ks and returns how many.
int skpo_eval_ks(long K, long *ks, int cap);

#endif
