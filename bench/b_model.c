/*
 * b_model.c - the model benchmark's C side (run by bench/b_model.sh, which
 * compiles it against build/libskpo.a and runs PyTorch on the same shapes).
 *
 *   b_model peak                          sgemm GFLOP/s (2048^3, best of 3)
 *   b_model train L C NH NKV F V B T      forward+backward tokens/s
 *   b_model decode L C NH NKV F V B P D   batched decode tokens/s: B sequences,
 *                                         prefill P tokens, then D greedy steps
 * Output: one line "key value" per measurement. Random weights (std 0.02), a
 * Llama config; timings are the best of a few repetitions after a warm-up.
 */
#include "model/model.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double peak(void) {
    int n = 2048;
    float *a = skpo_xmalloc((size_t)n * n * 4), *b = skpo_xmalloc((size_t)n * n * 4), *c = skpo_xmalloc((size_t)n * n * 4);
    for (size_t i = 0; i < (size_t)n * n; i++) a[i] = b[i] = (float)(i % 7) * 0.01f;
    double best = 1e9;
    for (int r = 0; r < 4; r++) {
        double t = skpo_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, a, n, b, n, 0, c, n);
        t = skpo_now() - t;
        if (r && t < best) best = t;
    }
    free(a); free(b); free(c);
    return 2.0 * n * n * n / best / 1e9;
}

static skpo_model *make(int L, int C, int NH, int NKV, int F, int V, int trainable) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"model_type\":\"llama\",\"vocab_size\":%d,\"hidden_size\":%d,\"intermediate_size\":%d,"
             "\"num_hidden_layers\":%d,\"num_attention_heads\":%d,\"num_key_value_heads\":%d,"
             "\"max_position_embeddings\":4096,\"rms_norm_eps\":1e-5}", V, C, F, L, NH, NKV);
    skpo_config c;
    skpo_err err = {0};
    skpo_model *m;
    skpo_model_opts o = {.trainable = trainable};
    if (skpo_config_parse(json, strlen(json), &c, &err) || skpo_model_init_random(&c, &o, 1, 0.02, &m, &err))
        skpo_die("%s", err.msg);
    return m;
}

// Matmul flops per token of a forward (2 per multiply-add), attention at context T.
static double fwd_flops_per_token(const skpo_config *c, int T) {
    double C = c->hidden_size, QD = (double)c->num_attention_heads * c->head_dim;
    double KVD = (double)c->num_key_value_heads * c->head_dim, F = c->intermediate_size;
    double layer = 2 * (C * QD + 2 * C * KVD + QD * C + 3 * C * F) + 2 * 2 * QD * (T / 2.0);
    return c->num_hidden_layers * layer + 2 * C * c->vocab_size;
}

static void train(skpo_model *m, int B, int T) {
    const skpo_config *c = skpo_model_config(m);
    int32_t *ids = skpo_xmalloc((size_t)B * T * sizeof(int32_t));
    skpo_seq *s = skpo_xmalloc((size_t)B * sizeof *s);
    uint64_t x = 12345;
    for (int i = 0; i < B * T; i++) x = x * 6364136223846793005ull + 1442695040888963407ull, ids[i] = (int32_t)((x >> 33) % (uint64_t)c->vocab_size);
    for (int b = 0; b < B; b++) s[b] = (skpo_seq){ids + (size_t)b * T, T, 1};
    size_t S = (size_t)B * (T - 1);
    float *lp = skpo_xmalloc(S * 4), *w = skpo_xmalloc(S * 4);
    for (size_t i = 0; i < S; i++) w[i] = 1.0f / (float)S;
    skpo_err err = {0};
    double best = 1e9;
    for (int r = 0; r < 3; r++) {
        double t = skpo_now();
        if (skpo_model_train_forward(m, s, B, 1.0f, lp, NULL, &err) || skpo_model_train_backward(m, w, NULL, &err))
            skpo_die("%s", err.msg);
        t = skpo_now() - t;
        if (r && t < best) best = t;
    }
    double tps = (double)B * T / best;
    printf("train_tok_s %.1f\ntrain_gflops %.2f\n", tps, 3 * fwd_flops_per_token(c, T) * tps / 1e9);
    free(ids); free(s); free(lp); free(w);
}

static int argmax(const float *v, int n) {
    int k = 0;
    float best = v[0];
    for (int i = 1; i < n; i++)
        if (v[i] > best) best = v[i], k = i;
    return k;
}

static void decode(skpo_model *m, int B, int P, int D) {
    const skpo_config *c = skpo_model_config(m);
    int V = c->vocab_size;
    skpo_err err = {0};
    double best = 1e9;
    float *logits = skpo_xmalloc((size_t)B * V * 4);
    int32_t *toks = skpo_xmalloc((size_t)B * P * sizeof(int32_t));
    int *seq = skpo_xmalloc((size_t)B * sizeof(int)), *off = skpo_xmalloc((size_t)(B + 1) * sizeof(int));
    for (int r = 0; r < 2; r++) {
        skpo_kv *kv = skpo_model_kv_new(m, (size_t)B * (P + D), B, &err);
        if (!kv) skpo_die("%s", err.msg);
        for (int b = 0; b < B; b++) {
            seq[b] = skpo_kv_seq_new(kv);
            off[b] = b * P;
            for (int t = 0; t < P; t++) toks[b * P + t] = (int32_t)((b * 131 + t * 17) % V);
        }
        off[B] = B * P;
        double t = skpo_now();
        if (skpo_model_step(m, kv, seq, B, toks, off, logits, &err)) skpo_die("%s", err.msg);
        for (int d = 0; d < D; d++) {
            for (int b = 0; b < B; b++) toks[b] = argmax(logits + (size_t)b * V, V), off[b] = b;
            off[B] = B;
            if (skpo_model_step(m, kv, seq, B, toks, off, logits, &err)) skpo_die("%s", err.msg);
        }
        t = skpo_now() - t;
        if (t < best) best = t;
        skpo_kv_free(kv);
    }
    printf("decode_tok_s %.1f\n", (double)B * D / best);
    free(logits); free(toks); free(seq); free(off);
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "peak")) {
        printf("sgemm_gflops %.1f\n", peak());
        return 0;
    }
    if (argc < 10) {
        fprintf(stderr, "usage: b_model peak | train L C NH NKV F V B T | decode L C NH NKV F V B P D\n");
        return 2;
    }
    int a[9] = {0};
    for (int i = 0; i < 9 && i + 2 < argc; i++) {
        long v;
        if (skpo_parse_long(argv[i + 2], 1, 1L << 30, &v)) skpo_die("bad number '%s'", argv[i + 2]);
        a[i] = (int)v;
    }
    int is_train = !strcmp(argv[1], "train");
    skpo_model *m = make(a[0], a[1], a[2], a[3], a[4], a[5], is_train);
    if (is_train) train(m, a[6], a[7]);
    else if (argc == 11) decode(m, a[6], a[7], a[8]);
    else return 2;
    skpo_model_free(m);
    return 0;
}
