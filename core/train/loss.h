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
 *   SHAPE  Critique-GRPO's policy shaping of refinement tokens (Zhang et al. 2025,
 *          arXiv 2506.03106; the authors' compute_token_on_off_policy_loss with
 *          off_policy_reshape p_div_p_0.1): with p_t = exp(logp_t),
 *          loss_t = -A f(p_t), f(p) = p / (p + gamma), gamma = shape_gamma (0.1);
 *          no pi_old, no clip, no mismatch weight (the refinement was sampled under
 *          another prompt, so no ratio to pi_old exists). dloss/dlogp = -A gamma p / (p + gamma)^2:
 *          unlikely correct tokens get the largest push. Not a phase form: skpo-update
 *          applies it to the records marked `refine` (record.h F_REFINE) whatever the phase's form.
 *   PRM-CE the implicit PRM's loss (PRIME, Cui et al. 2025; verl recipe/prime
 *          compute_ce_dpo_loss_rm): the model being trained is the PRM pi_phi,
 *          z = prm_beta * sum_t (logp_t - ref_t) (ref: the frozen reference), and the
 *          sequence loss is the binary cross-entropy of sigmoid(z) against the
 *          0/1 label y: l = softplus(z) - y z, dl/dlogp_t = prm_beta (sigmoid(z) - y).
 *          Every token carries l (as GSPO's tokens carry the sequence term) with
 *          gradient n dl/dlogp_t, so seq-mean-token-mean gives the mean BCE over
 *          sequences, verl's reduction. Reads no old log-probs, no advantage and
 *          no mismatch weight; KL and entropy terms are added as for any form.
 * Per-token advantages (PRIME): when skpo_loss_seq.adv_tok is set, token t uses
 * A_t = adv_tok[t] in place of the record's one A (every policy form).
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

#include "base/cli.h"
#include "base/common.h"

typedef enum skpo_loss_kind {
    SKPO_LOSS_PPO = 0,
    SKPO_LOSS_CISPO = 1,
    SKPO_LOSS_SFT = 2,
    SKPO_LOSS_GSPO = 3,
    SKPO_LOSS_SAPO = 4,
    SKPO_LOSS_SHAPE = 5,   // per record (refinements), never a phase's form
    SKPO_LOSS_PRM_CE = 6,
    SKPO_LOSS_NKINDS        // not a form: the count (a new form goes above it)
} skpo_loss_kind;

// What a loss form reads besides the current log-probs (skpo_loss_kind_needs).
enum {
    SKPO_LOSS_NEEDS_OLD = 1,    // old log-probs (a ratio to pi_old)
    SKPO_LOSS_NEEDS_ADV = 2,    // the advantage (adv, or adv_tok where set)
    SKPO_LOSS_NEEDS_REF = 4,    // reference log-probs
    SKPO_LOSS_NEEDS_LABEL = 8,  // the 0/1 outcome label (PRM-CE)
};

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
    double shape_gamma;    // SHAPE: f(p) = p / (p + gamma); Critique-GRPO 0.1
    double prm_beta;       // PRM-CE: beta of the implicit reward (PRIME's beta_train 0.05)
} skpo_loss_cfg;

// --- configuration ---------------------------------------------------------------

// Defaults: up = PPO [0.8, 1.2] without dual clip, i.e. the paper's eq. 6
// exactly (docs/algorithm.md Q7 suggested verl's dual clip 3, which eq. 6 does not
// have); down = CISPO [0.8, 1.28]; full (GRPO/DAPO/SPO baselines, run with
// verl's vanilla loss) = PPO clip-higher [0.8, 1.28] dual-clip 3; token-mean; norm 3072 (the completion budget); no KL, no entropy.
void skpo_loss_cfg_default(skpo_loss_cfg *c);
// The names (base/cli.h tables; one row per form in loss.c): every form
// ("ppo" "cispo" "sft" "gspo" "sapo" "shape" "prm-ce"), the forms a phase may
// take (all but sft and shape), and the aggregations.
extern const skpo_enum skpo_loss_kinds, skpo_loss_phase_kinds, skpo_loss_aggs;
// Name -> kind; -1 if unknown.
int skpo_loss_kind_parse(const char *s);
const char *skpo_loss_kind_name(skpo_loss_kind k);
// SKPO_LOSS_NEEDS_* of a form (0 for an unknown kind).
unsigned skpo_loss_kind_needs(skpo_loss_kind k);
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
    const float *old;       // (n) old policy (the ratio's denominator); unused by SFT, SHAPE and PRM-CE
    const float *ref;       // (n) reference; required iff kl_coef != 0 or the form is PRM-CE
    const float *entropy;   // (n) nullable; required iff entropy_coef != 0
    double adv;
    const float *adv_tok;   // (n) nullable: per-token advantages, used instead of adv
    double label;           // PRM-CE: the 0/1 outcome label
    double scale;           // skpo_loss_agg_scale(...)
    double weight;          // the record's phase weight
    const float *is_weight; // (n) nullable: rollout/train mismatch weights (skpo_mismatch_weights);
                            // the policy term of token t is multiplied by is_weight[t], and a
                            // token of weight 0 is masked out (no loss, no gradient, not counted)
} skpo_loss_seq;

