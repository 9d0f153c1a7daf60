/*
 * lora.c - see lora.h. Sections: configuration, the adapter's tensors and
 * PEFT's initialisation, the PEFT folder (read / write), the low-rank path
 * (forward / backward hooks), attaching, an adapter folder's base. What calls
 * the model's public API (merge, loading a policy, the trainer's view) is in
 * policy.c: the backends call the hooks here, so this file calls no model.c
 * function (no circle model.c -> backend -> lora.c -> model.c).
 */
#define _GNU_SOURCE
#include "model/lora.h"
#include "model/model_impl.h"
#include "base/rng.h"

#include "model/safetensors.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

// --- configuration ----------------------------------------------------------------------

static const char *SHORT[SKPO_LORA_NT] = {"q", "k", "v", "o", "gate", "up", "down"};
static const char *PEFT[SKPO_LORA_NT] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
static const char *BLOCK[SKPO_LORA_NT] = {"self_attn", "self_attn", "self_attn", "self_attn", "mlp", "mlp", "mlp"};

void skpo_lora_cfg_default(skpo_lora_cfg *c) {
    memset(c, 0, sizeof *c);
    c->rank = 0;   // off until asked for
    c->alpha = 32;
    c->targets = SKPO_LORA_ALL;
    c->dropout = 0;
}

static int target_of(const char *s, size_t n) {
    for (int t = 0; t < SKPO_LORA_NT; t++)
        if ((strlen(SHORT[t]) == n && !strncmp(s, SHORT[t], n)) || (strlen(PEFT[t]) == n && !strncmp(s, PEFT[t], n)))
            return t;
    return -1;
}

skpo_status skpo_lora_targets_parse(const char *list, unsigned *out, skpo_err *err) {
    *out = 0;
    if (!strcmp(list, "all-linear") || !strcmp(list, "all")) {
        *out = SKPO_LORA_ALL;
        return SKPO_OK;
    }
    for (const char *p = list;;) {
        size_t n = strcspn(p, ",");
        int t = target_of(p, n);
        if (t < 0)
            return skpo_err_set(err, SKPO_ERANGE, "unknown LoRA target '%.*s' (known: q,k,v,o,gate,up,down or q_proj, ..., down_proj)",
                                (int)n, p);
        *out |= 1u << t;
        if (!p[n]) break;
        p += n + 1;
    }
    return SKPO_OK;
}

const char *skpo_lora_targets_str(unsigned targets, char *buf, size_t n) {
    size_t o = 0;
    buf[0] = 0;
    for (int t = 0; t < SKPO_LORA_NT; t++)
        if (targets >> t & 1) o += (size_t)snprintf(buf + o, o < n ? n - o : 0, "%s%s", o ? "," : "", PEFT[t]);
    return buf;
}

skpo_status skpo_lora_cfg_check(const skpo_lora_cfg *c, skpo_err *err) {
    if (c->rank < 1) return skpo_err_set(err, SKPO_ERANGE, "LoRA rank %d must be at least 1", c->rank);
    if (!(c->alpha > 0) || !isfinite(c->alpha)) return skpo_err_set(err, SKPO_ERANGE, "LoRA alpha %g must be positive", c->alpha);
    if (!c->targets || (c->targets & ~SKPO_LORA_ALL)) return skpo_err_set(err, SKPO_ERANGE, "LoRA needs at least one target");
    if (c->dropout != 0)
        return skpo_err_set(err, SKPO_EUNSUPPORTED, "LoRA dropout %g: only 0 is implemented (PEFT's default)", c->dropout);
    return SKPO_OK;
}

double skpo_lora_scale(const skpo_lora_cfg *c) { return c->rslora ? c->alpha / sqrt((double)c->rank) : c->alpha / c->rank; }

// --- the tensors -------------------------------------------------------------------------

typedef struct lora_mod {
    float *A, *B;          // (r, K), (O, r); NULL when the target is not adapted
    float *dA, *dB;
    int K, O;
} lora_mod;

struct skpo_lora {
    skpo_lora_cfg c;
    float scale;
    int L;
    lora_mod *mod;         // (L * NT)
    skpo_param *params;    // A, B of every adapted module, layer-major
    int nparams;
    float *mem, *grad;
    size_t numel;
    char *base;            // base_model_name_or_path read from a folder
    void *pol;             // skpo_policy_of_lora's context
    void *dev;             // a backend's device copy (lora_cuda.c; NULL until a CUDA pass)
    void (*dev_free)(void *dev); // how to free it (set with it)
};

