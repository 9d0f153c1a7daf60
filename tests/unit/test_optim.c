// test_optim.c - AdamW, warmup schedule and grad-norm clipping against
// torch.optim.AdamW + clip_grad_norm_ (tests/fixtures/update/adamw.json), the
// state file round trip, master weights and the non-finite guard.
#include "harness.h"
#include "base/bf16.h"
#include "train/optim.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FIX "tests/fixtures/update/"

typedef struct tparams {
    skpo_param p[3];
    char names[3][32];
} tparams;

static void tparams_init(tparams *t, json_t *c) {
    json_t *shapes = json_object_get(c, "shapes"), *init = json_object_get(c, "init");
    for (int i = 0; i < 3; i++) {
        json_t *sh = json_array_get(shapes, (size_t)i), *v = json_array_get(init, (size_t)i);
        skpo_param *p = &t->p[i];
        snprintf(t->names[i], sizeof t->names[i], "layer.%d.weight", i);
        p->name = t->names[i];
        p->ndim = (int)json_array_size(sh);
        p->numel = 1;
        for (int d = 0; d < p->ndim; d++) p->numel *= (size_t)(p->shape[d] = json_integer_value(json_array_get(sh, (size_t)d)));
        p->data = calloc(p->numel, sizeof(float));
        p->grad = calloc(p->numel, sizeof(float));
        for (size_t k = 0; k < p->numel; k++) p->data[k] = (float)json_number_value(json_array_get(v, k));
    }
}

static void tparams_free(tparams *t) {
    for (int i = 0; i < 3; i++) free(t->p[i].data), free(t->p[i].grad);
}

static void set_grads(tparams *t, json_t *g) {
    for (int i = 0; i < 3; i++)
        for (size_t k = 0; k < t->p[i].numel; k++)
            t->p[i].grad[k] = (float)json_number_value(json_array_get(json_array_get(g, (size_t)i), k));
}

static double max_rel_err(tparams *t, json_t *want) {
    double worst = 0;
    for (int i = 0; i < 3; i++)
        for (size_t k = 0; k < t->p[i].numel; k++) {
            double w = json_number_value(json_array_get(json_array_get(want, (size_t)i), k));
            double d = fabs(t->p[i].data[k] - w) / (1e-3 + fabs(w));
            if (!(d <= worst)) worst = d;   // NaN propagates
        }
    return worst;
}

static void adamw_with_warmup_and_clipping_matches_pytorch(void) {
    json_error_t je;
    json_t *root = json_load_file(FIX "adamw.json", 0, &je);
    CHECK_MSG(root != NULL, "%s", je.text);
    if (!root) return;
    json_t *cases = json_object_get(root, "cases");
    for (size_t ci = 0; ci < json_array_size(cases); ci++) {
        json_t *c = json_array_get(cases, ci);
        tparams t;
        tparams_init(&t, c);
        skpo_adamw_cfg cfg;
        skpo_adamw_cfg_default(&cfg);
        cfg.lr = json_number_value(json_object_get(c, "lr"));
        cfg.warmup_steps = (int)json_integer_value(json_object_get(c, "warmup"));
        cfg.decay_matrices_only = (int)json_integer_value(json_object_get(c, "decay_matrices_only"));
        skpo_optim *o = skpo_optim_new(&cfg, t.p, 3);
        json_t *ups = json_object_get(c, "updates");
        int clipped = 0;
        for (size_t u = 0; u < json_array_size(ups); u++) {
            json_t *up = json_array_get(ups, u);
            set_grads(&t, json_object_get(up, "grads"));
            int64_t step = json_integer_value(json_object_get(up, "step"));
            double lr = skpo_optim_lr(&cfg, step), norm = 0;
            CHECK_NEAR(lr, json_number_value(json_object_get(up, "lr")), 1e-12);
            skpo_err e = {0};
            CHECK(skpo_optim_step(o, t.p, 3, lr, &norm, &e) == SKPO_OK);
            double wn = json_number_value(json_object_get(up, "norm"));
            CHECK_NEAR(norm, wn, 1e-5 * wn);
            clipped += wn > 1.0;
            double err = max_rel_err(&t, json_object_get(up, "params"));
            CHECK_MSG(err < 2e-5, "case %zu update %zu: relative error %g", ci, u, err);
        }
        CHECK(clipped > 0 && clipped < (int)json_array_size(ups));   // both regimes exercised
        skpo_optim_free(o);
        tparams_free(&t);
    }
    json_decref(root);
}

