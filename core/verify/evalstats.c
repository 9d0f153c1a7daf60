/*
 * evalstats.c - pass@k, maj@k and the reported k values (see evalstats.h).
 * maj@k votes over answer classes: answers the math verifier calls equal
 * (\frac12, 0.5, x = 1/2) are one answer. Classes cost one string compare per
 * (sample, class) and a verifier call only when the strings differ, so k
 * samples with d distinct strings cost at most k*d verifications.
 */
#include "verify/evalstats.h"
#include "base/common.h"
#include "verify/verify.h"

#include <stdlib.h>
#include <string.h>

double skpo_pass_at_k(long n, long c, long k) {
    SKPO_ASSERT(k >= 1 && k <= n && c >= 0 && c <= n);
    if (n - c < k) return 1.0;
    // C(n-c, k) / C(n, k) = prod_{j=n-c+1..n} (1 - k/j): no factorials, no overflow
    double prod = 1.0;
    for (long j = n - c + 1; j <= n; j++) prod *= 1.0 - (double)k / (double)j;
    return 1.0 - prod;
}

bool skpo_same_answer(const char *a, const char *b) {
    if (!a || !b) return a == b;
    if (!strcmp(a, b)) return true;
    size_t la = strlen(a), lb = strlen(b);
    return skpo_verify_equal(a, la, b, lb) || skpo_verify_equal(b, lb, a, la);
}

void skpo_answer_classes(const char *const *preds, long n, long *cls) {
    long *reps = skpo_xmalloc(sizeof(long) * (size_t)(n > 0 ? n : 1));
    long nr = 0;
    for (long i = 0; i < n; i++) {
        cls[i] = -1;
        if (!preds[i]) continue;
        for (long r = 0; r < nr && cls[i] < 0; r++) // the same string first: cheap
            if (!strcmp(preds[reps[r]], preds[i])) cls[i] = reps[r];
        for (long r = 0; r < nr && cls[i] < 0; r++) // then the verifier's equality
            if (skpo_same_answer(preds[reps[r]], preds[i])) cls[i] = reps[r];
        if (cls[i] < 0) { cls[i] = i; reps[nr++] = i; }
    }
    free(reps);
}

long skpo_maj_index(const char *const *preds, long k) {
    long *cls = skpo_xmalloc(sizeof(long) * (size_t)(k > 0 ? k : 1));
    long *votes = skpo_xmalloc(sizeof(long) * (size_t)(k > 0 ? k : 1));
    skpo_answer_classes(preds, k, cls);
    for (long i = 0; i < k; i++) votes[i] = 0;
    for (long i = 0; i < k; i++) if (cls[i] >= 0) votes[cls[i]]++;
    long best = -1, best_votes = 0; // each class counted at its first occurrence: ties go to it
    for (long i = 0; i < k; i++)
        if (cls[i] == i && votes[i] > best_votes) { best = i; best_votes = votes[i]; }
    free(cls);
    free(votes);
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