static void dims(const skpo_config *mc, int t, int *K, int *O) {
    int C = mc->hidden_size, F = mc->intermediate_size;
    int QD = mc->num_attention_heads * mc->head_dim, KVD = mc->num_key_value_heads * mc->head_dim;
    static const int in_is[SKPO_LORA_NT] = {0, 0, 0, 1, 0, 0, 2};   // 0: C, 1: QD, 2: F
    int out[SKPO_LORA_NT] = {QD, KVD, KVD, C, F, F, C};
    *K = in_is[t] == 0 ? C : in_is[t] == 1 ? QD : F;
    *O = out[t];
}

static void param_name(char *buf, size_t n, int l, int t, char which) {
    snprintf(buf, n, "base_model.model.model.layers.%d.%s.%s.lora_%c.weight", l, BLOCK[t], PEFT[t], which);
}

static skpo_status lora_alloc(const skpo_config *mc, const skpo_lora_cfg *c, int trainable, skpo_lora **out,
                              skpo_err *err) {
    skpo_status s = skpo_lora_cfg_check(c, err);
    if (s) return s;
    skpo_lora *lo = skpo_xcalloc(1, sizeof *lo);
    lo->c = *c;
    lo->scale = (float)skpo_lora_scale(c);
    lo->L = mc->num_hidden_layers;
    lo->mod = skpo_xcalloc((size_t)lo->L * SKPO_LORA_NT, sizeof *lo->mod);
    size_t r = (size_t)c->rank;
    for (int l = 0; l < lo->L; l++)
        for (int t = 0; t < SKPO_LORA_NT; t++) {
            lora_mod *md = &lo->mod[l * SKPO_LORA_NT + t];
            dims(mc, t, &md->K, &md->O);
            if (c->targets >> t & 1) lo->numel += r * (size_t)(md->K + md->O), lo->nparams += 2;
        }
    lo->mem = calloc(lo->numel, sizeof(float));
    lo->grad = trainable ? calloc(lo->numel, sizeof(float)) : NULL;
    if (!lo->mem || (trainable && !lo->grad)) {
        skpo_lora_free(lo);
        return skpo_err_set(err, SKPO_ENOMEM, "cannot allocate %zu MiB of LoRA tensors", lo->numel * 4 >> 20);
    }
    lo->params = skpo_xcalloc((size_t)lo->nparams, sizeof *lo->params);
    size_t off = 0;
    int k = 0;
    char name[128];
    for (int l = 0; l < lo->L; l++)
        for (int t = 0; t < SKPO_LORA_NT; t++) {
            lora_mod *md = &lo->mod[l * SKPO_LORA_NT + t];
            if (!(c->targets >> t & 1)) continue;
            for (int w = 0; w < 2; w++) {
                skpo_param *p = &lo->params[k++];
                param_name(name, sizeof name, l, t, w ? 'B' : 'A');
                p->name = skpo_xstrdup(name);
                p->ndim = 2;
                p->shape[0] = w ? md->O : c->rank;
                p->shape[1] = w ? c->rank : md->K;
                p->numel = (size_t)p->shape[0] * (size_t)p->shape[1];
                p->data = lo->mem + off;
                p->grad = lo->grad ? lo->grad + off : NULL;
                off += p->numel;
                if (w) md->B = p->data, md->dB = p->grad;
                else md->A = p->data, md->dA = p->grad;
            }
        }
    *out = lo;
    return SKPO_OK;
}

void skpo_lora_free(skpo_lora *lo) {
    if (!lo) return;
    for (int i = 0; i < lo->nparams; i++) free((char *)lo->params[i].name);
    free(lo->params);
    free(lo->mod);
    free(lo->mem);
    free(lo->grad);
    free(lo->base);
    free(lo->pol);
    if (lo->dev_free) lo->dev_free(lo->dev);
    free(lo);
}