static void warmup_is_linear_over_training_steps_then_constant(void) {
    skpo_adamw_cfg c;
    skpo_adamw_cfg_default(&c);
    CHECK_NEAR(skpo_optim_lr(&c, 1), 1e-7, 1e-20);
    CHECK_NEAR(skpo_optim_lr(&c, 5), 5e-7, 1e-20);
    CHECK_NEAR(skpo_optim_lr(&c, 10), 1e-6, 1e-20);
    CHECK_NEAR(skpo_optim_lr(&c, 500), 1e-6, 1e-20);
    c.warmup_steps = 0;
    CHECK_NEAR(skpo_optim_lr(&c, 1), 1e-6, 1e-20);
}

static void nonfinite_gradient_norm_leaves_state_untouched(void) {
    float d[4] = {1, 2, 3, 4}, g[4] = {0.1f, NAN, 0, 0}, d0[4];
    memcpy(d0, d, sizeof d);
    skpo_param p = {"w", d, g, 4, 1, {4, 0}};
    skpo_adamw_cfg c;
    skpo_adamw_cfg_default(&c);
    skpo_optim *o = skpo_optim_new(&c, &p, 1);
    skpo_err e = {0};
    double norm = 0;
    CHECK(skpo_optim_step(o, &p, 1, 1e-3, &norm, &e) == SKPO_ENUMERIC);
    CHECK(isnan(norm) && o->t == 0 && !memcmp(d, d0, sizeof d) && o->m[0][0] == 0);
    skpo_optim_free(o);
}

// The first update writes the moments without reading them (optim.c: reading
// calloc'd pages first made every page fault twice). Its bits must be the
// general rule's with zero moments, signed zeros and extremes included.
static void first_update_equals_the_general_rule_bit_for_bit(void) {
    enum { N = 12 };
    float g[N] = {0.0f, -0.0f, 1e-30f, -1e-30f, 0.5f, -0.5f, 3.0f, -7.0f, 1e20f, -1e20f, 1e-3f, 2.5e-8f};
    float d[N], want[N], wm[N], wv[N];
    for (int k = 0; k < N; k++) d[k] = 0.1f * (float)(k - 6); // 0 at k = 6
    skpo_param p = {"w", d, g, N, 2, {3, 4}};
    skpo_adamw_cfg c;
    skpo_adamw_cfg_default(&c);
    c.weight_decay = 0.01;
    c.max_grad_norm = 0; // coef 1: the gradients as written
    const float lr = 1e-3f, b1 = (float)c.beta1, b2 = (float)c.beta2, eps = (float)c.eps;
    const float keep = (float)(1.0 - (double)lr * c.weight_decay), bc1 = (float)(1.0 - c.beta1);
    const float bc2s = (float)sqrt(1.0 - c.beta2), step = lr / bc1;
    for (int k = 0; k < N; k++) { // optim.c's general loop with m = v = 0
        float x = d[k] * keep, m = 0.0f, v = 0.0f, gk = g[k] * 1.0f;
        m += (1.0f - b1) * (gk - m);
        v = v * b2 + (1.0f - b2) * gk * gk;
        float denom = sqrtf(v) / bc2s + eps;
        want[k] = x - step * (m / denom), wm[k] = m, wv[k] = v;
    }
    skpo_optim *o = skpo_optim_new(&c, &p, 1);
    skpo_err e = {0};
    CHECK(skpo_optim_step(o, &p, 1, lr, NULL, &e) == SKPO_OK);
    CHECK_MSG(!memcmp(d, want, sizeof d), "weights differ from the general rule");
    CHECK_MSG(!memcmp(o->m[0], wm, sizeof wm) && !memcmp(o->v[0], wv, sizeof wv), "moments differ from the general rule");
    skpo_optim_free(o);
}

