/*
 * advantage.c - group and batch advantages over one step, tracker updates and
 * the step's metrics record (see advantage.h for the formulas per mode).
 * The step is a barrier: every record is in memory, groups may be spread over
 * the input in any order. Records are first indexed and checked (nothing is
 * written into them until every check passed), then computed, then annotated.
 */
#include "rl/advantage.h"
#include "base/strmap.h"
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// --- modes and formulas --------------------------------------------------------------

// The one list of mode names (skpo-advantage --mode, the metrics' `mode`),
// indexed by skpo_adv_mode.
static const char *const mode_names[] = {"skpo", "grpo", "drgrpo", "dapo", "spo", "prime"};
enum { NMODES = sizeof mode_names / sizeof *mode_names };
static const char *mode_name(int m) { return m >= 0 && m < NMODES ? mode_names[m] : NULL; }
const skpo_enum skpo_adv_modes = {NMODES, mode_name};

int skpo_adv_mode_parse(const char *name, skpo_adv_mode *out) {
    int m = skpo_enum_parse(&skpo_adv_modes, name);
    if (m < 0) return -1;
    *out = (skpo_adv_mode)m;
    return 0;
}

const char *skpo_adv_mode_name(skpo_adv_mode m) { return mode_name(m) ? mode_name(m) : "?"; }

void skpo_adv_opts_default(skpo_adv_opts *o) {
    memset(o, 0, sizeof *o);
    o->mode = SKPO_ADV_SKPO;
    o->group = 8;
    o->w_up = 0.5;
    o->w_down = 0.5;
    o->eps_group = 1e-6;
    o->eps_batch = 1e-8;
    skpo_prime_opts_default(&o->prime);
}

static double mean_of(const double *a, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i];
    return n ? s / (double)n : 0.0;
}

double skpo_adv_std(const double *a, size_t n) {
    if (n < 2) return 0.0;
    double m = mean_of(a, n), s = 0;
    for (size_t i = 0; i < n; i++) s += (a[i] - m) * (a[i] - m);
    return sqrt(s / (double)(n - 1));
}

int skpo_adv_group(const double *r, size_t n, int use_std, double eps, double *adv) {
    SKPO_ASSERT(n >= 1);
    int same = 1;
    for (size_t i = 1; i < n; i++) same &= r[i] == r[0];
    if (same) {
        for (size_t i = 0; i < n; i++) adv[i] = 0.0;
        return 1;
    }
    double m = mean_of(r, n), sd = use_std ? skpo_adv_std(r, n) + eps : 1.0;
    for (size_t i = 0; i < n; i++) adv[i] = (r[i] - m) / sd;
    return 0;
}

void skpo_adv_batch_norm(double *a, size_t n, double eps) {
    if (n < 2) {
        for (size_t i = 0; i < n; i++) a[i] = 0.0;
        return;
    }
    double m = mean_of(a, n), sd = skpo_adv_std(a, n) + eps;
    for (size_t i = 0; i < n; i++) a[i] = (a[i] - m) / sd;
}

// --- divergence with a model ---------------------------------------------------------

// Score segs[lo..hi) in one batch and write their D.
static skpo_status score_batch(const skpo_adv_model_ctx *c, const skpo_tracker_seg *segs, size_t lo, size_t hi,
                               double *D, skpo_err *err) {
    size_t nseq = hi - lo, ntok = 0;
    skpo_seq *seqs = skpo_xcalloc(nseq, sizeof *seqs);
    int32_t **ids = skpo_xcalloc(nseq, sizeof *ids);
    for (size_t i = 0; i < nseq; i++) {
        const skpo_tracker_seg *s = &segs[lo + i];
        ids[i] = skpo_xmalloc((s->nprompt + s->ntokens) * sizeof(int32_t));
        memcpy(ids[i], s->prompt, s->nprompt * sizeof(int32_t));
        memcpy(ids[i] + s->nprompt, s->tokens, s->ntokens * sizeof(int32_t));
        seqs[i] = (skpo_seq){ids[i], (int)(s->nprompt + s->ntokens), (int)s->nprompt};
        ntok += s->ntokens;
    }
    float *lp = skpo_xmalloc((ntok + 1) * sizeof(float));
    skpo_status st = skpo_model_logprobs(c->model, seqs, (int)nseq, c->temperature, lp, NULL, err);
    for (size_t i = 0, off = 0; !st && i < nseq; i++) {
        const skpo_tracker_seg *s = &segs[lo + i];
        double sum = 0;
        for (size_t t = 0; t < s->ntokens; t++) sum += fabs((double)lp[off + t] - (double)s->logp[t]);
        D[lo + i] = sum / (double)s->ntokens;
        off += s->ntokens;
    }
    for (size_t i = 0; i < nseq; i++) free(ids[i]);
    free(ids); free(seqs); free(lp);
    return st;
}