skpo_status skpo_lora_new(const skpo_config *mc, const skpo_lora_cfg *c, int trainable, skpo_lora **out,
                          skpo_err *err) {
    skpo_status s = lora_alloc(mc, c, trainable, out, err);
    if (s) return s;
    skpo_lora *lo = *out;
    // torch.nn.init.kaiming_uniform_(A, a=sqrt(5)): gain sqrt(2 / (1 + 5)), bound
    // gain * sqrt(3 / fan_in) = 1 / sqrt(fan_in); B stays 0 (calloc).
    for (int i = 0; i < lo->nparams; i += 2) {
        skpo_param *A = &lo->params[i];
        double bound = 1.0 / sqrt((double)A->shape[1]);
        uint64_t rng = c->seed * 0x100000001b3ull + (uint64_t)i * 0x9e3779b97f4a7c15ull;
        for (size_t j = 0; j < A->numel; j++) {
            double u = (double)(skpo_splitmix64(&rng) >> 11) * (1.0 / 9007199254740992.0);
            A->data[j] = (float)((2 * u - 1) * bound);
        }
    }
    return SKPO_OK;
}

const skpo_lora_cfg *skpo_lora_get_cfg(const skpo_lora *lo) { return &lo->c; }
const char *skpo_lora_base(const skpo_lora *lo) { return lo->base; }
int skpo_lora_params(skpo_lora *lo, skpo_param **params) {
    *params = lo->params;
    return lo->nparams;
}
void skpo_lora_zero_grad(skpo_lora *lo) {
    if (lo->grad) memset(lo->grad, 0, lo->numel * sizeof(float));
}

// --- the PEFT folder ---------------------------------------------------------------------

int skpo_lora_is_adapter_dir(const char *dir) {
    char *p = skpo_path_join(dir, SKPO_LORA_CONFIG_FILE);
    int ok = skpo_path_exists(p);
    free(p);
    return ok;
}

static int json_empty(const json_t *v) {
    return !v || json_is_null(v) || (json_is_object(v) && !json_object_size(v)) ||
           (json_is_array(v) && !json_array_size(v)) || json_is_false(v);
}

// adapter_config.json -> c (targets, rank, alpha, dropout, rslora) and base.
static skpo_status read_config(const char *path, skpo_lora_cfg *c, char **base, skpo_err *err) {
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) return skpo_err_set(err, SKPO_EFORMAT, "'%s': %s (line %d)", path, je.text, je.line);
    skpo_status s = SKPO_OK;
    skpo_lora_cfg_default(c);
    const char *pt = json_string_value(json_object_get(j, "peft_type"));
    json_t *r = json_object_get(j, "r"), *a = json_object_get(j, "lora_alpha"), *tm = json_object_get(j, "target_modules");
    json_t *dr = json_object_get(j, "lora_dropout");
    const char *bias = json_string_value(json_object_get(j, "bias"));
    static const char *unsupported[] = {"use_dora", "rank_pattern", "alpha_pattern", "modules_to_save",
                                        "fan_in_fan_out", "layers_to_transform", "trainable_token_indices",
                                        "lora_bias", "layer_replication", "target_parameters", NULL};
    if (!pt || strcmp(pt, "LORA")) s = skpo_err_set(err, SKPO_EFORMAT, "'%s': peft_type is not \"LORA\"", path);
    else if (!json_is_integer(r) || json_integer_value(r) < 1 || json_integer_value(r) > INT_MAX)
        s = skpo_err_set(err, SKPO_EFORMAT, "'%s': 'r' must be an integer >= 1 (rank 0 is no adapter)", path);
    else if (!json_is_number(a) || !(json_number_value(a) > 0))
        s = skpo_err_set(err, SKPO_EFORMAT, "'%s': 'lora_alpha' must be a positive number", path);
    else if (bias && strcmp(bias, "none"))
        s = skpo_err_set(err, SKPO_EUNSUPPORTED, "'%s': bias \"%s\" is not supported (only \"none\")", path, bias);
    for (int i = 0; !s && unsupported[i]; i++)
        if (!json_empty(json_object_get(j, unsupported[i])))
            s = skpo_err_set(err, SKPO_EUNSUPPORTED, "'%s': '%s' is not supported", path, unsupported[i]);
    if (!s) {
        c->rank = (int)json_integer_value(r);
        c->alpha = json_number_value(a);
        c->dropout = json_is_number(dr) ? json_number_value(dr) : 0;
        c->rslora = json_is_true(json_object_get(j, "use_rslora"));
        c->targets = 0;
        if (json_is_string(tm)) {
            if (strcmp(json_string_value(tm), "all-linear"))
                s = skpo_err_set(err, SKPO_EUNSUPPORTED, "'%s': target_modules pattern '%s' is not supported (a list or \"all-linear\")",
                                 path, json_string_value(tm));
            else c->targets = SKPO_LORA_ALL;
        } else if (json_is_array(tm)) {
            size_t i;
            json_t *v;
            json_array_foreach(tm, i, v) {
                const char *n = json_string_value(v);
                int t = n ? target_of(n, strlen(n)) : -1;
                if (t < 0) {
                    s = skpo_err_set(err, SKPO_ERANGE, "'%s': unknown target module '%s' (skpo adapts q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)",
                                     path, n ? n : "(not a string)");
                    break;
                }
                c->targets |= 1u << t;
            }
        } else s = skpo_err_set(err, SKPO_EFORMAT, "'%s': 'target_modules' missing", path);
    }
    // Training reads the dropout of the config; inference ignores dropout (PEFT does too).
    const char *b = json_string_value(json_object_get(j, "base_model_name_or_path"));
    if (!s && base) *base = b ? skpo_xstrdup(b) : NULL;
    json_decref(j);
    return s;
}

