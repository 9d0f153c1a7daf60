/*
 * loss.c - see loss.h. Per-token math in double; inputs and gradients are
 * float32 like the model's. The branches mirror verl's torch code so the
 * PyTorch fixtures (tests/ref/make_update_fixtures.py) agree to rounding.
 */
#include "train/loss.h"

#include <math.h>
#include <string.h>

#define LOGRATIO_CLAMP 20.0
#define K3_CLAMP 10.0

void skpo_loss_cfg_default(skpo_loss_cfg *c) {
    memset(c, 0, sizeof *c);
    // Upstream: eq. 6 exactly (min/clip, no dual clip; --up-dual-clip 3 is verl's vanilla loss).
    c->phase[SKPO_PHASE_UP] = (skpo_phase_loss){SKPO_LOSS_PPO, 0.2, 0.2, 0.0};
    c->phase[SKPO_PHASE_DOWN] = (skpo_phase_loss){SKPO_LOSS_CISPO, 0.2, 0.28, 0.0};
    c->phase[SKPO_PHASE_FULL] = (skpo_phase_loss){SKPO_LOSS_PPO, 0.2, 0.28, 3.0};
    for (int p = 0; p < SKPO_NPHASE; p++) c->agg[p] = SKPO_AGG_TOKEN_MEAN;
    c->agg_norm = 3072;
    c->sapo_tau_pos = 1.0;
    c->sapo_tau_neg = 1.05;
    c->shape_gamma = 0.1;
    c->prm_beta = 0.05;
}

double skpo_loss_agg_scale(const skpo_loss_cfg *c, int p, const skpo_loss_count *ph, int n) {
    SKPO_ASSERT(p >= 0 && p < SKPO_NPHASE);
    if (n <= 0 || ph->tokens <= 0 || ph->seqs <= 0) return 0;
    switch (c->agg[p]) {
    case SKPO_AGG_TOKEN_MEAN: return 1.0 / ph->tokens;
    case SKPO_AGG_SEQ_MEAN_TOKEN_MEAN: return 1.0 / (ph->seqs * n);
    case SKPO_AGG_SEQ_MEAN_TOKEN_SUM_NORM: return 1.0 / (ph->seqs * c->agg_norm);
    }
    return 0;
}

// --- per-token forms ----------------------------------------------------------------

typedef struct tok_out {
    double loss, grad;         // loss_t and dloss_t/dlogp_t
    int low, high, dual;       // which clip bound decided the token
} tok_out;

// max(a, b) with torch's tie rule: the gradient is split half/half.
static void pick_max(double la, double ga, double lb, double gb, double *l, double *g) {
    if (la > lb) *l = la, *g = ga;
    else if (lb > la) *l = lb, *g = gb;
    else *l = la, *g = 0.5 * (ga + gb);
}

static tok_out ppo_token(const skpo_phase_loss *pl, double A, double d, int d_inside) {
    tok_out o = {0};
    double r = exp(d), dr = d_inside ? r : 0.0;     // dr/dlogp
    double lo = 1 - pl->eps_low, hi = 1 + pl->eps_high;
    double rc = r < lo ? lo : r > hi ? hi : r;
    double l1 = -A * r, g1 = -A * dr;
    double l2 = -A * rc, g2 = (r >= lo && r <= hi) ? -A * dr : 0.0;
    pick_max(l1, g1, l2, g2, &o.loss, &o.grad);
    if (l2 > l1) {
        o.low = r < 1;
        o.high = r > 1;
    }
    if (A < 0 && pl->dual_clip > 0) {
        double l3 = -A * pl->dual_clip;
        if (o.loss > l3) {
            o.loss = l3, o.grad = 0;
            o.dual = 1;
        } else if (o.loss == l3) {
            o.grad *= 0.5;
        }
    }
    return o;
}

static tok_out cispo_token(const skpo_phase_loss *pl, double A, double d, double logp) {
    tok_out o = {0};
    double r = exp(d);
    double lo = 1 - pl->eps_low, hi = 1 + pl->eps_high;
    double w = r < lo ? lo : r > hi ? hi : r;
    o.loss = -w * A * logp;
    o.grad = -w * A;
    o.low = r < lo;
    o.high = r > hi;
    return o;
}

