/*
 * model.c - the Qwen2 / Llama transformer, backend-independent: the parameter
 * table, checkpoint load/save, random init, and every public call of model.h
 * that depends on where the model computes, forwarded to its backend
 * (m->be, model_impl.h: the CPU reference in model_cpu.c / model_train.c,
 * CUDA in model_cuda.c / model_cuda_train.c). The host copy of the weights
 * (m->mem, float32) always exists: it is what load fills and save writes.
 */
#include "model/model_impl.h"
#include "base/rng.h"
#include "model/safetensors.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// --- parameter table --------------------------------------------------------------------

typedef struct pspec {
    char name[96];
    int ndim;
    int64_t shape[2];
    float **slot;   // where the pointer goes
    int is_norm;    // initialised to 1
} pspec;

// Fill specs (may be NULL to count) in the HF module order; model_alloc lays
// them out in layout_order's.
static int param_specs(skpo_model *m, pspec *ps) {
    const skpo_config *c = &m->c;
    int64_t C = c->hidden_size, F = c->intermediate_size, V = c->vocab_size;
    int64_t QD = (int64_t)c->num_attention_heads * c->head_dim, KVD = (int64_t)c->num_key_value_heads * c->head_dim;
    int qwen = !strcmp(c->model_type, "qwen2"), n = 0;
#define P(slot_, norm_, nd_, d0_, d1_, ...) do { if (ps) { pspec *p_ = &ps[n]; \
        snprintf(p_->name, sizeof p_->name, __VA_ARGS__); p_->ndim = nd_; p_->shape[0] = d0_; p_->shape[1] = d1_; \
        p_->slot = slot_; p_->is_norm = norm_; } n++; } while (0)
    P(&m->wte, 0, 2, V, C, "model.embed_tokens.weight");
    for (int l = 0; l < c->num_hidden_layers; l++) {
        model_layer *L = &m->layers[l];
        const char *pre = "model.layers";
        P(&L->ln1, 1, 1, C, 0, "%s.%d.input_layernorm.weight", pre, l);
        P(&L->wq, 0, 2, QD, C, "%s.%d.self_attn.q_proj.weight", pre, l);
        if (c->attention_bias) P(&L->bq, 0, 1, QD, 0, "%s.%d.self_attn.q_proj.bias", pre, l);
        P(&L->wk, 0, 2, KVD, C, "%s.%d.self_attn.k_proj.weight", pre, l);
        if (c->attention_bias) P(&L->bk, 0, 1, KVD, 0, "%s.%d.self_attn.k_proj.bias", pre, l);
        P(&L->wv, 0, 2, KVD, C, "%s.%d.self_attn.v_proj.weight", pre, l);
        if (c->attention_bias) P(&L->bv, 0, 1, KVD, 0, "%s.%d.self_attn.v_proj.bias", pre, l);
        P(&L->wo, 0, 2, C, QD, "%s.%d.self_attn.o_proj.weight", pre, l);
        if (c->attention_bias && !qwen) P(&L->bo, 0, 1, C, 0, "%s.%d.self_attn.o_proj.bias", pre, l);
        P(&L->ln2, 1, 1, C, 0, "%s.%d.post_attention_layernorm.weight", pre, l);
        P(&L->wg, 0, 2, F, C, "%s.%d.mlp.gate_proj.weight", pre, l);
        P(&L->wu, 0, 2, F, C, "%s.%d.mlp.up_proj.weight", pre, l);
        P(&L->wd, 0, 2, C, F, "%s.%d.mlp.down_proj.weight", pre, l);
    }
    P(&m->normf, 1, 1, C, 0, "model.norm.weight");
    if (!c->tie_word_embeddings) P(&m->lm_head, 0, 2, V, C, "lm_head.weight");
#undef P
    return n;
}

