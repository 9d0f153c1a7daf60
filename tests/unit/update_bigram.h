/*
 * update_bigram.h - an exact little policy for the trainer tests: a bigram
 * model, logits(t) = (W[ids[t-1]] + b) / T, computed in double, with analytic
 * backward. It lets the update tests run (micro-batching, data parallel,
 * resume, finite differences) independent of the transformer in core/model/model.c.
 * Header-only on purpose: each test binary is one translation unit.
 */
#ifndef SKPO_UPDATE_BIGRAM_H
#define SKPO_UPDATE_BIGRAM_H

#include "train/update.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BG_V 16

typedef struct bigram {
    float W[BG_V * BG_V], b[BG_V];       // data
    float gW[BG_V * BG_V], gb[BG_V];     // grad
    skpo_param p[2];
    // saved by forward for backward: per scored token (prev, target, probs, H)
    int ntok, *prev, *tgt;
    double *prob, *H, T;
} bigram;

static void bg_init(bigram *m, unsigned seed) {
    memset(m, 0, sizeof *m);
    for (int i = 0; i < BG_V * BG_V; i++) {
        seed = seed * 1103515245u + 12345u;
        m->W[i] = (float)(((seed >> 8) & 0xffff) / 65536.0 * 2.0 - 1.0);
    }
    for (int i = 0; i < BG_V; i++) m->b[i] = 0.05f * (float)(i % 5);
    m->p[0] = (skpo_param){"bigram.weight", m->W, m->gW, BG_V * BG_V, 2, {BG_V, BG_V}};
    m->p[1] = (skpo_param){"bigram.bias", m->b, m->gb, BG_V, 1, {BG_V, 0}};
}

static void bg_release(bigram *m) {
    free(m->prev), free(m->tgt), free(m->prob), free(m->H);
    m->prev = m->tgt = NULL;
    m->prob = m->H = NULL;
}

static skpo_status bg_run(bigram *m, const skpo_seq *seqs, int nseq, float temp, float *logp, float *ent, int keep) {
    int n = 0;
    for (int s = 0; s < nseq; s++) n += seqs[s].n - seqs[s].start;
    if (keep) {
        bg_release(m);
        m->ntok = n;
        m->T = temp;
        m->prev = calloc((size_t)n + 1, sizeof(int));
        m->tgt = calloc((size_t)n + 1, sizeof(int));
        m->prob = calloc((size_t)n * BG_V + 1, sizeof(double));
        m->H = calloc((size_t)n + 1, sizeof(double));
    }
    int k = 0;
    for (int s = 0; s < nseq; s++)
        for (int t = seqs[s].start; t < seqs[s].n; t++, k++) {
            int pv = seqs[s].ids[t - 1], tg = seqs[s].ids[t];
            double z[BG_V], mx = -1e300, se = 0, h = 0;
            for (int j = 0; j < BG_V; j++) {
                z[j] = ((double)m->W[pv * BG_V + j] + m->b[j]) / temp;
                if (z[j] > mx) mx = z[j];
            }
            for (int j = 0; j < BG_V; j++) se += exp(z[j] - mx);
            double lse = mx + log(se);
            for (int j = 0; j < BG_V; j++) {
                double lp = z[j] - lse, p = exp(lp);
                h -= p * lp;
                if (keep) m->prob[(size_t)k * BG_V + j] = p;
            }
            logp[k] = (float)(z[tg] - lse);
            if (ent) ent[k] = (float)h;
            if (keep) m->prev[k] = pv, m->tgt[k] = tg, m->H[k] = h;
        }
    return SKPO_OK;
}

static skpo_status bg_forward(void *ctx, const skpo_seq *seqs, int nseq, float temp, float *logp, float *ent,
                              skpo_err *err) {
    return bg_run(ctx, seqs, nseq, temp, logp, ent, 1);
}

static skpo_status bg_score(void *ctx, const skpo_seq *seqs, int nseq, float temp, float *logp, skpo_err *err) {
    return bg_run(ctx, seqs, nseq, temp, logp, NULL, 0);
}

static skpo_status bg_backward(void *ctx, const float *dlogp, const float *dent, skpo_err *err) {
    bigram *m = ctx;
    for (int k = 0; k < m->ntok; k++) {
        const double *p = m->prob + (size_t)k * BG_V;
        for (int j = 0; j < BG_V; j++) {
            double dz = dlogp[k] * ((j == m->tgt[k]) - p[j]);
            if (dent) dz += dent[k] * (-p[j] * (log(p[j]) + m->H[k]));
            dz /= m->T;
            m->gW[m->prev[k] * BG_V + j] += (float)dz;
            m->gb[j] += (float)dz;
        }
    }
    bg_release(m);
    return SKPO_OK;
}