// Adds this sequence's sums to st (masked tokens excluded) and writes d(objective)/d(logp_t) =
// weight * scale * dloss_t/dlogp_t into dlogp[0..n) and, when dent is non-NULL,
// d(objective)/d(H_t) into dent[0..n). kind is the phase's loss (SFT ignores
// old, adv and clip). Returns SKPO_ENUMERIC naming the token index when an input
// log-prob or a loss is not finite (nothing is added to st then).
skpo_status skpo_loss_seq_eval(const skpo_loss_cfg *c, const skpo_phase_loss *pl, const skpo_loss_seq *s,
                               float *dlogp, float *dent, skpo_loss_stats *st, skpo_err *err);

// --- rollout/train mismatch -----------------------------------------------------------------
//
// Three log-probs per token: the sampler's (`logp` in the records: rollout),
// pi_old (recomputed by the trainer with the step's starting weights) and the
// current policy. The PPO/CISPO ratio is current / pi_old; the mismatch between
// the sampler and pi_old is corrected by one per-token weight w_t that
// multiplies the policy term of every loss form alike (skpo_loss_seq.is_weight).
// With rho_t = exp(clamp(old_t - rollout_t, -20, 20)) (pi_old / pi_rollout):
//   off         w_t = 1
//   tis         w_t = min(rho_t, cap)                       (truncated IS, verl rollout_is=token)
//   mask-token  w_t = rho_t if low <= rho_t <= high, else 0 (masked IS per token, TRL token_mask)
//   mask-seq    g = exp(mean_t log rho_t) (geometric mean); every token of the
//               sequence gets w_t = g if low <= g <= high, else 0
//               (TRL sequence_mask, but on the geometric mean: no compounding with length)
//   icepop      w_t = rho_t if low <= rho_t <= high, else 0 with IcePop's
//               two-sided band (Ring-1T) as default
// A masked token (w_t = 0) leaves the loss and its phase's normalisers (the
// trainer counts kept tokens only, as verl's rejection mask does).

typedef enum skpo_mismatch_mode {
    SKPO_MISMATCH_OFF = 0,
    SKPO_MISMATCH_TIS = 1,
    SKPO_MISMATCH_MASK_TOKEN = 2,
    SKPO_MISMATCH_MASK_SEQ = 3,
    SKPO_MISMATCH_ICEPOP = 4,
} skpo_mismatch_mode;

typedef struct skpo_mismatch_cfg {
    skpo_mismatch_mode mode;
    double cap;           // tis: weight ceiling C (> 0)
    double low, high;     // mask-*, icepop: kept band [low, high] of the ratio (0 <= low < high)
} skpo_mismatch_cfg;

// Mode and its default thresholds (docs/update.md states the sources):
// tis cap 2; mask-token [0, 3]; mask-seq [1/1.001, 1.001]; icepop [0.5, 5].
void skpo_mismatch_cfg_default(skpo_mismatch_cfg *c, skpo_mismatch_mode mode);
// "off" | "tis" | "mask-token" | "mask-seq" | "icepop" -> mode; -1 if unknown.
extern const skpo_enum skpo_mismatch_modes;
int skpo_mismatch_parse(const char *s);
const char *skpo_mismatch_name(skpo_mismatch_mode m);
skpo_status skpo_mismatch_cfg_check(const skpo_mismatch_cfg *c, skpo_err *err);

// Sums over tokens of the mismatch between rollout and pi_old (whatever the
// mode, also off): k3 = rho - 1 - log rho (the K3 estimate of KL(rollout || pi_old)
// from rollout samples), |old - rollout| (sum and max), tokens whose weight was
// truncated (tis) or masked.
typedef struct skpo_mismatch_stats {
    double tokens;
    double k3;
    double abs_dlogp, max_abs_dlogp;
    double truncated, masked;
} skpo_mismatch_stats;

// w[0..n) for one sequence; adds to st (nullable). Returns the kept (w > 0)
// token count, or -1 with SKPO_ENUMERIC in err when a log-prob is not finite.
int skpo_mismatch_weights(const skpo_mismatch_cfg *c, const float *rollout, const float *old, int n, float *w,
                          skpo_mismatch_stats *st, skpo_err *err);
void skpo_mismatch_stats_add(skpo_mismatch_stats *acc, const skpo_mismatch_stats *s);

#endif