// "base_model.model.model.layers.<l>.<block>.<proj>.lora_<A|B>.weight" -> l, t, which.
static int parse_name(const char *n, int *l, int *t, char *which) {
    const char *pre = "base_model.model.model.layers.";
    size_t pl = strlen(pre);
    if (strncmp(n, pre, pl)) return 0;
    char *e;
    long v = strtol(n + pl, &e, 10);
    if (e == n + pl || *e != '.' || v < 0 || v > INT_MAX) return 0;
    for (int k = 0; k < SKPO_LORA_NT; k++) {
        char tail[64];
        for (int w = 0; w < 2; w++) {
            snprintf(tail, sizeof tail, ".%s.%s.lora_%c.weight", BLOCK[k], PEFT[k], w ? 'B' : 'A');
            if (!strcmp(e, tail)) {
                *l = (int)v, *t = k, *which = w ? 'B' : 'A';
                return 1;
            }
        }
    }
    return 0;
}

skpo_status skpo_lora_load(const char *dir, const skpo_config *mc, int trainable, skpo_lora **out, skpo_err *err) {
    *out = NULL;
    skpo_status s = skpo_dir_check_complete(dir, err);  // a half-saved adapter is never loaded
    if (s) return s;
    char *cp = skpo_path_join(dir, SKPO_LORA_CONFIG_FILE), *wp = skpo_path_join(dir, SKPO_LORA_WEIGHTS_FILE);
    skpo_lora_cfg c;
    char *base = NULL;
    s = read_config(cp, &c, &base, err);
    if (!s && trainable && c.dropout != 0)
        s = skpo_err_set(err, SKPO_EUNSUPPORTED, "'%s': lora_dropout %g: only 0 is implemented for training", cp, c.dropout);
    c.dropout = 0;
    skpo_st *st = NULL;
    if (!s) s = skpo_st_open_file(wp, &st, err);
    skpo_lora *lo = NULL;
    if (!s) s = lora_alloc(mc, &c, trainable, &lo, err);
    // Every tensor of the file must be one of ours, of the base's shape.
    for (int i = 0; !s && i < skpo_st_count(st); i++) {
        const skpo_st_tensor *tt = skpo_st_get(st, i);
        int l, t;
        char w;
        if (!parse_name(tt->name, &l, &t, &w))
            s = skpo_err_set(err, SKPO_EFORMAT, "'%s': tensor '%s' is not a LoRA A/B weight of a targeted projection", wp, tt->name);
        else if (l >= mc->num_hidden_layers)
            s = skpo_err_set(err, SKPO_ERANGE, "'%s': tensor '%s' is for layer %d, the base has %d layers (an adapter for another base?)",
                             wp, tt->name, l, mc->num_hidden_layers);
        else if (!(c.targets >> t & 1))
            s = skpo_err_set(err, SKPO_EFORMAT, "'%s': tensor '%s' is not in target_modules", wp, tt->name);
    }
    for (int i = 0; !s && i < lo->nparams; i++) {
        skpo_param *p = &lo->params[i];
        const skpo_st_tensor *tt = skpo_st_find(st, p->name);
        if (!tt) s = skpo_err_set(err, SKPO_ENOTFOUND, "'%s': tensor '%s' missing", wp, p->name);
        else if (tt->ndim != 2 || tt->shape[0] != p->shape[0] || tt->shape[1] != p->shape[1])
            s = skpo_err_set(err, SKPO_ERANGE, "'%s': tensor '%s' has shape [%lld, %lld], the base needs [%lld, %lld] (an adapter for another base?)",
                             wp, p->name, (long long)tt->shape[0], (long long)(tt->ndim > 1 ? tt->shape[1] : 0),
                             (long long)p->shape[0], (long long)p->shape[1]);
        else s = skpo_st_read_f32(st, p->name, p->data, 2, p->shape, err);
        for (size_t k = 0; !s && k < p->numel; k++)
            if (!isfinite(p->data[k])) s = skpo_err_set(err, SKPO_ENUMERIC, "'%s': non-finite value in '%s'", wp, p->name);
    }
    skpo_st_close(st);
    free(cp);
    free(wp);
    if (s) {
        skpo_lora_free(lo);
        free(base);
        return s;
    }
    lo->base = base;
    *out = lo;
    return SKPO_OK;
}