skpo_status skpo_adv_model_divergence(void *ctx, const skpo_tracker_seg *segs, size_t n, double *D, skpo_err *err) {
    const skpo_adv_model_ctx *c = ctx;
    size_t budget = c->max_tokens ? c->max_tokens : 16384;
    // scorable segments are packed into batches; the rest get D = 0
    skpo_tracker_seg *ok = skpo_xcalloc(n + 1, sizeof *ok);
    size_t *where = skpo_xcalloc(n + 1, sizeof *where), nok = 0;
    for (size_t i = 0; i < n; i++) {
        D[i] = 0.0;
        if (segs[i].ntokens && segs[i].nprompt && segs[i].logp && segs[i].prompt) { ok[nok] = segs[i]; where[nok++] = i; }
    }
    double *d = skpo_xcalloc(nok + 1, sizeof *d);
    skpo_status st = SKPO_OK;
    for (size_t lo = 0; !st && lo < nok;) {
        size_t hi = lo, tok = 0;
        while (hi < nok && (hi == lo || tok + ok[hi].nprompt + ok[hi].ntokens <= budget)) {
            tok += ok[hi].nprompt + ok[hi].ntokens;
            hi++;
        }
        st = score_batch(c, ok, lo, hi, d, err);
        lo = hi;
    }
    for (size_t i = 0; !st && i < nok; i++) D[where[i]] = d[i];
    free(ok); free(where); free(d);
    return st;
}

// --- indexing: groups of records -----------------------------------------------------

// A group: its head record (the up record in skpo mode, -1 otherwise), members,
// and their rewards / lengths.
typedef struct group {
    const char *name;   // gid or pid, for messages
    long head;
    long self;          // skpo: the up record's `self` record, -1 none
    long *mem; size_t n, cap;
} group;

typedef struct batch {
    group *g; size_t ng, cap;
    skpo_strmap idx;    // gid or pid (borrowed from the records) -> index into g
} batch;

static void batch_free(batch *b) {
    for (size_t i = 0; i < b->ng; i++) free(b->g[i].mem);
    free(b->g);
    skpo_strmap_free(&b->idx);
}

// The group called name, created when absent.
static group *batch_group(batch *b, const char *name) {
    int added;
    size_t gi = *skpo_strmap_add(&b->idx, name, b->ng, &added);
    if (!added) return &b->g[gi];
    skpo_xgrow((void **)&b->g, &b->cap, b->ng + 1, sizeof *b->g);
    group *g = &b->g[b->ng];
    memset(g, 0, sizeof *g);
    g->name = name;
    g->head = -1;
    g->self = -1;
    b->ng++;
    return g;
}

static void group_add(group *g, long i) {
    skpo_xgrow((void **)&g->mem, &g->cap, g->n + 1, sizeof *g->mem);
    g->mem[g->n++] = i;
}

static const char *uid_of(const skpo_rec *r) {
    const char *u = skpo_rec_str(r, F_UID);
    return u ? u : "(no uid)";
}

static skpo_status need_str(const skpo_rec *r, const char *key, const char **out, skpo_err *err) {
    *out = skpo_rec_str(r, key);
    if (!*out)
        return skpo_err_set(err, SKPO_ENOTFOUND, "%s record '%s' has no '%s'", skpo_rec_str(r, F_KIND), uid_of(r), key);
    return SKPO_OK;
}