static void bg_zero(void *ctx) {
    bigram *m = ctx;
    memset(m->gW, 0, sizeof m->gW);
    memset(m->gb, 0, sizeof m->gb);
}

static int bg_params(void *ctx, skpo_param **p) {
    *p = ((bigram *)ctx)->p;
    return 2;
}

static skpo_policy bg_policy(bigram *m) {
    return (skpo_policy){m, bg_forward, bg_backward, bg_score, bg_zero, bg_params, NULL, NULL, NULL};
}

// --- records for the tests -------------------------------------------------------------

static unsigned bg_rand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

// nprompts prompts, each an up record and ndown down records (SKPO step
// shape), weights 0.5/0.5; logp = the model's own log-prob plus noise of
// +-noise so ratios differ from 1; advantages in [-1.5, 1.5].
static skpo_rec *bg_records(bigram *m, int nprompts, int ndown, double noise, unsigned seed, size_t *nrec) {
    size_t n = (size_t)nprompts * (size_t)(1 + ndown);
    skpo_rec *r = calloc(n, sizeof *r);
    size_t k = 0;
    for (int q = 0; q < nprompts; q++)
        for (int d = 0; d <= ndown; d++, k++) {
            skpo_rec_init(&r[k]);
            char pid[32], uid[48];
            snprintf(pid, sizeof pid, "p%d", q);
            snprintf(uid, sizeof uid, "p%d-%s%d", q, d ? "d" : "u", d);
            int np = 1 + (int)(bg_rand(&seed) % 4), nt = 1 + (int)(bg_rand(&seed) % 9);
            int32_t ids[16];
            for (int i = 0; i < np + nt; i++) ids[i] = (int32_t)(bg_rand(&seed) % BG_V);
            skpo_rec_set_str(&r[k], F_KIND, d ? SKPO_KIND_DOWN : SKPO_KIND_UP);
            skpo_rec_set_str(&r[k], F_PID, pid);
            skpo_rec_set_str(&r[k], F_UID, uid);
            skpo_rec_set_i32s(&r[k], F_PROMPT, ids, (size_t)np);
            skpo_rec_set_i32s(&r[k], F_TOKENS, ids + np, (size_t)nt);
            float lp[16];
            skpo_seq s = {ids, np + nt, np};
            bg_score(m, &s, 1, 1.0f, lp, NULL);
            for (int i = 0; i < nt; i++) lp[i] += (float)(noise * ((bg_rand(&seed) % 2001) / 1000.0 - 1.0));
            skpo_rec_set_f32s(&r[k], F_LOGP, lp, (size_t)nt);
            skpo_rec_set_float(&r[k], F_ADV, ((bg_rand(&seed) % 3001) / 1000.0 - 1.5));
            skpo_rec_set_float(&r[k], F_WEIGHT, 0.5);
        }
    *nrec = n;
    return r;
}

// Options of one invariance-test combination: loss forms (bit 0: up and full
// cispo, bit 1: down cispo; else ppo), aggregation agg for every phase, and
// mismatch mode mm with bands tight enough to mask some of bg_records' tokens.
static void bg_combo_opts(skpo_update_opts *o, int form, int agg, int mm) {
    skpo_update_opts_default(o);
    skpo_mismatch_cfg_default(&o->mismatch, (skpo_mismatch_mode)mm);
    if (mm == SKPO_MISMATCH_MASK_TOKEN) o->mismatch.high = 1.2;
    if (mm == SKPO_MISMATCH_MASK_SEQ) o->mismatch.low = 0.8, o->mismatch.high = 1.25;
    for (int p = 0; p < SKPO_NPHASE; p++) {
        o->loss.agg[p] = (skpo_loss_agg)agg;
        o->loss.phase[p].kind = (form >> (p == SKPO_PHASE_DOWN)) & 1 ? SKPO_LOSS_CISPO : SKPO_LOSS_PPO;
    }
    o->loss.agg_norm = 16;
}

// Largest |a - b| over the largest |a| (the 1e-6 relative criterion).
static double bg_rel_diff(const float *a, const float *b, int n) {
    double worst = 0, scale = 0;
    for (int i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)a[i] - b[i]));
        scale = fmax(scale, fabs(a[i]));
    }
    return scale > 0 ? worst / scale : (worst > 0 ? INFINITY : 0);
}

static void bg_records_free(skpo_rec *r, size_t n) {
    for (size_t i = 0; i < n; i++) skpo_rec_free(&r[i]);
    free(r);
}

#endif