// The order of the parameters in memory (and in skpo_model_params): the HF
// module order, except that a layer's q/k/v biases follow v_proj.weight, so
// [Wq; Wk; Wv] and [bq | bk | bv] are each contiguous and a backend runs the
// three projections as one GEMM (model_cuda.c). Checkpoints are read and
// written by name, so files do not change. order[j] = HF index of the j-th.
static void layout_order(const skpo_model *m, const pspec *ps, int n, int *order) {
    int k = 0, held[3], nheld = 0;
    for (int i = 0; i < n; i++) {
        int is_qkv_bias = 0, before_wo = 0;
        for (int l = 0; l < m->c.num_hidden_layers && !is_qkv_bias && !before_wo; l++) {
            model_layer *L = &m->layers[l];
            is_qkv_bias = ps[i].slot == &L->bq || ps[i].slot == &L->bk || ps[i].slot == &L->bv;
            before_wo = ps[i].slot == &L->wo;
        }
        for (int h = 0; before_wo && h < nheld; h++) order[k++] = held[h];
        if (before_wo) nheld = 0;
        if (is_qkv_bias) {
            SKPO_ASSERT(nheld < 3);
            held[nheld++] = i;
        } else {
            order[k++] = i;
        }
    }
    SKPO_ASSERT(k == n && nheld == 0);
}

static void compute_inv_freq(skpo_model *m) {
    const skpo_config *c = &m->c;
    int half = c->head_dim / 2;
    m->inv_freq = skpo_xmalloc((size_t)half * sizeof(float));
    for (int i = 0; i < half; i++) {
        // transformers: 1 / base ** (arange(0, dim, 2).float() / dim), in float32
        float e = (float)(2 * i) / (float)c->head_dim;
        double f = (double)(float)(1.0 / pow(c->rope_theta, (double)e));
        if (c->rope_llama3) {
            double old = c->rope_original_max_position_embeddings;
            double lo_wl = old / c->rope_low_freq_factor, hi_wl = old / c->rope_high_freq_factor;
            double wl = 2 * M_PI / f;
            if (wl > lo_wl) f = f / c->rope_factor;
            else if (wl >= hi_wl) {
                double s = (old / wl - c->rope_low_freq_factor) / (c->rope_high_freq_factor - c->rope_low_freq_factor);
                f = (1 - s) * f / c->rope_factor + s * f;
            }
        }
        m->inv_freq[i] = (float)f;
    }
}

// Allocate a model for config c with uninitialised weights (NULL, err set, on failure).
static skpo_model *model_alloc(const skpo_config *c, const skpo_model_opts *o, skpo_status *st, skpo_err *err) {
    const model_backend *be;
    if ((*st = model_backend_get(o ? o->device : SKPO_DEV_CPU, &be, err))) return NULL;
    if (be->probe && (*st = be->probe(0, err))) return NULL; // before reading weights
    skpo_model *m = skpo_xcalloc(1, sizeof *m);
    m->c = *c;
    if (o) m->o = *o;
    m->be = be;
    m->ops = skpo_ops_cpu(); // host kernels for the float32 copy (the CPU backend computes with them)
    if (m->o.threads > 0) omp_set_num_threads(m->o.threads);
    m->layers = skpo_xcalloc((size_t)c->num_hidden_layers, sizeof(model_layer));
    int n = param_specs(m, NULL);
    pspec *ps = skpo_xmalloc((size_t)n * sizeof *ps);
    param_specs(m, ps);
    m->hf_index = skpo_xmalloc((size_t)n * sizeof *m->hf_index);
    layout_order(m, ps, n, m->hf_index);
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (size_t)ps[i].shape[0] * (ps[i].ndim == 2 ? (size_t)ps[i].shape[1] : 1);
    m->numel = total;
    m->mem = malloc(total * sizeof(float));
    m->grad = m->o.trainable ? calloc(total, sizeof(float)) : NULL;
    if (!m->mem || (m->o.trainable && !m->grad)) {
        free(ps);
        skpo_model_free(m);
        *st = skpo_err_set(err, SKPO_ENOMEM, "cannot allocate %zu MiB of parameters",
                           total * 4 * (o && o->trainable ? 2 : 1) >> 20);
        return NULL;
    }
    m->params = skpo_xcalloc((size_t)n, sizeof(skpo_param));
    m->nparams = n;
    size_t off = 0;
    for (int j = 0; j < n; j++) {
        const pspec *sp = &ps[m->hf_index[j]];
        skpo_param *p = &m->params[j];
        p->name = skpo_xstrdup(sp->name);
        p->ndim = sp->ndim;
        p->shape[0] = sp->shape[0];
        p->shape[1] = sp->ndim == 2 ? sp->shape[1] : 0;
        p->numel = (size_t)sp->shape[0] * (sp->ndim == 2 ? (size_t)sp->shape[1] : 1);
        p->data = m->mem + off;
        p->grad = m->grad ? m->grad + off : NULL;
        *sp->slot = p->data;
        off += p->numel;
    }
    if (c->tie_word_embeddings) m->lm_head = m->wte;
    free(ps);
    compute_inv_freq(m);
    m->src_dtype = SKPO_DT_F32;
    return m;
}

