// test_model_ref.c - the C model against Hugging Face transformers: logits,
// log-probs, entropies and parameter gradients from tests/ref/make_model_fixtures.py
// (fixtures in tests/fixtures/model/<name>/). Tolerances: logits and log-probs
// max abs error 1e-4; gradients max abs error <= 1e-3 of the tensor's largest
// reference gradient. Also: KV-cache decode == full forward and a batched step
// == single-sequence steps.
#include "harness.h"
#include "model/model.h"
#include "model/safetensors.h"

#include <stdlib.h>
#include <string.h>

#define NSEQ 3
#define TEMP 0.7f

typedef struct fixture {
    skpo_model *m;
    skpo_st *ref;
    int32_t *ids[NSEQ];
    int n[NSEQ], start[NSEQ];
    skpo_seq seqs[NSEQ];
    int S;
} fixture;

static char *fix_dir(const char *name) {
    const char *top = getenv("SKPO_TOP");
    char *d = malloc(4096);
    snprintf(d, 4096, "%s/tests/fixtures/model/%s", top ? top : ".", name);
    return d;
}

// Whole tensor as a malloc'd float array (NULL if absent); *numel set.
static float *ref_tensor(skpo_st *st, const char *name, size_t *numel) {
    const skpo_st_tensor *t = skpo_st_find(st, name);
    if (!t) return NULL;
    float *d = malloc(t->numel * sizeof(float));
    skpo_err err = {0};
    if (skpo_st_read_f32(st, name, d, t->ndim, t->shape, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        free(d);
        return NULL;
    }
    if (numel) *numel = t->numel;
    return d;
}

static int fixture_open(fixture *f, const char *name, int trainable) {
    memset(f, 0, sizeof *f);
    char *d = fix_dir(name);
    skpo_err err = {0};
    skpo_model_opts o = {.trainable = trainable};
    int ok = skpo_model_load(d, &o, &f->m, &err) == SKPO_OK;
    if (!ok) fprintf(stderr, "  load %s: %s\n", name, err.msg);
    char *e = malloc(strlen(d) + 32);
    sprintf(e, "%s/expected.safetensors", d);
    if (ok && skpo_st_open_file(e, &f->ref, &err)) {
        fprintf(stderr, "  %s\n", err.msg);
        ok = 0;
    }
    free(e);
    free(d);
    if (!ok) return 0;
    float *start = ref_tensor(f->ref, "start", NULL);
    for (int i = 0; i < NSEQ; i++) {
        char k[32];
        size_t n;
        snprintf(k, sizeof k, "ids.%d", i);
        float *ids = ref_tensor(f->ref, k, &n);
        f->ids[i] = malloc(n * sizeof(int32_t));
        for (size_t j = 0; j < n; j++) f->ids[i][j] = (int32_t)ids[j];
        free(ids);
        f->n[i] = (int)n;
        f->start[i] = (int)start[i];
        f->seqs[i] = (skpo_seq){f->ids[i], f->n[i], f->start[i]};
        f->S += f->n[i] - f->start[i];
    }
    free(start);
    return 1;
}

static void fixture_close(fixture *f) {
    skpo_model_free(f->m);
    skpo_st_close(f->ref);
    for (int i = 0; i < NSEQ; i++) free(f->ids[i]);
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d; // NaN propagates as a failure
    }
    return m;
}

static void check_logprobs(const char *name) {
    fixture f;
    if (!fixture_open(&f, name, 0)) { CHECK(0); return; }
    float *lp = malloc(f.S * sizeof(float)), *ent = malloc(f.S * sizeof(float));
    skpo_err err = {0};
    CHECK(skpo_model_logprobs(f.m, f.seqs, NSEQ, TEMP, lp, ent, &err) == SKPO_OK);
    float *rlp = ref_tensor(f.ref, "logp", NULL), *rent = ref_tensor(f.ref, "entropy", NULL);
    double e1 = max_abs_diff(lp, rlp, f.S), e2 = max_abs_diff(ent, rent, f.S);
    CHECK_MSG(e1 <= 1e-4, "%s logp max abs err %g", name, e1);
    CHECK_MSG(e2 <= 1e-4, "%s entropy max abs err %g", name, e2);
    free(lp); free(ent); free(rlp); free(rent);
    fixture_close(&f);
}

static void logprobs_match_hf_qwen2_bf16_tied(void) { check_logprobs("qwen2_bf16"); }
static void logprobs_match_hf_qwen2_untied(void) { check_logprobs("qwen2_untied"); }
static void logprobs_match_hf_llama3_rope_scaling(void) { check_logprobs("llama3"); }