// SAPO: the soft gate (4 / tau) sigma(tau (r - 1)) in place of the clip. No
// token is "clipped"; tokens whose gradient weight 4 sigma (1 - sigma) fell below
// 1/2 are counted as clip_low / clip_high (r below / above 1) to show how many the
// gate attenuates.
static tok_out sapo_token(const skpo_loss_cfg *c, double A, double d, int d_inside) {
    tok_out o = {0};
    double r = exp(d), tau = A > 0 ? c->sapo_tau_pos : c->sapo_tau_neg;
    double x = tau * (r - 1);
    double sg = x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x));
    double wgt = 4 * sg * (1 - sg);
    o.loss = -A * (4 / tau) * sg;
    o.grad = d_inside ? -A * wgt * r : 0.0;
    if (wgt < 0.5) {
        o.low = r < 1;
        o.high = r > 1;
    }
    return o;
}

// Critique-GRPO's shaping f(p) = p / (p + gamma) of a refinement token:
// loss = -A f(p), d/dlogp = -A f'(p) p = -A gamma p / (p + gamma)^2.
static tok_out shape_token(const skpo_loss_cfg *c, double A, double lp) {
    tok_out o = {0};
    double p = exp(lp), g = c->shape_gamma;
    o.loss = -A * p / (p + g);
    o.grad = -A * g * p / ((p + g) * (p + g));
    return o;
}

// GSPO's length-normalised sequence log-ratio: mean_t (logp_t - old_t), capped at
// 10 as verl does (above it the ratio carries no gradient).
#define GSPO_LOGRATIO_MAX 10.0
static double gspo_seq_logratio(const skpo_loss_seq *s, int *inside) {
    double m = 0;
    for (int t = 0; t < s->n; t++) m += (double)s->logp[t] - (double)s->old[t];
    m = s->n > 0 ? m / s->n : 0;
    *inside = m <= GSPO_LOGRATIO_MAX;
    return *inside ? m : GSPO_LOGRATIO_MAX;
}

// PRM-CE: the sequence's BCE l = softplus(z) - y z of z = beta sum_t (logp_t - ref_t)
// (softplus written so that it neither overflows nor loses digits for large |z|)
// and dl/dlogp_t = beta (sigmoid(z) - y), the same for every token.
static void prm_ce_seq(const skpo_loss_cfg *c, const skpo_loss_seq *s, double *l, double *g) {
    double q = 0;
    for (int t = 0; t < s->n; t++) q += (double)s->logp[t] - (double)s->ref[t];
    double z = c->prm_beta * q;
    double sg = z >= 0 ? 1 / (1 + exp(-z)) : exp(z) / (1 + exp(z));
    *l = fmax(z, 0) + log1p(exp(-fabs(z))) - s->label * z;
    *g = c->prm_beta * (sg - s->label);
}

// k3 of verl's low_var_kl and its derivative with respect to logp.
static void k3_term(double ref, double logp, double *kl, double *g) {
    double k = ref - logp;
    int inside = k >= -LOGRATIO_CLAMP && k <= LOGRATIO_CLAMP;
    if (!inside) k = k < 0 ? -LOGRATIO_CLAMP : LOGRATIO_CLAMP;
    double e = exp(k);
    double v = e - k - 1;
    if (v > K3_CLAMP || v < -K3_CLAMP) {
        *kl = v > 0 ? K3_CLAMP : -K3_CLAMP;
        *g = 0;
        return;
    }
    *kl = v;
    *g = inside ? -(e - 1) : 0.0;   // dk/dlogp = -1
}

// The terms a form computes once per sequence before its tokens: GSPO's
// length-normalised log-ratio (the PPO form on it, no dual clip) and PRM-CE's
// sequence BCE, which every token carries.
typedef struct seq_terms {
    skpo_phase_loss gspo_pl;
    int gspo_inside;
    double gspo_d;
    double prm_l, prm_g;
} seq_terms;