static char *tmpdir(void) {
    char *d = strdup("/tmp/skpo-optim-XXXXXX");
    return mkdtemp(d);
}

static void state_round_trip_continues_bit_identically(void) {
    // Two updates in one optimizer == one update, save, load into a fresh
    // optimizer, one more update (bytes compared).
    float a[6] = {0.5f, -1, 2, 0.25f, 3, -2}, b[6], g1[6] = {0.3f, -0.2f, 0.1f, 0.7f, -0.5f, 0.05f},
          g2[6] = {-0.1f, 0.4f, 0.2f, -0.3f, 0.6f, 0.0f}, gr[6];
    memcpy(b, a, sizeof a);
    skpo_param pa = {"m.w", a, gr, 6, 2, {2, 3}}, pb = {"m.w", b, gr, 6, 2, {2, 3}};
    skpo_adamw_cfg c;
    skpo_adamw_cfg_default(&c);
    c.lr = 1e-2;
    skpo_err e = {0};
    skpo_optim *oa = skpo_optim_new(&c, &pa, 1), *ob = skpo_optim_new(&c, &pb, 1);
    memcpy(gr, g1, sizeof gr);
    CHECK(skpo_optim_step(oa, &pa, 1, c.lr, NULL, &e) == SKPO_OK);
    CHECK(skpo_optim_step(ob, &pb, 1, c.lr, NULL, &e) == SKPO_OK);
    char *dir = tmpdir(), *path = skpo_path_join(dir, "optim.safetensors");
    CHECK(skpo_optim_save(ob, &pb, 0, path, &e) == SKPO_OK);
    skpo_optim_free(ob);
    ob = skpo_optim_new(&c, &pb, 1);
    int used = -1;
    CHECK(skpo_optim_load(ob, &pb, SKPO_DT_F32, path, &used, &e) == SKPO_OK);
    CHECK(used == 0 && ob->t == 1);
    memcpy(gr, g2, sizeof gr);
    CHECK(skpo_optim_step(oa, &pa, 1, c.lr, NULL, &e) == SKPO_OK);
    CHECK(skpo_optim_step(ob, &pb, 1, c.lr, NULL, &e) == SKPO_OK);
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(oa->v[0], ob->v[0], sizeof a) == 0);
    skpo_optim_free(oa);
    skpo_optim_free(ob);
    skpo_rm_rf(dir, &e);
    free(path);
    free(dir);
}

static void master_weights_restore_fp32_only_when_checkpoint_matches(void) {
    float w[3] = {0.123456f, -1.000123f, 7.654321f}, r[3], gr[3] = {0};
    skpo_param p = {"x", w, gr, 3, 1, {3, 0}};
    skpo_adamw_cfg c;
    skpo_adamw_cfg_default(&c);
    skpo_optim *o = skpo_optim_new(&c, &p, 1);
    skpo_err e = {0};
    char *dir = tmpdir(), *path = skpo_path_join(dir, "optim.safetensors");
    CHECK(skpo_optim_save(o, &p, 1, path, &e) == SKPO_OK);
    // What a bf16 checkpoint of w loads as:
    for (int i = 0; i < 3; i++) r[i] = skpo_bf16_round(w[i]);
    skpo_param q = {"x", r, gr, 3, 1, {3, 0}};
    int used = 0;
    CHECK(skpo_optim_load(o, &q, SKPO_DT_BF16, path, &used, &e) == SKPO_OK);
    CHECK(used == 1 && !memcmp(r, w, sizeof w));
    // Weights edited since the save: masters are not used.
    for (int i = 0; i < 3; i++) r[i] = skpo_bf16_round(w[i]);
    r[1] = 5.0f;
    float keep[3];
    memcpy(keep, r, sizeof r);
    CHECK(skpo_optim_load(o, &q, SKPO_DT_BF16, path, &used, &e) == SKPO_OK);
    CHECK(used == 0 && !memcmp(r, keep, sizeof r));
    skpo_optim_free(o);
    skpo_rm_rf(dir, &e);
    free(path);
    free(dir);
}