static skpo_status need_reward(const skpo_rec *r, double *out, skpo_err *err) {
    if (!skpo_rec_float(r, F_REWARD, out))
        return skpo_err_set(err, SKPO_ENOTFOUND, "%s record '%s' has no reward (run skpo-reward first)",
                            skpo_rec_str(r, F_KIND), uid_of(r));
    if (!isfinite(*out))
        return skpo_err_set(err, SKPO_ENUMERIC, "%s record '%s' has a non-finite reward (%g)",
                            skpo_rec_str(r, F_KIND), uid_of(r), *out);
    return SKPO_OK;
}

static skpo_status need_len(const skpo_rec *r, double *out, skpo_err *err) {
    size_t n;
    if (!skpo_rec_i32s(r, F_TOKENS, &n))
        return skpo_err_set(err, SKPO_ENOTFOUND, "%s record '%s' has no tokens", skpo_rec_str(r, F_KIND), uid_of(r));
    *out = (double)n;
    return SKPO_OK;
}

// skpo: groups keyed by the up uid; every down must name an up by gid.
static skpo_status index_skpo(skpo_rec *recs, size_t n, batch *b, skpo_err *err) {
    skpo_status st;
    const char *s;
    for (size_t i = 0; i < n; i++) {
        if (!skpo_rec_is_kind(&recs[i], SKPO_KIND_UP)) continue;
        if ((st = need_str(&recs[i], F_UID, &s, err)) || (st = need_str(&recs[i], F_PID, &s, err))) return st;
        group *g = batch_group(b, skpo_rec_str(&recs[i], F_UID));
        if (g->head >= 0) return skpo_err_set(err, SKPO_EFORMAT, "two up records share uid '%s'", g->name);
        g->head = (long)i;
    }
    for (size_t i = 0; i < n; i++) {
        if (!skpo_rec_is_kind(&recs[i], SKPO_KIND_DOWN)) continue;
        if ((st = need_str(&recs[i], F_GID, &s, err))) return st;
        const size_t *gi = skpo_strmap_get(&b->idx, s);
        if (!gi)
            return skpo_err_set(err, SKPO_EFORMAT, "down record '%s' names group '%s' but no up record has that uid",
                                uid_of(&recs[i]), s);
        group_add(&b->g[*gi], (long)i);
    }
    for (size_t i = 0; i < n; i++) {
        if (!skpo_rec_is_kind(&recs[i], SKPO_KIND_SELF)) continue;
        if ((st = need_str(&recs[i], F_GID, &s, err))) return st;
        const size_t *gi = skpo_strmap_get(&b->idx, s);
        if (!gi)
            return skpo_err_set(err, SKPO_EFORMAT, "self record '%s' names group '%s' but no up record has that uid",
                                uid_of(&recs[i]), s);
        group *g = &b->g[*gi];
        if (g->self >= 0) return skpo_err_set(err, SKPO_EFORMAT, "two self records for up record '%s'", g->name);
        g->self = (long)i;
    }
    return SKPO_OK;
}

// grpo family and spo: full records keyed by pid.
static skpo_status index_full(skpo_rec *recs, size_t n, batch *b, skpo_err *err) {
    const char *pid;
    for (size_t i = 0; i < n; i++) {
        if (!skpo_rec_is_kind(&recs[i], SKPO_KIND_FULL)) continue;
        skpo_status st = need_str(&recs[i], F_PID, &pid, err);
        if (st) return st;
        group_add(batch_group(b, pid), (long)i);
    }
    return SKPO_OK;
}

static skpo_status check_sizes(const batch *b, const skpo_rec *recs, const skpo_adv_opts *o, skpo_err *err) {
    for (size_t k = 0; k < b->ng; k++) {
        const group *g = &b->g[k];
        if (o->mode == SKPO_ADV_SPO) {
            if (g->n != 1)
                return skpo_err_set(err, SKPO_EFORMAT, "prompt '%s' has %zu full records; spo takes one per prompt",
                                    g->name, g->n);
        } else if ((long)g->n != o->group) {
            if (o->mode == SKPO_ADV_SKPO)
                return skpo_err_set(err, SKPO_EFORMAT, "group '%s' (prompt '%s') has %zu downstream records, expected %ld",
                                    g->name, skpo_rec_str(&recs[g->head], F_PID), g->n, o->group);
            return skpo_err_set(err, SKPO_EFORMAT, "group of prompt '%s' has %zu full records, expected %ld",
                                g->name, g->n, o->group);
        }
    }
    return SKPO_OK;
}

