/*
 * policy.c - see policy.h: the model as the trainer and the tools see it,
 * with or without a LoRA adapter. It sits above the backends: it calls the
 * generic model's public API (model.c) and the adapter's, and nothing below
 * calls back into it, so the link graph of core/model has no circle
 * (tests/sh/t_layers.sh checks the objects with nm).
 */
#include "model/policy.h"
#include "model/lora.h"
#include "model/model_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// One adapted projection as lora_mod_get shows it.
typedef struct lora_mod_view {
    const float *A, *B;   // (r, K), (O, r); A NULL when not adapted
    float *dA, *dB;
    int K, O;
} lora_mod_view;

// --- merging an adapter into the weights ------------------------------------------------------

skpo_status skpo_lora_merge(const skpo_lora *lo, skpo_model *m, skpo_err *err) {
    const skpo_config *mc = skpo_model_config(m);
    int L = lora_layers(lo);
    if (mc->num_hidden_layers != L)
        return skpo_err_set(err, SKPO_ERANGE, "adapter has %d layers, the model %d", L, mc->num_hidden_layers);
    skpo_status s = skpo_model_sync_host(m, err);
    if (s) return s;
    const skpo_ops *op = skpo_ops_cpu();
    size_t r = (size_t)skpo_lora_get_cfg(lo)->rank;
    float scale = lora_scale_f(lo);
    for (int l = 0; l < L; l++)
        for (int t = 0; t < SKPO_LORA_NT; t++) {
            lora_mod_view v, *md = &v;
            lora_mod_get(lo, l, t, &v.A, &v.B, &v.dA, &v.dB, &v.K, &v.O);
            if (!md->A) continue;
            const model_layer *ly = &m->layers[l];
            float *w[SKPO_LORA_NT] = {ly->wq, ly->wk, ly->wv, ly->wo, ly->wg, ly->wu, ly->wd};
            // W (O, K) += (s B) (O, r) @ A (r, K) = matmul(in = s B, w = A^T (K, r)).
            float *sb = skpo_xmalloc((size_t)md->O * r * sizeof(float)), *at = skpo_xmalloc((size_t)md->K * r * sizeof(float));
            for (size_t i = 0; i < (size_t)md->O * r; i++) sb[i] = scale * md->B[i];
            for (size_t i = 0; i < r; i++)
                for (size_t k = 0; k < (size_t)md->K; k++) at[k * r + i] = md->A[i * (size_t)md->K + k];
            op->matmul(w[t], sb, at, NULL, md->O, (int)r, md->K, 1);
            free(sb);
            free(at);
        }
    skpo_param *p;
    skpo_model_params(m, &p);   // drops packed copies made from the old weights
    return skpo_model_sync_device(m, err); // a backend with a device copy refreshes it
}

// --- loading a policy --------------------------------------------------------------------------

skpo_status skpo_lora_model_load(const char *dir, const char *adapter, const skpo_model_opts *o, int merge,
                                 skpo_model **m, skpo_lora **lora, skpo_err *err) {
    if (lora) *lora = NULL;
    *m = NULL;
    char *base = NULL;
    skpo_status s = SKPO_OK;
    if (!adapter && skpo_lora_is_adapter_dir(dir)) {
        adapter = dir;
        if ((s = skpo_lora_base_of(dir, &base, err))) return s;
        dir = base;
    }
    if (!adapter) {
        s = skpo_model_load(dir, o, m, err);
        free(base);
        return s;
    }
    s = skpo_model_load(dir, o, m, err);
    skpo_lora *lo = NULL;
    if (!s) s = skpo_lora_load(adapter, skpo_model_config(*m), 0, &lo, err);
    if (!s && merge) s = skpo_lora_merge(lo, *m, err);
    else if (!s) s = skpo_lora_attach(*m, lo, err);
    free(base);
    if (s) {
        skpo_model_free(*m);
        skpo_lora_free(lo);
        *m = NULL;
        return s;
    }
    if (merge) skpo_lora_free(lo);
    else *lora = lo;
    return SKPO_OK;
}

// --- the trainer's view of a model -------------------------------------------------------------

static skpo_status pm_forward(void *ctx, const skpo_seq *s, int n, float t, float *lp, float *ent, skpo_err *err) {
    return skpo_model_train_forward(ctx, s, n, t, lp, ent, err);
}
static skpo_status pm_backward(void *ctx, const float *dlp, const float *dent, skpo_err *err) {
    return skpo_model_train_backward(ctx, dlp, dent, err);
}
static skpo_status pm_score(void *ctx, const skpo_seq *s, int n, float t, float *lp, skpo_err *err) {
    return skpo_model_logprobs(ctx, s, n, t, lp, NULL, err);
}
static void pm_zero(void *ctx) { skpo_model_zero_grad(ctx); }
static int pm_params(void *ctx, skpo_param **p) { return skpo_model_params(ctx, p); }
static void pm_tokens(void *ctx, long *raw, long *packed) { skpo_model_pass_tokens(ctx, raw, packed); }
static int pm_packs(void *ctx) { return skpo_model_packs(ctx); }
static int pm_dev_finite(void *ctx) {
    double ss = 0;
    skpo_err e = {0};
    return skpo_model_grad_sumsq(ctx, &ss, &e) == SKPO_OK && isfinite(ss);
}

skpo_policy skpo_policy_of_model(skpo_model *m) {
    skpo_dev_params d;
    skpo_err e = {0};
    int dev = skpo_model_dev_params(m, &d, &e) == SKPO_OK;
    return (skpo_policy){m, pm_forward, pm_backward, pm_score, pm_zero, pm_params, dev ? pm_dev_finite : NULL, pm_tokens, pm_packs};
}

// --- the trainer's view ------------------------------------------------------------------------

typedef struct lora_pol {
    skpo_model *m;
    skpo_lora *lo;
} lora_pol;

static skpo_status lp_forward(void *ctx, const skpo_seq *s, int n, float t, float *lp, float *ent, skpo_err *err) {
    return skpo_model_train_forward(((lora_pol *)ctx)->m, s, n, t, lp, ent, err);
}
static skpo_status lp_backward(void *ctx, const float *dlp, const float *dent, skpo_err *err) {
    return skpo_model_train_backward(((lora_pol *)ctx)->m, dlp, dent, err);
}
static skpo_status lp_score(void *ctx, const skpo_seq *s, int n, float t, float *lp, skpo_err *err) {
    return skpo_model_logprobs(((lora_pol *)ctx)->m, s, n, t, lp, NULL, err);
}
static void lp_zero(void *ctx) { skpo_lora_zero_grad(((lora_pol *)ctx)->lo); }
static int lp_params(void *ctx, skpo_param **p) { return skpo_lora_params(((lora_pol *)ctx)->lo, p); }
static void lp_tokens(void *ctx, long *raw, long *packed) { skpo_model_pass_tokens(((lora_pol *)ctx)->m, raw, packed); }
static int lp_packs(void *ctx) { return skpo_model_packs(((lora_pol *)ctx)->m); }

skpo_policy skpo_policy_of_lora(skpo_model *m, skpo_lora *lo) {
    // One small context per (model, adapter), kept with the adapter so the
    // policy value can be copied freely; freed with it.
    void **slot = lora_pol_slot(lo);
    if (!*slot) *slot = skpo_xcalloc(1, sizeof(lora_pol));
    lora_pol *ctx = *slot;
    ctx->m = m;
    ctx->lo = lo;
    return (skpo_policy){ctx, lp_forward, lp_backward, lp_score, lp_zero, lp_params, NULL, lp_tokens, lp_packs};
}