skpo_status skpo_lora_save(const skpo_lora *lo, const char *dir, const char *base, skpo_err *err) {
    if (!base) base = lo->base;
    const skpo_lora_cfg *c = &lo->c;
    json_t *tm = json_array();
    for (int t = 0; t < SKPO_LORA_NT; t++)
        if (c->targets >> t & 1) json_array_append_new(tm, json_string(PEFT[t]));
    // The keys PEFT 0.x writes for a plain LoRA of a causal LM.
    json_t *j = json_object();
    json_object_set_new(j, "alpha_pattern", json_object());
    json_object_set_new(j, "auto_mapping", json_null());
    json_object_set_new(j, "base_model_name_or_path", base ? json_string(base) : json_null());
    json_object_set_new(j, "bias", json_string("none"));
    json_object_set_new(j, "fan_in_fan_out", json_false());
    json_object_set_new(j, "inference_mode", json_true());
    json_object_set_new(j, "init_lora_weights", json_true());
    json_object_set_new(j, "layers_pattern", json_null());
    json_object_set_new(j, "layers_to_transform", json_null());
    json_object_set_new(j, "lora_alpha", fmod(c->alpha, 1) == 0 ? json_integer((json_int_t)c->alpha) : json_real(c->alpha));
    json_object_set_new(j, "lora_dropout", json_real(c->dropout));
    json_object_set_new(j, "modules_to_save", json_null());
    json_object_set_new(j, "peft_type", json_string("LORA"));
    json_object_set_new(j, "r", json_integer(c->rank));
    json_object_set_new(j, "rank_pattern", json_object());
    json_object_set_new(j, "revision", json_null());
    json_object_set_new(j, "target_modules", tm);
    json_object_set_new(j, "task_type", json_string("CAUSAL_LM"));
    json_object_set_new(j, "use_dora", json_false());
    json_object_set_new(j, "use_rslora", c->rslora ? json_true() : json_false());
    char *txt = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(j);
    size_t n = strlen(txt);
    txt = skpo_xrealloc(txt, n + 2);
    txt[n] = '\n';
    char *cp = skpo_path_join(dir, SKPO_LORA_CONFIG_FILE), *wp = skpo_path_join(dir, SKPO_LORA_WEIGHTS_FILE);
    skpo_st_wtensor *t = skpo_xcalloc((size_t)lo->nparams, sizeof *t);
    for (int i = 0; i < lo->nparams; i++) {
        const skpo_param *p = &lo->params[i];
        t[i] = (skpo_st_wtensor){.name = p->name, .data = p->data, .ndim = 2, .shape = {p->shape[0], p->shape[1]}};
    }
    skpo_status s = skpo_st_write_file(wp, t, lo->nparams, SKPO_ST_F32, err);
    if (!s) s = skpo_write_file_atomic(cp, txt, n + 1, err);
    free(t);
    free(txt);
    free(cp);
    free(wp);
    return s;
}