// --- metrics -------------------------------------------------------------------------

typedef struct moments { double s, s2, lo, hi; size_t n; } moments;

static void mom_add(moments *m, double x) {
    if (m->n == 0 || x < m->lo) m->lo = x;
    if (m->n == 0 || x > m->hi) m->hi = x;
    m->s += x; m->s2 += x * x; m->n++;
}

static void mom_put(skpo_rec *r, const char *prefix, const moments *m, int with_std, int with_range) {
    if (!m->n) return;
    char key[96];
    double mean = m->s / (double)m->n, var = m->s2 / (double)m->n - mean * mean;
    snprintf(key, sizeof key, "%s_mean", prefix);
    skpo_rec_set_float(r, key, mean);
    if (with_std) {
        snprintf(key, sizeof key, "%s_std", prefix);
        skpo_rec_set_float(r, key, sqrt(var > 0 ? var : 0));
    }
    if (with_range) {
        snprintf(key, sizeof key, "%s_min", prefix);
        skpo_rec_set_float(r, key, m->lo);
        snprintf(key, sizeof key, "%s_max", prefix);
        skpo_rec_set_float(r, key, m->hi);
    }
}

typedef struct step_stats {
    moments reward, correct, adv_up, adv_grp, len_up, len_grp, rho, D;
    size_t degenerate, dropped, revisits, rho_clipped;
} step_stats;

static void put_metrics(skpo_rec *m, const step_stats *s, const batch *b, const skpo_adv_opts *o,
                        const skpo_tracker *t) {
    const char *grp = o->mode == SKPO_ADV_SKPO ? "down" : "full";
    char key[64];
    skpo_rec_clear(m);
    skpo_rec_set_str(m, F_KIND, SKPO_KIND_METRICS);
    skpo_rec_set_str(m, "tool", "skpo-advantage");
    skpo_rec_set_str(m, "mode", skpo_adv_mode_name(o->mode));
    skpo_rec_set_int(m, F_STEP, skpo_tracker_step(t));
    mom_put(m, "reward", &s->reward, 0, 0);
    if (s->correct.n) skpo_rec_set_float(m, "accuracy", s->correct.s / (double)s->correct.n);
    skpo_rec_set_int(m, "groups", (int64_t)b->ng);
    if (o->mode != SKPO_ADV_SPO) {
        skpo_rec_set_float(m, "degenerate_frac", b->ng ? (double)s->degenerate / (double)b->ng : 0.0);
        skpo_rec_set_int(m, "dropped_groups", (int64_t)s->dropped);
    }
    mom_put(m, "adv_up", &s->adv_up, 1, 0);
    snprintf(key, sizeof key, "adv_%s", grp);
    mom_put(m, key, &s->adv_grp, 1, 0);
    mom_put(m, "len_up", &s->len_up, 0, 0);
    snprintf(key, sizeof key, "len_%s", grp);
    mom_put(m, key, &s->len_grp, 0, 0);
    mom_put(m, "rho", &s->rho, 0, 1);
    mom_put(m, "kl_d", &s->D, 0, 1);
    skpo_rec_set_int(m, "revisits", (int64_t)s->revisits);
    skpo_rec_set_float(m, "rho_clip_frac", s->revisits ? (double)s->rho_clipped / (double)s->revisits : 0.0);
    skpo_rec_set_int(m, "tracker_prompts", (int64_t)skpo_tracker_size(t));
}

// --- computing -----------------------------------------------------------------------

// Per group: rewards, lengths and advantages of its members (parallel to g->mem).
// same_outcome: every member has `correct` and all agree (-1: some lack it),
// what DAPO's dynamic sampling decides on.
typedef struct gvals { double *r, *len, *adv; double head_r, head_adv, self_r; int degenerate, same_outcome; } gvals;

