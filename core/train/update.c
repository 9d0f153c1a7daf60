/*
 * update.c - see update.h. Sections: records -> samples, the mini-batch plan,
 * micro-batch gradient, the step, metrics records.
 */
#include "train/update.h"

#include "base/strmap.h"
#include "model/pack.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void skpo_update_opts_default(skpo_update_opts *o) {
    memset(o, 0, sizeof *o);
    skpo_loss_cfg_default(&o->loss);
    o->minibatch = 32;
    o->micro_tokens = 8192;
    o->epochs = 1;
    for (int p = 0; p < SKPO_NPHASE; p++) o->phase_weight[p] = NAN;
    o->temperature = 1.0;
    o->step = 1;
    o->old_logp = SKPO_OLD_RECOMPUTE;
    skpo_mismatch_cfg_default(&o->mismatch, SKPO_MISMATCH_TIS);
}

int skpo_old_logp_parse(const char *s) {
    static const char *names[] = {"recompute", "rollout", "field"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}

// One trained record.
typedef struct sample {
    const char *uid;          // record uid, or uidbuf
    char uidbuf[32];
    int phase;
    int prompt;               // prompt index in order of first appearance
    int32_t *ids;             // (n) prompt ++ tokens, owned
    int n, start;             // scored tokens are ids[start..n)
    const float *rollout;     // (n - start) record `logp` (the sampler's); NULL when absent
    const float *old_rec;     // (n - start) record `old_logp`; NULL when absent
    float *old;               // (n - start) recomputed pi_old, owned; NULL until recomputed
    float *isw;               // (n - start) mismatch weights, owned; NULL = all 1
    int nkeep;                // tokens not masked by the mismatch correction
    skpo_mismatch_stats ms;   // rollout vs pi_old of this record
    const float *ref;         // (n - start) or NULL
    const float *adv_tok;     // (n - start) record `adv_tok` (per-token advantages), NULL when absent
    double adv, weight;
    int refine;               // record marked `refine`: Critique-GRPO's shaped loss (loss.h SHAPE), no mismatch weight
    double label;             // PRM-CE: the record's `correct` as 0/1
} sample;

struct skpo_batch {
    sample *s;
    size_t ns;
    int nprompts, nmb, rank, size;
    int **mb;                 // (nmb) this rank's sample indices of mini-batch k
    int *mbn;                 // (nmb) their count
    int *mbprompts;           // (nmb) prompts in mini-batch k (all ranks)
    int prepared;             // skpo_update_prepare ran
};

// --- records -> samples -----------------------------------------------------------

static skpo_status bad(skpo_err *err, const sample *s, const char *fmt, const char *what) {
    return skpo_err_set(err, SKPO_EFORMAT, "record '%s': %s%s", s->uid, fmt, what);
}

// The rollout and pi_old inputs a record must carry for o->old_logp and the
// mismatch correction.
static skpo_status sample_logps(const skpo_rec *r, const skpo_update_opts *o, size_t nt, sample *s, skpo_err *err) {
    size_t nl = 0, no = 0;
    s->rollout = skpo_rec_f32s(r, F_LOGP, &nl);
    s->old_rec = skpo_rec_f32s(r, F_OLD_LOGP, &no);
    // a refinement needs neither: its shaped loss has no ratio and no mismatch weight
    int need_rollout = !s->refine && (o->old_logp == SKPO_OLD_ROLLOUT || o->mismatch.mode != SKPO_MISMATCH_OFF);
    if (need_rollout && !s->rollout)
        return bad(err, s, "missing field ",
                   o->old_logp == SKPO_OLD_ROLLOUT ? "'logp' (needed by --old-logp rollout)"
                                                   : "'logp' (the rollout log-probs the mismatch correction needs; or --mismatch off)");
    if (s->rollout && nl != nt) return bad(err, s, "'logp'", " length differs from 'tokens'");
    if (o->old_logp == SKPO_OLD_FIELD && !s->old_rec)
        return bad(err, s, "missing field ", "'old_logp' (needed by --old-logp field)");
    if (s->old_rec && no != nt) return bad(err, s, "'old_logp'", " length differs from 'tokens'");
    return SKPO_OK;
}

// The policy's advantage: `adv_tok` (one per token, PRIME) when present, else `adv`.
static skpo_status sample_adv(const skpo_rec *r, size_t nt, sample *s, skpo_err *err) {
    size_t na = 0;
    s->adv_tok = skpo_rec_f32s(r, F_ADV_TOK, &na);
    if (s->adv_tok) {
        if (na != nt) return bad(err, s, "'adv_tok'", " length differs from 'tokens'");
        for (size_t t = 0; t < na; t++)
            if (!isfinite(s->adv_tok[t])) return bad(err, s, "'adv_tok' is not finite", "");
        return SKPO_OK;
    }
    if (!skpo_rec_float(r, F_ADV, &s->adv)) return bad(err, s, "missing field ", "'adv'");
    if (!isfinite(s->adv)) return bad(err, s, "advantage is not finite", "");
    return SKPO_OK;
}

// The PRM's 0/1 outcome label: the verifier's `correct` (PRIME's acc).
static skpo_status sample_label(const skpo_rec *r, sample *s, skpo_err *err) {
    bool c;
    if (!skpo_rec_bool(r, F_CORRECT, &c)) return bad(err, s, "missing field ", "'correct' (the prm-ce loss's label)");
    s->label = c ? 1.0 : 0.0;
    return SKPO_OK;
}

static skpo_status sample_from_rec(const skpo_rec *r, size_t idx, const skpo_update_opts *o, int phase, sample *s,
                                   skpo_err *err) {
    memset(s, 0, sizeof *s);
    s->uid = skpo_rec_str(r, F_UID);
    if (!s->uid) {
        snprintf(s->uidbuf, sizeof s->uidbuf, "#%zu", idx + 1);
        s->uid = s->uidbuf;
    }
    s->phase = o->sft ? SKPO_PHASE_FULL : phase;
    size_t np = 0, nt = 0, nr = 0;
    skpo_status st;
    const int32_t *pr = skpo_rec_i32s(r, F_PROMPT, &np);
    const int32_t *tk = skpo_rec_i32s(r, F_TOKENS, &nt);
    if (!pr || np == 0) return bad(err, s, "missing or empty field ", "'prompt'");
    if (!tk) return bad(err, s, "missing field ", "'tokens'");
    if (np + nt > INT32_MAX) return bad(err, s, "too long", "");
    s->n = (int)(np + nt);
    s->start = (int)np;
    s->ids = skpo_xmalloc((np + nt) * sizeof *s->ids);
    memcpy(s->ids, pr, np * sizeof *pr);
    if (nt) memcpy(s->ids + np, tk, nt * sizeof *tk);
    s->nkeep = (int)nt;
    if (o->sft) {
        s->weight = 1;
        return SKPO_OK;
    }
    bool refine = false;
    if (skpo_rec_get(r, F_REFINE) && !skpo_rec_bool(r, F_REFINE, &refine)) return bad(err, s, "'refine' is not a bool", "");
    s->refine = refine;
    st = sample_logps(r, o, nt, s, err);
    if (st) return st;
    int prm = o->loss.phase[phase].kind == SKPO_LOSS_PRM_CE;
    st = prm ? sample_label(r, s, err) : sample_adv(r, nt, s, err);
    if (st) return st;
    s->weight = 1;
    if (skpo_rec_get(r, F_WEIGHT) && (!skpo_rec_float(r, F_WEIGHT, &s->weight) || !isfinite(s->weight)))
        return bad(err, s, "'weight' is not a finite number", "");
    if (s->weight < 0) return bad(err, s, "'weight' is negative (it would turn the phase's gradient around)", "");
    if (!isnan(o->phase_weight[phase])) s->weight = o->phase_weight[phase];
    if (o->loss.kl_coef != 0 || prm) {
        s->ref = skpo_rec_f32s(r, F_REF_LOGP, &nr);
        if (!s->ref) return bad(err, s, "missing field ", prm ? "'ref_logp' (needed by the prm-ce loss)" : "'ref_logp' (needed by --kl-coef)");
        if (nr != nt) return bad(err, s, "'ref_logp' length differs from 'tokens'", "");
    }
    return SKPO_OK;
}

static const char *prompt_key(const skpo_rec *r) {
    const char *k = skpo_rec_str(r, F_PID);
    if (!k) k = skpo_rec_str(r, F_GID);
    if (!k) k = skpo_rec_str(r, F_UID);
    return k;
}

// --- the mini-batch plan ----------------------------------------------------------------

typedef struct prompt_load {
    double tokens;   // prompt + response tokens of all its records: the compute it costs
    int prompt;
} prompt_load;

static int by_load_desc(const void *a, const void *b) {
    const prompt_load *x = a, *y = b;
    if (x->tokens != y->tokens) return x->tokens < y->tokens ? 1 : -1;
    return x->prompt - y->prompt;
}

// Which rank trains each prompt: within each mini-batch, heaviest prompt first
// to the least-loaded rank (lowest rank on ties). Every rank sees the same
// records, so every rank computes the same plan without talking.
static int *assign_ranks(const skpo_batch *b, int minibatch) {
    int *owner = skpo_xcalloc(b->nprompts ? (size_t)b->nprompts : 1, sizeof *owner);
    prompt_load *pl = skpo_xcalloc(b->nprompts ? (size_t)b->nprompts : 1, sizeof *pl);
    double *load = skpo_xcalloc((size_t)b->size, sizeof *load);
    for (int q = 0; q < b->nprompts; q++) pl[q].prompt = q;
    for (size_t i = 0; i < b->ns; i++)
        if (b->s[i].n > b->s[i].start) pl[b->s[i].prompt].tokens += b->s[i].n;
    for (int lo = 0; lo < b->nprompts; lo += minibatch) {
        int cnt = lo + minibatch < b->nprompts ? minibatch : b->nprompts - lo;
        qsort(pl + lo, (size_t)cnt, sizeof *pl, by_load_desc);
        memset(load, 0, (size_t)b->size * sizeof *load);
        for (int q = lo; q < lo + cnt; q++) {
            int r = 0;
            for (int k = 1; k < b->size; k++)
                if (load[k] < load[r]) r = k;
            owner[pl[q].prompt] = r;
            load[r] += pl[q].tokens;
        }
    }
    free(load);
    free(pl);
    return owner;
}

static void plan(skpo_batch *b, int minibatch) {
    b->nmb = (b->nprompts + minibatch - 1) / minibatch;
    b->mb = skpo_xcalloc(b->nmb ? (size_t)b->nmb : 1, sizeof *b->mb);
    b->mbn = skpo_xcalloc(b->nmb ? (size_t)b->nmb : 1, sizeof *b->mbn);
    b->mbprompts = skpo_xcalloc(b->nmb ? (size_t)b->nmb : 1, sizeof *b->mbprompts);
    for (int k = 0; k < b->nmb; k++) {
        int lo = k * minibatch, hi = lo + minibatch < b->nprompts ? lo + minibatch : b->nprompts;
        b->mbprompts[k] = hi - lo;
        b->mb[k] = skpo_xmalloc((b->ns ? b->ns : 1) * sizeof(int));
    }
    int *owner = assign_ranks(b, minibatch);
    for (size_t i = 0; i < b->ns; i++) {
        const sample *s = &b->s[i];
        int k = s->prompt / minibatch;
        if (owner[s->prompt] == b->rank && s->n > s->start) b->mb[k][b->mbn[k]++] = (int)i;
    }
    free(owner);
}

skpo_status skpo_batch_new(const skpo_rec *recs, size_t n, const skpo_update_opts *o, int rank, int size,
                           skpo_batch **out, skpo_err *err) {
    SKPO_ASSERT(o->minibatch > 0 && size > 0 && rank >= 0 && rank < size);
    *out = NULL;
    skpo_batch *b = skpo_xcalloc(1, sizeof *b);
    b->rank = rank;
    b->size = size;
    b->s = skpo_xcalloc(n ? n : 1, sizeof *b->s);
    skpo_strmap km = {0}; // prompt key (borrowed from recs) -> prompt index
    skpo_status st = SKPO_OK;
    for (size_t i = 0; i < n && !st; i++) {
        int ph = skpo_phase_of_kind(skpo_rec_str(&recs[i], F_KIND));
        if (ph < 0) continue;
        sample *s = &b->s[b->ns++];
        st = sample_from_rec(&recs[i], i, o, ph, s, err);
        if (st) break;
        const char *key = prompt_key(&recs[i]);
        if (!key) {
            st = bad(err, s, "no 'pid', 'gid' or 'uid' to group it by", "");
            break;
        }
        int added;
        s->prompt = (int)*skpo_strmap_add(&km, key, (size_t)b->nprompts, &added);
        b->nprompts += added;
    }
    skpo_strmap_free(&km);
    if (st) {
        skpo_batch_free(b);
        return st;
    }
    plan(b, o->minibatch);
    *out = b;
    return SKPO_OK;
}

void skpo_batch_free(skpo_batch *b) {
    if (!b) return;
    for (size_t i = 0; i < b->ns; i++) {
        free(b->s[i].ids);
        free(b->s[i].old);
        free(b->s[i].isw);
    }
    for (int k = 0; b->mb && k < b->nmb; k++) free(b->mb[k]);
    free(b->mb);
    free(b->mbn);
    free(b->mbprompts);
    free(b->s);
    free(b);
}

int skpo_batch_minibatches(const skpo_batch *b) { return b->nmb; }
int skpo_batch_prompts(const skpo_batch *b) { return b->nprompts; }
size_t skpo_batch_records(const skpo_batch *b) { return b->ns; }

double skpo_batch_tokens(const skpo_batch *b) {
    double t = 0;
    for (size_t i = 0; i < b->ns; i++) t += b->s[i].n - b->s[i].start;
    return t;
}

void skpo_batch_local(const skpo_batch *b, int k, int *records, double *tokens) {
    SKPO_ASSERT(k >= 0 && k < b->nmb);
    *records = b->mbn[k];
    *tokens = 0;
    for (int q = 0; q < b->mbn[k]; q++) *tokens += b->s[b->mb[k][q]].n;
}

// --- micro-batches ------------------------------------------------------------------------

// The first micro-batch with room for tok more tokens, else a new one; counts them in.
static int first_fit(long *load, int *nm, long budget, long tok) {
    int u = 0;
    while (u < *nm && load[u] + tok > budget) u++;
    if (u == *nm) load[(*nm)++] = 0;
    load[u] += tok;
    return u;
}

// The micro-batches of a rank's records idx[0..cnt) of one mini-batch:
// micro-batch u is order[cut[u] .. cut[u + 1]) (batch indices); returns their
// count. The budget bounds the activations of one pass, so it counts the
// tokens the pass computes.
//
// Unpacked: records in order until prompt + response tokens reach the budget
// (a longer record goes alone), as this path always was.
//
// Packed (model/pack.h): the budget counts each group's shared prefix once,
// and a group (records whose prompt tokens are the same) is never cut when
// its packed size fits: groups in order of first member go whole into the
// first micro-batch with room left (first fit), else into a new one. A group
// larger than the budget is cut in order into parts that each fit (each part
// computes the prefix again), placed the same way (were two parts to meet in
// one micro-batch, the pass would pack them as one: fewer tokens than
// counted); a single record over the budget goes alone. Records keep their
// batch order within a micro-batch. The sum over micro-batches is the whole
// mini-batch's gradient whatever the cut, so this changes float summation
// order only.
static int micro_plan(const skpo_batch *b, const int *idx, int cnt, long budget, int pack, int *order, int *cut) {
    int nm = 0;
    cut[0] = 0;
    if (!pack) {
        long tot = 0;
        for (int q = 0; q < cnt; q++) {
            int n = b->s[idx[q]].n;
            if (q > cut[nm] && tot + n > budget) cut[++nm] = q, tot = 0;
            tot += n;
            order[q] = idx[q];
        }
        if (cnt) cut[++nm] = cnt;
        return nm;
    }
    size_t sz = cnt ? (size_t)cnt : 1;
    skpo_seq *seqs = skpo_xmalloc(sz * sizeof *seqs);
    int *grp = skpo_xmalloc(sz * sizeof(int)), *bin = skpo_xmalloc(sz * sizeof(int));
    long *load = skpo_xmalloc(sz * sizeof(long));   // packed tokens of each micro-batch so far
    skpo_pack_tally all, part;
    skpo_pack_tally_init(&all, 1);
    for (int q = 0; q < cnt; q++) {
        const sample *s = &b->s[idx[q]];
        seqs[q] = (skpo_seq){s->ids, s->n, s->start};
        grp[q] = skpo_pack_tally_add(&all, &seqs[q]);
    }
    int *mem = skpo_xmalloc(sz * sizeof(int));   // members of the part being cut
    for (int g = 0; g < all.ngroups; g++) {
        long tok = skpo_pack_tally_group(&all, g);
        if (tok <= budget) {
            int u = first_fit(load, &nm, budget, tok);
            for (int q = all.first[g]; q < cnt; q++)
                if (grp[q] == g) bin[q] = u;
            continue;
        }
        // over the budget: parts in order, each as many members as fit (at least one)
        int nmem = 0;
        long have = 0;
        skpo_pack_tally_init(&part, 1);
        for (int q = all.first[g]; q <= cnt; q++) {
            if (q < cnt && grp[q] != g) continue;
            if (q < cnt) skpo_pack_tally_add(&part, &seqs[q]);
            if (q == cnt || (nmem && part.packed > budget)) {   // the part ends before q
                int u = first_fit(load, &nm, budget, have);
                for (int i = 0; i < nmem; i++) bin[mem[i]] = u;
                nmem = 0;
                skpo_pack_tally_free(&part);
                if (q < cnt) skpo_pack_tally_add(&part, &seqs[q]);
            }
            if (q < cnt) mem[nmem++] = q, have = part.packed;
        }
        skpo_pack_tally_free(&part);
    }
    free(mem);
    // counting sort by micro-batch, stable in batch order
    for (int u = 0; u <= nm; u++) cut[u] = 0;
    for (int q = 0; q < cnt; q++) cut[bin[q] + 1]++;
    for (int u = 0; u < nm; u++) cut[u + 1] += cut[u];
    int *at = skpo_xmalloc(((size_t)nm + 1) * sizeof(int));
    memcpy(at, cut, ((size_t)nm + 1) * sizeof(int));
    for (int q = 0; q < cnt; q++) order[at[bin[q]]++] = idx[q];
    free(at);
    skpo_pack_tally_free(&all);
    free(seqs);
    free(grp);
    free(bin);
    free(load);
    return nm;
}

// The sequences of micro-batch u into seqs; returns its scored-token count.
static long micro_seqs(const skpo_batch *b, const int *order, const int *cut, int u, skpo_seq *seqs) {
    long ntok = 0;
    for (int q = cut[u]; q < cut[u + 1]; q++) {
        const sample *s = &b->s[order[q]];
        seqs[q - cut[u]] = (skpo_seq){s->ids, s->n, s->start};
        ntok += s->n - s->start;
    }
    return ntok;
}

// The policy packs shared prefixes in its passes now.
static int policy_packs(const skpo_policy *pol) { return pol->packs && pol->packs(pol->ctx); }

skpo_status skpo_update_recompute_old(const skpo_policy *pol, skpo_batch *b, const skpo_update_opts *o,
                                      skpo_err *err) {
    int pack = policy_packs(pol);
    for (int k = 0; k < b->nmb; k++) {
        int cnt = b->mbn[k];
        size_t sz = cnt ? (size_t)cnt : 1;
        skpo_seq *seqs = skpo_xmalloc(sz * sizeof *seqs);
        int *order = skpo_xmalloc(sz * sizeof(int)), *cut = skpo_xmalloc((sz + 1) * sizeof(int));
        int nm = micro_plan(b, b->mb[k], cnt, o->micro_tokens, pack, order, cut);
        skpo_status st = SKPO_OK;
        for (int u = 0; u < nm && !st; u++) {
            long ntok = micro_seqs(b, order, cut, u, seqs);
            float *lp = skpo_xmalloc((size_t)(ntok ? ntok : 1) * sizeof *lp);
            st = pol->score(pol->ctx, seqs, cut[u + 1] - cut[u], (float)o->temperature, lp, err);
            long off = 0;
            for (int q = cut[u]; !st && q < cut[u + 1]; q++) {
                sample *s = &b->s[order[q]];
                int nt = s->n - s->start;
                s->old = skpo_xrealloc(s->old, (size_t)nt * sizeof *s->old);
                memcpy(s->old, lp + off, (size_t)nt * sizeof *lp);
                off += nt;
                for (int t = 0; t < nt && !st; t++)
                    if (!isfinite(s->old[t]))
                        st = skpo_err_set(err, SKPO_ENUMERIC, "record '%s': recomputed old log-prob of token %d is %g",
                                          s->uid, t, (double)s->old[t]);
            }
            free(lp);
        }
        free(seqs);
        free(order);
        free(cut);
        if (st) return st;
    }
    return SKPO_OK;
}

// pi_old of a record under o->old_logp.
static const float *sample_old(const sample *s, const skpo_update_opts *o) {
    switch (o->old_logp) {
    case SKPO_OLD_RECOMPUTE: return s->old;
    case SKPO_OLD_ROLLOUT: return s->rollout;
    case SKPO_OLD_FIELD: return s->old_rec;
    }
    return NULL;
}

// Mismatch weights and statistics of this rank's records (rollout vs pi_old).
static skpo_status mismatch_prepare(skpo_batch *b, const skpo_update_opts *o, skpo_err *err) {
    for (int k = 0; k < b->nmb; k++)
        for (int q = 0; q < b->mbn[k]; q++) {
            sample *s = &b->s[b->mb[k][q]];
            const float *old = sample_old(s, o);
            int nt = s->n - s->start;
            memset(&s->ms, 0, sizeof s->ms);
            s->nkeep = nt;
            // nothing to compare; a refinement's `logp` was sampled under its refinement prompt, not
            // the prompt it is trained on, and its shaped loss has no ratio to correct
            if (o->old_logp == SKPO_OLD_ROLLOUT || !s->rollout || !old || s->refine) continue;
            s->isw = skpo_xrealloc(s->isw, (size_t)(nt ? nt : 1) * sizeof *s->isw);
            s->nkeep = skpo_mismatch_weights(&o->mismatch, s->rollout, old, nt, s->isw, &s->ms, err);
            if (s->nkeep < 0) {
                skpo_err e = *err;
                return skpo_err_set(err, SKPO_ENUMERIC, "record '%s': %s", s->uid, e.msg);
            }
        }
    return SKPO_OK;
}

skpo_status skpo_update_prepare(const skpo_policy *pol, skpo_batch *b, const skpo_update_opts *o, skpo_err *err) {
    if (b->prepared || o->sft) return SKPO_OK;
    skpo_status st = o->old_logp == SKPO_OLD_RECOMPUTE ? skpo_update_recompute_old(pol, b, o, err) : SKPO_OK;
    if (!st) st = mismatch_prepare(b, o, err);
    if (!st) b->prepared = 1;
    return st;
}

static int grads_finite(skpo_param *p, int np) {
    int ok = 1;
    for (int i = 0; i < np && ok; i++) {
        const float *g = p[i].grad;
        long long n = (long long)p[i].numel;
#pragma omp parallel for schedule(static) reduction(&& : ok)
        for (long long k = 0; k < n; k++) ok = ok && isfinite(g[k]);
    }
    return ok;
}

// Forward, loss and backward of records idx[i..j) (one micro-batch).
static skpo_status micro(const skpo_policy *pol, skpo_batch *b, const int *idx, int i, int j, const skpo_seq *seqs,
                         long ntok, const skpo_update_opts *o, const skpo_loss_count *cnt, skpo_update_metrics *m,
                         double *wloss, skpo_err *err) {
    static const skpo_phase_loss sft = {SKPO_LOSS_SFT, 0, 0, 0};
    static const skpo_phase_loss shape = {SKPO_LOSS_SHAPE, 0, 0, 0};
    // SFT is plain cross-entropy: no KL or entropy terms even if configured.
    skpo_loss_cfg sftcfg = o->loss;
    sftcfg.kl_coef = sftcfg.entropy_coef = 0;
    const skpo_loss_cfg *lc = o->sft ? &sftcfg : &o->loss;
    size_t nb = (size_t)(ntok ? ntok : 1) * sizeof(float);
    float *lp = skpo_xmalloc(nb), *ent = skpo_xmalloc(nb), *dlp = skpo_xmalloc(nb);
    float *dent = lc->entropy_coef != 0 ? skpo_xmalloc(nb) : NULL;
    skpo_status st = pol->forward(pol->ctx, seqs, j - i, (float)o->temperature, lp, ent, err);
    long raw = 0, packed = 0;
    if (pol->pass_tokens) pol->pass_tokens(pol->ctx, &raw, &packed);
    else
        for (int q = 0; q < j - i; q++) raw += seqs[q].n;
    m->raw_tokens += raw;
    m->packed_tokens += pol->pass_tokens ? packed : raw;
    long off = 0;
    for (int q = i; !st && q < j; q++) {
        const sample *s = &b->s[idx[q]];
        int nt = s->n - s->start;
        skpo_loss_seq ls = {
            .n = nt, .logp = lp + off, .old = sample_old(s, o), .is_weight = s->isw, .ref = s->ref,
            .entropy = ent + off, .adv = s->adv, .adv_tok = s->adv_tok, .label = s->label, .weight = s->weight,
            .scale = skpo_loss_agg_scale(lc, s->phase, &cnt[s->phase], s->nkeep),
        };
        double before = m->phase[s->phase].loss;
        st = skpo_loss_seq_eval(lc, o->sft ? &sft : s->refine ? &shape : &lc->phase[s->phase], &ls, dlp + off, dent ? dent + off : NULL,
                                &m->phase[s->phase], err);
        if (st) {
            skpo_err e = *err;
            st = skpo_err_set(err, st, "record '%s': %s", s->uid, e.msg);
        }
        *wloss += s->weight * (m->phase[s->phase].loss - before);
        off += nt;
    }
    if (!st) st = pol->backward(pol->ctx, dlp, dent, err);
    free(lp);
    free(ent);
    free(dlp);
    free(dent);
    if (st) return st;
    skpo_param *p;
    int np = pol->params(pol->ctx, &p);
    if (!(pol->grads_finite ? pol->grads_finite(pol->ctx) : grads_finite(p, np)))
        return skpo_err_set(err, SKPO_ENUMERIC, "gradient is not finite after the micro-batch of records '%s' .. '%s'",
                            b->s[idx[i]].uid, b->s[idx[j - 1]].uid);
    return SKPO_OK;
}

// --- the step --------------------------------------------------------------------------------

#define NSTAT 8   // doubles in skpo_loss_stats

#define NSUM (SKPO_NPHASE * (NSTAT + 1) + 4)   // the doubles stats_pack writes

static void stats_pack(const skpo_update_metrics *m, double wloss, double *v) {
    for (int p = 0; p < SKPO_NPHASE; p++) {
        memcpy(v + p * NSTAT, &m->phase[p], sizeof m->phase[p]);
        v[SKPO_NPHASE * NSTAT + p] = m->seqs[p];
    }
    v[SKPO_NPHASE * (NSTAT + 1)] = wloss;
    v[SKPO_NPHASE * (NSTAT + 1) + 1] = m->raw_tokens;
    v[SKPO_NPHASE * (NSTAT + 1) + 2] = m->packed_tokens;
    v[SKPO_NPHASE * (NSTAT + 1) + 3] = m->micro_batches;
}

static void stats_unpack(skpo_update_metrics *m, const double *v) {
    for (int p = 0; p < SKPO_NPHASE; p++) {
        memcpy(&m->phase[p], v + p * NSTAT, sizeof m->phase[p]);
        m->seqs[p] = v[SKPO_NPHASE * NSTAT + p];
    }
    m->loss = v[SKPO_NPHASE * (NSTAT + 1)];
    m->raw_tokens = v[SKPO_NPHASE * (NSTAT + 1) + 1];
    m->packed_tokens = v[SKPO_NPHASE * (NSTAT + 1) + 2];
    m->micro_batches = v[SKPO_NPHASE * (NSTAT + 1) + 3];
    m->tokens = 0;
    for (int p = 0; p < SKPO_NPHASE; p++) m->tokens += m->phase[p].tokens;
}

// Sums over ranks; the maximum through one slot per rank (the transport only sums).
static skpo_status mismatch_reduce(skpo_comm *comm, const skpo_batch *b, skpo_mismatch_stats *ms, skpo_err *err) {
    if (b->size == 1) return SKPO_OK;
    size_t nv = 5 + (size_t)b->size;
    double *v = skpo_xcalloc(nv, sizeof *v);
    v[0] = ms->tokens, v[1] = ms->k3, v[2] = ms->abs_dlogp, v[3] = ms->truncated, v[4] = ms->masked;
    v[5 + b->rank] = ms->max_abs_dlogp;
    skpo_status st = skpo_comm_allreduce_f64(comm, v, nv, err);
    if (!st) {
        *ms = (skpo_mismatch_stats){.tokens = v[0], .k3 = v[1], .abs_dlogp = v[2], .truncated = v[3], .masked = v[4]};
        for (int r = 0; r < b->size; r++) ms->max_abs_dlogp = fmax(ms->max_abs_dlogp, v[5 + r]);
    }
    free(v);
    return st;
}

skpo_status skpo_update_grad(const skpo_policy *pol, skpo_comm *comm, skpo_batch *b, int k, const skpo_update_opts *o,
                             skpo_update_metrics *m, skpo_err *err) {
    _Static_assert(sizeof(skpo_loss_stats) == NSTAT * sizeof(double), "skpo_loss_stats layout");
    SKPO_ASSERT(k >= 0 && k < b->nmb);
    memset(m, 0, sizeof *m);
    m->minibatch = k;
    m->prompts = b->mbprompts[k];
    int cnt = b->mbn[k], *idx = b->mb[k];
    // Normalisers first: counts of the whole mini-batch over all ranks.
    double c[2 * SKPO_NPHASE] = {0};
    skpo_status st = skpo_comm_agree(comm, skpo_update_prepare(pol, b, o, err), err);
    if (st) return st;
    for (int q = 0; q < cnt; q++) {   // kept tokens: masked ones leave the normalisers
        const sample *s = &b->s[idx[q]];
        c[2 * s->phase] += s->nkeep;
        c[2 * s->phase + 1] += s->nkeep > 0;
    }
    st = skpo_comm_allreduce_f64(comm, c, 2 * SKPO_NPHASE, err);
    if (st) return st;
    skpo_loss_count pc[SKPO_NPHASE];
    for (int p = 0; p < SKPO_NPHASE; p++) pc[p] = (skpo_loss_count){c[2 * p], c[2 * p + 1]};
    pol->zero_grad(pol->ctx);
    double wloss = 0;
    size_t sz = cnt ? (size_t)cnt : 1;
    skpo_seq *seqs = skpo_xmalloc(sz * sizeof *seqs);
    int *order = skpo_xmalloc(sz * sizeof(int)), *cut = skpo_xmalloc((sz + 1) * sizeof(int));
    int nm = micro_plan(b, idx, cnt, o->micro_tokens, policy_packs(pol), order, cut);
    for (int u = 0; u < nm && !st; u++) {
        long ntok = micro_seqs(b, order, cut, u, seqs);
        st = micro(pol, b, order, cut[u], cut[u + 1], seqs, ntok, o, pc, m, &wloss, err);
        for (int q = cut[u]; q < cut[u + 1]; q++) m->seqs[b->s[order[q]].phase] += b->s[order[q]].nkeep > 0;
        m->micro_batches++;
    }
    free(seqs);
    free(order);
    free(cut);
    for (int q = 0; q < cnt; q++) skpo_mismatch_stats_add(&m->mismatch, &b->s[idx[q]].ms);
    st = skpo_comm_agree(comm, st, err);
    if (st) return st;
    skpo_param *p;
    int np = pol->params(pol->ctx, &p);
    for (int i = 0; i < np && !st && !pol->grads_finite; i++)
        st = skpo_comm_allreduce_f32(comm, p[i].grad, p[i].numel, err);
    double v[NSUM];
    stats_pack(m, wloss, v);
    if (!st) st = skpo_comm_allreduce_f64(comm, v, sizeof v / sizeof v[0], err);
    stats_unpack(m, v);
    if (!st) st = mismatch_reduce(comm, b, &m->mismatch, err);
    return st;
}

skpo_status skpo_update_step(const skpo_policy *pol, skpo_optim *opt, skpo_comm *comm, skpo_batch *b,
                             const skpo_update_opts *o, skpo_update_metrics *met, skpo_err *err) {
    skpo_status st = skpo_comm_agree(comm, skpo_update_prepare(pol, b, o, err), err);
    if (st) {
        skpo_err e = *err;
        return skpo_err_set(err, st, "step %" PRId64 ", %s: %s", o->step,
                            o->old_logp == SKPO_OLD_RECOMPUTE ? "recomputing old log-probs" : "old log-probs", e.msg);
    }
    if (pol->grads_finite && !opt->dev)
        return skpo_err_set(err, SKPO_EUNSUPPORTED, "device gradients need the optimizer on the device (skpo_optim_to_device)");
    double lr = skpo_optim_lr(&opt->cfg, o->step);
    SKPO_ASSERT(o->epochs >= 1);
    for (int u = 0; u < o->epochs * b->nmb; u++) {
        int k = u % b->nmb;
        double t0 = skpo_now();
        skpo_update_metrics m;
        st = skpo_update_grad(pol, comm, b, k, o, &m, err);
        m.epoch = u / b->nmb;
        if (!st && !isfinite(m.loss))
            st = skpo_err_set(err, SKPO_ENUMERIC, "loss is %g", m.loss);
        skpo_param *p;
        int np = pol->params(pol->ctx, &p);
        if (!st) st = skpo_optim_step(opt, p, np, lr, &m.grad_norm, err);
        if (st) {
            skpo_err e = *err;
            if (o->epochs > 1)
                return skpo_err_set(err, st, "step %" PRId64 ", epoch %d, mini-batch %d of %d: %s", o->step, m.epoch + 1,
                                    k + 1, b->nmb, e.msg);
            return skpo_err_set(err, st, "step %" PRId64 ", mini-batch %d of %d: %s", o->step, k + 1, b->nmb, e.msg);
        }
        m.lr = lr;
        m.seconds = skpo_now() - t0;
        if (met) met[u] = m;
    }
    return SKPO_OK;
}

// --- metrics records ----------------------------------------------------------------------------

static void set_ph(skpo_rec *r, const char *what, int p, double v) {
    char key[64];
    snprintf(key, sizeof key, "%s_%s", what, skpo_phase_name(p));
    skpo_rec_set_float(r, key, v);
}

// Rollout vs pi_old: absent when not measured (pi_old = rollout, SFT).
static void mismatch_metrics_rec(const skpo_mismatch_stats *ms, skpo_rec *r) {
    if (ms->tokens <= 0) return;
    skpo_rec_set_float(r, "mismatch_k3", ms->k3 / ms->tokens);
    skpo_rec_set_float(r, "mismatch_dlogp_mean", ms->abs_dlogp / ms->tokens);
    skpo_rec_set_float(r, "mismatch_dlogp_max", ms->max_abs_dlogp);
    skpo_rec_set_float(r, "mismatch_truncated", ms->truncated / ms->tokens);
    skpo_rec_set_float(r, "mismatch_masked", ms->masked / ms->tokens);
}

void skpo_update_metrics_rec(const skpo_update_metrics *m, int64_t step, skpo_rec *r) {
    skpo_rec_clear(r);
    skpo_rec_set_str(r, F_KIND, SKPO_KIND_METRICS);
    skpo_rec_set_str(r, "tool", "skpo-update");
    skpo_rec_set_int(r, F_STEP, step);
    skpo_rec_set_int(r, "epoch", m->epoch);
    skpo_rec_set_int(r, "minibatch", m->minibatch);
    skpo_rec_set_int(r, "prompts", m->prompts);
    skpo_rec_set_float(r, "loss", m->loss);
    skpo_rec_set_float(r, "grad_norm", m->grad_norm);
    skpo_rec_set_float(r, "lr", m->lr);
    skpo_rec_set_float(r, "n_tokens", m->tokens);   // not `tokens`: that schema field is i32s
    skpo_rec_set_float(r, "seconds", m->seconds);
    skpo_rec_set_float(r, "tokens_per_s", m->seconds > 0 ? m->tokens / m->seconds : 0);
    // packing (model/pack.h): what the passes were given, what they computed, the share saved
    skpo_rec_set_float(r, F_RAW_TOKENS, m->raw_tokens);
    skpo_rec_set_float(r, F_PACKED_TOKENS, m->packed_tokens);
    skpo_rec_set_float(r, F_SHARED_RATIO, m->raw_tokens > 0 ? 1 - m->packed_tokens / m->raw_tokens : 0);
    skpo_rec_set_float(r, F_MICRO_BATCHES, m->micro_batches);
    for (int p = 0; p < SKPO_NPHASE; p++) {
        const skpo_loss_stats *s = &m->phase[p];
        if (m->seqs[p] == 0) continue;
        double n = s->tokens > 0 ? s->tokens : 1;
        set_ph(r, "loss", p, s->loss);
        set_ph(r, "n_seqs", p, m->seqs[p]);
        set_ph(r, "n_tokens", p, s->tokens);
        set_ph(r, "clip_low", p, s->clip_low / n);
        set_ph(r, "clip_high", p, s->clip_high / n);
        set_ph(r, "clip_dual", p, s->clip_dual / n);
        set_ph(r, "approx_kl", p, s->approx_kl / n);
        set_ph(r, "kl_ref", p, s->kl_ref / n);
        set_ph(r, "entropy", p, s->entropy / n);
    }
    mismatch_metrics_rec(&m->mismatch, r);
}
