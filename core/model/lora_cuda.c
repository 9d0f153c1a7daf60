/*
 * lora_cuda.c - the adapter's device copy for a model on CUDA (lora.h, "the
 * CUDA path"): cuBLAS GEMMs through cuda.h / cuda_train.h, no kernels of its
 * own. Per targeted projection, with u = x A^T (N, r) in bf16:
 *   forward   y += u (s B)^T
 *   backward  u recomputed; du = dy (s B) (N, r); dx += du A;
 *             dA += du^T x; d(sB) += dy^T u, so dB = s d(sB) (applied when
 *             the gradients go to the host).
 * The optimizer stays on the host (the adapter is small): gradients go to the
 * host after every backward, weights come back before every pass.
 * In builds without CUDA every entry point fails with SKPO_EUNSUPPORTED.
 */
#include "model/model_impl.h"

#include <stdlib.h>
#include <string.h>

#ifndef SKPO_HAVE_CUDA

#define NOCUDA(err) skpo_err_set((err), SKPO_EUNSUPPORTED, "this build has no CUDA (rebuild with nvcc on the PATH)")
void lora_cuda_free(void *dev) { (void)dev; }
skpo_status skpo_lora_cuda_sync(skpo_lora *lo, struct skpo_cuda *cu, int N, skpo_err *err) { return NOCUDA(err); }
skpo_status skpo_lora_cuda_fwd(skpo_lora *lo, struct skpo_cuda *cu, int l, int t, uint16_t *y, const uint16_t *x,
                               int N, skpo_err *err) { return NOCUDA(err); }
skpo_status skpo_lora_cuda_bwd(skpo_lora *lo, struct skpo_cuda *cu, int l, int t, uint16_t *dx, const uint16_t *dy,
                               const uint16_t *x, int N, skpo_err *err) { return NOCUDA(err); }
skpo_status skpo_lora_cuda_grads_to_host(skpo_lora *lo, struct skpo_cuda *cu, skpo_err *err) { return NOCUDA(err); }

#else
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

void lora_cuda_free(void *p) {
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
    void **slot = lora_dev_slot(lo);
    if (*slot) {
        *out = *slot;
        return SKPO_OK;
    }
    lora_dev *d = skpo_xcalloc(1, sizeof *d);
    d->L = lora_layers(lo);
    d->r = skpo_lora_get_cfg(lo)->rank;
    d->off = skpo_xcalloc((size_t)d->L * SKPO_LORA_NT, sizeof *d->off);
    for (int l = 0; l < d->L; l++)
        for (int t = 0; t < SKPO_LORA_NT; t++) {
            const float *A, *B;
            float *dA, *dB;
            int K, O;
            lora_mod_get(lo, l, t, &A, &B, &dA, &dB, &K, &O);
            d->off[l * SKPO_LORA_NT + t] = d->numel;
            if (A) d->numel += (size_t)d->r * (size_t)(K + O);
        }
    d->hw = skpo_xmalloc(d->numel * sizeof *d->hw);
    d->hg = skpo_xmalloc(d->numel * sizeof *d->hg);
    skpo_status s = skpo_cuda_malloc(cu, (void **)&d->w, d->numel * 2, "LoRA adapter", err);
    if (!s) s = skpo_cuda_malloc(cu, (void **)&d->g, d->numel * 4, "LoRA gradients", err);
    if (!s) s = skpo_cuda_memset0(cu, d->g, d->numel * 4, err);
    if (s) {
        lora_cuda_free(d);
        return s;
    }
    *slot = d;
    *out = d;
    return SKPO_OK;
}

