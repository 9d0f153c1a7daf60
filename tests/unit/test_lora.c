// test_lora.c - LoRA adapters (core/lora.h): PEFT's format both ways against
// the PyTorch/PEFT fixtures of tests/ref/make_lora_fixtures.py (log-probs
// max abs error 1e-4, fp32), the untrained adapter equal to the base bit for
// bit, adapter gradients against central finite differences (relative 2e-2
// of the largest gradient, fp32), no base gradients, merged == low-rank
// greedy decoding, save/load round trip, and the refusals (another base,
// unknown targets, rank 0).
#define _GNU_SOURCE
#include "harness.h"
#include "model/lora.h"
#include "model/safetensors.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *fix(const char *rel) {
    const char *top = getenv("SKPO_TOP");
    char *d = malloc(4096);
    snprintf(d, 4096, "%s/tests/fixtures/%s", top ? top : ".", rel);
    return d;
}

// Sequences and expected log-probs of an expected.safetensors.
typedef struct expect {
    int nseq, S;
    int32_t *ids[64];
    skpo_seq seqs[64];
    float *logp;
} expect;

static int expect_open(expect *x, const char *rel) {
    memset(x, 0, sizeof *x);
    char *p = fix(rel);
    skpo_st *st;
    skpo_err err = {0};
    int ok = skpo_st_open_file(p, &st, &err) == SKPO_OK;
    if (!ok) fprintf(stderr, "  %s\n", err.msg);
    free(p);
    if (!ok) return 0;
    x->logp = malloc(4096 * sizeof(float));
    char name[64];
    for (int i = 0; i < 64; i++) {
        snprintf(name, sizeof name, "seq.%d.ids", i);
        const skpo_st_tensor *t = skpo_st_find(st, name);
        if (!t) break;
        float *f = malloc(t->numel * sizeof(float)), start;
        skpo_st_read_f32(st, name, f, 1, t->shape, &err);
        snprintf(name, sizeof name, "seq.%d.start", i);
        int64_t one = 1;
        skpo_st_read_f32(st, name, &start, 1, &one, &err);
        x->ids[i] = malloc(t->numel * sizeof(int32_t));
        for (size_t k = 0; k < t->numel; k++) x->ids[i][k] = (int32_t)f[k];
        x->seqs[i] = (skpo_seq){x->ids[i], (int)t->numel, (int)start};
        snprintf(name, sizeof name, "seq.%d.logp", i);
        int64_t ns = (int64_t)t->numel - (int64_t)start;
        skpo_st_read_f32(st, name, x->logp + x->S, 1, &ns, &err);
        x->S += (int)ns;
        x->nseq++;
        free(f);
    }
    skpo_st_close(st);
    return x->nseq > 0;
}

static void expect_free(expect *x) {
    for (int i = 0; i < x->nseq; i++) free(x->ids[i]);
    free(x->logp);
}

static double max_err(const float *a, const float *b, int n) {
    double e = 0;
    for (int i = 0; i < n; i++) e = fmax(e, fabs((double)a[i] - b[i]));
    return e;
}

// skpo's log-probs of adapter `rel` (merged, then low-rank) == PEFT's.
static void check_against_peft(const char *adapter_rel, const char *expected_rel) {
    expect x;
    if (!expect_open(&x, expected_rel)) {
        CHECK_MSG(0, "fixture %s missing (python3 tests/ref/make_lora_fixtures.py)", expected_rel);
        return;
    }
    char *ad = fix(adapter_rel);
    float *lp = malloc((size_t)x.S * sizeof(float));
    skpo_err err = {0};
    skpo_model_opts mo = {SKPO_DEV_CPU, 0, 0};
    for (int merge = 1; merge >= 0; merge--) {
        skpo_model *m = NULL;
        skpo_lora *lo = NULL;
        // The adapter folder alone: its base_model_name_or_path is the base.
        skpo_status s = skpo_lora_model_load(ad, NULL, &mo, merge, &m, &lo, &err);
        CHECK_MSG(s == SKPO_OK, "%s", err.msg);
        if (s) break;
        CHECK(skpo_model_logprobs(m, x.seqs, x.nseq, 1.0f, lp, NULL, &err) == SKPO_OK);
        double e = max_err(lp, x.logp, x.S);
        CHECK_MSG(e <= 1e-4, "%s merge=%d: max |logp - PEFT| = %g", adapter_rel, merge, e);
        skpo_model_free(m);
        skpo_lora_free(lo);
    }
    free(lp);
    free(ad);
    expect_free(&x);
}