static void state_of_another_model_is_rejected_by_name_and_size(void) {
    float w[4] = {0}, gr[4] = {0};
    skpo_param p = {"a", w, gr, 4, 1, {4, 0}}, q = {"b", w, gr, 4, 1, {4, 0}}, s = {"a", w, gr, 3, 1, {3, 0}};
    skpo_adamw_cfg c;
    skpo_adamw_cfg_default(&c);
    skpo_optim *o = skpo_optim_new(&c, &p, 1), *oq = skpo_optim_new(&c, &q, 1), *os = skpo_optim_new(&c, &s, 1);
    skpo_err e = {0};
    char *dir = tmpdir(), *path = skpo_path_join(dir, "optim.safetensors");
    CHECK(skpo_optim_save(o, &p, 0, path, &e) == SKPO_OK);
    int used;
    CHECK(skpo_optim_load(oq, &q, SKPO_DT_F32, path, &used, &e) == SKPO_ENOTFOUND);
    CHECK(strstr(e.msg, "exp_avg.b") != NULL);
    CHECK(skpo_optim_load(os, &s, SKPO_DT_F32, path, &used, &e) == SKPO_ERANGE);
    CHECK(skpo_write_file_atomic(path, "garbage!", 8, &e) == SKPO_OK);
    CHECK(skpo_optim_load(o, &p, SKPO_DT_F32, path, &used, &e) == SKPO_EFORMAT);
    skpo_optim_free(o);
    skpo_optim_free(oq);
    skpo_optim_free(os);
    skpo_rm_rf(dir, &e);
    free(path);
    free(dir);
}

// A rank writing its shard copies flat ranges of the state that cut through
// parameters; the ZeRO-1 ranges tile the whole state, in multiples of 4 but
// the last, exactly as the device optimizer slices it (optim_dev.c).
static void flat_ranges_copy_the_moments_across_parameter_boundaries(void) {
    float a[5] = {1, 2, 3, 4, 5}, b[6] = {6, 7, 8, 9, 10, 11}, g[11];
    for (int i = 0; i < 11; i++) g[i] = 0.1f * (float)(i + 1) * (i % 2 ? -1 : 1);
    skpo_param p[2] = {{"p.a", a, g, 5, 1, {5, 0}}, {"p.b", b, g + 5, 6, 2, {2, 3}}};
    skpo_adamw_cfg c;
    skpo_adamw_cfg_default(&c);
    skpo_err e = {0};
    skpo_optim *o = skpo_optim_new(&c, p, 2);
    CHECK(skpo_optim_step(o, p, 2, 1e-2, NULL, &e) == SKPO_OK);
    float *m, *v;
    CHECK(skpo_optim_copy_range(o, 3, 9, &m, &v, &e) == SKPO_OK);
    for (int k = 3; k < 9; k++) {
        float wm = k < 5 ? o->m[0][k] : o->m[1][k - 5], wv = k < 5 ? o->v[0][k] : o->v[1][k - 5];
        CHECK_MSG(m[k - 3] == wm && v[k - 3] == wv && wm != 0, "element %d", k);
    }
    free(m), free(v);
    CHECK(skpo_optim_copy_range(o, 8, 12, &m, &v, &e) == SKPO_ERANGE && m == NULL);
    size_t end = 0;
    for (int r = 0; r < 3; r++) {
        size_t x, y;
        skpo_optim_zero_range(37, r, 3, &x, &y);
        CHECK(x == end && (r == 2 ? y == 37 : y - x == 12));
        end = y;
    }
    skpo_optim_free(o);
}

int main(void) {
    RUN(adamw_with_warmup_and_clipping_matches_pytorch);
    RUN(warmup_is_linear_over_training_steps_then_constant);
    RUN(nonfinite_gradient_norm_leaves_state_untouched);
    RUN(first_update_equals_the_general_rule_bit_for_bit);
    RUN(state_round_trip_continues_bit_identically);
    RUN(master_weights_restore_fp32_only_when_checkpoint_matches);
    RUN(state_of_another_model_is_rejected_by_name_and_size);
    RUN(flat_ranges_copy_the_moments_across_parameter_boundaries);
    return TEST_SUMMARY();
}
