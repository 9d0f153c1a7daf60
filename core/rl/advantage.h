/*
 * advantage.h - advantages for every algorithm skpo trains (docs/algorithm.md sections 3,
 * 4.2-4.4, Q4, Q6) computed over one whole step of records in memory.
 *
 * Modes and the records they read (other kinds pass through untouched):
 *   skpo    `up` records (key uid) and their G `down` records (gid = up uid).
 *           down: A = (R - mean) / (std + 1e-6) within the group (unbiased std),
 *           optionally batch-normalised again over all downs (--norm-down, Q4);
 *           up: reward R_I = mean of its G down rewards (written as `reward`),
 *           A = R_I - V_prev(pid), then (A - mean) / (std + 1e-8) over the
 *           batch's up records. weight w_up / w_down (0.5 / 0.5).
 *           With up_warmup K > 0 (ours, not the paper's: a baseline warm-up) a
 *           prompt seen fewer than K times before has no baseline yet: its up
 *           record gets A = 0 and stays out of the batch mean and std.
 *           With reward_up_self (the paper's "w/o MC Estimation" ablation) R_I
 *           is instead the reward of the up record's `self` record (gid = up
 *           uid): the outcome of the kept candidate's own complete generation.
 *   grpo    `full` records grouped by pid (G each), group-normalised as above.
 *   drgrpo  the same without the std division (Dr. GRPO).
 *   dapo    grpo plus dynamic sampling: groups whose outcomes are all equal
 *           (all `correct` or none; DAPO decides on accuracy, not on the
 *           overlong-shaped reward) are dropped (keep[i] = 0); a group whose
 *           records lack `correct` is judged by its rewards instead.
 *   spo     one `full` record per pid, A = R - V_prev(pid), batch-normalised.
 *   prime   `full` records grouped by pid (K each, K >= 2) with `prm_logp` and
 *           `ref_logp` (skpo-score) and `correct` (the 0/1 outcome):
 *           per-token advantages `adv_tok` (skpo_adv_prime below); `adv` gets
 *           their mean (for viewers; skpo-update uses adv_tok). The tracker is
 *           updated as in grpo.
 * Degenerate groups (all rewards equal) get A = 0. Batches of one record get
 * A = 0 after batch normalisation (the std is undefined).
 * The tracker (tracker.h) is updated once per prompt observation after all
 * advantages used the pre-update baselines: V from R_I (skpo), the group mean
 * (grpo family) or R (spo); L from the prompt's mean response length (the
 * paper's "per-prompt average response length", docs/algorithm.md Q6): in skpo
 * mean |o_i| under the skip layout (each downstream response restates s and
 * solves q whole) and |s| + mean |o_i| under the continual one (o_i continues
 * s); the mean response length otherwise; capped at len_cap when set;
 * skpo and spo also store the segment (tokens, logp, prompt) for the next D.
 * rho: clamp(2^(-D/tau)) with D from the records' `seg_div` (div_from_records,
 * what the pipelines use: skpo-sample --rescore measures it) or the caller's
 * divergence function on revisits, D = 0 on first visits; with neither rho =
 * rho_max (SPO's constant-rho variant, docs/algorithm.md Q1).
 */
#ifndef SKPO_ADVANTAGE_H
#define SKPO_ADVANTAGE_H

#include "base/cli.h"
#include "base/common.h"
#include "record/record.h"
#include "rl/tracker.h"

#include <stddef.h>

typedef enum skpo_adv_mode {
    SKPO_ADV_SKPO = 0,
    SKPO_ADV_GRPO,
    SKPO_ADV_DRGRPO,
    SKPO_ADV_DAPO,
    SKPO_ADV_SPO,
    SKPO_ADV_PRIME,
} skpo_adv_mode;

// The modes' names (base/cli.h table; skpo-advantage --mode).
extern const skpo_enum skpo_adv_modes;
// "skpo" ... "prime" -> mode; returns 0 on success, -1 for an unknown name.
int skpo_adv_mode_parse(const char *name, skpo_adv_mode *out);
const char *skpo_adv_mode_name(skpo_adv_mode m);

// --- the formulas ------------------------------------------------------------------

// Group-relative advantages of rewards r[0..n) into adv: (r - mean) / (std + eps)
// with the unbiased std when use_std, else r - mean. Returns 1 (and zeros) when
// all rewards are equal, else 0. n >= 1.
int skpo_adv_group(const double *r, size_t n, int use_std, double eps, double *adv);
// In place: a = (a - mean) / (std + eps), unbiased std; n < 2 gives zeros.
void skpo_adv_batch_norm(double *a, size_t n, double eps);
// Unbiased standard deviation (0 for n < 2).
double skpo_adv_std(const double *a, size_t n);