static void peft_written_adapter_is_read_and_matches_peft_logprobs(void) {
    check_against_peft("lora/peft_adapter", "lora/peft_expected.safetensors");
}

static void skpo_written_adapter_loaded_into_peft_matches_skpo_logprobs(void) {
    check_against_peft("lora/skpo_adapter", "lora/skpo_expected.safetensors");
}

// --- a random tiny model ---------------------------------------------------------------

static skpo_model *tiny(uint64_t seed, int hidden) {
    char json[512];
    snprintf(json, sizeof json,
             "{\"model_type\": \"qwen2\", \"vocab_size\": 40, \"hidden_size\": %d, \"intermediate_size\": 24,"
             " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
             " \"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000,"
             " \"tie_word_embeddings\": true}", hidden);
    skpo_config c;
    skpo_err err = {0};
    if (skpo_config_parse(json, strlen(json), &c, &err)) return NULL;
    skpo_model *m = NULL;
    skpo_model_opts o = {SKPO_DEV_CPU, 0, 0};
    if (skpo_model_init_random(&c, &o, seed, 0.3, &m, &err)) return NULL;
    return m;
}

static void seqs_of(int32_t ids[2][12], skpo_seq s[2]) {
    for (int i = 0; i < 2; i++)
        for (int t = 0; t < 12; t++) ids[i][t] = (int32_t)((7 * t + 13 * i + 3) % 40);
    s[0] = (skpo_seq){ids[0], 12, 4};
    s[1] = (skpo_seq){ids[1], 9, 3};
}

static skpo_lora *fresh(skpo_model *m, int rank, unsigned targets, int trainable) {
    skpo_lora_cfg c;
    skpo_lora_cfg_default(&c);
    c.rank = rank;
    c.alpha = 16;
    c.targets = targets;
    c.seed = 5;
    skpo_lora *lo = NULL;
    skpo_err err = {0};
    if (skpo_lora_new(skpo_model_config(m), &c, trainable, &lo, &err)) fprintf(stderr, "  %s\n", err.msg);
    return lo;
}

static void untrained_adapter_scores_exactly_the_base(void) {
    skpo_model *m = tiny(1, 16);
    skpo_lora *lo = fresh(m, 4, SKPO_LORA_ALL, 0);
    int32_t ids[2][12];
    skpo_seq s[2];
    seqs_of(ids, s);
    float a[32], b[32];
    skpo_err err = {0};
    CHECK(skpo_model_logprobs(m, s, 2, 1.0f, a, NULL, &err) == SKPO_OK);
    CHECK(skpo_lora_attach(m, lo, &err) == SKPO_OK);
    CHECK(skpo_model_logprobs(m, s, 2, 1.0f, b, NULL, &err) == SKPO_OK);
    CHECK(memcmp(a, b, 14 * sizeof(float)) == 0);   // B = 0: the low-rank path adds exact zeros
    // A is PEFT's kaiming-uniform: inside +-1/sqrt(K), not all zero.
    skpo_param *p;
    int np = skpo_lora_params(lo, &p);
    CHECK(np == 2 * 2 * SKPO_LORA_NT);
    double amax = 0, bmax = 0, bound = 1 / sqrt((double)p[0].shape[1]);
    for (size_t k = 0; k < p[0].numel; k++) amax = fmax(amax, fabs(p[0].data[k]));
    for (size_t k = 0; k < p[1].numel; k++) bmax = fmax(bmax, fabs(p[1].data[k]));
    CHECK(amax > 0.5 * bound && amax <= bound);
    CHECK(bmax == 0);
    CHECK(strcmp(p[0].name, "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight") == 0);
    skpo_model_free(m);
    skpo_lora_free(lo);
}

