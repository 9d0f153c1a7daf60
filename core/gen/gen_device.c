/*
 * gen_device.c - the engine's device sampler (generate.h, skpo_gen_dev) for a
 * model on CUDA: the step leaves the logits on the device
 * (skpo_model_step_dev) and skpo_cuda_sample draws on the model's stream, so
 * only B coins go up and B tokens + log-probs come back per step instead of
 * B x vocab floats. The copies are asynchronous through pinned buffers and the
 * draw ends in the step's one host synchronisation (the step itself never
 * waits: model_cuda.c). Uses skpo_model_cuda_ctx (model/model.h) for the
 * model's device context and stream.
 */
#include "gen/generate.h"
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

#ifdef SKPO_HAVE_CUDA
#include "cuda/cuda.h"
#include "cuda/cuda_infer.h"

typedef struct gen_dev {
    skpo_gen_dev pub;       // first: the engine's view
    skpo_model *m;
    int max_rows, vocab;
    const float *logits;    // device (nrows, vocab) of the last step
    int nrows;
    float *d_coin, *d_logp; // device (max_rows)
    int32_t *d_tok;
    float *h_coin, *h_logp; // pinned host (max_rows)
    int32_t *h_tok;
} gen_dev;

static skpo_status dev_step(void *ctx, skpo_kv *kv, const int *seq, int nseq, const int32_t *toks, const int *off,
                            skpo_err *err) {
    gen_dev *d = ctx;
    if (nseq > d->max_rows)
        return skpo_err_set(err, SKPO_ERANGE, "device sampler: %d rows in a step, built for %d", nseq, d->max_rows);
    d->logits = NULL;
    skpo_status s = skpo_model_step_dev(d->m, kv, seq, nseq, toks, off, &d->logits, err);
    d->nrows = s == SKPO_OK ? nseq : 0;
    return s;
}

static skpo_status dev_sample(void *ctx, int nrows, const skpo_sample_params *p, const double *coin, int32_t *tok,
                              float *logp, skpo_err *err) {
    gen_dev *d = ctx;
    SKPO_ASSERT(nrows <= d->nrows && d->logits);
    skpo_cuda *cu = skpo_model_cuda_ctx(d->m);
    // h_coin is free: the previous draw synchronised after its upload.
    for (int r = 0; r < nrows; r++) d->h_coin[r] = (float)coin[r];
    skpo_status s = skpo_cuda_h2d_async(cu, d->d_coin, d->h_coin, (size_t)nrows * sizeof(float), err);
    if (s == SKPO_OK)
        s = skpo_cuda_sample(cu, d->d_tok, d->d_logp, d->logits, nrows, d->vocab, (float)p->temperature, p->top_k,
                             (float)p->top_p, d->d_coin, err);
    if (s == SKPO_OK) s = skpo_cuda_d2h_async(cu, d->h_tok, d->d_tok, (size_t)nrows * sizeof *tok, err);
    if (s == SKPO_OK) s = skpo_cuda_d2h_async(cu, d->h_logp, d->d_logp, (size_t)nrows * sizeof *logp, err);
    if (s == SKPO_OK) s = skpo_cuda_sync(cu, err);   // the step's one host synchronisation
    if (s == SKPO_OK) {
        memcpy(tok, d->h_tok, (size_t)nrows * sizeof *tok);
        memcpy(logp, d->h_logp, (size_t)nrows * sizeof *logp);
    }
    return s;
}

static skpo_status dev_row(void *ctx, int r, float *dst, skpo_err *err) {
    gen_dev *d = ctx;
    SKPO_ASSERT(r >= 0 && r < d->nrows && d->logits);
    return skpo_cuda_d2h(skpo_model_cuda_ctx(d->m), dst, d->logits + (size_t)r * d->vocab, (size_t)d->vocab * sizeof *dst,
                         err);
}

skpo_gen_dev *skpo_gen_dev_new(struct skpo_model *m, int max_rows, skpo_err *err) {
    SKPO_ASSERT(m && max_rows >= 1);
    skpo_cuda *cu = skpo_model_cuda_ctx(m);
    if (skpo_model_device(m) != SKPO_DEV_CUDA || !cu) {
        skpo_err_set(err, SKPO_EUNSUPPORTED, "device sampling needs a model on cuda");
        return NULL;
    }
    gen_dev *d = skpo_xcalloc(1, sizeof *d);
    d->m = m;
    d->max_rows = max_rows;
    d->vocab = skpo_model_config(m)->vocab_size;
    size_t b = (size_t)max_rows * 4;
    if (skpo_cuda_host_alloc((void **)&d->h_coin, b, err) != SKPO_OK ||
        skpo_cuda_host_alloc((void **)&d->h_logp, b, err) != SKPO_OK ||
        skpo_cuda_host_alloc((void **)&d->h_tok, b, err) != SKPO_OK ||
        skpo_cuda_malloc(cu, (void **)&d->d_coin, b, "sampler coins", err) != SKPO_OK ||
        skpo_cuda_malloc(cu, (void **)&d->d_logp, b, "sampled log-probs", err) != SKPO_OK ||
        skpo_cuda_malloc(cu, (void **)&d->d_tok, b, "sampled tokens", err) != SKPO_OK) {
        skpo_gen_dev_free(&d->pub);
        return NULL;
    }
    d->pub = (skpo_gen_dev){.ctx = d, .step = dev_step, .sample = dev_sample, .row = dev_row};
    return &d->pub;
}

void skpo_gen_dev_free(skpo_gen_dev *pub) {
    if (!pub) return;
    gen_dev *d = (gen_dev *)pub;
    skpo_cuda_dfree(d->d_coin);
    skpo_cuda_dfree(d->d_logp);
    skpo_cuda_dfree(d->d_tok);
    skpo_cuda_host_free(d->h_coin);
    skpo_cuda_host_free(d->h_logp);
    skpo_cuda_host_free(d->h_tok);
    free(d);
}

#else

skpo_gen_dev *skpo_gen_dev_new(struct skpo_model *m, int max_rows, skpo_err *err) {
    skpo_err_set(err, SKPO_EUNSUPPORTED, "device sampling needs a CUDA build (this one has no nvcc)");
    return NULL;
}
void skpo_gen_dev_free(skpo_gen_dev *d) { (void)d; }

#endif
