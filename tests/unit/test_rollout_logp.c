/*
 * test_rollout_logp.c - on the CPU the trainer's log-probs (scoring, pi_old's
 * recompute, the training forward) equal the sampler's rollout log-probs BIT
 * FOR BIT, whatever the sampler's batch (1, 8 or 64 rows at once), prefix
 * sharing, the scorer's batch and micro-batch split, and the thread count;
 * also for a trainable model holding fp32 masters of a bf16 checkpoint,
 * whose passes compute with the bf16 rounding the samplers read.
 *
 * Models (random, written to a temporary folder): head size 32 (the AVX-512
 * attention path where the CPU has it) stored in bf16, and head size 24 (not
 * a multiple of 16: the portable path everywhere) stored in float32. No
 * tolerance anywhere: memcmp.
 */
#include "base/bf16.h"
#include "base/common.h"
#include "base/config.h"
#include "base/rng.h"
#include "gen/generate.h"
#include "harness.h"
#include "model/model.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { V = 300, NG = 8, G = 8, MAXNEW = 20, MAXLEN = 128 };

static char tmpdir[] = "/tmp/skpo-rollout-XXXXXX";

static void make_config(skpo_config *c, int hidden, int heads) {
    memset(c, 0, sizeof *c);
    const char *js = "{\"model_type\": \"qwen2\", \"vocab_size\": 300, \"hidden_size\": 64, \"intermediate_size\": 96,"
                     " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
                     " \"max_position_embeddings\": 128, \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0,"
                     " \"tie_word_embeddings\": true}";
    skpo_err e = {0};
    if (skpo_config_parse(js, strlen(js), c, &e) != SKPO_OK) skpo_die("config: %s", e.msg);
    c->hidden_size = hidden;
    c->num_attention_heads = heads;
    c->head_dim = hidden / heads;
}

// A random checkpoint in dir/name (dtype), weights large enough that every one matters.
static void make_checkpoint(const char *name, int hidden, int heads, skpo_dtype dt) {
    skpo_config c;
    make_config(&c, hidden, heads);
    skpo_model_opts o = {.device = SKPO_DEV_CPU};
    skpo_model *m;
    skpo_err e = {0};
    if (skpo_model_init_random(&c, &o, 11, 0.08, &m, &e) != SKPO_OK) skpo_die("init: %s", e.msg);
    char *dir = skpo_path_join(tmpdir, name);
    if (mkdir(dir, 0755) != 0 || skpo_model_save(m, dir, dt, 0, &e) != SKPO_OK) skpo_die("save %s: %s", dir, e.msg);
    free(dir);
    skpo_model_free(m);
}

static skpo_model *load(const char *name, int trainable) {
    char *dir = skpo_path_join(tmpdir, name);
    skpo_model_opts o = {.device = SKPO_DEV_CPU, .trainable = trainable};
    skpo_model *m = NULL;
    skpo_err e = {0};
    if (skpo_model_load(dir, &o, &m, &e) != SKPO_OK) fprintf(stderr, "  load %s: %s\n", dir, e.msg);
    free(dir);
    return m;
}

// Prompt k: 6 + 5k tokens; the first 4 tokens are the same for every prompt
// (a shared system-prompt-like head).
static int prompt_of(int k, int32_t *p) {
    int n = 6 + 5 * k;
    for (int i = 0; i < n; i++) p[i] = i < 4 ? (int32_t)(7 + i) : (int32_t)((k * 37 + i * 11 + 3) % V);
    return n;
}

typedef struct rollout {
    int32_t ids[NG * G][MAXLEN];
    int n[NG * G], start[NG * G];
    float logp[NG * G][MAXLEN];
    int total;   // scored tokens
} rollout;

