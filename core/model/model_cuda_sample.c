/*
 * model_cuda_sample.c - the CUDA backend's device sampler (model_impl.h slots
 * sampler_*; model.h skpo_model_sampler_*): skpo_cuda_sample on the model's
 * stream over the logits model_cuda_step left on the device, so only B coins
 * go up and B tokens + log-probs come back per step instead of B x vocab
 * floats. The copies are asynchronous through pinned buffers and the draw ends
 * in the step's one host synchronisation (the step itself never waits:
 * model_cuda.c). Host code only, like the rest of the backend.
 */
#include "model/model_impl.h"

#include <stdlib.h>
#include <string.h>

#ifdef SKPO_HAVE_CUDA  // a CPU-only build has no CUDA backend (backends.c does not list one)

#include "cuda/cuda.h"
#include "cuda/cuda_infer.h"

typedef struct cuda_sampler {
    skpo_cuda *cu;          // the model's context and stream
    int max_rows, vocab;
    float *d_coin, *d_logp; // device (max_rows)
    int32_t *d_tok;
    float *h_coin, *h_logp; // pinned host (max_rows)
    int32_t *h_tok;
} cuda_sampler;

void model_cuda_sampler_free(void *p) {
    cuda_sampler *d = p;
    if (!d) return;
    skpo_cuda_dfree(d->d_coin);
    skpo_cuda_dfree(d->d_logp);
    skpo_cuda_dfree(d->d_tok);
    skpo_cuda_host_free(d->h_coin);
    skpo_cuda_host_free(d->h_logp);
    skpo_cuda_host_free(d->h_tok);
    free(d);
}

skpo_status model_cuda_sampler_new(skpo_model *m, int max_rows, void **out, skpo_err *err) {
    SKPO_ASSERT(m && max_rows >= 1);
    *out = NULL;
    skpo_cuda *cu = model_cuda_ctx(m);
    if (!cu) return skpo_err_set(err, SKPO_EUNSUPPORTED, "device sampling needs a model on cuda");
    cuda_sampler *d = skpo_xcalloc(1, sizeof *d);
    d->cu = cu;
    d->max_rows = max_rows;
    d->vocab = m->c.vocab_size;
    size_t b = (size_t)max_rows * 4;
    skpo_status st;
    if ((st = skpo_cuda_host_alloc((void **)&d->h_coin, b, err)) != SKPO_OK ||
        (st = skpo_cuda_host_alloc((void **)&d->h_logp, b, err)) != SKPO_OK ||
        (st = skpo_cuda_host_alloc((void **)&d->h_tok, b, err)) != SKPO_OK ||
        (st = skpo_cuda_malloc(cu, (void **)&d->d_coin, b, "sampler coins", err)) != SKPO_OK ||
        (st = skpo_cuda_malloc(cu, (void **)&d->d_logp, b, "sampled log-probs", err)) != SKPO_OK ||
        (st = skpo_cuda_malloc(cu, (void **)&d->d_tok, b, "sampled tokens", err)) != SKPO_OK) {
        model_cuda_sampler_free(d);
        return st;
    }
    *out = d;
    return SKPO_OK;
}

skpo_status model_cuda_sampler_draw(void *p, const float *logits, int nrows, const skpo_model_draw *sp,
                                    const double *coin, int32_t *tok, float *logp, skpo_err *err) {
    cuda_sampler *d = p;
    if (nrows > d->max_rows)
        return skpo_err_set(err, SKPO_ERANGE, "device sampler: %d rows in a step, built for %d", nrows, d->max_rows);
    // h_coin is free: the previous draw synchronised after its upload.
    for (int r = 0; r < nrows; r++) d->h_coin[r] = (float)coin[r];
    skpo_status s = skpo_cuda_h2d_async(d->cu, d->d_coin, d->h_coin, (size_t)nrows * sizeof(float), err);
    if (s == SKPO_OK)
        s = skpo_cuda_sample(d->cu, d->d_tok, d->d_logp, logits, nrows, d->vocab, (float)sp->temperature, sp->top_k,
                             (float)sp->top_p, d->d_coin, err);
    if (s == SKPO_OK) s = skpo_cuda_d2h_async(d->cu, d->h_tok, d->d_tok, (size_t)nrows * sizeof *tok, err);
    if (s == SKPO_OK) s = skpo_cuda_d2h_async(d->cu, d->h_logp, d->d_logp, (size_t)nrows * sizeof *logp, err);
    if (s == SKPO_OK) s = skpo_cuda_sync(d->cu, err);   // the step's one host synchronisation
    if (s == SKPO_OK) {
        memcpy(tok, d->h_tok, (size_t)nrows * sizeof *tok);
        memcpy(logp, d->h_logp, (size_t)nrows * sizeof *logp);
    }
    return s;
}

skpo_status model_cuda_sampler_row(void *p, const float *logits, int r, float *dst, skpo_err *err) {
    cuda_sampler *d = p;
    return skpo_cuda_d2h(d->cu, dst, logits + (size_t)r * d->vocab, (size_t)d->vocab * sizeof *dst, err);
}

#endif /* SKPO_HAVE_CUDA */
