/*
 * test_gen_dev.c - the engine's device-sampler path (generate.h,
 * skpo_gen_dev) without a GPU: a stand-in "device" that keeps the logits of
 * the last step in its own buffer and samples them with the CPU sampler. The
 * engine must then give byte-identical tokens and log-probs to its host path
 * (same coins, drawn from each sample's generator in the same order; a
 * shared-prefix parent's logits fetched through row()), with and without
 * prefix sharing, with prefill chunks that end mid-prompt, and must report a
 * NaN row as SKPO_ENUMERIC and a failing device call as its error.
 * Model: the tiny Qwen2 fixture of test_sampler_model (tests/fixtures/sample).
 */
#include "gen/generate.h"
#include "fixture_model.h"
#include "harness.h"
#include "model/model.h"
#include "base/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { V = 300 };

typedef struct fake_dev {
    skpo_gen_dev pub;
    skpo_model *m;
    float *logits;          // (cap, V) the "device" buffer of the last step
    int nrows, cap;
    int poison_row;         // >= 0: that row of every step becomes NaN
    int fail_sample;        // the sample call fails
    int rows_fetched, sample_calls;
} fake_dev;

static skpo_status fd_step(void *ctx, skpo_kv *kv, const int *seq, int nseq, const int32_t *toks, const int *off,
                           skpo_err *err) {
    fake_dev *d = ctx;
    SKPO_ASSERT(nseq <= d->cap);
    d->nrows = nseq;
    skpo_status s = skpo_model_step(d->m, kv, seq, nseq, toks, off, d->logits, err);
    if (s == SKPO_OK && d->poison_row >= 0 && d->poison_row < nseq) d->logits[(size_t)d->poison_row * V + 7] = NAN;
    return s;
}
static skpo_status fd_sample(void *ctx, int nrows, const skpo_sample_params *p, const double *coin, int32_t *tok,
                             float *logp, skpo_err *err) {
    fake_dev *d = ctx;
    d->sample_calls++;
    if (d->fail_sample) return skpo_err_set(err, SKPO_EDEVICE, "fake device lost");
    CHECK(nrows == d->nrows);
    skpo_sampler s;
    skpo_sampler_init(&s, V);
    for (int r = 0; r < nrows; r++) {
        CHECK(coin[r] >= 0 && coin[r] < 1);
        tok[r] = skpo_sample(&s, d->logits + (size_t)r * V, p, coin[r], &logp[r]);
    }
    skpo_sampler_destroy(&s);
    return SKPO_OK;
}
static skpo_status fd_row(void *ctx, int r, float *dst, skpo_err *err) {
    fake_dev *d = ctx;
    CHECK(r >= 0 && r < d->nrows);
    d->rows_fetched++;
    memcpy(dst, d->logits + (size_t)r * V, V * sizeof *dst);
    return SKPO_OK;
}

static skpo_model *load(void) { return fixture_model_load("sample/tiny-qwen2"); }

// 3 prompts x 4 samples, 12 new tokens, batch 5, 16 tokens per call (prompts of
// 5, 18, 31 tokens prefill in several chunks). Returns the status of the run;
// out[k] the groups.
static skpo_status run(skpo_model *m, fake_dev *d, int share, skpo_sample_params sp, skpo_gen_group **out,
                       skpo_err *err) {
    enum { B = 5 };
    skpo_kv *kv = skpo_model_kv_new(m, 4096, 2 * B + 1, NULL);
    int32_t eos = -1;
    skpo_gen_opts o = {.step = skpo_gen_model_step, .step_ctx = m, .kv = kv, .vocab = V, .max_batch = B,
                       .step_tokens = 16, .share_prefix = share, .ctx_limit = 128, .sample = sp, .eos = &eos,
                       .n_eos = 1, .dev = d ? &d->pub : NULL};
    skpo_gen *g = skpo_gen_new(&o);
    for (int k = 0; k < 3; k++) {
        int32_t p[64];
        int n = 5 + 13 * k;
        for (int i = 0; i < n; i++) p[i] = (int32_t)((k * 37 + i * 11 + 3) % V);
        uint64_t seeds[4];
        for (int i = 0; i < 4; i++) seeds[i] = skpo_seed_derive(9, "d", (uint64_t)(k * 4 + i));
        skpo_gen_req q = {.prompt = p, .n_prompt = n, .n = 4, .max_new = 12, .seeds = seeds};
        SKPO_ASSERT(skpo_gen_submit(g, &q, NULL) == SKPO_OK);
    }
    skpo_status st = skpo_gen_run(g, err);
    for (int k = 0; k < 3; k++) out[k] = st == SKPO_OK ? skpo_gen_pop(g) : NULL;
    skpo_gen_free(g);
    skpo_kv_free(kv);
    return st;
}