// Prefill each sequence's first half in one batched step, then decode the rest
// one token per sequence per step (all sequences together): every step's
// logits must equal HF's full-forward logits at that position.
static void check_step(const char *name) {
    fixture f;
    if (!fixture_open(&f, name, 0)) { CHECK(0); return; }
    int V = skpo_model_config(f.m)->vocab_size;
    skpo_err err = {0};
    skpo_kv *kv = skpo_model_kv_new(f.m, 64, NSEQ, &err);
    CHECK(kv != NULL);
    float *ref[NSEQ];
    for (int i = 0; i < NSEQ; i++) {
        char k[32];
        snprintf(k, sizeof k, "logits.%d", i);
        ref[i] = ref_tensor(f.ref, k, NULL);
    }
    int seq[NSEQ], off[NSEQ + 1], len[NSEQ], maxn = 0;
    int32_t toks[64];
    off[0] = 0;
    for (int i = 0; i < NSEQ; i++) {
        seq[i] = skpo_kv_seq_new(kv);
        len[i] = f.n[i] / 2;
        memcpy(toks + off[i], f.ids[i], len[i] * sizeof(int32_t));
        off[i + 1] = off[i] + len[i];
        if (f.n[i] > maxn) maxn = f.n[i];
    }
    float *logits = malloc((size_t)NSEQ * V * sizeof(float));
    double worst = 0;
    CHECK(skpo_model_step(f.m, kv, seq, NSEQ, toks, off, logits, &err) == SKPO_OK);
    for (int i = 0; i < NSEQ; i++) {
        double e = max_abs_diff(logits + (size_t)i * V, ref[i] + (size_t)(len[i] - 1) * V, V);
        if (e > worst) worst = e;
    }
    for (int t = 0; t < maxn; t++) { // decode: sequences still running advance together
        int bs[NSEQ], ns = 0, boff[NSEQ + 1] = {0}, who[NSEQ];
        for (int i = 0; i < NSEQ; i++)
            if (len[i] < f.n[i]) {
                bs[ns] = seq[i];
                who[ns] = i;
                toks[ns] = f.ids[i][len[i]];
                boff[ns + 1] = ns + 1;
                ns++;
            }
        if (!ns) break;
        CHECK(skpo_model_step(f.m, kv, bs, ns, toks, boff, logits, &err) == SKPO_OK);
        for (int j = 0; j < ns; j++) {
            int i = who[j];
            double e = max_abs_diff(logits + (size_t)j * V, ref[i] + (size_t)len[i] * V, V);
            if (e > worst) worst = e;
            len[i]++;
            CHECK(skpo_kv_seq_len(kv, seq[i]) == len[i]);
        }
    }
    CHECK_MSG(worst <= 1e-4, "%s step logits max abs err %g", name, worst);
    for (int i = 0; i < NSEQ; i++) free(ref[i]);
    free(logits);
    skpo_kv_free(kv);
    fixture_close(&f);
}

static void batched_decode_matches_hf_qwen2_bf16(void) { check_step("qwen2_bf16"); }
static void batched_decode_matches_hf_qwen2_untied(void) { check_step("qwen2_untied"); }
static void batched_decode_matches_hf_llama3(void) { check_step("llama3"); }

// loss = sum(w * logp) + sum(u * entropy): gradients of every parameter vs HF.
static void check_grads(const char *name) {
    fixture f;
    if (!fixture_open(&f, name, 1)) { CHECK(0); return; }
    float *lp = malloc(f.S * sizeof(float)), *ent = malloc(f.S * sizeof(float));
    float *w = ref_tensor(f.ref, "w", NULL), *u = ref_tensor(f.ref, "u", NULL);
    skpo_err err = {0};
    skpo_model_zero_grad(f.m);
    CHECK(skpo_model_train_forward(f.m, f.seqs, NSEQ, TEMP, lp, ent, &err) == SKPO_OK);
    float *rlp = ref_tensor(f.ref, "logp", NULL);
    CHECK_MSG(max_abs_diff(lp, rlp, f.S) <= 1e-4, "train_forward logp differs from HF");
    CHECK(skpo_model_train_backward(f.m, w, u, &err) == SKPO_OK);
    skpo_param *ps;
    int np = skpo_model_params(f.m, &ps), checked = 0;
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < np; i++) {
        char k[160];
        snprintf(k, sizeof k, "grad.%s", ps[i].name);
        size_t n = 0;
        float *g = ref_tensor(f.ref, k, &n);
        if (!g) { CHECK_MSG(0, "no reference gradient %s", k); continue; }
        CHECK(n == ps[i].numel);
        double mx = 0;
        for (size_t j = 0; j < n; j++) if (fabs(g[j]) > mx) mx = fabs(g[j]);
        double rel = max_abs_diff(ps[i].grad, g, n) / (mx > 1e-6 ? mx : 1e-6);
        if (rel > worst) worst = rel, worst_name = ps[i].name;
        checked++;
        free(g);
    }
    CHECK(checked == np);
    CHECK_MSG(worst <= 1e-3, "%s: gradient rel err %g at %s", name, worst, worst_name);
    printf("# %s: %d gradients, worst rel err %.2e (%s)\n", name, checked, worst, worst_name);
    free(lp); free(ent); free(w); free(u); free(rlp);
    fixture_close(&f);
}

