// test_model_grad.c - the backward pass against central finite differences of
// an independent double-precision forward (written here, straight from the
// equations), for every element of every parameter of tiny Qwen2 and Llama
// configs (bias, o_proj bias, tied and untied heads, GQA, llama3 rope), with
// loss = sum(w * logp) + sum(u * entropy) at temperature 0.8.
// Tolerance: per tensor, max |analytic - fd| <= 1e-3 * max |fd|.
#include "harness.h"
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

#define TEMP 0.8

typedef struct ref {
    const skpo_config *c;
    skpo_param *ps;
    int np;
    double *P;        // all parameters in double, same order as ps
    size_t *off;      // offset of each param in P
} ref;

static const double *prm(const ref *r, const char *fmt, int l) {
    char name[128];
    snprintf(name, sizeof name, fmt, l);
    for (int i = 0; i < r->np; i++)
        if (!strcmp(r->ps[i].name, name)) return r->P + r->off[i];
    return NULL;
}

// y (n, O) = x (n, K) W^T (+ b)
static void lin(double *y, const double *x, const double *W, const double *b, int n, int K, int O) {
    for (int t = 0; t < n; t++)
        for (int o = 0; o < O; o++) {
            double s = b ? b[o] : 0;
            for (int k = 0; k < K; k++) s += x[t * K + k] * W[o * K + k];
            y[t * O + o] = s;
        }
}

static void rms(double *y, const double *x, const double *w, int n, int C, double eps) {
    for (int t = 0; t < n; t++) {
        double ss = 0;
        for (int i = 0; i < C; i++) ss += x[t * C + i] * x[t * C + i];
        double r = 1 / sqrt(ss / C + eps);
        for (int i = 0; i < C; i++) y[t * C + i] = w[i] * x[t * C + i] * r;
    }
}

static double inv_freq(const skpo_config *c, int i) {
    double f = 1 / pow(c->rope_theta, 2.0 * i / c->head_dim);
    if (!c->rope_llama3) return f;
    double old = c->rope_original_max_position_embeddings, wl = 2 * M_PI / f;
    if (wl > old / c->rope_low_freq_factor) return f / c->rope_factor;
    if (wl < old / c->rope_high_freq_factor) return f;
    double s = (old / wl - c->rope_low_freq_factor) / (c->rope_high_freq_factor - c->rope_low_freq_factor);
    return (1 - s) * f / c->rope_factor + s * f;
}

static void rope(double *x, int n, int nh, int HS, const skpo_config *c) {
    for (int t = 0; t < n; t++)
        for (int h = 0; h < nh; h++)
            for (int i = 0; i < HS / 2; i++) {
                double a = t * inv_freq(c, i), *v = x + (t * nh + h) * HS;
                double x1 = v[i], x2 = v[i + HS / 2];
                v[i] = x1 * cos(a) - x2 * sin(a);
                v[i + HS / 2] = x2 * cos(a) + x1 * sin(a);
            }
}