void skpo_model_free(skpo_model *m) {
    if (!m) return;
    m->be->close(m);
    for (int i = 0; i < m->nparams; i++) free((char *)m->params[i].name);
    free(m->params);
    free(m->mem);
    free(m->grad);
    free(m->layers);
    free(m->inv_freq);
    free(m->hf_index);
    free(m);
}

const skpo_config *skpo_model_config(const skpo_model *m) { return &m->c; }
skpo_dtype skpo_model_src_dtype(const skpo_model *m) { return m->src_dtype; }

int skpo_model_params(skpo_model *m, skpo_param **params) {
    if (m->be->host_weights_changed) m->be->host_weights_changed(m); // the caller may write the weights
    *params = m->params;
    return m->nparams;
}

void skpo_model_zero_grad(skpo_model *m) {
    skpo_err e = {0};   // a device failure is kept and reported by the next pass
    (void)m->be->zero_grad(m, &e);
}

// --- load / init / save --------------------------------------------------------------------

skpo_status skpo_model_load(const char *dir, const skpo_model_opts *o, skpo_model **out, skpo_err *err) {
    skpo_config c;
    skpo_status s = skpo_dir_check_complete(dir, err);  // a half-saved checkpoint is never loaded
    if (s) return s;
    char *cp = skpo_path_join(dir, "config.json");
    s = skpo_config_load(cp, &c, err);
    free(cp);
    if (s) return s;
    skpo_st *st;
    if ((s = skpo_st_open_dir(dir, &st, err))) return s;
    skpo_model *m = model_alloc(&c, o, &s, err);
    if (!m) {
        skpo_st_close(st);
        return s;
    }
    for (int i = 0; i < m->nparams && !s; i++) {
        skpo_param *p = &m->params[i];
        s = skpo_st_read_f32(st, p->name, p->data, p->ndim, p->shape, err);
    }
    if (!s) {
        const skpo_st_tensor *t = skpo_st_find(st, m->params[0].name);
        m->src_dtype = t->dtype == SKPO_ST_BF16 ? SKPO_DT_BF16 : t->dtype == SKPO_ST_F16 ? SKPO_DT_F16 : SKPO_DT_F32;
        for (size_t i = 0; i < m->numel && !s; i++)
            if (!isfinite(m->mem[i])) s = skpo_err_set(err, SKPO_ENUMERIC, "'%s': non-finite weight in checkpoint", dir);
    }
    skpo_st_close(st);
    if (!s && m->be->open) s = m->be->open(m, err);
    if (s) {
        skpo_model_free(m);
        return s;
    }
    *out = m;
    return SKPO_OK;
}

skpo_status skpo_model_export_weights(const skpo_model *m, const char *dir, const char *path, skpo_err *err) {
    skpo_weights_handle h = {.pid = (long)getpid(), .numel = m->numel};
    char *mk = skpo_weights_mark_path(path);   // a mark left by an earlier loan is not this one's
    unlink(mk);
    free(mk);
    skpo_status s = skpo_weights_identity(dir, h.weights, err);
    if (!s) {
        if (m->be->export_weights) s = m->be->export_weights(m, &h, err);
        else s = skpo_err_set(err, SKPO_EUNSUPPORTED, "the %s backend has no device weights to share (the other "
                              "tools read the same files through the page cache)", m->be->name);
    }
    if (s) snprintf(h.none, sizeof h.none, "%.190s", err->msg);
    skpo_err werr = {0};
    skpo_status ws = skpo_weights_handle_write(path, &h, &werr);
    if (ws) *err = werr;
    return ws ? ws : s;
}