static skpo_status gather(skpo_rec *recs, const batch *b, const skpo_adv_opts *o, gvals *gv, step_stats *s,
                          skpo_err *err) {
    for (size_t k = 0; k < b->ng; k++) {
        const group *g = &b->g[k];
        gv[k].r = skpo_xmalloc(g->n * sizeof(double));
        gv[k].len = skpo_xmalloc(g->n * sizeof(double));
        gv[k].adv = skpo_xmalloc(g->n * sizeof(double));
        int ncorrect = 0, nknown = 0;
        for (size_t j = 0; j < g->n; j++) {
            const skpo_rec *r = &recs[g->mem[j]];
            skpo_status st;
            if ((st = need_reward(r, &gv[k].r[j], err)) || (st = need_len(r, &gv[k].len[j], err))) return st;
            bool c;
            mom_add(&s->reward, gv[k].r[j]);
            if (skpo_rec_bool(r, F_CORRECT, &c)) {
                mom_add(&s->correct, c ? 1.0 : 0.0);
                nknown++;
                ncorrect += c;
            }
            mom_add(&s->len_grp, gv[k].len[j]);
        }
        gv[k].same_outcome = (size_t)nknown < g->n ? -1 : ncorrect == 0 || ncorrect == nknown;
        if (o->reward_up_self) {
            if (g->self < 0)
                return skpo_err_set(err, SKPO_ENOTFOUND, "up record '%s' has no self record (--reward-up self needs "
                                    "skpo-sample --segment --self)", g->name);
            skpo_status st = need_reward(&recs[g->self], &gv[k].self_r, err);
            if (st) return st;
        }
    }
    return SKPO_OK;
}

// The segment to remember for pid: the up record (skpo) or the response (spo).
static skpo_tracker_seg seg_of(const skpo_rec *r) {
    skpo_tracker_seg seg;
    size_t nl = 0;
    memset(&seg, 0, sizeof seg);
    seg.tokens = skpo_rec_i32s(r, F_TOKENS, &seg.ntokens);
    seg.logp = skpo_rec_f32s(r, F_LOGP, &nl);
    if (seg.logp && nl != seg.ntokens) seg.logp = NULL; // cannot score a mismatched segment later
    seg.prompt = skpo_rec_i32s(r, F_PROMPT, &seg.nprompt);
    return seg;
}

// rho for each group's prompt: D from the divergence function on revisits with a
// stored, scorable segment; D = 0 otherwise; rho_max without a function.
static skpo_status rhos(skpo_rec *recs, const batch *b, const skpo_adv_opts *o, const skpo_tracker *t,
                        double *rho, step_stats *s, skpo_err *err) {
    const skpo_tracker_params *p = skpo_tracker_get_params(t);
    skpo_tracker_seg *segs = skpo_xcalloc(b->ng + 1, sizeof *segs);
    size_t *which = skpo_xcalloc(b->ng + 1, sizeof *which), ns = 0;
    int adaptive = o->divergence || o->div_from_records;
    for (size_t k = 0; k < b->ng; k++) {
        const skpo_rec *r = &recs[b->g[k].head >= 0 ? b->g[k].head : b->g[k].mem[0]];
        const char *pid = skpo_rec_str(r, F_PID);
        rho[k] = p->rho_max;
        if (!skpo_tracker_seen(t, pid)) continue;
        s->revisits++;
        if (adaptive && skpo_tracker_last_seg(t, pid, &segs[ns]) && segs[ns].logp && segs[ns].prompt)
            which[ns++] = k;
        else if (adaptive) { // nothing to rescore: D = 0, like a first visit
            int clipped;
            rho[k] = skpo_tracker_rho(t, 0.0, &clipped);
            s->rho_clipped += clipped;
        }
    }
    double *D = skpo_xcalloc(ns + 1, sizeof *D);
    skpo_status st = SKPO_OK;
    if (ns && o->div_from_records) {
        for (size_t i = 0; i < ns && !st; i++) {
            const skpo_rec *r = &recs[b->g[which[i]].head >= 0 ? b->g[which[i]].head : b->g[which[i]].mem[0]];
            if (!skpo_rec_float(r, F_SEG_DIV, &D[i]))
                st = skpo_err_set(err, SKPO_EFORMAT,
                                  "record '%s': prompt '%s' is a revisit with a stored segment but has no 'seg_div' "
                                  "(sample with skpo-sample --rescore, or drop --rescored for rho = rho_max)",
                                  skpo_rec_str(r, F_UID) ? skpo_rec_str(r, F_UID) : "?", b->g[which[i]].name);
        }
    } else if (ns) {
        st = o->divergence(o->div_ctx, segs, ns, D, err);
    }
    for (size_t i = 0; !st && i < ns; i++) {
        if (!(isfinite(D[i]) && D[i] >= 0)) {
            st = skpo_err_set(err, SKPO_ENUMERIC, "divergence %g for prompt '%s' is not a finite D >= 0", D[i],
                              b->g[which[i]].name);
            break;
        }
        int clipped;
        rho[which[i]] = skpo_tracker_rho(t, D[i], &clipped);
        s->rho_clipped += clipped;
        mom_add(&s->D, D[i]);
    }
    if (!adaptive) s->rho_clipped = s->revisits; // constant rho_max: every revisit sits on the bound
    for (size_t k = 0; k < b->ng; k++) {
        const skpo_rec *r = &recs[b->g[k].head >= 0 ? b->g[k].head : b->g[k].mem[0]];
        if (skpo_tracker_seen(t, skpo_rec_str(r, F_PID))) mom_add(&s->rho, rho[k]);
    }
    free(D); free(which); free(segs);
    return st;
}