// NG prompts x G samples at `temp`, at most `rows` sequences per decode step.
static void sample(skpo_model *m, int rows, int share, double temp, rollout *ro) {
    skpo_kv *kv = skpo_model_kv_new(m, 8192, 2 * rows + 1, NULL);
    skpo_gen_opts o = {.step = skpo_gen_model_step, .step_ctx = m, .kv = kv, .vocab = V, .max_batch = rows,
                       .step_tokens = 48, .share_prefix = share, .ctx_limit = MAXLEN,
                       .sample = {.temperature = temp, .top_p = 1, .top_k = 0}};
    skpo_gen *g = skpo_gen_new(&o);
    for (int k = 0; k < NG; k++) {
        int32_t p[MAXLEN];
        uint64_t seeds[G];
        for (int i = 0; i < G; i++) seeds[i] = skpo_seed_derive(9, "r", (uint64_t)(k * G + i));
        skpo_gen_req q = {.prompt = p, .n_prompt = prompt_of(k, p), .n = G, .max_new = MAXNEW, .seeds = seeds};
        CHECK(skpo_gen_submit(g, &q, NULL) == SKPO_OK);
    }
    skpo_err err = {0};
    CHECK_MSG(skpo_gen_run(g, &err) == SKPO_OK, "%s", err.msg);
    ro->total = 0;
    for (int k = 0; k < NG; k++) {
        skpo_gen_group *gr = skpo_gen_pop(g);
        for (int i = 0; i < G; i++) {
            int r = k * G + i, np = prompt_of(k, ro->ids[r]);
            const skpo_gen_sample *s = &gr->s[i];
            memcpy(ro->ids[r] + np, s->tokens, (size_t)s->n * sizeof(int32_t));
            memcpy(ro->logp[r], s->logp, (size_t)s->n * sizeof(float));
            ro->n[r] = np + s->n;
            ro->start[r] = np;
            ro->total += s->n;
        }
        skpo_gen_group_free(gr);
    }
    skpo_gen_free(g);
    skpo_kv_free(kv);
}

// Scores every rollout in micro-batches of `micro` sequences (train: the
// training forward) and counts the tokens whose log-prob is not the rollout's bits.
static int score_diffs(skpo_model *m, const rollout *ro, int micro, int train, float temp) {
    skpo_seq seqs[NG * G];
    for (int r = 0; r < NG * G; r++) seqs[r] = (skpo_seq){.ids = ro->ids[r], .n = ro->n[r], .start = ro->start[r]};
    float *lp = skpo_xmalloc((size_t)ro->total * sizeof(float));
    int diff = 0;
    for (int r0 = 0; r0 < NG * G; r0 += micro) {
        int n = NG * G - r0 < micro ? NG * G - r0 : micro;
        skpo_err e = {0};
        skpo_status st = train ? skpo_model_train_forward(m, seqs + r0, n, temp, lp, NULL, &e)
                               : skpo_model_logprobs(m, seqs + r0, n, temp, lp, NULL, &e);
        CHECK_MSG(st == SKPO_OK, "%s", e.msg);
        if (train && st == SKPO_OK) { // finish the pass as the trainer does (zero loss gradient)
            size_t ns = 0;
            for (int r = r0; r < r0 + n; r++) ns += (size_t)(ro->n[r] - ro->start[r]);
            float *d = skpo_xcalloc(ns ? ns : 1, sizeof *d);
            CHECK(skpo_model_train_backward(m, d, NULL, &e) == SKPO_OK);
            free(d);
        }
        size_t k = 0;
        for (int r = r0; r < r0 + n; r++)
            for (int t = 0; t < ro->n[r] - ro->start[r]; t++, k++) diff += memcmp(&lp[k], &ro->logp[r][t], 4) != 0;
    }
    free(lp);
    return diff;
}

// The sampler at 1, 8 and 64 rows, with and without prefix sharing, against
// the scorer at several micro-batch splits and thread counts.
static void check_model(const char *name, double temp) {
    skpo_model *m = load(name, 0);
    if (!m) { CHECK(0); return; }
    rollout *ro = skpo_xmalloc(sizeof *ro);
    int nt = omp_get_max_threads();
    // scorer layouts: (micro-batch sequences, threads)
    static const int ROWS[] = {1, 8, 64}, LAYOUT[][2] = {{1, 1}, {5, 3}, {64, 2}};
    for (int ri = 0; ri < 3; ri++)
        for (int share = 0; share < 2; share++) {
            sample(m, ROWS[ri], share, temp, ro);
            for (int li = 0; li < 3; li++) {
                omp_set_num_threads(LAYOUT[li][1]);
                int d = score_diffs(m, ro, LAYOUT[li][0], 0, (float)temp);
                CHECK_MSG(d == 0, "%s: %d of %d log-probs differ (sampler rows %d, share %d; scorer micro %d, threads %d)",
                          name, d, ro->total, ROWS[ri], share, LAYOUT[li][0], LAYOUT[li][1]);
            }
            omp_set_num_threads(nt);
        }
    printf("# %s: %d tokens per run, 6 sampler layouts x 3 scorer layouts, all bitwise equal\n", name, ro->total);
    free(ro);
    skpo_model_free(m);
}