// loss = sum_t w_t logp_t; gradients of A and B against central differences.
static void adapter_gradients_match_finite_differences_and_base_gets_none(void) {
    skpo_model *m = tiny(2, 16);
    skpo_lora *lo = fresh(m, 3, SKPO_LORA_ALL, 1);
    skpo_param *p;
    int np = skpo_lora_params(lo, &p);
    for (int i = 0; i < np; i++)   // B != 0 so that A's gradient is not trivially zero
        for (size_t k = 0; k < p[i].numel; k++) p[i].data[k] = (float)(0.3 * sin(1.7 * (double)(k + 31 * i)));
    skpo_err err = {0};
    CHECK(skpo_lora_attach(m, lo, &err) == SKPO_OK);
    int32_t ids[2][12];
    skpo_seq s[2];
    seqs_of(ids, s);
    float lp[32], w[32];
    int S = 14;
    for (int i = 0; i < S; i++) w[i] = (float)(0.5 + 0.25 * cos(i));
    skpo_lora_zero_grad(lo);
    CHECK(skpo_model_train_forward(m, s, 2, 1.0f, lp, NULL, &err) == SKPO_OK);
    CHECK_MSG(skpo_model_train_backward(m, w, NULL, &err) == SKPO_OK, "%s", err.msg);
    skpo_param *bp;
    int nb = skpo_model_params(m, &bp);
    int base_grads = 0;
    for (int i = 0; i < nb; i++) base_grads += bp[i].grad != NULL;
    CHECK(base_grads == 0);
    double gmax = 0, emax = 0;
    for (int i = 0; i < np; i++)
        for (size_t k = 0; k < p[i].numel; k++) gmax = fmax(gmax, fabs(p[i].grad[k]));
    CHECK(gmax > 0);
    // A sample of entries of every tensor (all of them would be slow).
    for (int i = 0; i < np; i++)
        for (size_t k = 0; k < p[i].numel; k += 1 + p[i].numel / 5) {
            float keep = p[i].data[k];
            double L[2];
            for (int sgn = 0; sgn < 2; sgn++) {
                p[i].data[k] = keep + (sgn ? 1e-2f : -1e-2f);
                skpo_model_logprobs(m, s, 2, 1.0f, lp, NULL, &err);
                L[sgn] = 0;
                for (int t = 0; t < S; t++) L[sgn] += (double)w[t] * lp[t];
            }
            p[i].data[k] = keep;
            emax = fmax(emax, fabs((L[1] - L[0]) / 2e-2 - p[i].grad[k]));
        }
    CHECK_MSG(emax <= 2e-2 * gmax, "max |grad - fd| = %g of max grad %g", emax, gmax);
    skpo_model_free(m);
    skpo_lora_free(lo);
}

// Greedy decode of n tokens from a prompt through skpo_model_step.
static void greedy(skpo_model *m, const int32_t *prompt, int np, int n, int32_t *out) {
    skpo_err err = {0};
    skpo_kv *kv = skpo_model_kv_new(m, 64, 1, &err);
    int V = skpo_model_config(m)->vocab_size, seq = skpo_kv_seq_new(kv), off[2] = {0, np};
    float *logits = malloc((size_t)V * sizeof(float));
    skpo_model_step(m, kv, &seq, 1, prompt, off, logits, &err);
    for (int i = 0; i < n; i++) {
        int best = 0;
        for (int v = 1; v < V; v++)
            if (logits[v] > logits[best]) best = v;
        out[i] = best;
        int o1[2] = {0, 1};
        skpo_model_step(m, kv, &seq, 1, &out[i], o1, logits, &err);
    }
    free(logits);
    skpo_kv_free(kv);
}

static void greedy_decoding_is_the_same_merged_and_low_rank(void) {
    skpo_model *a = tiny(3, 16), *b = tiny(3, 16), *base = tiny(3, 16);
    skpo_lora *lo = fresh(a, 4, SKPO_LORA_ALL, 0);
    skpo_param *p;
    int np = skpo_lora_params(lo, &p);
    for (int i = 1; i < np; i += 2)   // a trained-looking B: the adapter changes the output
        for (size_t k = 0; k < p[i].numel; k++) p[i].data[k] = (float)(0.4 * sin(0.9 * (double)(k + 7 * i)));
    skpo_err err = {0};
    CHECK(skpo_lora_attach(a, lo, &err) == SKPO_OK);
    CHECK(skpo_lora_merge(lo, b, &err) == SKPO_OK);
    int32_t prompt[5] = {3, 17, 5, 22, 9}, ta[24], tb[24], t0[24];
    greedy(a, prompt, 5, 24, ta);
    greedy(b, prompt, 5, 24, tb);
    greedy(base, prompt, 5, 24, t0);
    CHECK(memcmp(ta, tb, sizeof ta) == 0);
    CHECK(memcmp(ta, t0, sizeof ta) != 0);   // and the adapter mattered
    skpo_model_free(a);
    skpo_model_free(b);
    skpo_model_free(base);
    skpo_lora_free(lo);
}

static char *tmpdir(void) {
    char *d = strdup("/tmp/skpo_lora_XXXXXX");
    return mkdtemp(d);
}