static void gradients_match_hf_qwen2_bf16_tied(void) { check_grads("qwen2_bf16"); }
static void gradients_match_hf_qwen2_untied(void) { check_grads("qwen2_untied"); }
static void gradients_match_hf_llama3(void) { check_grads("llama3"); }

// A prompt prefilled once and forked (kvcache copy-on-write) continues exactly
// like HF on one branch and like an unshared sequence on another.
static void forked_prefix_decodes_like_unshared_sequences(void) {
    fixture f;
    if (!fixture_open(&f, "qwen2_untied", 0)) { CHECK(0); return; }
    int V = skpo_model_config(f.m)->vocab_size, P = 5, n = f.n[0];
    skpo_err err = {0};
    skpo_kv *kv = skpo_model_kv_new(f.m, 128, 4, &err);
    float *ref = ref_tensor(f.ref, "logits.0", NULL);
    float *lg = malloc(2 * (size_t)V * sizeof(float)), *solo = malloc((size_t)V * sizeof(float));
    int a = skpo_kv_seq_new(kv), off1[2] = {0, P};
    CHECK(skpo_model_step(f.m, kv, &a, 1, f.ids[0], off1, lg, &err) == SKPO_OK);
    int b = skpo_kv_seq_fork(kv, a);
    size_t used = skpo_kv_blocks_used(kv);
    int32_t other[32];
    for (int t = 0; t < n; t++) other[t] = t < P ? f.ids[0][t] : (f.ids[0][t] * 7 + 3) % V;
    double ea = 0, eb = 0;
    for (int t = P; t < n; t++) {
        int seqs[2] = {a, b}, off[3] = {0, 1, 2};
        int32_t toks[2] = {f.ids[0][t], other[t]};
        CHECK(skpo_model_step(f.m, kv, seqs, 2, toks, off, lg, &err) == SKPO_OK);
        double e = max_abs_diff(lg, ref + (size_t)t * V, V);
        if (e > ea) ea = e;
        // the same tokens in a fresh, unshared sequence
        int c = skpo_kv_seq_new(kv), offc[2] = {0, t + 1};
        CHECK(skpo_model_step(f.m, kv, &c, 1, other, offc, solo, &err) == SKPO_OK);
        e = max_abs_diff(lg + V, solo, V);
        if (e > eb) eb = e;
        skpo_kv_seq_free(kv, c);
    }
    CHECK_MSG(ea <= 1e-4, "branch A vs HF %g", ea);
    CHECK_MSG(eb <= 1e-5, "branch B vs unshared %g", eb);
    CHECK(used < 2 * (size_t)((P + 15) / 16) + 2); // the prefix was not copied at fork time
    free(ref); free(lg); free(solo);
    skpo_kv_free(kv);
    fixture_close(&f);
}

