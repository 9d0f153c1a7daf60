/*
 * test_sampler_model.c - the engine on a real (tiny, random) Qwen2 checkpoint:
 * greedy decoding equals recomputation from scratch, behaviour log-probs equal
 * the scorer's, prefix sharing and batching do not change tokens, and forked
 * samples hold one copy of the prompt in the KV cache.
 * Fixture: tests/fixtures/sample/tiny-qwen2 (2 layers, hidden 64, vocab 300,
 * 128 positions; a copy of the model tests' qwen2_untied checkpoint).
 * Tolerance: 1e-4 on log-probs (float32 batched vs single-sequence sums).
 */
#include "gen/generate.h"
#include "fixture_model.h"
#include "harness.h"
#include "model/model.h"
#include "base/rng.h"

#include <stdlib.h>
#include <string.h>

static skpo_model *load(void) { return fixture_model_load("sample/tiny-qwen2"); }

typedef struct run {
    skpo_kv *kv;
    skpo_gen *g;
    skpo_gen_group **out;
    size_t peak;
} run;

static const int32_t EOS_NONE[1] = {-1};

// ng prompts (lengths 5, 18, 31, ...) x G samples of up to max_new tokens.
static int prompt_of(int k, int32_t *p) {
    int n = 5 + 13 * k;
    for (int i = 0; i < n; i++) p[i] = (int32_t)((k * 37 + i * 11 + 3) % 300);
    return n;
}

static void run_engine(skpo_model *m, run *r, int batch, int share, int ng, int G, int max_new, skpo_sample_params sp,
                       const int32_t *eos, int n_eos) {
    memset(r, 0, sizeof *r);
    r->kv = skpo_model_kv_new(m, 4096, 2 * batch + 1, NULL);
    skpo_gen_opts o = {.step = skpo_gen_model_step, .step_ctx = m, .kv = r->kv, .vocab = 300, .max_batch = batch,
                       .step_tokens = 64, .share_prefix = share, .ctx_limit = 128, .sample = sp, .eos = eos,
                       .n_eos = n_eos};
    r->g = skpo_gen_new(&o);
    r->out = skpo_xcalloc((size_t)ng, sizeof *r->out);
    for (int k = 0; k < ng; k++) {
        int32_t p[128];
        uint64_t seeds[16];
        for (int i = 0; i < G; i++) seeds[i] = skpo_seed_derive(5, "m", (uint64_t)(k * 16 + i));
        skpo_gen_req q = {.prompt = p, .n_prompt = prompt_of(k, p), .n = G, .max_new = max_new, .seeds = seeds};
        CHECK(skpo_gen_submit(r->g, &q, NULL) == SKPO_OK);
    }
    skpo_err err = {0};
    CHECK_MSG(skpo_gen_run(r->g, &err) == SKPO_OK, "%s", err.msg);
    for (int k = 0; k < ng; k++) {
        r->out[k] = skpo_gen_pop(r->g);
        CHECK(r->out[k] != NULL);
    }
    r->peak = skpo_gen_get_stats(r->g)->peak_blocks;
}

static void run_free(run *r, int ng) {
    for (int k = 0; k < ng; k++) skpo_gen_group_free(r->out[k]);
    free(r->out);
    skpo_gen_free(r->g);
    CHECK(skpo_kv_blocks_used(r->kv) == 0);
    skpo_kv_free(r->kv);
}

// Logits after ids[0..n) from a fresh cache: one prefill, no reuse.
static void fresh_logits(skpo_model *m, const int32_t *ids, int n, float *logits) {
    skpo_kv *kv = skpo_model_kv_new(m, 256, 1, NULL);
    int s = skpo_kv_seq_new(kv), off[2] = {0, n};
    skpo_err err = {0};
    CHECK_MSG(skpo_model_step(m, kv, &s, 1, ids, off, logits, &err) == SKPO_OK, "%s", err.msg);
    skpo_kv_free(kv);
}

static void greedy_equals_recomputation_without_cache(void) {
    skpo_model *m = load();
    if (!m) { CHECK(0); return; }
    skpo_sample_params g0 = {0, 1, 0};
    run r;
    enum { NG = 3, G = 2, M = 24 };
    run_engine(m, &r, 4, 1, NG, G, M, g0, EOS_NONE, 0);
    float logits[300];
    for (int k = 0; k < NG; k++)
        for (int i = 0; i < G; i++) {
            skpo_gen_sample *s = &r.out[k]->s[i];
            CHECK(s->n == M);
            int32_t h[128];
            int n = prompt_of(k, h);
            for (int t = 0; t < s->n; t++) {
                fresh_logits(m, h, n, logits);
                int best = 0;
                for (int v = 1; v < 300; v++) if (logits[v] > logits[best]) best = v;
                // A near-tie may flip under float32 reassociation; anything else is a bug.
                CHECK_MSG(best == s->tokens[t] || logits[best] - logits[s->tokens[t]] < 1e-5,
                          "prompt %d sample %d step %d: %d vs %d", k, i, t, best, s->tokens[t]);
                CHECK_NEAR(s->logp[t], skpo_sample_logprob(logits, 300, 1.0, s->tokens[t]), 1e-4);
                h[n++] = s->tokens[t];
            }
        }
    run_free(&r, NG);
    skpo_model_free(m);
}