skpo_status skpo_lora_cuda_sync(skpo_lora *lo, struct skpo_cuda *cu, int N, skpo_err *err) {
    lora_dev *d;
    TRY(dev_of(lo, cu, &d, err));
    float s = lora_scale_f(lo);
    for (int l = 0; l < d->L; l++)
        for (int t = 0; t < SKPO_LORA_NT; t++) {
            const float *A, *B;
            float *dA, *dB;
            int K, O;
            lora_mod_get(lo, l, t, &A, &B, &dA, &dB, &K, &O);
            if (!A) continue;
            size_t o = d->off[l * SKPO_LORA_NT + t], na = (size_t)d->r * K, nb = (size_t)d->r * O;
            skpo_f32_to_bf16_host(d->hw + o, A, na);
            for (size_t i = 0; i < nb; i++) d->hg[i] = s * B[i];   // hg as scratch for s B
            skpo_f32_to_bf16_host(d->hw + o + na, d->hg, nb);
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

// Module (l, t) on the device: A, sB, dA, d(sB); 0 when not adapted.
static int mod(skpo_lora *lo, lora_dev *d, int l, int t, skpo_bf16 **A, skpo_bf16 **sB, float **gA, float **gB, int *K,
               int *O) {
    const float *hA, *hB;
    float *dA, *dB;
    lora_mod_get(lo, l, t, &hA, &hB, &dA, &dB, K, O);
    if (!hA) return 0;
    size_t o = d->off[l * SKPO_LORA_NT + t], na = (size_t)d->r * *K;
    *A = d->w + o, *sB = d->w + o + na, *gA = d->g + o, *gB = d->g + o + na;
    return 1;
}

static skpo_status ready(skpo_lora *lo, int N, lora_dev **d, skpo_err *err) {
    *d = *lora_dev_slot(lo);
    if (!*d || N > (*d)->cap)
        return skpo_err_set(err, SKPO_EUNSUPPORTED, "LoRA on cuda: skpo_lora_cuda_sync not called for %d rows", N);
    return SKPO_OK;
}

skpo_status skpo_lora_cuda_fwd(skpo_lora *lo, struct skpo_cuda *cu, int l, int t, uint16_t *y, const uint16_t *x,
                               int N, skpo_err *err) {
    lora_dev *d;
    skpo_bf16 *A, *sB;
    float *gA, *gB;
    int K, O;
    TRY(ready(lo, N, &d, err));
    if (N <= 0 || !mod(lo, d, l, t, &A, &sB, &gA, &gB, &K, &O)) return SKPO_OK;
    TRY(skpo_cuda_linear(cu, d->u, x, A, NULL, N, K, d->r, 0.f, err));     // u = x A^T
    return skpo_cuda_linear(cu, y, d->u, sB, NULL, N, d->r, O, 1.f, err);  // y += u (sB)^T
}

skpo_status skpo_lora_cuda_bwd(skpo_lora *lo, struct skpo_cuda *cu, int l, int t, uint16_t *dx, const uint16_t *dy,
                               const uint16_t *x, int N, skpo_err *err) {
    lora_dev *d;
    skpo_bf16 *A, *sB;
    float *gA, *gB;
    int K, O;
    TRY(ready(lo, N, &d, err));
    if (N <= 0 || !mod(lo, d, l, t, &A, &sB, &gA, &gB, &K, &O)) return SKPO_OK;
    TRY(skpo_cuda_linear(cu, d->u, x, A, NULL, N, K, d->r, 0.f, err));                 // u recomputed
    TRY(skpo_cuda_linear_backward(cu, d->du, gB, NULL, dy, d->u, sB, N, d->r, O, err)); // du = dy sB; d(sB) += dy^T u
    TRY(skpo_cuda_linear_backward(cu, NULL, gA, NULL, d->du, x, A, N, K, d->r, err));   // dA += du^T x
    return skpo_cuda_linear_dx(cu, dx, d->du, A, N, K, d->r, 1.f, err);                 // dx += du A
}

skpo_status skpo_lora_cuda_grads_to_host(skpo_lora *lo, struct skpo_cuda *cu, skpo_err *err) {
    lora_dev *d = *lora_dev_slot(lo);
    if (!d) return SKPO_OK;
    TRY(skpo_cuda_d2h(cu, d->hg, d->g, d->numel * 4, err));
    TRY(skpo_cuda_memset0(cu, d->g, d->numel * 4, err));
    float s = lora_scale_f(lo);
    for (int l = 0; l < d->L; l++)
        for (int t = 0; t < SKPO_LORA_NT; t++) {
            const float *A, *B;
            float *dA, *dB;
            int K, O;
            lora_mod_get(lo, l, t, &A, &B, &dA, &dB, &K, &O);
            if (!A || !dA) continue;
            size_t o = d->off[l * SKPO_LORA_NT + t], na = (size_t)d->r * K, nb = (size_t)d->r * O;
            for (size_t i = 0; i < na; i++) dA[i] += d->hg[o + i];
            for (size_t i = 0; i < nb; i++) dB[i] += s * d->hg[o + na + i];
        }
    return SKPO_OK;
}
#endif