static void step_past_cache_or_positions_fails_without_appending(void) {
    fixture f;
    if (!fixture_open(&f, "llama3", 0)) { CHECK(0); return; }
    int V = skpo_model_config(f.m)->vocab_size;
    skpo_err err = {0};
    skpo_kv *kv = skpo_model_kv_new(f.m, 16, 2, &err); // 16 / 16 + 2 = 3 blocks
    float *lg = malloc(2 * (size_t)V * sizeof(float));
    int32_t toks[64] = {0};
    int s[2] = {skpo_kv_seq_new(kv), skpo_kv_seq_new(kv)}, off[3] = {0, 10, 60};
    CHECK(skpo_model_step(f.m, kv, s, 2, toks, off, lg, &err) == SKPO_ERANGE);
    CHECK(skpo_kv_seq_len(kv, s[0]) == 0 && skpo_kv_seq_len(kv, s[1]) == 0 && skpo_kv_blocks_used(kv) == 0);
    int offb[3] = {0, 1, 2};
    toks[1] = V; // out of vocabulary
    CHECK(skpo_model_step(f.m, kv, s, 2, toks, offb, lg, &err) == SKPO_ERANGE);
    CHECK(strstr(err.msg, "vocabulary") != NULL);
    int dup[2] = {s[0], s[0]};
    toks[1] = 0;
    CHECK(skpo_model_step(f.m, kv, dup, 2, toks, offb, lg, &err) == SKPO_ERANGE);
    skpo_kv_free(kv);
    // max_position_embeddings is 128
    kv = skpo_model_kv_new(f.m, 256, 1, &err);
    int z = skpo_kv_seq_new(kv), offp[2] = {0, 129};
    int32_t *many = calloc(129, sizeof(int32_t));
    CHECK(skpo_model_step(f.m, kv, &z, 1, many, offp, lg, &err) == SKPO_ERANGE);
    CHECK(skpo_kv_seq_len(kv, z) == 0);
    free(many);
    free(lg);
    skpo_kv_free(kv);
    fixture_close(&f);
}

// Save in F32 sharded and in BF16, load back: F32 is bit-identical, BF16 is
// the round-to-nearest-even of every weight; log-probs follow.
static void saved_checkpoints_reload_identically(void) {
    fixture f;
    if (!fixture_open(&f, "qwen2_untied", 0)) { CHECK(0); return; }
    char d[] = "/tmp/skpo_save_XXXXXX";
    CHECK(mkdtemp(d) != NULL);
    skpo_err err = {0};
    skpo_param *pa, *pb;
    int np = skpo_model_params(f.m, &pa);
    for (int pass = 0; pass < 2; pass++) {
        skpo_dtype dt = pass ? SKPO_DT_BF16 : SKPO_DT_F32;
        CHECK(skpo_model_save(f.m, d, dt, pass ? 0 : 100000, &err) == SKPO_OK);
        char idx[256];
        snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", d);
        CHECK(skpo_path_exists(idx) == !pass);
        skpo_model *m2;
        skpo_model_opts o = {0};
        CHECK(skpo_model_load(d, &o, &m2, &err) == SKPO_OK);
        CHECK(skpo_model_src_dtype(m2) == dt);
        CHECK(skpo_model_params(m2, &pb) == np);
        int same = 1;
        for (int i = 0; i < np; i++) {
            same &= !strcmp(pa[i].name, pb[i].name) && pa[i].numel == pb[i].numel;
            for (size_t j = 0; same && j < pa[i].numel; j++) {
                float want = pass ? skpo_bf16_to_f32(skpo_f32_to_bf16(pa[i].data[j])) : pa[i].data[j];
                same &= pb[i].data[j] == want;
            }
        }
        CHECK_MSG(same, "pass %d: weights differ after reload", pass);
        skpo_model_free(m2);
    }
    skpo_rm_rf(d, &err);
    fixture_close(&f);
}

static int same_weights(skpo_model *a, skpo_model *b) {
    skpo_param *pa, *pb;
    int np = skpo_model_params(a, &pa);
    if (skpo_model_params(b, &pb) != np) return 0;
    for (int i = 0; i < np; i++)
        if (strcmp(pa[i].name, pb[i].name) || pa[i].numel != pb[i].numel || memcmp(pa[i].data, pb[i].data, pa[i].numel * 4))
            return 0;
    return 1;
}