static skpo_status gspo_seq(const skpo_loss_cfg *c, const skpo_loss_seq *s, seq_terms *q, skpo_err *err) {
    (void)c;
    for (int t = 0; t < s->n; t++)
        if (!isfinite(s->logp[t]) || !isfinite(s->old[t]))
            return skpo_err_set(err, SKPO_ENUMERIC, "log-prob of token %d is %g (old %g)", t, (double)s->logp[t],
                                (double)s->old[t]);
    q->gspo_d = gspo_seq_logratio(s, &q->gspo_inside);
    return SKPO_OK;
}

static skpo_status prm_ce_seq_terms(const skpo_loss_cfg *c, const skpo_loss_seq *s, seq_terms *q, skpo_err *err) {
    for (int t = 0; t < s->n; t++)
        if (!isfinite(s->logp[t]) || !isfinite(s->ref[t]))
            return skpo_err_set(err, SKPO_ENUMERIC, "log-prob of token %d is %g (ref %g)", t, (double)s->logp[t],
                                (double)s->ref[t]);
    if (!(s->label == 0 || s->label == 1)) return skpo_err_set(err, SKPO_ERANGE, "PRM label %g is not 0 or 1", s->label);
    prm_ce_seq(c, s, &q->prm_l, &q->prm_g);
    return SKPO_OK;
}

// What a token function sees: the form's inputs for token t. A, d (the
// clamped log-ratio to pi_old) and inside (d was not clamped) are set only for
// the forms that need old log-probs (SKPO_LOSS_NEEDS_OLD).
typedef struct tok_in {
    const skpo_loss_cfg *c;
    const skpo_phase_loss *pl;
    const skpo_loss_seq *s;
    const seq_terms *q;
    double lp, A, d;
    int inside;
} tok_in;

static tok_out ppo_row(const tok_in *in) { return ppo_token(in->pl, in->A, in->d, in->inside); }
static tok_out cispo_row(const tok_in *in) { return cispo_token(in->pl, in->A, in->d, in->lp); }
static tok_out sft_row(const tok_in *in) { return (tok_out){.loss = -in->lp, .grad = -1}; }
static tok_out gspo_row(const tok_in *in) { return ppo_token(&in->q->gspo_pl, in->A, in->q->gspo_d, in->q->gspo_inside); }
static tok_out sapo_row(const tok_in *in) { return sapo_token(in->c, in->A, in->d, in->inside); }
// The refinement's record advantage: SHAPE reads no per-token advantages.
static tok_out shape_row(const tok_in *in) { return shape_token(in->c, in->s->adv, in->lp); }
static tok_out prm_ce_row(const tok_in *in) { return (tok_out){.loss = in->q->prm_l, .grad = in->s->n * in->q->prm_g}; }

// --- the forms ----------------------------------------------------------------------
//
// One row per skpo_loss_kind: its name (--up-loss etc., the fixtures' "kind"),
// what it reads, where it may be used, the terms it computes once per sequence
// (NULL: none) and its per-token loss and gradient. A new form is a row here,
// its token function above, and an enum value in loss.h.

enum {
    FORM_PHASE = 1,       // may be a phase's form (--up-loss, --down-loss, --full-loss)
    FORM_RECORD = 2,      // per record only (refinements), never a phase's form
    FORM_UNWEIGHTED = 4,  // the mismatch weight does not apply (no ratio to the sampler's policy)
};

typedef struct form_row {
    const char *name;
    unsigned needs;  // SKPO_LOSS_NEEDS_*
    unsigned use;    // FORM_*
    skpo_status (*seq)(const skpo_loss_cfg *c, const skpo_loss_seq *s, seq_terms *q, skpo_err *err);
    tok_out (*token)(const tok_in *in);
} form_row;