skpo_status skpo_model_load_shared(const char *dir, const char *path, const skpo_model_opts *o, skpo_model **out,
                                   skpo_err *err) {
    skpo_weights_handle h;
    skpo_status s = skpo_weights_handle_read(path, &h, err);
    if (s) return s;
    if (h.none[0]) return skpo_err_set(err, SKPO_ENOTFOUND, "'%s' holds no weights: %s", path, h.none);
    if (kill((pid_t)h.pid, 0) && errno == ESRCH)
        return skpo_err_set(err, SKPO_ENOTFOUND, "the process %ld that exported '%s' is gone", h.pid, path);
    char id[48];
    if ((s = skpo_weights_identity(dir, id, err))) return s;
    if (strcmp(id, h.weights))
        return skpo_err_set(err, SKPO_ERANGE, "'%s' holds the weights of another checkpoint than '%s' (identity %s, not %s)",
                            path, dir, h.weights, id);
    if (!o || o->device != SKPO_DEV_CUDA || o->trainable)
        return skpo_err_set(err, SKPO_EUNSUPPORTED, "shared weights are for inference on a CUDA device");
    skpo_config c;
    char *cp = skpo_path_join(dir, "config.json");
    s = skpo_config_load(cp, &c, err);
    free(cp);
    if (s) return s;
    skpo_model *m = model_alloc(&c, o, &s, err);
    if (!m) return s;
    if (m->numel != h.numel)
        s = skpo_err_set(err, SKPO_ERANGE, "'%s' holds %zu parameters, '%s' has %zu", path, h.numel, dir, m->numel);
    else if (!m->be->open_shared)
        s = skpo_err_set(err, SKPO_EUNSUPPORTED, "the %s backend cannot map shared weights", m->be->name);
    else
        s = m->be->open_shared(m, &h, err);
    if (s) {
        skpo_model_free(m);
        return s;
    }
    *out = m;
    return SKPO_OK;
}

