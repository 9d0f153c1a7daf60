/*
 * loss.h - per-token policy losses, their gradient with respect to the current
 * log-probs, and the aggregation normalisers of a mini-batch.
 *
 * Notation (docs/algorithm.md 4.5): d_t = clamp(logp_t - old_t, -20, 20), r_t = exp(d_t),
 * A = the record's advantage; per-token losses are minimised.
 *   PPO    loss_t = max(-A r_t, -A clamp(r_t, 1 - eps_low, 1 + eps_high)), and
 *          for A < 0 with dual clip c > 0: loss_t = min(loss_t, -A c)
 *          (verl compute_policy_loss_vanilla; at a tie of the max/min the
 *          gradient is split half/half as torch.maximum/minimum do).
 *   CISPO  loss_t = -stopgrad(clamp(r_t, 1 - eps_low, 1 + eps_high)) A logp_t
 *          (clipped tokens keep a capped gradient).
 *   SFT    loss_t = -logp_t (next-token cross-entropy on `tokens`).
 *   GSPO   sequence-level ratio s = exp(min(mean_t d_t, 10)) (length-normalised,
 *          verl compute_policy_loss_gspo): every token of the sequence takes
 *          loss_t = max(-A s, -A clamp(s, 1 - eps_low, 1 + eps_high)) with
 *          ds/dlogp_t = s (the GSPO-token form with A_t = A), so the whole
 *          sequence is clipped or not; no dual clip. With seq-mean-token-mean
 *          aggregation this is GSPO's sequence objective exactly.
 *   SAPO   soft gate instead of a clip (SAPO paper): loss_t = -A (4/tau) sigma(tau (r_t - 1)),
 *          tau = sapo_tau_pos for A > 0, sapo_tau_neg otherwise; the gradient
 *          weight on A dlogp is 4 sigma (1 - sigma) r_t (1 at r_t = 1).
 * Optional terms added to every token (both off by default, docs/algorithm.md 2):
 *   kl_coef * k3(ref, logp)  with verl's low_var_kl clamps: k = clamp(ref - logp,
 *                            -20, 20), k3 = clamp(exp(k) - k - 1, -10, 10);
 *   -entropy_coef * H_t      (H_t from the model; its gradient goes to dH).
 *
 * Aggregation of one phase over a mini-batch (docs/algorithm.md 4.6). The trainer counts
 * tokens and sequences of each phase over the WHOLE mini-batch (all micro-
 * batches, all ranks) before the first backward, so accumulation is exact:
 *   token-mean               sum_t loss_t / tokens(phase)
 *   seq-mean-token-mean      mean over sequences of each sequence's token mean
 *   seq-mean-token-sum-norm  sum_t loss_t / (seqs(phase) * norm)  (Dr. GRPO: the
 *                            token sum of each sequence over a constant, e.g. the
 *                            generation budget, averaged over sequences)
 * The mini-batch objective is sum over phases of weight * L_phase with the
 * weight taken from each record (docs/algorithm.md Q5: 0.5 up + 0.5 down). Records with
 * weight 0 or advantage 0 still count in tokens(phase), as in verl.
 */
#ifndef SKPO_LOSS_H
#define SKPO_LOSS_H

#include "base/common.h"

typedef enum skpo_loss_kind {
    SKPO_LOSS_PPO = 0,
    SKPO_LOSS_CISPO = 1,
    SKPO_LOSS_SFT = 2,
    SKPO_LOSS_GSPO = 3,
    SKPO_LOSS_SAPO = 4,
} skpo_loss_kind;

typedef enum skpo_loss_agg {
    SKPO_AGG_TOKEN_MEAN = 0,
    SKPO_AGG_SEQ_MEAN_TOKEN_MEAN = 1,
    SKPO_AGG_SEQ_MEAN_TOKEN_SUM_NORM = 2,
} skpo_loss_agg;

// Record kinds that carry a trained response, each its own phase.
typedef enum skpo_phase {
    SKPO_PHASE_UP = 0,
    SKPO_PHASE_DOWN = 1,
    SKPO_PHASE_FULL = 2,
    SKPO_NPHASE = 3,
} skpo_phase;