#define OLD_ADV (SKPO_LOSS_NEEDS_OLD | SKPO_LOSS_NEEDS_ADV)
static const form_row forms[SKPO_LOSS_NKINDS] = {
    [SKPO_LOSS_PPO] = {"ppo", OLD_ADV, FORM_PHASE, NULL, ppo_row},
    [SKPO_LOSS_CISPO] = {"cispo", OLD_ADV, FORM_PHASE, NULL, cispo_row},
    [SKPO_LOSS_SFT] = {"sft", 0, 0, NULL, sft_row},
    [SKPO_LOSS_GSPO] = {"gspo", OLD_ADV, FORM_PHASE, gspo_seq, gspo_row},
    [SKPO_LOSS_SAPO] = {"sapo", OLD_ADV, FORM_PHASE, NULL, sapo_row},
    [SKPO_LOSS_SHAPE] = {"shape", SKPO_LOSS_NEEDS_ADV, FORM_RECORD, NULL, shape_row},
    [SKPO_LOSS_PRM_CE] = {"prm-ce", SKPO_LOSS_NEEDS_REF | SKPO_LOSS_NEEDS_LABEL, FORM_PHASE | FORM_UNWEIGHTED,
                          prm_ce_seq_terms, prm_ce_row},
};

// --- names -------------------------------------------------------------------------

