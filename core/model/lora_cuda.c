/*
 * lora_cuda.c - the adapter's device copy for a model on CUDA (the CUDA
 * backend's half of LoRA, model_impl.h): cuBLAS GEMMs through cuda.h /
 * cuda_train.h, no kernels of its own. Per targeted projection, with
 * u = x A^T (N, r) in bf16:
 *   forward   y += u (s B)^T
 *   backward  u recomputed; du = dy (s B) (N, r); dx += du A;
 *             dA += du^T x; d(sB) += dy^T u, so dB = s d(sB) (applied when
 *             the gradients go to the host).
 * The optimizer stays on the host (the adapter is small): gradients go to the
 * host after every backward, weights come back before every pass.
 * Only the CUDA backend (model_cuda_train.c) calls this file, so a CPU-only
 * build compiles it to nothing: there is no CUDA LoRA to stub out. The
 * adapter frees the device copy through the function stored with it
 * (lora_dev_set), never by naming this file.
 */
#include "model/model_impl.h"

#include <stdlib.h>

#ifdef SKPO_HAVE_CUDA  // a CPU-only build has no CUDA backend, hence no CUDA LoRA
#include "cuda/cuda_train.h"

#define TRY(call) do { skpo_status s_ = (call); if (s_) return s_; } while (0)

typedef struct lora_dev {
    int L, r;
    size_t numel;             // A and B elements of all modules
    skpo_bf16 *w;             // (numel) A, then s B, per module in order
    float *g;                 // (numel) d A, d(sB)
    size_t *off;              // (L * NT) offset of module (l, t)'s A in w / g
    skpo_bf16 *u, *du;        // (cap, r) scratch
    int cap;
    uint16_t *hw;             // (numel) host staging
    float *hg;                // (numel) host staging
} lora_dev;

// One adapted module (l, t) as this file sees it: the host tensors of
// lora_mod_get and where its A and then its s B sit in w / g.
typedef struct dmod {
    const float *A, *B;       // host (r, K), (O, r)
    float *dA, *dB;           // host gradients, NULL when not trainable
    int K, O;
    size_t off, na, nb;       // offset in w / g; r K and r O elements
} dmod;

// Module i = l * NT + t; 0 when that target is not adapted.
static int dmod_at(skpo_lora *lo, const lora_dev *d, int i, dmod *m) {
    lora_mod_get(lo, i / SKPO_LORA_NT, i % SKPO_LORA_NT, &m->A, &m->B, &m->dA, &m->dB, &m->K, &m->O);
    if (!m->A) return 0;
    m->off = d->off[i];
    m->na = (size_t)d->r * (size_t)m->K;
    m->nb = (size_t)d->r * (size_t)m->O;
    return 1;
}

static void lora_dev_free(void *p) {
    lora_dev *d = p;
    if (!d) return;
    skpo_cuda_dfree(d->w);
    skpo_cuda_dfree(d->g);
    skpo_cuda_dfree(d->u);
    skpo_cuda_dfree(d->du);
    free(d->off);
    free(d->hw);
    free(d->hg);
    free(d);
}

static skpo_status dev_of(skpo_lora *lo, skpo_cuda *cu, lora_dev **out, skpo_err *err) {
    if ((*out = lora_dev_get(lo))) return SKPO_OK;
    lora_dev *d = skpo_xcalloc(1, sizeof *d);
    d->L = lora_layers(lo);
    d->r = skpo_lora_get_cfg(lo)->rank;
    d->off = skpo_xcalloc((size_t)d->L * SKPO_LORA_NT, sizeof *d->off);
    for (int i = 0; i < d->L * SKPO_LORA_NT; i++) {
        dmod m;
        d->off[i] = d->numel; // dmod_at reads it: the module's own offset
        if (dmod_at(lo, d, i, &m)) d->numel += m.na + m.nb;
    }
    d->hw = skpo_xmalloc(d->numel * sizeof *d->hw);
    d->hg = skpo_xmalloc(d->numel * sizeof *d->hg);
    skpo_status s = skpo_cuda_malloc(cu, (void **)&d->w, d->numel * 2, "LoRA adapter", err);
    if (!s) s = skpo_cuda_malloc(cu, (void **)&d->g, d->numel * 4, "LoRA gradients", err);
    if (!s) s = skpo_cuda_memset0(cu, d->g, d->numel * 4, err);
    if (s) {
        lora_dev_free(d);
        return s;
    }
    lora_dev_set(lo, d, lora_dev_free);
    *out = d;
    return SKPO_OK;
}

