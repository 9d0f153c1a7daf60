/*
 * sampler.c - token choice from logits and stop strings; see sampler.h for
 * the contract. (The SKPO upstream pieces are rl/segment.c.)
 */
#define _GNU_SOURCE // memmem, qsort_r
#include "gen/sampler.h"

#include "base/softmax.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// --- token choice ----------------------------------------------------------------

void skpo_sampler_init(skpo_sampler *s, int vocab) {
    SKPO_ASSERT(vocab > 0);
    s->vocab = vocab;
    s->prob = skpo_xmalloc((size_t)vocab * sizeof *s->prob);
    s->idx = skpo_xmalloc((size_t)vocab * sizeof *s->idx);
}

void skpo_sampler_destroy(skpo_sampler *s) {
    free(s->prob);
    free(s->idx);
    memset(s, 0, sizeof *s);
}

// Index of the largest logit (lowest on ties); -1 if a logit is NaN/+Inf or all are -Inf.
static int argmax_checked(const float *x, int n) {
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (isnan(x[i]) || x[i] == INFINITY) return -1;
        if (x[i] == -INFINITY) continue;
        if (best < 0 || x[i] > x[best]) best = i;
    }
    return best;
}

double skpo_sample_logprob(const float *logits, int vocab, double temperature, int tok) {
    double inv = temperature > 0 ? 1.0 / temperature : 1.0;
    float m = -INFINITY;
    for (int i = 0; i < vocab; i++) m = logits[i] > m ? logits[i] : m;
    double sum = 0;
    for (int i = 0; i < vocab; i++) sum += exp(((double)logits[i] - m) * inv);
    return ((double)logits[tok] - m) * inv - log(sum);
}

// "a before b": more likely first, ties by lower id, so the kept set and the
// chosen token never depend on how qsort orders equal keys.
static int before(const float *p, int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); }

static int cmp_desc(const void *a, const void *b, void *prob) {
    int i = *(const int *)a, j = *(const int *)b;
    const float *p = prob;
    return before(p, i, j) ? -1 : before(p, j, i) ? 1 : 0;
}

// Partition idx[0..n) so that its first k entries are the k "before"-most (any order).
static void select_top(int *idx, int n, int k, const float *p) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int piv = idx[lo + (hi - lo) / 2], i = lo, j = hi;
        while (i <= j) {
            while (before(p, idx[i], piv)) i++;
            while (before(p, piv, idx[j])) j--;
            if (i <= j) { int t = idx[i]; idx[i] = idx[j]; idx[j] = t; i++; j--; }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
}

// Inverse CDF over ids in index order (no truncation): the common training
// case, O(vocab) and no sort. Whole blocks below the target are skipped with
// vectorised block sums; the serial scan inside a block decides the token.
static int draw_full(const float *p, int n, double sum, double coin) {
    double target = coin * sum, cum = 0;
    int i = 0;
    for (; i + 64 <= n; i += 64) {
        double b = 0;
#pragma omp simd reduction(+ : b)
        for (int j = 0; j < 64; j++) b += p[i + j];
        if (cum + b > target) break;
        cum += b;
    }
    for (; i < n; i++) {
        cum += p[i];
        if (p[i] > 0 && cum > target) return i;
    }
    for (i = n - 1; i > 0 && p[i] <= 0; i--) {} // rounding left target at the very top
    return i;
}

// Top-k then top-p over candidates, most likely first.
static int draw_truncated(skpo_sampler *s, const skpo_sample_params *sp, double sum, double coin) {
    const float *p = s->prob;
    int n = 0, V = s->vocab;
    // Tokens below (1 - top_p) / (V - 1) of the mass cannot be in the nucleus:
    // together they hold less than 1 - top_p (llama2.c's filter). Only valid
    // without top-k, where top-p sees the full distribution.
    double floor_p = (sp->top_k == 0 && V > 1) ? (1.0 - sp->top_p) / (V - 1) * sum : 0;
    for (int i = 0; i < V; i++)
        if (p[i] > 0 && p[i] >= floor_p) s->idx[n++] = i;
    if (sp->top_k > 0 && sp->top_k < n) {
        select_top(s->idx, n, sp->top_k, p);
        n = sp->top_k;
    }
    qsort_r(s->idx, (size_t)n, sizeof *s->idx, cmp_desc, s->prob);
    double mass = 0;
    if (sp->top_k > 0) for (int i = 0; i < n; i++) mass += p[s->idx[i]];
    else mass = sum;
    int kept = n;
    if (sp->top_p < 1) {
        double cum = 0, want = sp->top_p * mass;
        for (int i = 0; i < n; i++) {
            cum += p[s->idx[i]];
            if (cum >= want) { kept = i + 1; break; }
        }
    }
    double kmass = 0;
    for (int i = 0; i < kept; i++) kmass += p[s->idx[i]];
    double target = coin * kmass, cum = 0;
    for (int i = 0; i < kept; i++) {
        cum += p[s->idx[i]];
        if (cum > target) return s->idx[i];
    }
    return s->idx[kept - 1];
}

int skpo_sample(skpo_sampler *s, const float *logits, const skpo_sample_params *sp, double coin, float *logp) {
    SKPO_ASSERT(s && logits && sp && coin >= 0 && coin < 1);
    int V = s->vocab;
    float m = skpo_logits_max(logits, V);
    if (isnan(m)) return -1;
    float inv = skpo_inv_temperature(sp->temperature);
    double sum = skpo_softmax_exp(s->prob, logits, V, m, inv);
    int tok;
    if (sp->temperature == 0) tok = argmax_checked(logits, V);
    else if (sp->top_k == 0 && sp->top_p >= 1) tok = draw_full(s->prob, V, sum, coin);
    else tok = draw_truncated(s, sp, sum, coin);
    if (logp) logp[0] = skpo_softmax_logp(logits, tok, m, inv, sum);
    return tok;
}

// --- stop strings ---------------------------------------------------------------------

long skpo_stop_find(const char *text, size_t len, size_t from, const char *const *stops, int nstops) {
    long first = -1;
    for (int k = 0; k < nstops; k++) {
        size_t sl = strlen(stops[k]);
        if (sl == 0 || sl > len) continue;
        // A new match must end after `from`, so it starts at or after from - sl + 1.
        size_t start = from + 1 > sl ? from + 1 - sl : 0;
        const char *hit = memmem(text + start, len - start, stops[k], sl);
        if (hit && (first < 0 || hit - text < first)) first = hit - text;
    }
    return first;
}