// Loss of one sequence; logp / ent (n - start) filled when non-NULL.
static double ref_seq(const ref *r, const skpo_seq *s, const double *w, const double *u, double *logp, double *ent) {
    const skpo_config *c = r->c;
    int n = s->n, C = c->hidden_size, F = c->intermediate_size, NH = c->num_attention_heads;
    int NKV = c->num_key_value_heads, HS = c->head_dim, V = c->vocab_size;
    double *x = calloc(n * C, 8), *ln = calloc(n * C, 8), *q = calloc(n * NH * HS, 8), *k = calloc(n * NKV * HS, 8);
    double *v = calloc(n * NKV * HS, 8), *att = calloc(n * NH * HS, 8), *tmp = calloc(n * C, 8);
    double *g = calloc(n * F, 8), *up = calloc(n * F, 8), *lg = calloc(V, 8);
    const double *wte = prm(r, "model.embed_tokens.weight", 0);
    for (int t = 0; t < n; t++) memcpy(x + t * C, wte + (size_t)s->ids[t] * C, C * 8);
    for (int l = 0; l < c->num_hidden_layers; l++) {
        rms(ln, x, prm(r, "model.layers.%d.input_layernorm.weight", l), n, C, c->rms_norm_eps);
        lin(q, ln, prm(r, "model.layers.%d.self_attn.q_proj.weight", l), prm(r, "model.layers.%d.self_attn.q_proj.bias", l), n, C, NH * HS);
        lin(k, ln, prm(r, "model.layers.%d.self_attn.k_proj.weight", l), prm(r, "model.layers.%d.self_attn.k_proj.bias", l), n, C, NKV * HS);
        lin(v, ln, prm(r, "model.layers.%d.self_attn.v_proj.weight", l), prm(r, "model.layers.%d.self_attn.v_proj.bias", l), n, C, NKV * HS);
        rope(q, n, NH, HS, c);
        rope(k, n, NKV, HS, c);
        for (int t = 0; t < n; t++)
            for (int h = 0; h < NH; h++) {
                int gk = h / (NH / NKV);
                double p[64], mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    double z = 0;
                    for (int i = 0; i < HS; i++) z += q[(t * NH + h) * HS + i] * k[(j * NKV + gk) * HS + i];
                    p[j] = z / sqrt(HS);
                    if (p[j] > mx) mx = p[j];
                }
                for (int j = 0; j <= t; j++) sum += (p[j] = exp(p[j] - mx));
                for (int i = 0; i < HS; i++) {
                    double o = 0;
                    for (int j = 0; j <= t; j++) o += p[j] / sum * v[(j * NKV + gk) * HS + i];
                    att[(t * NH + h) * HS + i] = o;
                }
            }
        lin(tmp, att, prm(r, "model.layers.%d.self_attn.o_proj.weight", l), prm(r, "model.layers.%d.self_attn.o_proj.bias", l), n, NH * HS, C);
        for (int i = 0; i < n * C; i++) x[i] += tmp[i];
        rms(ln, x, prm(r, "model.layers.%d.post_attention_layernorm.weight", l), n, C, c->rms_norm_eps);
        lin(g, ln, prm(r, "model.layers.%d.mlp.gate_proj.weight", l), NULL, n, C, F);
        lin(up, ln, prm(r, "model.layers.%d.mlp.up_proj.weight", l), NULL, n, C, F);
        for (int i = 0; i < n * F; i++) g[i] = g[i] / (1 + exp(-g[i])) * up[i];
        lin(tmp, g, prm(r, "model.layers.%d.mlp.down_proj.weight", l), NULL, n, F, C);
        for (int i = 0; i < n * C; i++) x[i] += tmp[i];
    }
    rms(ln, x, prm(r, "model.norm.weight", 0), n, C, c->rms_norm_eps);
    const double *head = c->tie_word_embeddings ? wte : prm(r, "lm_head.weight", 0);
    double loss = 0;
    for (int t = s->start; t < n; t++) {
        lin(lg, ln + (t - 1) * C, head, NULL, 1, C, V);
        double mx = -INFINITY, sum = 0, sz = 0;
        for (int i = 0; i < V; i++) if (lg[i] / TEMP > mx) mx = lg[i] / TEMP;
        for (int i = 0; i < V; i++) sum += exp(lg[i] / TEMP - mx);
        double lse = mx + log(sum);
        for (int i = 0; i < V; i++) sz += exp(lg[i] / TEMP - lse) * (lg[i] / TEMP - lse);
        double lp = lg[s->ids[t]] / TEMP - lse, H = -sz;
        loss += w[t - s->start] * lp + u[t - s->start] * H;
        if (logp) logp[t - s->start] = lp;
        if (ent) ent[t - s->start] = H;
    }
    free(x); free(ln); free(q); free(k); free(v); free(att); free(tmp); free(g); free(up); free(lg);
    return loss;
}

static double ref_loss(const ref *r, const skpo_seq *seqs, int nseq, const double *w, const double *u) {
    double L = 0;
    for (int i = 0, o = 0; i < nseq; o += seqs[i].n - seqs[i].start, i++) L += ref_seq(r, &seqs[i], w + o, u + o, NULL, NULL);
    return L;
}