typedef struct skpo_phase_loss {
    skpo_loss_kind kind;
    double eps_low, eps_high;   // ratio clamp [1 - eps_low, 1 + eps_high]
    double dual_clip;           // PPO only: c > 1 caps the loss of A < 0 tokens at -A c; 0 = off
} skpo_phase_loss;

typedef struct skpo_loss_cfg {
    skpo_phase_loss phase[SKPO_NPHASE];
    skpo_loss_agg agg[SKPO_NPHASE];   // per phase (docs/algorithm.md Q5: a seq-mean upstream is one flag away)
    double agg_norm;       // constant of seq-mean-token-sum-norm
    double kl_coef;        // 0 = off; otherwise every record needs ref_logp
    double entropy_coef;   // 0 = off
    double sapo_tau_pos, sapo_tau_neg; // SAPO gate temperatures (A > 0, A <= 0); SAPO paper 1.0 / 1.05
} skpo_loss_cfg;

// --- configuration ---------------------------------------------------------------

// Defaults of docs/algorithm.md Q7: up = PPO [0.8, 1.2] dual-clip 3; down = CISPO
// [0.8, 1.28]; full (GRPO/DAPO/SPO baselines) = PPO clip-higher [0.8, 1.28]
// dual-clip 3; token-mean; norm 3072 (the completion budget); no KL, no entropy.
void skpo_loss_cfg_default(skpo_loss_cfg *c);
// "ppo" | "cispo" | "sft" | "gspo" | "sapo" -> kind; -1 if unknown.
int skpo_loss_kind_parse(const char *s);
const char *skpo_loss_kind_name(skpo_loss_kind k);
// "token-mean" | "seq-mean-token-mean" | "seq-mean-token-sum-norm"; -1 if unknown.
int skpo_loss_agg_parse(const char *s);
const char *skpo_loss_agg_name(skpo_loss_agg a);
// Record kind -> phase; -1 for kinds that are not trained (prompt, meta, ...).
int skpo_phase_of_kind(const char *kind);
const char *skpo_phase_name(skpo_phase p);
// Reject settings no formula accepts (eps outside [0,1), dual clip in (0,1], ...).
skpo_status skpo_loss_cfg_check(const skpo_loss_cfg *c, skpo_err *err);

// --- aggregation ----------------------------------------------------------------------

// Counts of one phase over a whole mini-batch (all ranks).
typedef struct skpo_loss_count {
    double tokens, seqs;
} skpo_loss_count;

// The factor every token loss of one sequence of length n in phase p is
// multiplied by to give the phase's aggregate L_p (not including the record
// weight); 0 when the phase is empty or n == 0.
double skpo_loss_agg_scale(const skpo_loss_cfg *c, int p, const skpo_loss_count *count, int n);

// --- per-token loss -------------------------------------------------------------------------

// Sums over tokens (means are formed by the caller): clipped-token counts, the
// PPO approx-KL sum of (old - new) (clamped like d_t), k3 to the reference and
// entropy; `loss` is sum of scale * loss_t (this phase's L contribution).
typedef struct skpo_loss_stats {
    double loss;
    double tokens;
    double clip_low, clip_high, clip_dual;
    double approx_kl;
    double kl_ref;
    double entropy;
} skpo_loss_stats;

typedef struct skpo_loss_seq {
    int n;                  // scored tokens
    const float *logp;      // (n) current policy
    const float *old;       // (n) old policy; unused by SFT
    const float *ref;       // (n) reference; required iff kl_coef != 0
    const float *entropy;   // (n) nullable; required iff entropy_coef != 0
    double adv;
    double scale;           // skpo_loss_agg_scale(...)
    double weight;          // the record's phase weight
} skpo_loss_seq;

// Adds this sequence's sums to st and writes d(objective)/d(logp_t) =
// weight * scale * dloss_t/dlogp_t into dlogp[0..n) and, when dent is non-NULL,
// d(objective)/d(H_t) into dent[0..n). kind is the phase's loss (SFT ignores
// old, adv and clip). Returns SKPO_ENUMERIC naming the token index when an input
// log-prob or a loss is not finite (nothing is added to st then).
skpo_status skpo_loss_seq_eval(const skpo_loss_cfg *c, const skpo_phase_loss *pl, const skpo_loss_seq *s,
                               float *dlogp, float *dent, skpo_loss_stats *st, skpo_err *err);

#endif
