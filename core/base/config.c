/*
 * config.c - read and write Hugging Face config.json for Qwen2 / Llama (config.h).
 *
 * Both the transformers 4 layout (rope_theta + rope_scaling) and the
 * transformers 5 layout (rope_parameters holding rope_type and rope_theta) are
 * read; we always write the 4.x layout, which 5.x still loads. What we cannot
 * run is rejected by name: another model_type, a rope type other than
 * default/llama3, a hidden_act other than silu, Llama MLP bias, sliding window.
 */
#include "base/config.h"

#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

// --- reading helpers -----------------------------------------------------------

typedef struct cfg_ctx {
    const char *what;   // for messages: the path or "config"
    skpo_err *err;
} cfg_ctx;

// Integer field; `def` when absent or null (required => error when absent).
static skpo_status get_int(cfg_ctx *x, json_t *o, const char *key, int required, long def, long min,
                           long max, int *out) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (required) return skpo_err_set(x->err, SKPO_ENOTFOUND, "%s: missing field '%s'", x->what, key);
        *out = (int)def;
        return SKPO_OK;
    }
    if (!json_is_integer(v)) return skpo_err_set(x->err, SKPO_ETYPE, "%s: field '%s' is not an integer", x->what, key);
    json_int_t i = json_integer_value(v);
    if (i < min || i > max)
        return skpo_err_set(x->err, SKPO_ERANGE, "%s: field '%s' = %lld out of range [%ld, %ld]", x->what, key,
                            (long long)i, min, max);
    *out = (int)i;
    return SKPO_OK;
}

static skpo_status get_num(cfg_ctx *x, json_t *o, const char *key, double def, double *out) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return SKPO_OK;
    }
    if (!json_is_number(v)) return skpo_err_set(x->err, SKPO_ETYPE, "%s: field '%s' is not a number", x->what, key);
    *out = json_number_value(v);
    if (!isfinite(*out) || *out <= 0)
        return skpo_err_set(x->err, SKPO_ERANGE, "%s: field '%s' must be a positive number", x->what, key);
    return SKPO_OK;
}

static skpo_status get_bool(cfg_ctx *x, json_t *o, const char *key, int def, int *out) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return SKPO_OK;
    }
    if (!json_is_boolean(v)) return skpo_err_set(x->err, SKPO_ETYPE, "%s: field '%s' is not a boolean", x->what, key);
    *out = json_is_true(v);
    return SKPO_OK;
}

static skpo_status get_eos(cfg_ctx *x, json_t *o, skpo_config *c) {
    json_t *v = json_object_get(o, "eos_token_id");
    c->n_eos = 0;
    if (!v || json_is_null(v)) return SKPO_OK;
    if (json_is_integer(v)) {
        c->eos_token_ids[c->n_eos++] = (int)json_integer_value(v);
        return SKPO_OK;
    }
    if (!json_is_array(v)) return skpo_err_set(x->err, SKPO_ETYPE, "%s: 'eos_token_id' is not an integer or list", x->what);
    if (json_array_size(v) > SKPO_MAX_EOS)
        return skpo_err_set(x->err, SKPO_ERANGE, "%s: more than %d eos_token_id values", x->what, SKPO_MAX_EOS);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > INT32_MAX)
            return skpo_err_set(x->err, SKPO_ETYPE, "%s: 'eos_token_id' holds a non-id", x->what);
        c->eos_token_ids[c->n_eos++] = (int)json_integer_value(e);
    }
    return SKPO_OK;
}