static void fake_init(fake_dev *d, skpo_model *m) {
    memset(d, 0, sizeof *d);
    d->m = m;
    d->cap = 5;
    d->logits = skpo_xmalloc((size_t)d->cap * V * sizeof *d->logits);
    d->poison_row = -1;
    d->pub = (skpo_gen_dev){.ctx = d, .step = fd_step, .sample = fd_sample, .row = fd_row};
}

static void device_path_gives_the_host_paths_tokens_and_logprobs(void) {
    skpo_model *m = load();
    CHECK(m != NULL);
    if (!m) return;
    skpo_sample_params sps[2] = {{1.0, 0.9, 0}, {0.7, 1.0, 20}};
    for (int share = 0; share < 2; share++)
        for (int k = 0; k < 2; k++) {
            fake_dev d;
            fake_init(&d, m);
            skpo_gen_group *a[3], *b[3];
            skpo_err e = {0};
            CHECK(run(m, NULL, share, sps[k], a, &e) == SKPO_OK);
            CHECK_MSG(run(m, &d, share, sps[k], b, &e) == SKPO_OK, "%s", e.msg);
            CHECK(d.sample_calls > 0);
            CHECK(share ? d.rows_fetched == 3 : d.rows_fetched == 0);
            for (int g = 0; g < 3; g++) {
                if (!a[g] || !b[g]) { CHECK(0); continue; }
                for (int i = 0; i < 4; i++) {
                    skpo_gen_sample *x = &a[g]->s[i], *y = &b[g]->s[i];
                    CHECK(x->n == y->n && x->n == 12 && x->seed == y->seed);
                    CHECK(!memcmp(x->tokens, y->tokens, (size_t)x->n * sizeof *x->tokens));
                    CHECK(!memcmp(x->logp, y->logp, (size_t)x->n * sizeof *x->logp));
                }
                skpo_gen_group_free(a[g]);
                skpo_gen_group_free(b[g]);
            }
            free(d.logits);
        }
    skpo_model_free(m);
}

static void device_nan_row_and_device_errors_stop_the_engine(void) {
    skpo_model *m = load();
    CHECK(m != NULL);
    if (!m) return;
    skpo_sample_params sp = {1.0, 1.0, 0};
    skpo_gen_group *out[3];
    skpo_err e = {0};
    fake_dev d;
    fake_init(&d, m);
    d.poison_row = 0;
    CHECK(run(m, &d, 0, sp, out, &e) == SKPO_ENUMERIC);
    CHECK(strstr(e.msg, "NaN") != NULL);
    d.poison_row = -1;
    d.fail_sample = 1;
    CHECK(run(m, &d, 0, sp, out, &e) == SKPO_EDEVICE);
    CHECK(strstr(e.msg, "fake device lost") != NULL);
    free(d.logits);
    skpo_model_free(m);
}

int main(void) {
    RUN(device_path_gives_the_host_paths_tokens_and_logprobs);
    RUN(device_nan_row_and_device_errors_stop_the_engine);
    return TEST_SUMMARY();
}