static const char *const agg_names[] = {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"};
static const char *const phase_names[] = {"up", "down", "full"};
enum { NAGG = sizeof agg_names / sizeof *agg_names };

static const form_row *form(int k) { return k >= 0 && k < SKPO_LOSS_NKINDS ? &forms[k] : NULL; }
static const char *kind_name(int k) { return form(k) ? form(k)->name : NULL; }
static const char *phase_kind_name(int k) { return form(k) && (form(k)->use & FORM_PHASE) ? form(k)->name : NULL; }
static const char *agg_name(int a) { return a >= 0 && a < NAGG ? agg_names[a] : NULL; }

const skpo_enum skpo_loss_kinds = {SKPO_LOSS_NKINDS, kind_name};
const skpo_enum skpo_loss_phase_kinds = {SKPO_LOSS_NKINDS, phase_kind_name};
const skpo_enum skpo_loss_aggs = {NAGG, agg_name};

int skpo_loss_kind_parse(const char *s) { return skpo_enum_parse(&skpo_loss_kinds, s); }
const char *skpo_loss_kind_name(skpo_loss_kind k) { return form(k) ? form(k)->name : "?"; }
unsigned skpo_loss_kind_needs(skpo_loss_kind k) { return form(k) ? form(k)->needs : 0; }

int skpo_loss_agg_parse(const char *s) { return skpo_enum_parse(&skpo_loss_aggs, s); }
const char *skpo_loss_agg_name(skpo_loss_agg a) { return agg_name(a) ? agg_name(a) : "?"; }

int skpo_phase_of_kind(const char *kind) {
    for (int i = 0; kind && i < SKPO_NPHASE; i++)
        if (!strcmp(kind, phase_names[i])) return i;
    return -1;
}
const char *skpo_phase_name(skpo_phase p) { return (unsigned)p < SKPO_NPHASE ? phase_names[p] : "?"; }

skpo_status skpo_loss_cfg_check(const skpo_loss_cfg *c, skpo_err *err) {
    for (int p = 0; p < SKPO_NPHASE; p++) {
        const skpo_phase_loss *pl = &c->phase[p];
        if (!form(pl->kind) || (form(pl->kind)->use & FORM_RECORD))
            return skpo_err_set(err, SKPO_ERANGE, "%s: unknown loss kind %d", phase_names[p], (int)pl->kind);
        if (!(pl->eps_low >= 0 && pl->eps_low < 1) || !(pl->eps_high >= 0 && isfinite(pl->eps_high)))
            return skpo_err_set(err, SKPO_ERANGE, "%s: clip range [1 - %g, 1 + %g] is not a ratio range",
                                phase_names[p], pl->eps_low, pl->eps_high);
        // verl asserts c > 1: a cap at or below 1 would cut unclipped tokens.
        if (pl->dual_clip != 0 && !(pl->dual_clip > 1 && isfinite(pl->dual_clip)))
            return skpo_err_set(err, SKPO_ERANGE, "%s: dual clip %g must be 0 (off) or > 1", phase_names[p], pl->dual_clip);
    }
    for (int p = 0; p < SKPO_NPHASE; p++)
        if ((unsigned)c->agg[p] > SKPO_AGG_SEQ_MEAN_TOKEN_SUM_NORM)
            return skpo_err_set(err, SKPO_ERANGE, "%s: unknown loss aggregation %d", phase_names[p], (int)c->agg[p]);
    if (!(c->agg_norm > 0 && isfinite(c->agg_norm)))
        return skpo_err_set(err, SKPO_ERANGE, "loss normaliser %g must be positive", c->agg_norm);
    if (!isfinite(c->kl_coef) || !isfinite(c->entropy_coef))
        return skpo_err_set(err, SKPO_ERANGE, "kl/entropy coefficients must be finite");
    if (!(c->shape_gamma > 0 && isfinite(c->shape_gamma)))
        return skpo_err_set(err, SKPO_ERANGE, "shaping constant gamma %g must be positive", c->shape_gamma);
    int sapo = 0;
    for (int p = 0; p < SKPO_NPHASE; p++) sapo |= c->phase[p].kind == SKPO_LOSS_SAPO;
    if (sapo && (!(c->sapo_tau_pos > 0 && isfinite(c->sapo_tau_pos)) || !(c->sapo_tau_neg > 0 && isfinite(c->sapo_tau_neg))))
        return skpo_err_set(err, SKPO_ERANGE, "SAPO temperatures %g / %g must be positive", c->sapo_tau_pos,
                            c->sapo_tau_neg);
    if (!(c->prm_beta > 0 && isfinite(c->prm_beta)))
        return skpo_err_set(err, SKPO_ERANGE, "PRM beta %g must be positive", c->prm_beta);
    return SKPO_OK;
}

// Token t's policy term under the phase's form (before the mismatch weight);
// the forms with a ratio add -log r to *approx_kl.
static skpo_status policy_token(const form_row *f, tok_in *in, int t, tok_out *o, double *approx_kl, skpo_err *err) {
    *o = (tok_out){0};
    if (f->needs & SKPO_LOSS_NEEDS_OLD) {
        const skpo_loss_seq *s = in->s;
        double old = s->old[t];
        if (!isfinite(old)) return skpo_err_set(err, SKPO_ENUMERIC, "old log-prob of token %d is %g", t, old);
        double d = in->lp - old;
        in->inside = d >= -LOGRATIO_CLAMP && d <= LOGRATIO_CLAMP;
        if (!in->inside) d = d < 0 ? -LOGRATIO_CLAMP : LOGRATIO_CLAMP;
        in->d = d;
        in->A = s->adv_tok ? (double)s->adv_tok[t] : s->adv;
        if (!isfinite(in->A)) return skpo_err_set(err, SKPO_ENUMERIC, "advantage of token %d is %g", t, in->A);
    }
    *o = f->token(in);
    if (f->needs & SKPO_LOSS_NEEDS_OLD) *approx_kl -= in->d;
    return SKPO_OK;
}

// Token t's regularisers, added to its term: k3 KL to the reference, entropy bonus.
static skpo_status reg_token(const skpo_loss_cfg *c, const skpo_loss_seq *s, int t, double lp, tok_out *o,
                             skpo_loss_stats *add, skpo_err *err) {
    if (c->kl_coef != 0) {
        if (!isfinite(s->ref[t])) return skpo_err_set(err, SKPO_ENUMERIC, "ref log-prob of token %d is %g", t, (double)s->ref[t]);
        double kl, g;
        k3_term(s->ref[t], lp, &kl, &g);
        o->loss += c->kl_coef * kl;
        o->grad += c->kl_coef * g;
        add->kl_ref += kl;
    }
    if (s->entropy) {
        double h = s->entropy[t];
        if (!isfinite(h)) return skpo_err_set(err, SKPO_ENUMERIC, "entropy of token %d is %g", t, h);
        o->loss -= c->entropy_coef * h;
        add->entropy += h;
    }
    return SKPO_OK;
}

skpo_status skpo_loss_seq_eval(const skpo_loss_cfg *c, const skpo_phase_loss *pl, const skpo_loss_seq *s,
                               float *dlogp, float *dent, skpo_loss_stats *st, skpo_err *err) {
    SKPO_ASSERT(s->n >= 0 && s->logp && dlogp);
    const form_row *f = form(pl->kind);
    SKPO_ASSERT(f);
    SKPO_ASSERT(!(f->needs & SKPO_LOSS_NEEDS_OLD) || s->old);
    SKPO_ASSERT((c->kl_coef == 0 && !(f->needs & SKPO_LOSS_NEEDS_REF)) || s->ref);
    SKPO_ASSERT(c->entropy_coef == 0 || s->entropy);
    skpo_loss_stats add = {0};
    double w = s->weight * s->scale;
    seq_terms q = {.gspo_pl = *pl, .gspo_inside = 1};
    q.gspo_pl.dual_clip = 0;
    skpo_status rc = f->seq ? f->seq(c, s, &q, err) : SKPO_OK;
    if (rc != SKPO_OK) return rc;
    tok_in in = {.c = c, .pl = pl, .s = s, .q = &q};
    for (int t = 0; t < s->n; t++) {
        double lp = s->logp[t];
        if (!isfinite(lp)) return skpo_err_set(err, SKPO_ENUMERIC, "log-prob of token %d is %g", t, lp);
        double isw = s->is_weight && !(f->use & FORM_UNWEIGHTED) ? s->is_weight[t] : 1.0;
        if (isw == 0) {   // masked by the mismatch correction: not part of the loss
            dlogp[t] = 0;
            if (dent) dent[t] = 0;
            continue;
        }
        tok_out o;
        in.lp = lp;
        if ((rc = policy_token(f, &in, t, &o, &add.approx_kl, err)) != SKPO_OK) return rc;
        o.loss *= isw;   // the mismatch weight scales the policy term of every form
        o.grad *= isw;
        if ((rc = reg_token(c, s, t, lp, &o, &add, err)) != SKPO_OK) return rc;
        if (!isfinite(o.loss) || !isfinite(o.grad))
            return skpo_err_set(err, SKPO_ENUMERIC, "loss of token %d is %g (gradient %g)", t, o.loss, o.grad);
        dlogp[t] = (float)(w * o.grad);
        if (dent) dent[t] = (float)(-w * c->entropy_coef);
        add.loss += s->scale * o.loss;
        add.clip_low += o.low;
        add.clip_high += o.high;
        add.clip_dual += o.dual;
        add.tokens += 1;
    }
    st->loss += add.loss;
    st->tokens += add.tokens;
    st->clip_low += add.clip_low;
    st->clip_high += add.clip_high;
    st->clip_dual += add.clip_dual;
    st->approx_kl += add.approx_kl;
    st->kl_ref += add.kl_ref;
    st->entropy += add.entropy;
    return SKPO_OK;
}

// --- rollout/train mismatch -----------------------------------------------------------------

static const char *const mismatch_names[] = {"off", "tis", "mask-token", "mask-seq", "icepop"};
enum { NMISMATCH = sizeof mismatch_names / sizeof *mismatch_names };
static const char *mismatch_name(int m) { return m >= 0 && m < NMISMATCH ? mismatch_names[m] : NULL; }
const skpo_enum skpo_mismatch_modes = {NMISMATCH, mismatch_name};

void skpo_mismatch_cfg_default(skpo_mismatch_cfg *c, skpo_mismatch_mode mode) {
    memset(c, 0, sizeof *c);
    c->mode = mode;
    c->cap = 2.0;   // verl rollout_is_threshold default
    switch (mode) {
    case SKPO_MISMATCH_MASK_TOKEN: c->low = 0, c->high = 3.0; break;   // TRL vllm_importance_sampling_cap 3, no floor
    case SKPO_MISMATCH_MASK_SEQ: c->low = 1 / 1.001, c->high = 1.001; break;   // verl geometric RS, lower = 1/upper
    case SKPO_MISMATCH_ICEPOP: c->low = 0.5, c->high = 5.0; break;   // IcePop [alpha, beta] (Ring-1T)
    default: c->low = 0, c->high = 0; break;
    }
}

int skpo_mismatch_parse(const char *s) { return skpo_enum_parse(&skpo_mismatch_modes, s); }
const char *skpo_mismatch_name(skpo_mismatch_mode m) { return mismatch_name(m) ? mismatch_name(m) : "?"; }

skpo_status skpo_mismatch_cfg_check(const skpo_mismatch_cfg *c, skpo_err *err) {
    switch (c->mode) {
    case SKPO_MISMATCH_OFF: return SKPO_OK;
    case SKPO_MISMATCH_TIS:
        if (!(c->cap > 0 && isfinite(c->cap)))
            return skpo_err_set(err, SKPO_ERANGE, "mismatch cap %g must be positive", c->cap);
        return SKPO_OK;
    case SKPO_MISMATCH_MASK_TOKEN:
    case SKPO_MISMATCH_MASK_SEQ:
    case SKPO_MISMATCH_ICEPOP:
        if (!(c->low >= 0 && c->high > c->low && isfinite(c->high)))
            return skpo_err_set(err, SKPO_ERANGE, "mismatch band [%g, %g] is not 0 <= low < high", c->low, c->high);
        return SKPO_OK;
    }
    return skpo_err_set(err, SKPO_ERANGE, "unknown mismatch mode %d", (int)c->mode);
}

void skpo_mismatch_stats_add(skpo_mismatch_stats *acc, const skpo_mismatch_stats *s) {
    acc->tokens += s->tokens;
    acc->k3 += s->k3;
    acc->abs_dlogp += s->abs_dlogp;
    acc->max_abs_dlogp = fmax(acc->max_abs_dlogp, s->max_abs_dlogp);
    acc->truncated += s->truncated;
    acc->masked += s->masked;
}

int skpo_mismatch_weights(const skpo_mismatch_cfg *c, const float *rollout, const float *old, int n, float *w,
                          skpo_mismatch_stats *st, skpo_err *err) {
    skpo_mismatch_stats add = {0};
    double sum_lr = 0;
    for (int t = 0; t < n; t++) {
        double r = rollout[t], o = old[t];
        if (!isfinite(r) || !isfinite(o)) {
            skpo_err_set(err, SKPO_ENUMERIC, "%s log-prob of token %d is %g", isfinite(r) ? "old" : "rollout", t,
                         isfinite(r) ? o : r);
            return -1;
        }
        double d = o - r;
        add.abs_dlogp += fabs(d);
        add.max_abs_dlogp = fmax(add.max_abs_dlogp, fabs(d));
        if (d > LOGRATIO_CLAMP) d = LOGRATIO_CLAMP;
        if (d < -LOGRATIO_CLAMP) d = -LOGRATIO_CLAMP;
        double rho = exp(d);
        add.k3 += rho - 1 - d;
        sum_lr += d;
        double wt = 1;
        switch (c->mode) {
        case SKPO_MISMATCH_OFF: break;
        case SKPO_MISMATCH_TIS:
            wt = rho > c->cap ? c->cap : rho;
            add.truncated += rho > c->cap;
            break;
        case SKPO_MISMATCH_MASK_TOKEN:
        case SKPO_MISMATCH_ICEPOP: wt = rho >= c->low && rho <= c->high ? rho : 0; break;
        case SKPO_MISMATCH_MASK_SEQ: break;   // below, once the mean is known
        }
        w[t] = (float)wt;
    }
    if (c->mode == SKPO_MISMATCH_MASK_SEQ && n > 0) {
        double g = exp(sum_lr / n);
        float wt = (float)(g >= c->low && g <= c->high ? g : 0);
        for (int t = 0; t < n; t++) w[t] = wt;
    }
    int kept = 0;
    for (int t = 0; t < n; t++) {
        if (w[t] == 0) add.masked += 1;   // a weight that underflows float32 is a masked token too
        else kept++;
    }
    add.tokens = n;
    if (st) skpo_mismatch_stats_add(st, &add);
    return kept;
}