// Several writers (the update server's ranks) each write their shard of one
// checkpoint, in any deal of the tensors, and one writes the index: the folder
// loads as the same weights. And a sharded checkpoint that transformers'
// save_pretrained wrote (tests/ref/make_sharded_fixture.py) loads as the
// single-file original, tensor for tensor.
static void checkpoints_written_in_parts_and_hf_sharded_ones_load_identically(void) {
    fixture f;
    if (!fixture_open(&f, "qwen2_untied", 0)) { CHECK(0); return; }
    char d[] = "/tmp/skpo_parts_XXXXXX";
    CHECK(mkdtemp(d) != NULL);
    skpo_err err = {0};
    skpo_param *p;
    int np = skpo_model_params(f.m, &p), *owner = calloc((size_t)np, sizeof *owner);
    for (int i = 0; i < np; i++) owner[i] = (i * 7) % 3;   // interleaved: no part is a contiguous run
    for (int k = 2; k >= 0; k--) CHECK(skpo_model_save_part(f.m, d, SKPO_DT_F32, owner, k, 3, &err) == SKPO_OK);
    CHECK(skpo_model_save_index(f.m, d, SKPO_DT_F32, owner, 3, &err) == SKPO_OK);
    char fn[256];
    snprintf(fn, sizeof fn, "%s/model-00003-of-00003.safetensors", d);
    CHECK(skpo_path_exists(fn));
    skpo_model *m2 = NULL, *m3 = NULL;
    skpo_model_opts o = {0};
    CHECK_MSG(skpo_model_load(d, &o, &m2, &err) == SKPO_OK, "%s", err.msg);
    CHECK(m2 && same_weights(f.m, m2));
    char *hf = fix_dir("qwen2_hf_sharded");
    snprintf(fn, sizeof fn, "%s/model.safetensors.index.json", hf);
    CHECK(skpo_path_exists(fn));
    CHECK_MSG(skpo_model_load(hf, &o, &m3, &err) == SKPO_OK, "%s", err.msg);
    CHECK(m3 && same_weights(f.m, m3));
    skpo_model_free(m2);
    skpo_model_free(m3);
    free(hf);
    free(owner);
    skpo_rm_rf(d, &err);
    fixture_close(&f);
}

// A sequence's logits are bit-identical whether it is stepped alone or in a
// batch with others (prefill and decode), so sampling does not depend on
// batch composition.
static void batched_step_is_bit_identical_to_single_sequence_steps(void) {
    fixture f;
    if (!fixture_open(&f, "qwen2_bf16", 0)) { CHECK(0); return; }
    int V = skpo_model_config(f.m)->vocab_size;
    skpo_err err = {0};
    skpo_kv *kv = skpo_model_kv_new(f.m, 256, 2 * NSEQ, &err);
    float *batch = malloc((size_t)NSEQ * V * sizeof(float)), *one = malloc((size_t)V * sizeof(float));
    int bs[NSEQ], ss[NSEQ], off[NSEQ + 1] = {0};
    int32_t toks[64];
    for (int i = 0; i < NSEQ; i++) {
        bs[i] = skpo_kv_seq_new(kv);
        ss[i] = skpo_kv_seq_new(kv);
        memcpy(toks + off[i], f.ids[i], 5 * sizeof(int32_t));
        off[i + 1] = off[i] + 5;
    }
    int same = 1;
    for (int t = 0; t < 3; t++) { // a 5-token prefill, then two decode steps
        CHECK(skpo_model_step(f.m, kv, bs, NSEQ, toks, off, batch, &err) == SKPO_OK);
        for (int i = 0; i < NSEQ; i++) {
            int o1[2] = {0, off[i + 1] - off[i]};
            CHECK(skpo_model_step(f.m, kv, &ss[i], 1, toks + off[i], o1, one, &err) == SKPO_OK);
            same &= !memcmp(one, batch + (size_t)i * V, (size_t)V * sizeof(float));
        }
        for (int i = 0; i < NSEQ && t < 2; i++) { // every fixture sequence has >= 7 tokens
            toks[i] = f.ids[i][5 + t];
            off[i + 1] = i + 1;
        }
    }
    CHECK_MSG(same, "batched and single-sequence logits differ");
    free(batch);
    free(one);
    skpo_kv_free(kv);
    fixture_close(&f);
}

int main(void) {
    RUN(logprobs_match_hf_qwen2_bf16_tied);
    RUN(logprobs_match_hf_qwen2_untied);
    RUN(logprobs_match_hf_llama3_rope_scaling);
    RUN(batched_decode_matches_hf_qwen2_bf16);
    RUN(batched_decode_matches_hf_qwen2_untied);
    RUN(batched_decode_matches_hf_llama3);
    RUN(batched_step_is_bit_identical_to_single_sequence_steps);
    RUN(forked_prefix_decodes_like_unshared_sequences);
    RUN(saved_checkpoints_reload_identically);
    RUN(checkpoints_written_in_parts_and_hf_sharded_ones_load_identically);
    RUN(step_past_cache_or_positions_fails_without_appending);
    RUN(gradients_match_hf_qwen2_bf16_tied);
    RUN(gradients_match_hf_qwen2_untied);
    RUN(gradients_match_hf_llama3);
    return TEST_SUMMARY();
}