// rope_scaling (4.x) or rope_parameters (5.x): null/"default" or "llama3".
static skpo_status get_rope(cfg_ctx *x, json_t *o, skpo_config *c) {
    json_t *rp = json_object_get(o, "rope_parameters");
    json_t *rs = json_object_get(o, "rope_scaling");
    json_t *r = (rs && !json_is_null(rs)) ? rs : rp;
    skpo_status st = get_num(x, o, "rope_theta", 10000.0, &c->rope_theta);
    if (st) return st;
    c->rope_llama3 = 0;
    if (!r || json_is_null(r)) return SKPO_OK;
    if (!json_is_object(r)) return skpo_err_set(x->err, SKPO_ETYPE, "%s: 'rope_scaling' is not an object", x->what);
    if (rp && json_is_object(rp) && json_object_get(rp, "rope_theta"))
        if ((st = get_num(x, rp, "rope_theta", c->rope_theta, &c->rope_theta))) return st;
    json_t *t = json_object_get(r, "rope_type");
    if (!t) t = json_object_get(r, "type");
    const char *type = json_is_string(t) ? json_string_value(t) : "default";
    if (!strcmp(type, "default")) return SKPO_OK;
    if (strcmp(type, "llama3"))
        return skpo_err_set(x->err, SKPO_EUNSUPPORTED, "%s: rope_scaling type '%s' is not supported (default, llama3)",
                            x->what, type);
    c->rope_llama3 = 1;
    if ((st = get_num(x, r, "factor", 8.0, &c->rope_factor))) return st;
    if ((st = get_num(x, r, "low_freq_factor", 1.0, &c->rope_low_freq_factor))) return st;
    if ((st = get_num(x, r, "high_freq_factor", 4.0, &c->rope_high_freq_factor))) return st;
    if ((st = get_int(x, r, "original_max_position_embeddings", 0, 8192, 1, INT32_MAX,
                      &c->rope_original_max_position_embeddings)))
        return st;
    if (c->rope_high_freq_factor <= c->rope_low_freq_factor)
        return skpo_err_set(x->err, SKPO_ERANGE, "%s: rope high_freq_factor must exceed low_freq_factor", x->what);
    return SKPO_OK;
}

static skpo_status check_supported(cfg_ctx *x, json_t *o, skpo_config *c) {
    json_t *act = json_object_get(o, "hidden_act");
    if (act && !(json_is_string(act) && !strcmp(json_string_value(act), "silu")))
        return skpo_err_set(x->err, SKPO_EUNSUPPORTED, "%s: hidden_act must be \"silu\"", x->what);
    int b = 0;
    skpo_status st;
    if ((st = get_bool(x, o, "mlp_bias", 0, &b))) return st;
    if (b) return skpo_err_set(x->err, SKPO_EUNSUPPORTED, "%s: mlp_bias is not supported", x->what);
    if ((st = get_bool(x, o, "use_sliding_window", 0, &b))) return st;
    if (b) return skpo_err_set(x->err, SKPO_EUNSUPPORTED, "%s: use_sliding_window is not supported", x->what);
    if (c->num_attention_heads % c->num_key_value_heads)
        return skpo_err_set(x->err, SKPO_ERANGE, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                            x->what, c->num_attention_heads, c->num_key_value_heads);
    if (c->head_dim % 2) return skpo_err_set(x->err, SKPO_ERANGE, "%s: head_dim %d is odd", x->what, c->head_dim);
    return SKPO_OK;
}

// The shape fields, in the order config.json is read and written: the first
// five are required; the others default to a value computed from them (see
// parse_obj). One list for both directions, so a field is added once.
static const struct cfg_int_field {
    const char *key;
    size_t off;
    long max;
} CFG_SHAPE[] = {
    {"vocab_size", offsetof(skpo_config, vocab_size), 1L << 30},
    {"hidden_size", offsetof(skpo_config, hidden_size), 1L << 30},
    {"intermediate_size", offsetof(skpo_config, intermediate_size), 1L << 30},
    {"num_hidden_layers", offsetof(skpo_config, num_hidden_layers), 100000},
    {"num_attention_heads", offsetof(skpo_config, num_attention_heads), 100000},
    {"num_key_value_heads", offsetof(skpo_config, num_key_value_heads), 100000},
    {"head_dim", offsetof(skpo_config, head_dim), 100000},
    {"max_position_embeddings", offsetof(skpo_config, max_position_embeddings), INT32_MAX},
};
enum { CFG_SHAPE_REQUIRED = 5, CFG_SHAPE_N = sizeof CFG_SHAPE / sizeof *CFG_SHAPE };

