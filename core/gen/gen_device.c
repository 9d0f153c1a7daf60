/*
 * gen_device.c - the engine's device sampler (generate.h, skpo_gen_dev) over
 * any backend that has one (model.h skpo_model_sampler_*: the CUDA backend's
 * draws on the model's stream): the step leaves the logits on the device
 * (skpo_model_step_dev) and the backend draws there. Names no device: a
 * backend without a sampler (the CPU) makes skpo_gen_dev_new fail with
 * SKPO_EUNSUPPORTED, and the engine samples host logits.
 */
#include "gen/generate.h"
#include "model/model.h"

#include <stdlib.h>

typedef struct gen_dev {
    skpo_gen_dev pub;           // first: the engine's view
    skpo_model *m;
    skpo_model_sampler *s;
    int max_rows;
    const float *logits;        // device (nrows, vocab) of the last step
    int nrows;
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
    skpo_model_draw dp = {.temperature = p->temperature, .top_p = p->top_p, .top_k = p->top_k};
    return skpo_model_sampler_draw(d->s, d->logits, nrows, &dp, coin, tok, logp, err);
}

static skpo_status dev_row(void *ctx, int r, float *dst, skpo_err *err) {
    gen_dev *d = ctx;
    SKPO_ASSERT(r >= 0 && r < d->nrows && d->logits);
    return skpo_model_sampler_row(d->s, d->logits, r, dst, err);
}

skpo_gen_dev *skpo_gen_dev_new(struct skpo_model *m, int max_rows, skpo_err *err) {
    SKPO_ASSERT(m && max_rows >= 1);
    skpo_model_sampler *s;
    if (skpo_model_sampler_new(m, max_rows, &s, err) != SKPO_OK) return NULL;
    gen_dev *d = skpo_xcalloc(1, sizeof *d);
    d->m = m;
    d->s = s;
    d->max_rows = max_rows;
    d->pub = (skpo_gen_dev){.ctx = d, .step = dev_step, .sample = dev_sample, .row = dev_row};
    return &d->pub;
}

void skpo_gen_dev_free(skpo_gen_dev *pub) {
    if (!pub) return;
    gen_dev *d = (gen_dev *)pub;
    skpo_model_sampler_free(d->s);
    free(d);
}