skpo_status skpo_lora_cuda_sync(skpo_lora *lo, struct skpo_cuda *cu, int N, skpo_err *err) {
    lora_dev *d;
    TRY(dev_of(lo, cu, &d, err));
    float s = lora_scale_f(lo);
    dmod m;
    for (int i = 0; i < d->L * SKPO_LORA_NT; i++) {
        if (!dmod_at(lo, d, i, &m)) continue;
        skpo_f32_to_bf16_host(d->hw + m.off, m.A, m.na);
        for (size_t j = 0; j < m.nb; j++) d->hg[j] = s * m.B[j];   // hg as scratch for s B
        skpo_f32_to_bf16_host(d->hw + m.off + m.na, d->hg, m.nb);
    }
    TRY(skpo_cuda_h2d(cu, d->w, d->hw, d->numel * 2, err));
    if (N > d->cap) {
        skpo_cuda_dfree(d->u);
        skpo_cuda_dfree(d->du);
        d->u = d->du = NULL;
        d->cap = 0;
        TRY(skpo_cuda_malloc(cu, (void **)&d->u, (size_t)N * d->r * 2, "LoRA scratch", err));
        TRY(skpo_cuda_malloc(cu, (void **)&d->du, (size_t)N * d->r * 2, "LoRA scratch", err));
        d->cap = N;
    }
    return SKPO_OK;
}

// Module (l, t) on the device for a pass over N rows: A, sB, dA, d(sB) and
// its K, O; *on = 0 when it is not adapted (or N is 0): nothing to do.
typedef struct dpass {
    lora_dev *d;
    skpo_bf16 *A, *sB;
    float *gA, *gB;
    int K, O, on;
} dpass;

static skpo_status pass_of(skpo_lora *lo, int l, int t, int N, dpass *p, skpo_err *err) {
    lora_dev *d = lora_dev_get(lo);
    if (!d || N > d->cap)
        return skpo_err_set(err, SKPO_EUNSUPPORTED, "LoRA on cuda: skpo_lora_cuda_sync not called for %d rows", N);
    dmod m;
    p->d = d;
    p->on = N > 0 && dmod_at(lo, d, l * SKPO_LORA_NT + t, &m);
    if (!p->on) return SKPO_OK;
    p->A = d->w + m.off, p->sB = d->w + m.off + m.na, p->gA = d->g + m.off, p->gB = d->g + m.off + m.na;
    p->K = m.K, p->O = m.O;
    return SKPO_OK;
}

skpo_status skpo_lora_cuda_fwd(skpo_lora *lo, struct skpo_cuda *cu, int l, int t, uint16_t *y, const uint16_t *x,
                               int N, skpo_err *err) {
    dpass p;
    TRY(pass_of(lo, l, t, N, &p, err));
    if (!p.on) return SKPO_OK;
    int r = p.d->r;
    TRY(skpo_cuda_linear(cu, p.d->u, x, p.A, NULL, N, p.K, r, 0.f, err));     // u = x A^T
    return skpo_cuda_linear(cu, y, p.d->u, p.sB, NULL, N, r, p.O, 1.f, err);  // y += u (sB)^T
}

skpo_status skpo_lora_cuda_bwd(skpo_lora *lo, struct skpo_cuda *cu, int l, int t, uint16_t *dx, const uint16_t *dy,
                               const uint16_t *x, int N, skpo_err *err) {
    dpass p;
    TRY(pass_of(lo, l, t, N, &p, err));
    if (!p.on) return SKPO_OK;
    int r = p.d->r;
    skpo_bf16 *u = p.d->u, *du = p.d->du;
    TRY(skpo_cuda_linear(cu, u, x, p.A, NULL, N, p.K, r, 0.f, err));                  // u recomputed
    TRY(skpo_cuda_linear_backward(cu, du, p.gB, NULL, dy, u, p.sB, N, r, p.O, err));  // du = dy sB; d(sB) += dy^T u
    TRY(skpo_cuda_linear_backward(cu, NULL, p.gA, NULL, du, x, p.A, N, p.K, r, err)); // dA += du^T x
    return skpo_cuda_linear_dx(cu, dx, du, p.A, N, p.K, r, 1.f, err);                 // dx += du A
}

skpo_status skpo_lora_cuda_grads_to_host(skpo_lora *lo, struct skpo_cuda *cu, skpo_err *err) {
    lora_dev *d = lora_dev_get(lo);
    if (!d) return SKPO_OK;
    TRY(skpo_cuda_d2h(cu, d->hg, d->g, d->numel * 4, err));
    TRY(skpo_cuda_memset0(cu, d->g, d->numel * 4, err));
    float s = lora_scale_f(lo);
    dmod m;
    for (int i = 0; i < d->L * SKPO_LORA_NT; i++) {
        if (!dmod_at(lo, d, i, &m) || !m.dA) continue;
        for (size_t j = 0; j < m.na; j++) m.dA[j] += d->hg[m.off + j];
        for (size_t j = 0; j < m.nb; j++) m.dB[j] += s * d->hg[m.off + m.na + j];
    }
    return SKPO_OK;
}
#endif