static int *cfg_int_at(skpo_config *c, const struct cfg_int_field *f) { return (int *)((char *)c + f->off); }
static int cfg_int_get(const skpo_config *c, const struct cfg_int_field *f) {
    return *(const int *)((const char *)c + f->off);
}

static skpo_status parse_obj(cfg_ctx *x, json_t *o, skpo_config *c) {
    memset(c, 0, sizeof *c);
    json_t *mt = json_object_get(o, "model_type");
    if (!json_is_string(mt)) return skpo_err_set(x->err, SKPO_ENOTFOUND, "%s: missing string field 'model_type'", x->what);
    const char *type = json_string_value(mt);
    if (strcmp(type, "qwen2") && strcmp(type, "llama"))
        return skpo_err_set(x->err, SKPO_EUNSUPPORTED, "%s: model_type '%s' is not supported (qwen2, llama)", x->what, type);
    snprintf(c->model_type, sizeof c->model_type, "%s", type);
    int qwen = !strcmp(type, "qwen2");
    skpo_status st;
    for (int i = 0; i < CFG_SHAPE_REQUIRED; i++)
        if ((st = get_int(x, o, CFG_SHAPE[i].key, 1, 0, 1, CFG_SHAPE[i].max, cfg_int_at(c, &CFG_SHAPE[i])))) return st;
    // HF's defaults of the others: no GQA, head_dim = hidden / heads, 2048 positions.
    const long def[CFG_SHAPE_N] = {[5] = c->num_attention_heads, [6] = c->hidden_size / c->num_attention_heads,
                                   [7] = 2048};
    for (int i = CFG_SHAPE_REQUIRED; i < CFG_SHAPE_N; i++)
        if ((st = get_int(x, o, CFG_SHAPE[i].key, 0, def[i], 1, CFG_SHAPE[i].max, cfg_int_at(c, &CFG_SHAPE[i]))))
            return st;
    if ((st = get_int(x, o, "bos_token_id", 0, -1, -1, INT32_MAX, &c->bos_token_id))) return st;
    if ((st = get_num(x, o, "rms_norm_eps", 1e-6, &c->rms_norm_eps)) ||
        (st = get_num(x, o, "initializer_range", 0.02, &c->initializer_range)))
        return st;
    if ((st = get_bool(x, o, "tie_word_embeddings", 0, &c->tie_word_embeddings))) return st;
    // Qwen2 always has q/k/v bias; Llama only with attention_bias (then o_proj too).
    if (qwen) c->attention_bias = 1;
    else if ((st = get_bool(x, o, "attention_bias", 0, &c->attention_bias))) return st;
    if ((st = get_rope(x, o, c)) || (st = get_eos(x, o, c)) || (st = check_supported(x, o, c))) return st;
    json_t *dt = json_object_get(o, "torch_dtype");
    if (!dt) dt = json_object_get(o, "dtype");
    snprintf(c->torch_dtype, sizeof c->torch_dtype, "%s", json_is_string(dt) ? json_string_value(dt) : "float32");
    return SKPO_OK;
}

skpo_status skpo_config_parse(const char *json, size_t len, skpo_config *c, skpo_err *err) {
    json_error_t je;
    json_t *o = json_loadb(json, len, 0, &je);
    if (!o) return skpo_err_set(err, SKPO_EFORMAT, "config: invalid json at line %d: %s", je.line, je.text);
    cfg_ctx x = {"config", err};
    skpo_status st = json_is_object(o) ? parse_obj(&x, o, c)
                                       : skpo_err_set(err, SKPO_EFORMAT, "config: not a json object");
    json_decref(o);
    return st;
}

skpo_status skpo_config_load(const char *path, skpo_config *c, skpo_err *err) {
    char *data;
    size_t len;
    skpo_status st = skpo_read_file(path, &data, &len, err);
    if (st) return st;
    json_error_t je;
    json_t *o = json_loadb(data, len, 0, &je);
    free(data);
    if (!o) return skpo_err_set(err, SKPO_EFORMAT, "'%s': invalid json at line %d: %s", path, je.line, je.text);
    char what[600];
    snprintf(what, sizeof what, "'%s'", path);
    cfg_ctx x = {what, err};
    st = json_is_object(o) ? parse_obj(&x, o, c) : skpo_err_set(err, SKPO_EFORMAT, "'%s': not a json object", path);
    json_decref(o);
    return st;
}