static void check_config(const char *json) {
    skpo_config c;
    skpo_err err = {0};
    CHECK(skpo_config_parse(json, strlen(json), &c, &err) == SKPO_OK);
    skpo_model *m;
    skpo_model_opts o = {.trainable = 1};
    CHECK(skpo_model_init_random(&c, &o, 42, 0.3, &m, &err) == SKPO_OK);
    ref r = {.c = skpo_model_config(m)};
    r.np = skpo_model_params(m, &r.ps);
    r.off = malloc(r.np * sizeof(size_t));
    size_t tot = 0;
    for (int i = 0; i < r.np; i++) r.off[i] = tot, tot += r.ps[i].numel;
    r.P = malloc(tot * 8);
    srand(3);
    for (int i = 0; i < r.np; i++) // norms and biases away from 1 / 0 so their gradients matter
        for (size_t j = 0; j < r.ps[i].numel; j++) {
            if (strstr(r.ps[i].name, "norm")) r.ps[i].data[j] = 1.0f + 0.3f * ((float)rand() / RAND_MAX - 0.5f);
            if (strstr(r.ps[i].name, "bias")) r.ps[i].data[j] = 0.2f * ((float)rand() / RAND_MAX - 0.5f);
            r.P[r.off[i] + j] = r.ps[i].data[j];
        }
    int32_t a[] = {3, 7, 1, 12, 5, 9, 2}, b[] = {4, 4, 11, 0, 8};
    skpo_seq seqs[2] = {{a, 7, 2}, {b, 5, 1}};
    int S = 5 + 4;
    double w[9], u[9];
    float fw[9], fu[9], lp[9], ent[9];
    for (int i = 0; i < S; i++) fw[i] = (float)(w[i] = 0.5 + 0.1 * i), fu[i] = (float)(u[i] = 0.3 - 0.07 * i);
    CHECK(skpo_model_train_forward(m, seqs, 2, (float)TEMP, lp, ent, &err) == SKPO_OK);
    double rlp[9], rent[9];
    ref_seq(&r, &seqs[0], w, u, rlp, rent);
    ref_seq(&r, &seqs[1], w + 5, u + 5, rlp + 5, rent + 5);
    for (int i = 0; i < S; i++) {
        CHECK_NEAR(lp[i], rlp[i], 2e-5);
        CHECK_NEAR(ent[i], rent[i], 2e-5);
    }
    CHECK(skpo_model_train_backward(m, fw, fu, &err) == SKPO_OK);
    double worst = 0;
    const char *wn = "";
    for (int i = 0; i < r.np; i++) {
        double mx = 0, md = 0;
        for (size_t j = 0; j < r.ps[i].numel; j++) {
            double *p = &r.P[r.off[i] + j], save = *p, h = 1e-5;
            *p = save + h;
            double lp1 = ref_loss(&r, seqs, 2, w, u);
            *p = save - h;
            double lm = ref_loss(&r, seqs, 2, w, u);
            *p = save;
            double fd = (lp1 - lm) / (2 * h);
            if (fabs(fd) > mx) mx = fabs(fd);
            double d = fabs(fd - r.ps[i].grad[j]);
            if (d > md) md = d;
        }
        double rel = md / (mx > 1e-8 ? mx : 1e-8);
        CHECK_MSG(mx > 1e-6, "%s has a zero gradient", r.ps[i].name);
        if (rel > worst) worst = rel, wn = r.ps[i].name;
    }
    CHECK_MSG(worst <= 1e-3, "worst rel err %g at %s", worst, wn);
    printf("# %s: %d tensors, worst rel err %.2e (%s)\n", c.model_type, r.np, worst, wn);
    free(r.P);
    free(r.off);
    skpo_model_free(m);
}

static void qwen2_untied_gradients_match_finite_differences(void) {
    check_config("{\"model_type\":\"qwen2\",\"vocab_size\":17,\"hidden_size\":8,\"intermediate_size\":12,"
                 "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"rope_theta\":100.0}");
}

static void llama_tied_bias_llama3_rope_gradients_match_finite_differences(void) {
    check_config("{\"model_type\":\"llama\",\"vocab_size\":19,\"hidden_size\":8,\"intermediate_size\":12,"
                 "\"num_hidden_layers\":2,\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":6,"
                 "\"tie_word_embeddings\":true,\"attention_bias\":true,\"rope_theta\":50.0,"
                 "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":3.0,\"low_freq_factor\":1.0,"
                 "\"high_freq_factor\":2.0,\"original_max_position_embeddings\":8}}");
}

int main(void) {
    RUN(qwen2_untied_gradients_match_finite_differences);
    RUN(llama_tied_bias_llama3_rope_gradients_match_finite_differences);
    return TEST_SUMMARY();
}