// splitmix64: a tiny, well-mixed generator; state passed explicitly.
// Uniform in (0, 1) (never 0: log(u1) below) from rng.h's splitmix64 stream.
static double uniform01(uint64_t *s) { return ((skpo_splitmix64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

skpo_status skpo_model_init_random(const skpo_config *c, const skpo_model_opts *o, uint64_t seed, double std,
                                   skpo_model **out, skpo_err *err) {
    if (!(std > 0) || !isfinite(std)) return skpo_err_set(err, SKPO_ERANGE, "init std %g must be positive", std);
    skpo_status st;
    skpo_model *m = model_alloc(c, o, &st, err);
    if (!m) return st;
    enum { CHUNK = 1 << 16 };
    for (int i = 0; i < m->nparams; i++) {
        skpo_param *p = &m->params[i];
        int is_bias = strstr(p->name, ".bias") != NULL, is_norm = strstr(p->name, "norm.weight") != NULL;
        // A stream per (seed, tensor, chunk): parallel, yet independent of the thread count.
#pragma omp parallel for schedule(static)
        for (size_t c0 = 0; c0 < p->numel; c0 += CHUNK) {
            // Keyed by the HF index: the same weights as before the q/k/v biases moved.
            uint64_t rng = seed * 0x100000001b3ull + (uint64_t)m->hf_index[i] * 0x9e3779b97f4a7c15ull + c0;
            skpo_splitmix64(&rng);
            size_t c1 = c0 + CHUNK < p->numel ? c0 + CHUNK : p->numel;
            for (size_t j = c0; j < c1; j += 2) {
                double u1 = uniform01(&rng), u2 = uniform01(&rng), r = sqrt(-2 * log(u1));
                p->data[j] = is_norm ? 1.0f : is_bias ? 0.0f : (float)(std * r * cos(2 * M_PI * u2));
                if (j + 1 < c1) p->data[j + 1] = is_norm ? 1.0f : is_bias ? 0.0f : (float)(std * r * sin(2 * M_PI * u2));
            }
        }
    }
    if (m->be->open && (st = m->be->open(m, err))) {
        skpo_model_free(m);
        return st;
    }
    *out = m;
    return SKPO_OK;
}

static skpo_st_wtensor *wtensors_of(const skpo_model *m) {
    skpo_st_wtensor *t = skpo_xcalloc((size_t)m->nparams + 1, sizeof *t);
    for (int i = 0; i < m->nparams; i++) {
        const skpo_param *p = &m->params[i];
        t[i].name = p->name;
        t[i].data = p->data;
        t[i].ndim = p->ndim;
        t[i].shape[0] = p->shape[0];
        t[i].shape[1] = p->shape[1];
    }
    return t;
}

static skpo_status save_config(const skpo_model *m, const char *dir, skpo_dtype dtype, skpo_err *err) {
    char *cp = skpo_path_join(dir, "config.json");
    skpo_status s = skpo_config_save(&m->c, cp, dtype == SKPO_DT_BF16 ? "bfloat16" : "float32", err);
    free(cp);
    return s;
}

skpo_status skpo_model_save(const skpo_model *m, const char *dir, skpo_dtype dtype, size_t shard_bytes, skpo_err *err) {
    if (dtype == SKPO_DT_F16) return skpo_err_set(err, SKPO_EUNSUPPORTED, "saving float16 checkpoints is not supported");
    skpo_status cs = m->be->sync_to_host ? m->be->sync_to_host(m, err) : SKPO_OK; // a device holds the current weights
    if (cs) return cs;
    skpo_st_wtensor *t = wtensors_of(m);
    skpo_status s = skpo_st_write_dir(dir, t, m->nparams, dtype == SKPO_DT_BF16 ? SKPO_ST_BF16 : SKPO_ST_F32,
                                      shard_bytes, err);
    free(t);
    return s ? s : save_config(m, dir, dtype, err);
}

skpo_status skpo_model_save_part(const skpo_model *m, const char *dir, skpo_dtype dtype, const int *owner, int part,
                                 int nparts, skpo_err *err) {
    if (dtype == SKPO_DT_F16) return skpo_err_set(err, SKPO_EUNSUPPORTED, "saving float16 checkpoints is not supported");
    skpo_st_wtensor *t = wtensors_of(m);
    skpo_status s = skpo_st_write_shard(dir, t, m->nparams, dtype == SKPO_DT_BF16 ? SKPO_ST_BF16 : SKPO_ST_F32, owner,
                                        part, nparts, err);
    free(t);
    return s;
}

skpo_status skpo_model_save_index(const skpo_model *m, const char *dir, skpo_dtype dtype, const int *owner, int nparts,
                                  skpo_err *err) {
    skpo_st_wtensor *t = wtensors_of(m);
    skpo_status s = skpo_st_write_index(dir, t, m->nparams, dtype == SKPO_DT_BF16 ? SKPO_ST_BF16 : SKPO_ST_F32, owner,
                                        nparts, err);
    free(t);
    return s ? s : save_config(m, dir, dtype, err);
}

// --- the calls that run on the backend ---------------------------------------------------------

skpo_device skpo_model_device(const skpo_model *m) { return m->be->device; }

struct skpo_cuda *skpo_model_cuda_ctx(const skpo_model *m) { return m->be->cuda_ctx ? m->be->cuda_ctx(m) : NULL; }

// --- sampling on the device: the backend's sampler, if it has one ------------------------

struct skpo_model_sampler {
    const model_backend *be;
    void *impl;
};

skpo_status skpo_model_sampler_new(skpo_model *m, int max_rows, skpo_model_sampler **out, skpo_err *err) {
    SKPO_ASSERT(m && max_rows >= 1);
    *out = NULL;
    if (!m->be->sampler_new)
        return skpo_err_set(err, SKPO_EUNSUPPORTED, "device sampling: the %s backend has none (sample the host logits)",
                            m->be->name);
    void *impl = NULL;
    skpo_status st = m->be->sampler_new(m, max_rows, &impl, err);
    if (st) return st;
    *out = skpo_xcalloc(1, sizeof **out);
    **out = (skpo_model_sampler){m->be, impl};
    return SKPO_OK;
}

skpo_status skpo_model_sampler_draw(skpo_model_sampler *s, const float *logits, int nrows, const skpo_model_draw *p,
                                    const double *coin, int32_t *tok, float *logp, skpo_err *err) {
    return s->be->sampler_draw(s->impl, logits, nrows, p, coin, tok, logp, err);
}

skpo_status skpo_model_sampler_row(skpo_model_sampler *s, const float *logits, int r, float *dst, skpo_err *err) {
    return s->be->sampler_row(s->impl, logits, r, dst, err);
}

void skpo_model_sampler_free(skpo_model_sampler *s) {
    if (!s) return;
    s->be->sampler_free(s->impl);
    free(s);
}

skpo_kv *skpo_model_kv_new(const skpo_model *m, size_t max_tokens, int max_seqs, skpo_err *err) {
    return m->be->kv_new(m, max_tokens, max_seqs, err);
}

skpo_status skpo_model_step(skpo_model *m, skpo_kv *kv, const int *seq, int nseq, const int32_t *toks,
                            const int *off, float *logits, skpo_err *err) {
    return m->be->step(m, kv, seq, nseq, toks, off, logits, err);
}

skpo_status skpo_model_step_dev(skpo_model *m, skpo_kv *kv, const int *seq, int nseq, const int32_t *toks,
                                const int *off, const float **dev_logits, skpo_err *err) {
    *dev_logits = NULL;
    if (!m->be->step_dev)
        return skpo_err_set(err, SKPO_EUNSUPPORTED, "skpo_model_step_dev: the model is on the %s (use skpo_model_step)",
                            m->be->name);
    return m->be->step_dev(m, kv, seq, nseq, toks, off, dev_logits, err);
}

void skpo_model_set_pack(skpo_model *m, int on) { m->no_pack = !on; }
int skpo_model_packs(const skpo_model *m) { return model_packs(m); }

void skpo_model_pass_tokens(const skpo_model *m, long *raw, long *packed) {
    *raw = m->last_raw;
    *packed = m->last_packed;
}

skpo_status skpo_model_logprobs(skpo_model *m, const skpo_seq *seqs, int nseq, float temperature, float *logp,
                                float *entropy, skpo_err *err) {
    return m->be->logprobs(m, seqs, nseq, temperature, logp, entropy, err);
}

skpo_status skpo_model_train_forward(skpo_model *m, const skpo_seq *seqs, int nseq, float temperature, float *logp,
                                     float *entropy, skpo_err *err) {
    return m->be->train_forward(m, seqs, nseq, temperature, logp, entropy, err);
}

skpo_status skpo_model_train_backward(skpo_model *m, const float *dlogp, const float *dentropy, skpo_err *err) {
    return m->be->train_backward(m, dlogp, dentropy, err);
}

void skpo_model_set_recompute(skpo_model *m, int on) {
    if (m->be->set_recompute) m->be->set_recompute(m, on);
}

skpo_status skpo_model_dev_params(skpo_model *m, skpo_dev_params *out, skpo_err *err) {
    if (!m->be->dev_params)
        return skpo_err_set(err, SKPO_EUNSUPPORTED, "the model is on the %s: no device parameters", m->be->name);
    return m->be->dev_params(m, out, err);
}

skpo_status skpo_model_sync_host(skpo_model *m, skpo_err *err) {
    return m->be->sync_to_host ? m->be->sync_to_host(m, err) : SKPO_OK;
}

skpo_status skpo_model_sync_device(skpo_model *m, skpo_err *err) {
    return m->be->sync_from_host ? m->be->sync_from_host(m, err) : SKPO_OK;
}

skpo_status skpo_model_sync_host_range(skpo_model *m, size_t a, size_t b, skpo_err *err) {
    SKPO_ASSERT(a <= b && b <= m->numel);
    if (m->be->sync_to_host_range) return m->be->sync_to_host_range(m, a, b, err);
    return skpo_model_sync_host(m, err);
}

skpo_status skpo_model_offload(skpo_model *m, skpo_err *err) { return m->be->offload ? m->be->offload(m, err) : SKPO_OK; }
skpo_status skpo_model_reload(skpo_model *m, skpo_err *err) { return m->be->reload ? m->be->reload(m, err) : SKPO_OK; }

skpo_status skpo_model_grad_sumsq(skpo_model *m, double *ss, skpo_err *err) {
    if (!m->be->grad_sumsq) return skpo_err_set(err, SKPO_EUNSUPPORTED, "the model has no device gradients");
    return m->be->grad_sumsq(m, ss, err);
}