// --- writing -----------------------------------------------------------------------

static void set_int(json_t *o, const char *k, long v) { json_object_set_new(o, k, json_integer(v)); }
static void set_num(json_t *o, const char *k, double v) { json_object_set_new(o, k, json_real(v)); }

skpo_status skpo_config_save(const skpo_config *c, const char *path, const char *dtype, skpo_err *err) {
    int qwen = !strcmp(c->model_type, "qwen2");
    json_t *o = json_object();
    json_t *arch = json_array();
    json_array_append_new(arch, json_string(qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM"));
    json_object_set_new(o, "architectures", arch);
    json_object_set_new(o, "model_type", json_string(c->model_type));
    for (int i = 0; i < CFG_SHAPE_N; i++) set_int(o, CFG_SHAPE[i].key, cfg_int_get(c, &CFG_SHAPE[i]));
    set_num(o, "rms_norm_eps", c->rms_norm_eps);
    set_num(o, "rope_theta", c->rope_theta);
    json_object_set_new(o, "hidden_act", json_string("silu"));
    set_num(o, "initializer_range", c->initializer_range > 0 ? c->initializer_range : 0.02);
    json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tie_word_embeddings));
    if (!qwen) json_object_set_new(o, "attention_bias", json_boolean(c->attention_bias));
    if (c->rope_llama3) {
        json_t *r = json_object();
        json_object_set_new(r, "rope_type", json_string("llama3"));
        set_num(r, "factor", c->rope_factor);
        set_num(r, "low_freq_factor", c->rope_low_freq_factor);
        set_num(r, "high_freq_factor", c->rope_high_freq_factor);
        set_int(r, "original_max_position_embeddings", c->rope_original_max_position_embeddings);
        json_object_set_new(o, "rope_scaling", r);
    } else {
        json_object_set_new(o, "rope_scaling", json_null());
    }
    if (c->bos_token_id >= 0) set_int(o, "bos_token_id", c->bos_token_id);
    if (c->n_eos == 1) set_int(o, "eos_token_id", c->eos_token_ids[0]);
    else if (c->n_eos > 1) {
        json_t *e = json_array();
        for (int i = 0; i < c->n_eos; i++) json_array_append_new(e, json_integer(c->eos_token_ids[i]));
        json_object_set_new(o, "eos_token_id", e);
    }
    json_object_set_new(o, "torch_dtype", json_string(dtype ? dtype : c->torch_dtype[0] ? c->torch_dtype : "float32"));
    json_object_set_new(o, "use_cache", json_true());
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    json_decref(o);
    if (!s) return skpo_err_set(err, SKPO_ENOMEM, "cannot serialise config for '%s'", path);
    size_t n = strlen(s);
    char *buf = skpo_xmalloc(n + 2);
    memcpy(buf, s, n);
    buf[n] = '\n';
    free(s);
    skpo_status st = skpo_write_file_atomic(path, buf, n + 1, err);
    free(buf);
    return st;
}

size_t skpo_config_num_params(const skpo_config *c) {
    size_t C = (size_t)c->hidden_size, V = (size_t)c->vocab_size, F = (size_t)c->intermediate_size;
    size_t qd = (size_t)c->num_attention_heads * c->head_dim, kvd = (size_t)c->num_key_value_heads * c->head_dim;
    size_t layer = C                                  // input_layernorm
                   + qd * C + 2 * kvd * C + C * qd    // q, k, v, o
                   + 3 * C * F                        // gate, up, down
                   + C;                               // post_attention_layernorm
    if (c->attention_bias) layer += qd + 2 * kvd + (strcmp(c->model_type, "qwen2") ? C : 0);
    return V * C * (c->tie_word_embeddings ? 1 : 2) + (size_t)c->num_hidden_layers * layer + C;
}