// Advantages into gv; tracker untouched.
static void compute(skpo_rec *recs, const batch *b, const skpo_adv_opts *o, const skpo_tracker *t, gvals *gv,
                    step_stats *s) {
    int use_std = o->mode != SKPO_ADV_DRGRPO;
    size_t nb = b->ng;
    double *up = skpo_xcalloc(nb + 1, sizeof *up);
    size_t *warm = skpo_xcalloc(nb + 1, sizeof *warm);
    for (size_t k = 0; k < nb; k++) {
        const group *g = &b->g[k];
        if (o->mode == SKPO_ADV_SPO) {
            gv[k].head_r = gv[k].r[0];
        } else {
            gv[k].degenerate = skpo_adv_group(gv[k].r, g->n, use_std, o->eps_group, gv[k].adv);
            s->degenerate += gv[k].degenerate;
            // R_I: the Monte-Carlo value of the segment (mean downstream outcome),
            // or in the "w/o MC" ablation the outcome of its own completion
            gv[k].head_r = o->reward_up_self ? gv[k].self_r : mean_of(gv[k].r, g->n);
        }
        const skpo_rec *h = &recs[g->head >= 0 ? g->head : g->mem[0]];
        up[k] = gv[k].head_r - skpo_tracker_value(t, skpo_rec_str(h, F_PID)); // pre-update baseline
    }
    if (o->mode == SKPO_ADV_SKPO || o->mode == SKPO_ADV_SPO) {
        // warm-up: the prompts without K earlier visits are left out (A = 0)
        size_t m = 0;
        for (size_t k = 0; k < nb; k++) {
            const skpo_rec *h = &recs[b->g[k].head >= 0 ? b->g[k].head : b->g[k].mem[0]];
            if (o->mode == SKPO_ADV_SKPO && skpo_tracker_visits(t, skpo_rec_str(h, F_PID)) < o->up_warmup) continue;
            warm[m] = k;
            up[m++] = up[k];
        }
        skpo_adv_batch_norm(up, m, o->eps_batch);
        for (size_t k = 0; k < nb; k++) gv[k].head_adv = 0;
        for (size_t i = 0; i < m; i++) gv[warm[i]].head_adv = up[i];
    }
    if (o->mode == SKPO_ADV_SPO)
        for (size_t k = 0; k < nb; k++) gv[k].adv[0] = gv[k].head_adv;
    if (o->mode == SKPO_ADV_SKPO && o->norm_down) {
        size_t tot = 0;
        for (size_t k = 0; k < nb; k++) tot += b->g[k].n;
        double *all = skpo_xmalloc((tot + 1) * sizeof *all);
        size_t m = 0;
        for (size_t k = 0; k < nb; k++) { memcpy(all + m, gv[k].adv, b->g[k].n * sizeof *all); m += b->g[k].n; }
        skpo_adv_batch_norm(all, tot, o->eps_batch);
        m = 0;
        for (size_t k = 0; k < nb; k++) { memcpy(gv[k].adv, all + m, b->g[k].n * sizeof *all); m += b->g[k].n; }
        free(all);
    }
    free(up);
    free(warm);
}