// PRIME (Cui et al. 2025; verl recipe/prime compute_rloo_advantage_return) for
// nseq responses in consecutive groups of k (k >= 2) of one batch; response i has
// len[i] >= 1 tokens with PRM log-probs prm[i], reference log-probs ref[i] and
// outcome acc[i] (0 or 1):
//   r_it = beta (prm_it - ref_it) for t < len_i - 1, r_i,last = 0 (token granularity);
//   batch_norm: r_it /= max over the batch of |sum_{s >= t} r_is| + 1e-6;
//   leave-one-out in the group, m_j = mean_t r_jt:
//     p_it = r_it k/(k-1) - sum_j m_j/(k-1),  o_i = acc_i k/(k-1) - sum_j acc_j/(k-1);
//   x_it = coef_process p_it + coef_outcome o_i [t = last];  G_it = sum_{s >= t} x_is;
//   adv_it = (G_it - mean) / sqrt(var + 1e-8), mean and unbiased var over every token.
// adv[i] receives len[i] values.
typedef struct skpo_prime_opts {
    double beta;           // implicit reward beta (beta_train 0.05)
    double coef_process;   // reward_dpo_coef (5)
    double coef_outcome;   // reward_gt_coef (5)
    int batch_norm;        // prime_norm = batch_norm (1) or none (0)
} skpo_prime_opts;
void skpo_prime_opts_default(skpo_prime_opts *o);
skpo_status skpo_adv_prime(const float *const *prm, const float *const *ref, const size_t *len, const double *acc,
                           size_t nseq, size_t k, const skpo_prime_opts *o, float **adv, skpo_err *err);

// --- a whole step ------------------------------------------------------------------

// D for each of n stored segments (see tracker.h): mean_t |logp_now - seg.logp|.
typedef skpo_status (*skpo_divergence_fn)(void *ctx, const skpo_tracker_seg *segs, size_t n, double *D, skpo_err *err);

// The divergence of docs/algorithm.md Q1 / SPO's code, with the current checkpoint:
// D = mean_t |logp_model(seg.tokens[t] | seg.prompt, seg.tokens[<t]) - seg.logp[t]|
// at the given sampling temperature. Segments without tokens or prompt get D = 0.
// Sequences are scored in batches of at most max_tokens tokens (0 = 16384).
typedef struct skpo_adv_model_ctx {
    struct skpo_model *model;
    float temperature;
    size_t max_tokens;
} skpo_adv_model_ctx;
skpo_status skpo_adv_model_divergence(void *ctx, const skpo_tracker_seg *segs, size_t n, double *D, skpo_err *err);

typedef struct skpo_adv_opts {
    skpo_adv_mode mode;
    long group;                 // G: downstream records per up (skpo), full records per pid (grpo family)
    double w_up, w_down;        // phase weights in skpo mode (others write 1.0)
    int norm_down;              // skpo: batch-normalise downstream advantages too
    int reward_up_self;         // skpo: R_I = reward of the `self` record, not the mean of the downs
    long up_warmup;             // skpo: prompts with fewer earlier visits get upstream A = 0, outside the batch statistics
    int len_with_segment;       // skpo: L observes |s| + mean |o_i| (continual layout [q, s]); 0: mean |o_i| (skip)
    double len_cap;             // > 0: the L observation is capped here (MAX_TOKENS, the completion limit)
    double eps_group;           // 1e-6
    double eps_batch;           // 1e-8
    skpo_divergence_fn divergence; // NULL: rho = rho_max (unless div_from_records)
    void *div_ctx;
    // D from the records instead: the head record (up, else the group's first)
    // of every revisited prompt whose stored segment is scorable carries
    // `seg_div` (skpo-sample --rescore measured it under the sampling weights);
    // a missing one is an error naming the record. No model needed here.
    int div_from_records;
    skpo_prime_opts prime;      // prime mode
} skpo_adv_opts;

void skpo_adv_opts_default(skpo_adv_opts *o);

// Compute advantages for recs[0..n) in place (fields adv, weight; reward on up
// records), set keep[i] = 0 for records dropped by dapo (1 otherwise), update
// the tracker and fill *metrics (cleared first) with a `metrics` record. On
// error nothing in recs or t is to be trusted: the caller discards both.
// Errors name the record (uid) or group (gid / pid) at fault.
skpo_status skpo_adv_step(skpo_rec *recs, size_t n, const skpo_adv_opts *o, skpo_tracker *t,
                          unsigned char *keep, skpo_rec *metrics, skpo_err *err);

#endif