static void sampled_logp_equals_scorer_logprobs(void) {
    skpo_model *m = load();
    if (!m) { CHECK(0); return; }
    skpo_sample_params sp = {0.8, 1, 0};
    run r;
    run_engine(m, &r, 8, 1, 2, 3, 30, sp, EOS_NONE, 0);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 3; i++) {
            skpo_gen_sample *s = &r.out[k]->s[i];
            int32_t ids[128];
            int n = prompt_of(k, ids);
            memcpy(ids + n, s->tokens, (size_t)s->n * sizeof *ids);
            skpo_seq q = {.ids = ids, .n = n + s->n, .start = n};
            float lp[128];
            CHECK(skpo_model_logprobs(m, &q, 1, 0.8f, lp, NULL, NULL) == SKPO_OK);
            for (int t = 0; t < s->n; t++) CHECK_NEAR(s->logp[t], lp[t], 1e-4);
        }
    run_free(&r, 2);
    skpo_model_free(m);
}

static void sharing_and_batching_give_the_same_samples(void) {
    skpo_model *m = load();
    if (!m) { CHECK(0); return; }
    skpo_sample_params sp = {1.0, 0.95, 50};
    int32_t eos[1] = {2};
    run a, b, c;
    run_engine(m, &a, 8, 1, 4, 4, 40, sp, eos, 1);
    run_engine(m, &b, 8, 0, 4, 4, 40, sp, eos, 1);
    run_engine(m, &c, 1, 1, 4, 4, 40, sp, eos, 1);
    int same = 1;
    double worst = 0;
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 4; i++) {
            skpo_gen_sample *x = &a.out[k]->s[i], *y = &b.out[k]->s[i], *z = &c.out[k]->s[i];
            if (x->n != y->n || x->n != z->n || memcmp(x->tokens, y->tokens, (size_t)x->n * 4) ||
                memcmp(x->tokens, z->tokens, (size_t)x->n * 4)) { same = 0; continue; }
            for (int t = 0; t < x->n; t++) {
                double d1 = fabs(x->logp[t] - y->logp[t]), d2 = fabs(x->logp[t] - z->logp[t]);
                worst = d1 > worst ? d1 : worst;
                worst = d2 > worst ? d2 : worst;
            }
        }
    CHECK(same);
    CHECK_MSG(worst < 1e-4, "logp differs by %g", worst);
    run_free(&a, 4);
    run_free(&b, 4);
    run_free(&c, 4);
    skpo_model_free(m);
}

// G = 8 samples of a 70-token prompt, 10 new tokens each, EOS off.
static void forked_samples_use_one_prefix_plus_g_suffixes(void) {
    skpo_model *m = load();
    if (!m) { CHECK(0); return; }
    skpo_sample_params sp = {1.0, 1, 0};
    size_t peak[2];
    for (int share = 0; share < 2; share++) {
        skpo_kv *kv = skpo_model_kv_new(m, 4096, 17, NULL);
        skpo_gen_opts o = {.step = skpo_gen_model_step, .step_ctx = m, .kv = kv, .vocab = 300, .max_batch = 8,
                           .share_prefix = share, .ctx_limit = 128, .sample = sp};
        skpo_gen *g = skpo_gen_new(&o);
        int32_t p[70];
        uint64_t seeds[8];
        for (int i = 0; i < 70; i++) p[i] = (int32_t)(i * 7 % 300);
        for (int i = 0; i < 8; i++) seeds[i] = (uint64_t)i;
        skpo_gen_req q = {.prompt = p, .n_prompt = 70, .n = 8, .max_new = 10, .seeds = seeds};
        CHECK(skpo_gen_submit(g, &q, NULL) == SKPO_OK);
        CHECK(skpo_gen_run(g, NULL) == SKPO_OK);
        peak[share] = skpo_gen_get_stats(g)->peak_blocks;
        skpo_gen_group_free(skpo_gen_pop(g));
        skpo_gen_free(g);
        skpo_kv_free(kv);
    }
    // 16-position blocks: 79 positions alone = 5 blocks; shared = 4 full prefix
    // blocks + per sample its copy of block 4 (positions 64..79).
    printf("# KV blocks at peak: %zu without sharing, %zu with (8 samples, 70-token prompt)\n", peak[0], peak[1]);
    CHECK(peak[0] == 8 * 5);
    CHECK(peak[1] == 4 + 8 * 1);
    skpo_model_free(m);
}

int main(void) {
    RUN(greedy_equals_recomputation_without_cache);
    RUN(sampled_logp_equals_scorer_logprobs);
    RUN(sharing_and_batching_give_the_same_samples);
    RUN(forked_samples_use_one_prefix_plus_g_suffixes);
    return TEST_SUMMARY();
}