// Write adv/weight/reward into the records. dapo drops the groups whose
// outcomes are all equal (all correct or all wrong: DAPO's accuracy filter, so
// an all-correct group is dropped even when the overlong penalty made its
// rewards differ); without `correct` on every member, all-equal rewards.
static void annotate(skpo_rec *recs, const batch *b, const skpo_adv_opts *o, gvals *gv, unsigned char *keep,
                     step_stats *s) {
    int skpo = o->mode == SKPO_ADV_SKPO;
    for (size_t k = 0; k < b->ng; k++) {
        const group *g = &b->g[k];
        int drop = o->mode == SKPO_ADV_DAPO && (gv[k].same_outcome >= 0 ? gv[k].same_outcome : gv[k].degenerate);
        s->dropped += drop;
        for (size_t j = 0; j < g->n; j++) {
            skpo_rec *r = &recs[g->mem[j]];
            if (drop) { keep[g->mem[j]] = 0; continue; }
            skpo_rec_set_float(r, F_ADV, gv[k].adv[j]);
            skpo_rec_set_float(r, F_WEIGHT, skpo ? o->w_down : 1.0);
            mom_add(&s->adv_grp, gv[k].adv[j]);
        }
        if (skpo) {
            skpo_rec *h = &recs[g->head];
            double len = 0;
            skpo_rec_set_float(h, F_REWARD, gv[k].head_r);
            skpo_rec_set_float(h, F_ADV, gv[k].head_adv);
            skpo_rec_set_float(h, F_WEIGHT, o->w_up);
            mom_add(&s->adv_up, gv[k].head_adv);
            if (need_len(h, &len, NULL) == SKPO_OK) mom_add(&s->len_up, len);
        }
    }
}

// The prompt's average response length, what L_q tracks (the paper: "the
// per-prompt average response length", docs/algorithm.md Q6). Under the skip
// layout [s, q] a downstream response is a whole solution of q (it restates s
// or ignores it), so the observation is mean_i |o_i|; counting |s| again made L
// drift to ~1.5x the real length. Under the continual layout [q, s] o_i
// continues s: |s| + mean_i |o_i|. Other modes: the mean response length.
static double response_len(const skpo_rec *recs, const group *g, const skpo_adv_opts *o, const gvals *gv) {
    double len = mean_of(gv->len, g->n), seg = 0;
    if (o->mode == SKPO_ADV_SKPO && o->len_with_segment && g->head >= 0 && need_len(&recs[g->head], &seg, NULL) == SKPO_OK)
        len += seg;
    return o->len_cap > 0 && len > o->len_cap ? o->len_cap : len;
}

static skpo_status update_tracker(skpo_rec *recs, const batch *b, const skpo_adv_opts *o, skpo_tracker *t,
                                  const gvals *gv, const double *rho, skpo_err *err) {
    int store = o->mode == SKPO_ADV_SKPO || o->mode == SKPO_ADV_SPO;
    for (size_t k = 0; k < b->ng; k++) {
        const group *g = &b->g[k];
        const skpo_rec *h = &recs[g->head >= 0 ? g->head : g->mem[0]];
        skpo_tracker_seg seg = seg_of(h);
        skpo_status st = skpo_tracker_update(t, skpo_rec_str(h, F_PID), gv[k].head_r, response_len(recs, g, o, &gv[k]),
                                             rho[k], store && seg.tokens ? &seg : NULL, err);
        if (st) return st;
    }
    return SKPO_OK;
}