static void rollout_logp_equals_scorer_bitwise_bf16_hs32(void) { check_model("hs32_bf16", 1.0); }
static void rollout_logp_equals_scorer_bitwise_f32_hs24(void) { check_model("hs24_f32", 0.7); }

// A trainer continuing from a bf16 checkpoint holds fp32 masters that are not
// bf16 values; its scoring and training passes compute with their bf16
// rounding, which is exactly what a sampler loading the saved checkpoint reads.
static void trainer_masters_compute_with_the_bf16_the_sampler_reads(void) {
    skpo_model *tr = load("hs32_bf16", 1);
    if (!tr) { CHECK(0); return; }
    skpo_param *p;
    int np = skpo_model_params(tr, &p);
    uint64_t s = 5;
    size_t inexact = 0, total = 0;
    for (int i = 0; i < np; i++) // masters a few bf16 ulps away from the stored values
        for (size_t k = 0; k < p[i].numel; k++, total++) {
            p[i].data[k] *= 1.0f + 0.02f * (float)((double)(skpo_splitmix64(&s) >> 11) / 9007199254740992.0 - 0.5);
            inexact += skpo_bf16_round(p[i].data[k]) != p[i].data[k];
        }
    CHECK(inexact > total / 2);
    char *dir = skpo_path_join(tmpdir, "masters_bf16"), *dir32 = skpo_path_join(tmpdir, "masters_f32");
    skpo_err e = {0};
    CHECK(mkdir(dir, 0755) == 0 && skpo_model_save(tr, dir, SKPO_DT_BF16, 0, &e) == SKPO_OK);
    CHECK(mkdir(dir32, 0755) == 0 && skpo_model_save(tr, dir32, SKPO_DT_F32, 0, &e) == SKPO_OK);
    free(dir);
    free(dir32);
    skpo_model *smp = load("masters_bf16", 0), *f32 = load("masters_f32", 0);
    if (!smp || !f32) { CHECK(0); return; }
    rollout *ro = skpo_xmalloc(sizeof *ro);
    sample(smp, 8, 1, 1.0, ro);
    int d_score = score_diffs(tr, ro, 7, 0, 1.0f), d_train = score_diffs(tr, ro, 16, 1, 1.0f);
    CHECK_MSG(d_score == 0 && d_train == 0, "%d (scoring) and %d (training forward) of %d log-probs differ", d_score,
              d_train, ro->total);
    // The rounding is what makes them equal: the fp32 masters themselves give other numbers.
    int d_f32 = score_diffs(f32, ro, 64, 0, 1.0f);
    CHECK_MSG(d_f32 > ro->total / 2, "fp32 masters: only %d of %d differ", d_f32, ro->total);
    printf("# bf16 masters: %d of %d tokens bitwise equal; the fp32 masters would differ on %d\n", ro->total - d_score,
           ro->total, d_f32);
    free(ro);
    skpo_model_free(smp);
    skpo_model_free(f32);
    skpo_model_free(tr);
}

static void cleanup(void) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "  could not remove %s\n", tmpdir);
}

int main(void) {
    if (!mkdtemp(tmpdir)) skpo_die("mkdtemp: %s", tmpdir);
    atexit(cleanup);
    make_checkpoint("hs32_bf16", 128, 4, SKPO_DT_BF16);
    make_checkpoint("hs24_f32", 96, 4, SKPO_DT_F32);
    RUN(rollout_logp_equals_scorer_bitwise_bf16_hs32);
    RUN(rollout_logp_equals_scorer_bitwise_f32_hs24);
    RUN(trainer_masters_compute_with_the_bf16_the_sampler_reads);
    return TEST_SUMMARY();
}
