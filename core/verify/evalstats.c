/*
 * evalstats.c - pass@k, maj@k and the reported k values (see evalstats.h).
 * maj@k is quadratic in k, which is fine for the k <= a few hundred of evals.
 */
#include "verify/evalstats.h"
#include "base/common.h"

#include <string.h>

double skpo_pass_at_k(long n, long c, long k) {
    SKPO_ASSERT(k >= 1 && k <= n && c >= 0 && c <= n);
    if (n - c < k) return 1.0;
    // C(n-c, k) / C(n, k) = prod_{j=n-c+1..n} (1 - k/j): no factorials, no overflow
    double prod = 1.0;
    for (long j = n - c + 1; j <= n; j++) prod *= 1.0 - (double)k / (double)j;
    return 1.0 - prod;
}

long skpo_maj_index(const char *const *preds, long k) {
    long best = -1, best_votes = 0;
    for (long i = 0; i < k; i++) {
        if (!preds[i]) continue;
        int first = 1; // count each distinct answer once, at its first occurrence
        for (long j = 0; j < i; j++)
            if (preds[j] && strcmp(preds[j], preds[i]) == 0) { first = 0; break; }
        if (!first) continue;
        long votes = 0;
        for (long j = i; j < k; j++)
            if (preds[j] && strcmp(preds[j], preds[i]) == 0) votes++;
        if (votes > best_votes) { best = i; best_votes = votes; }
    }
    return best;
}

double skpo_maj_at_k(const char *const *preds, const int *correct, long k) {
    long i = skpo_maj_index(preds, k);
    return i < 0 ? 0.0 : (correct[i] ? 1.0 : 0.0);
}

int skpo_eval_ks(long K, long *ks, int cap) {
    int n = 0;
    for (long k = 1; k < K && n < cap; k *= 2) ks[n++] = k;
    if (K >= 1 && n < cap) ks[n++] = K;
    return n;
}