static void save_then_load_round_trips_every_tensor(void) {
    skpo_model *m = tiny(4, 16);
    skpo_lora *lo = fresh(m, 2, (1u << SKPO_LORA_Q) | (1u << SKPO_LORA_DOWN), 0), *back = NULL;
    char *d = tmpdir();
    skpo_err err = {0};
    CHECK(skpo_lora_save(lo, d, "/some/base", &err) == SKPO_OK);
    CHECK_MSG(skpo_lora_load(d, skpo_model_config(m), 0, &back, &err) == SKPO_OK, "%s", err.msg);
    if (back) {
        skpo_param *p, *q;
        int n = skpo_lora_params(lo, &p), n2 = skpo_lora_params(back, &q);
        CHECK(n == n2 && n == 2 * 2 * 2);
        for (int i = 0; i < n && i < n2; i++)
            CHECK(!strcmp(p[i].name, q[i].name) && !memcmp(p[i].data, q[i].data, p[i].numel * 4));
        CHECK(skpo_lora_get_cfg(back)->rank == 2 && skpo_lora_get_cfg(back)->alpha == 16);
        CHECK(!strcmp(skpo_lora_base(back), "/some/base"));
    }
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    CHECK(system(cmd) == 0);
    free(d);
    skpo_model_free(m);
    skpo_lora_free(lo);
    skpo_lora_free(back);
}

static void adapter_for_another_base_is_refused_naming_the_tensor(void) {
    skpo_model *m = tiny(5, 24);   // hidden 24, the fixture base has 32
    char *ad = fix("lora/peft_adapter");
    skpo_lora *lo = NULL;
    skpo_err err = {0};
    CHECK(skpo_lora_load(ad, skpo_model_config(m), 0, &lo, &err) == SKPO_ERANGE);
    CHECK_MSG(strstr(err.msg, "another base") && strstr(err.msg, "lora_"), "%s", err.msg);
    CHECK(lo == NULL);
    free(ad);
    skpo_model_free(m);
}

// A copy of the PEFT fixture with its config edited by sed expression `ed`.
static skpo_status load_edited(const char *ed, skpo_err *err) {
    char *ad = fix("lora/peft_adapter"), *d = tmpdir(), cmd[2048];
    snprintf(cmd, sizeof cmd, "cp '%s'/* '%s' && sed -i '%s' '%s/adapter_config.json'", ad, d, ed, d);
    skpo_status s = system(cmd) == 0 ? SKPO_OK : SKPO_EIO;
    skpo_model *m = tiny(6, 32);
    skpo_lora *lo = NULL;
    if (!s) s = skpo_lora_load(d, skpo_model_config(m), 0, &lo, err);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    if (system(cmd)) s = SKPO_EIO;
    skpo_lora_free(lo);
    skpo_model_free(m);
    free(ad);
    free(d);
    return s;
}

static void unknown_target_and_rank_zero_are_refused(void) {
    skpo_err err = {0};
    CHECK(load_edited("s/\"o_proj\"/\"lm_head\"/", &err) == SKPO_ERANGE);
    CHECK_MSG(strstr(err.msg, "unknown target module 'lm_head'"), "%s", err.msg);
    CHECK(load_edited("s/\"r\": 4/\"r\": 0/", &err) == SKPO_EFORMAT);
    CHECK_MSG(strstr(err.msg, "'r' must be an integer >= 1"), "%s", err.msg);
    CHECK(load_edited("s/\"use_dora\": false/\"use_dora\": true/", &err) == SKPO_EUNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "use_dora"), "%s", err.msg);
    unsigned t;
    CHECK(skpo_lora_targets_parse("q,k,embed", &t, &err) == SKPO_ERANGE && strstr(err.msg, "'embed'"));
    CHECK(skpo_lora_targets_parse("q_proj,down", &t, &err) == SKPO_OK && t == ((1u << SKPO_LORA_Q) | (1u << SKPO_LORA_DOWN)));
    skpo_lora_cfg c;
    skpo_lora_cfg_default(&c);
    CHECK(skpo_lora_cfg_check(&c, &err) == SKPO_ERANGE && strstr(err.msg, "rank 0"));
}

int main(void) {
    RUN(peft_written_adapter_is_read_and_matches_peft_logprobs);
    RUN(skpo_written_adapter_loaded_into_peft_matches_skpo_logprobs);
    RUN(untrained_adapter_scores_exactly_the_base);
    RUN(adapter_gradients_match_finite_differences_and_base_gets_none);
    RUN(greedy_decoding_is_the_same_merged_and_low_rank);
    RUN(save_then_load_round_trips_every_tensor);
    RUN(adapter_for_another_base_is_refused_naming_the_tensor);
    RUN(unknown_target_and_rank_zero_are_refused);
    return TEST_SUMMARY();
}
