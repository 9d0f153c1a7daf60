/*
 * softmax.h - the one log-softmax of a row of logits on the host. The
 * sampler (gen/sampler.c) draws tokens and writes their rollout log-probs
 * with it, and the CPU kernel table's logprob (cpu/ops_cpu.c), which scores
 * records and computes pi_old and the training log-probs, calls the same
 * compiled code: for the same logits a token's log-prob is the same float.
 *
 * With m the largest logit and inv = 1 / temperature:
 *     e_i = exp((logits_i - m) * inv)   float, Cephes-style polynomial, ~1 ulp
 *     sum = sum_i e_i                   double, a fixed order per build and CPU
 *     logp(tok) = (float)((logits_tok - m) * inv - log(sum))
 */
#ifndef SKPO_SOFTMAX_H
#define SKPO_SOFTMAX_H

// 1 / temperature as both sides compute it: the temperature rounded to float
// first (the trainer holds it as a float), then one division in double.
// 1 when temperature <= 0 (greedy: log-probs at temperature 1).
static inline float skpo_inv_temperature(double temperature) {
    return temperature > 0 ? (float)(1.0 / (double)(float)temperature) : 1.0f;
}

// Largest of x[0..n), or NAN when one is NaN or +Inf or all are -Inf.
float skpo_logits_max(const float *x, int n);
// prob[i] = e_i (above) for i < V; returns sum. prob may not alias logits.
double skpo_softmax_exp(float *prob, const float *logits, int V, float m, float inv);
// logp(tok) from m, inv and sum.
float skpo_softmax_logp(const float *logits, int tok, float m, float inv, double sum);

#endif