// prime: per-token advantages of every group's responses (skpo_adv_prime) into
// `adv_tok`, their mean into `adv`; s->adv_grp is redone from the token values.
static skpo_status prime_annotate(skpo_rec *recs, const batch *b, const skpo_adv_opts *o, step_stats *s,
                                  skpo_err *err) {
    size_t n = 0;
    for (size_t k = 0; k < b->ng; k++) n += b->g[k].n;
    const float **prm = skpo_xcalloc(n, sizeof *prm), **ref = skpo_xcalloc(n, sizeof *ref);
    size_t *len = skpo_xcalloc(n, sizeof *len);
    double *acc = skpo_xcalloc(n, sizeof *acc);
    float **adv = skpo_xcalloc(n, sizeof *adv);
    long *rec = skpo_xcalloc(n, sizeof *rec);
    skpo_status st = SKPO_OK;
    size_t i = 0;
    for (size_t k = 0; k < b->ng && !st; k++)
        for (size_t j = 0; j < b->g[k].n && !st; j++, i++) {
            const skpo_rec *r = &recs[b->g[k].mem[j]];
            size_t np = 0, nr = 0;
            bool c;
            rec[i] = b->g[k].mem[j];
            skpo_rec_i32s(r, F_TOKENS, &len[i]);
            prm[i] = skpo_rec_f32s(r, F_PRM_LOGP, &np);
            ref[i] = skpo_rec_f32s(r, F_REF_LOGP, &nr);
            if (!prm[i] || !ref[i] || np != len[i] || nr != len[i])
                st = skpo_err_set(err, SKPO_EFORMAT, "record '%s': prime needs prm_logp and ref_logp, one per token "
                                  "(skpo-score --field prm_logp / ref_logp)", uid_of(r));
            else if (!skpo_rec_bool(r, F_CORRECT, &c))
                st = skpo_err_set(err, SKPO_EFORMAT, "record '%s': prime needs the outcome 'correct'", uid_of(r));
            else
                acc[i] = c ? 1.0 : 0.0;
            adv[i] = skpo_xcalloc(len[i] ? len[i] : 1, sizeof **adv);
        }
    if (!st) {
        st = skpo_adv_prime(prm, ref, len, acc, n, (size_t)o->group, &o->prime, adv, err);
        if (st) {
            skpo_err e = *err;
            st = skpo_err_set(err, st, "prime: %s", e.msg);
        }
    }
    if (!st) {
        memset(&s->adv_grp, 0, sizeof s->adv_grp);
        for (i = 0; i < n; i++) {
            double m = 0;
            for (size_t t = 0; t < len[i]; t++) {
                m += adv[i][t];
                mom_add(&s->adv_grp, adv[i][t]);
            }
            skpo_rec_set_f32s(&recs[rec[i]], F_ADV_TOK, adv[i], len[i]);
            skpo_rec_set_float(&recs[rec[i]], F_ADV, len[i] ? m / (double)len[i] : 0.0);
        }
    }
    for (i = 0; i < n; i++) free(adv[i]);
    free(prm), free(ref), free(len), free(acc), free(adv), free(rec);
    return st;
}

skpo_status skpo_adv_step(skpo_rec *recs, size_t n, const skpo_adv_opts *o, skpo_tracker *t,
                          unsigned char *keep, skpo_rec *metrics, skpo_err *err) {
    SKPO_ASSERT(o->group >= 1);
    batch b;
    memset(&b, 0, sizeof b);
    memset(keep, 1, n);
    step_stats s;
    memset(&s, 0, sizeof s);
    skpo_status st = o->mode == SKPO_ADV_SKPO ? index_skpo(recs, n, &b, err) : index_full(recs, n, &b, err);
    if (!st && b.ng == 0)
        st = skpo_err_set(err, SKPO_ENOTFOUND, "no %s records in the input (is --mode %s right?)",
                          o->mode == SKPO_ADV_SKPO ? "up" : "full", skpo_adv_mode_name(o->mode));
    if (!st) st = check_sizes(&b, recs, o, err);
    gvals *gv = skpo_xcalloc(b.ng + 1, sizeof *gv);
    double *rho = skpo_xcalloc(b.ng + 1, sizeof *rho);
    if (!st) st = gather(recs, &b, o, gv, &s, err);
    if (!st) st = rhos(recs, &b, o, t, rho, &s, err);
    if (!st) {
        compute(recs, &b, o, t, gv, &s);
        // metrics name the step being processed; the tracker moves on after
        st = update_tracker(recs, &b, o, t, gv, rho, err);
    }
    if (!st) {
        annotate(recs, &b, o, gv, keep, &s);
        if (o->mode == SKPO_ADV_PRIME) st = prime_annotate(recs, &b, o, &s, err);
    }
    if (!st) put_metrics(metrics, &s, &b, o, t);
    for (size_t k = 0; k < b.ng; k++) { free(gv[k].r); free(gv[k].len); free(gv[k].adv); }
    free(gv);
    free(rho);
    batch_free(&b);
    return st;
}