// --- for the backends (model_impl.h) -------------------------------------------------------

void lora_mod_get(const skpo_lora *lo, int l, int t, const float **A, const float **B, float **dA, float **dB, int *K,
                  int *O) {
    const lora_mod *md = &lo->mod[l * SKPO_LORA_NT + t];
    *A = md->A, *B = md->B, *dA = md->dA, *dB = md->dB, *K = md->K, *O = md->O;
}
int lora_layers(const skpo_lora *lo) { return lo->L; }
void **lora_pol_slot(skpo_lora *lo) { return &lo->pol; }
float lora_scale_f(const skpo_lora *lo) { return lo->scale; }
void *lora_dev_get(const skpo_lora *lo) { return lo->dev; }
void lora_dev_set(skpo_lora *lo, void *dev, void (*dev_free)(void *dev)) {
    SKPO_ASSERT(!lo->dev);
    lo->dev = dev;
    lo->dev_free = dev_free;
}

// --- the low-rank path ----------------------------------------------------------------------

static const lora_mod *mod_of(const skpo_lora *lo, int l, int t) {
    const lora_mod *md = &lo->mod[l * SKPO_LORA_NT + t];
    return md->A ? md : NULL;
}

void skpo_lora_fwd(const skpo_lora *lo, const skpo_ops *op, int l, int t, float *y, const float *x, int N) {
    const lora_mod *md = mod_of(lo, l, t);
    if (!md || N <= 0) return;
    int r = lo->c.rank;
    float *u = skpo_xmalloc((size_t)N * r * sizeof(float));
    op->matmul(u, x, md->A, NULL, N, md->K, r, 0);                     // u = x A^T
    for (size_t i = 0; i < (size_t)N * r; i++) u[i] *= lo->scale;
    op->matmul(y, u, md->B, NULL, N, r, md->O, 1);                     // y += s u B^T
    free(u);
}

void skpo_lora_bwd(skpo_lora *lo, const skpo_ops *op, int l, int t, float *dx, const float *dy, const float *x, int N) {
    const lora_mod *md = mod_of(lo, l, t);
    if (!md || N <= 0) return;
    size_t r = (size_t)lo->c.rank;
    float *u = skpo_xmalloc((size_t)N * r * sizeof(float)), *du = skpo_xcalloc((size_t)N * r, sizeof(float));
    op->matmul(u, x, md->A, NULL, N, md->K, (int)r, 0);                // recomputed: N r K flops, no saved state
    for (size_t i = 0; i < (size_t)N * r; i++) u[i] *= lo->scale;
    op->matmul_backward(du, md->dB, NULL, dy, u, md->B, NULL, N, (int)r, md->O);   // du = dy B; dB += dy^T (s u)
    for (size_t i = 0; i < (size_t)N * r; i++) du[i] *= lo->scale;
    op->matmul_backward(dx, md->dA, NULL, du, x, md->A, NULL, N, md->K, (int)r);   // dx += s dy B A; dA += (s dy B)^T x
    free(u);
    free(du);
}

skpo_status skpo_lora_attach(skpo_model *m, skpo_lora *lo, skpo_err *err) {
    if (lo && lo->L != m->c.num_hidden_layers)
        return skpo_err_set(err, SKPO_ERANGE, "adapter has %d layers, the model %d", lo->L, m->c.num_hidden_layers);
    m->lora = lo;
    return SKPO_OK;
}

// --- an adapter folder's base --------------------------------------------------------------------------

skpo_status skpo_lora_base_of(const char *dir, char **base, skpo_err *err) {
    char *cp = skpo_path_join(dir, SKPO_LORA_CONFIG_FILE);
    skpo_lora_cfg c;
    char *b = NULL;
    skpo_status s = read_config(cp, &c, &b, err);
    if (!s && !b) s = skpo_err_set(err, SKPO_EFORMAT, "'%s': no base_model_name_or_path (pass the base with --model and this folder with --adapter)", cp);
    free(cp);
    if (s) return s;
    if (b[0] != '/' && !skpo_path_exists(b)) {
        char *rel = skpo_path_join(dir, b);
        if (skpo_path_exists(rel)) {
            free(b);
            b = rel;
        } else free(rel);
    }
    *base = b;
    return SKPO_OK;
}
