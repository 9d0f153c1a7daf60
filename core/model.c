/*
 * model.c - the Qwen2 / Llama transformer: parameters, checkpoint load/save,
 * random init, and inference over the paged KV cache (skpo_model_step).
 * Scoring and training live in model_train.c. The math reads like llm.c:
 * each layer is
 *     ln = rmsnorm(x) ; q,k,v = ln Wq^T (+b) ... ; rope(q, k) ;
 *     x += attention(q, k, v) Wo^T ; ln = rmsnorm(x) ;
 *     x += (silu(ln Wg^T) * ln Wu^T) Wd^T
 * followed by a final rmsnorm and the lm_head (tied to the embedding or not).
 * Kernels are the backend's (ops.h); weights are float32 in host memory.
 */
#include "model_cuda.h"
#include "model_cuda_train.h"
#include "model_impl.h"
#include "lora.h"
#include "safetensors.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

// --- parameter table --------------------------------------------------------------------

typedef struct pspec {
    char name[96];
    int ndim;
    int64_t shape[2];
    float **slot;   // where the pointer goes
    int is_norm;    // initialised to 1
} pspec;

// Fill specs (may be NULL to count). Order is the HF module order.
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

// --- packed inference weights --------------------------------------------------------------
//
// A non-trainable model keeps the backend's packed copy of every matrix
// (ops.h pack), made at its first step: batched decode then streams weights
// already laid out for the kernel instead of re-laying them out every step.
// Trainable models, whose weights change under the optimizer, use
// matmul_invariant on the weights as they are (bit-identical results).
enum { PK_Q, PK_K, PK_V, PK_O, PK_G, PK_U, PK_D, PK_PER_LAYER };

static void model_unpack(skpo_model *m) {
    if (!m->packed) return;
    for (int i = 0; i < m->c.num_hidden_layers * PK_PER_LAYER + 1; i++) m->ops->pack_free(m->packed[i]);
    free(m->packed);
    m->packed = NULL;
}

static void model_pack(skpo_model *m) {
    const skpo_config *c = &m->c;
    if (m->packed || m->o.trainable || !m->ops->pack || !m->ops->matmul_packed) return;
    int C = c->hidden_size, F = c->intermediate_size, QD = c->num_attention_heads * c->head_dim;
    int KVD = c->num_key_value_heads * c->head_dim, nl = c->num_hidden_layers;
    void **pk = skpo_xmalloc(((size_t)nl * PK_PER_LAYER + 1) * sizeof *pk);
    for (int l = 0; l < nl; l++) {
        const model_layer *L = &m->layers[l];
        void **p = pk + (size_t)l * PK_PER_LAYER;
        p[PK_Q] = m->ops->pack(L->wq, C, QD);
        p[PK_K] = m->ops->pack(L->wk, C, KVD);
        p[PK_V] = m->ops->pack(L->wv, C, KVD);
        p[PK_O] = m->ops->pack(L->wo, QD, C);
        p[PK_G] = m->ops->pack(L->wg, C, F);
        p[PK_U] = m->ops->pack(L->wu, C, F);
        p[PK_D] = m->ops->pack(L->wd, F, C);
    }
    pk[(size_t)nl * PK_PER_LAYER] = m->ops->pack(m->lm_head, C, c->vocab_size);
    m->packed = pk;
}

// out (N, O) (+)= in (N, K) @ w^T + bias, batch-invariant; slot names w's packed copy.
static void model_linear(const skpo_model *m, int slot, float *out, const float *in, const float *w,
                         const float *bias, int N, int K, int O, int acc) {
    const skpo_ops *op = m->ops;
    if (m->packed) op->matmul_packed(out, in, m->packed[slot], bias, N, K, O, acc);
    else (op->matmul_invariant ? op->matmul_invariant : op->matmul)(out, in, w, bias, N, K, O, acc);
}

// Allocate a model for config c with uninitialised weights (NULL, err set, on failure).
static skpo_model *model_alloc(const skpo_config *c, const skpo_model_opts *o, skpo_status *st, skpo_err *err) {
    *st = SKPO_OK;
    if (o && o->device == SKPO_DEV_CUDA && (*st = model_cuda_probe(0, err))) return NULL; // before reading weights
    if (o && o->device != SKPO_DEV_CPU && o->device != SKPO_DEV_CUDA) {
        *st = skpo_err_set(err, SKPO_EUNSUPPORTED, "unknown device %d", (int)o->device);
        return NULL;
    }
    skpo_model *m = skpo_xcalloc(1, sizeof *m);
    m->c = *c;
    if (o) m->o = *o;
    m->ops = skpo_ops_cpu();
    if (m->o.threads > 0) omp_set_num_threads(m->o.threads);
    m->layers = skpo_xcalloc((size_t)c->num_hidden_layers, sizeof(model_layer));
    int n = param_specs(m, NULL);
    pspec *ps = skpo_xmalloc((size_t)n * sizeof *ps);
    param_specs(m, ps);
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
    for (int i = 0; i < n; i++) {
        skpo_param *p = &m->params[i];
        p->name = skpo_xstrdup(ps[i].name);
        p->ndim = ps[i].ndim;
        p->shape[0] = ps[i].shape[0];
        p->shape[1] = ps[i].ndim == 2 ? ps[i].shape[1] : 0;
        p->numel = (size_t)ps[i].shape[0] * (ps[i].ndim == 2 ? (size_t)ps[i].shape[1] : 1);
        p->data = m->mem + off;
        p->grad = m->grad ? m->grad + off : NULL;
        *ps[i].slot = p->data;
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
    model_cuda_close(m);
    for (int i = 0; i < m->nparams; i++) free((char *)m->params[i].name);
    free(m->params);
    free(m->mem);
    free(m->grad);
    free(m->layers);
    free(m->inv_freq);
    model_unpack(m);
    model_acts_free(&m->acts);
    free(m);
}

const skpo_config *skpo_model_config(const skpo_model *m) { return &m->c; }
skpo_dtype skpo_model_src_dtype(const skpo_model *m) { return m->src_dtype; }

int skpo_model_params(skpo_model *m, skpo_param **params) {
    model_unpack(m); // the caller may write the weights: packed copies would go stale
    *params = m->params;
    return m->nparams;
}

void skpo_model_zero_grad(skpo_model *m) {
    skpo_err e = {0};   // a device failure is kept and reported by the next pass
    if (m->cuda) return (void)model_cuda_zero_grad(m, &e);
    if (m->grad) memset(m->grad, 0, m->numel * sizeof(float));
}

// --- load / init / save --------------------------------------------------------------------

skpo_status skpo_model_load(const char *dir, const skpo_model_opts *o, skpo_model **out, skpo_err *err) {
    skpo_config c;
    char *cp = skpo_path_join(dir, "config.json");
    skpo_status s = skpo_config_load(cp, &c, err);
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
    if (!s && m->o.device == SKPO_DEV_CUDA) s = model_cuda_open(m, 0, NULL, err);
    if (s) {
        skpo_model_free(m);
        return s;
    }
    *out = m;
    return SKPO_OK;
}

// splitmix64: a tiny, well-mixed generator; state passed explicitly.
static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *s) { return ((splitmix64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

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
            uint64_t rng = seed * 0x100000001b3ull + (uint64_t)i * 0x9e3779b97f4a7c15ull + c0;
            splitmix64(&rng);
            size_t c1 = c0 + CHUNK < p->numel ? c0 + CHUNK : p->numel;
            for (size_t j = c0; j < c1; j += 2) {
                double u1 = uniform01(&rng), u2 = uniform01(&rng), r = sqrt(-2 * log(u1));
                p->data[j] = is_norm ? 1.0f : is_bias ? 0.0f : (float)(std * r * cos(2 * M_PI * u2));
                if (j + 1 < c1) p->data[j + 1] = is_norm ? 1.0f : is_bias ? 0.0f : (float)(std * r * sin(2 * M_PI * u2));
            }
        }
    }
    if (m->o.device == SKPO_DEV_CUDA && (st = model_cuda_open(m, 0, NULL, err))) {
        skpo_model_free(m);
        return st;
    }
    *out = m;
    return SKPO_OK;
}

skpo_status skpo_model_save(const skpo_model *m, const char *dir, skpo_dtype dtype, size_t shard_bytes, skpo_err *err) {
    if (dtype == SKPO_DT_F16) return skpo_err_set(err, SKPO_EUNSUPPORTED, "saving float16 checkpoints is not supported");
    skpo_status cs = m->cuda ? model_cuda_sync_to_host(m, err) : SKPO_OK; // the device holds the current weights
    if (cs) return cs;
    skpo_st_wtensor *t = skpo_xcalloc((size_t)m->nparams, sizeof *t);
    for (int i = 0; i < m->nparams; i++) {
        const skpo_param *p = &m->params[i];
        t[i].name = p->name;
        t[i].data = p->data;
        t[i].ndim = p->ndim;
        t[i].shape[0] = p->shape[0];
        t[i].shape[1] = p->shape[1];
    }
    skpo_status s = skpo_st_write_dir(dir, t, m->nparams, dtype == SKPO_DT_BF16 ? SKPO_ST_BF16 : SKPO_ST_F32,
                                      shard_bytes, err);
    free(t);
    if (s) return s;
    char *cp = skpo_path_join(dir, "config.json");
    s = skpo_config_save(&m->c, cp, dtype == SKPO_DT_BF16 ? "bfloat16" : "float32", err);
    free(cp);
    return s;
}

// --- inference over the paged cache -----------------------------------------------------------

skpo_kv *skpo_model_kv_new(const skpo_model *m, size_t max_tokens, int max_seqs, skpo_err *err) {
    if (m->cuda) return model_cuda_kv_new(m, max_tokens, max_seqs, err);
    skpo_kv_shape sh = {
        .n_layers = m->c.num_hidden_layers,
        .kv_dim = m->c.num_key_value_heads * m->c.head_dim,
        .block_size = 16,
        .n_blocks = (max_tokens + 15) / 16 + (size_t)(max_seqs > 0 ? max_seqs : 1), // partial last blocks
        .max_seqs = max_seqs,
    };
    return skpo_kv_new(&sh, err);
}

// Reserve positions for every sequence, all or nothing (old[i] = previous
// length); shared with the CUDA step (model_impl.h).
skpo_status model_step_reserve(const skpo_model *m, skpo_kv *kv, const int *seq, int nseq, const int *off, int *old,
                               skpo_err *err) {
    int i;
    skpo_status s = SKPO_OK;
    for (i = 0; i < nseq; i++) {
        int n = off[i + 1] - off[i];
        old[i] = skpo_kv_seq_len(kv, seq[i]);
        if (old[i] + n > m->c.max_position_embeddings) {
            s = skpo_err_set(err, SKPO_ERANGE, "sequence %d would reach position %d, past max_position_embeddings %d",
                             seq[i], old[i] + n, m->c.max_position_embeddings);
            break;
        }
        if (skpo_kv_seq_append(kv, seq[i], n) < 0) {
            s = skpo_err_set(err, SKPO_ERANGE, "kv cache full (%zu blocks in use)", skpo_kv_blocks_used(kv));
            break;
        }
    }
    if (s)
        while (--i >= 0) skpo_kv_seq_truncate(kv, seq[i], old[i]);
    return s;
}

// model_step_reserve, then pos (N) and blocks (N) of every new row.
static skpo_status step_reserve(skpo_model *m, skpo_kv *kv, const int *seq, int nseq, const int *off, int *pos,
                                const int **blocks, skpo_err *err) {
    int *old = skpo_xmalloc((size_t)nseq * sizeof(int));
    skpo_status s = model_step_reserve(m, kv, seq, nseq, off, old, err);
    int i;
    if (s) {
        free(old);
        return s;
    }
    for (i = 0; i < nseq; i++) {
        int nb;
        const int *b = skpo_kv_seq_blocks(kv, seq[i], &nb);
        for (int r = off[i]; r < off[i + 1]; r++) {
            pos[r] = old[i] + (r - off[i]);
            blocks[r] = b;
        }
    }
    free(old);
    return SKPO_OK;
}

skpo_status model_step_check(const skpo_model *m, const int *seq, int nseq, const int32_t *toks, const int *off,
                              skpo_err *err) {
    if (nseq <= 0 || off[0] != 0) return skpo_err_set(err, SKPO_ERANGE, "step: no sequences or off[0] != 0");
    for (int i = 0; i < nseq; i++) {
        if (off[i + 1] <= off[i]) return skpo_err_set(err, SKPO_ERANGE, "step: sequence %d has no new tokens", seq[i]);
        for (int j = 0; j < i; j++)
            if (seq[j] == seq[i]) return skpo_err_set(err, SKPO_ERANGE, "step: sequence %d given twice", seq[i]);
    }
    for (int r = 0; r < off[nseq]; r++)
        if (toks[r] < 0 || toks[r] >= m->c.vocab_size)
            return skpo_err_set(err, SKPO_ERANGE, "step: token id %d outside the vocabulary (%d)", toks[r], m->c.vocab_size);
    return SKPO_OK;
}

// One layer on N new rows; x (N, C) is updated in place. K/V go into the cache.
static void step_layer(skpo_model *m, int l, float *x, int N, const int *pos, const int **blocks, skpo_kv *kv,
                       float *ln, float *q, float *k, float *v, float *att, float *gate, float *up) {
    const skpo_config *c = &m->c;
    const skpo_ops *op = m->ops;
    const model_layer *L = &m->layers[l];
    int C = c->hidden_size, F = c->intermediate_size, NH = c->num_attention_heads, NKV = c->num_key_value_heads;
    int HS = c->head_dim, QD = NH * HS, KVD = NKV * HS, pw = l * PK_PER_LAYER;
    op->rmsnorm(ln, NULL, x, L->ln1, N, C, (float)c->rms_norm_eps);
    model_linear(m, pw + PK_Q, q, ln, L->wq, L->bq, N, C, QD, 0);
    model_linear(m, pw + PK_K, k, ln, L->wk, L->bk, N, C, KVD, 0);
    model_linear(m, pw + PK_V, v, ln, L->wv, L->bv, N, C, KVD, 0);
    if (m->lora) { // LoRA (lora.h): the low-rank path of each targeted projection
        skpo_lora_fwd(m->lora, op, l, SKPO_LORA_Q, q, ln, N);
        skpo_lora_fwd(m->lora, op, l, SKPO_LORA_K, k, ln, N);
        skpo_lora_fwd(m->lora, op, l, SKPO_LORA_V, v, ln, N);
    }
    op->rope(q, pos, m->inv_freq, N, NH, HS, 0);
    op->rope(k, pos, m->inv_freq, N, NKV, HS, 0);
    const skpo_kv_shape *ks = skpo_kv_get_shape(kv);
    float *pk = skpo_kv_pool_k(kv), *pv = skpo_kv_pool_v(kv);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < N; r++) {
        size_t b = (size_t)blocks[r][pos[r] / ks->block_size];
        size_t o = ((b * (size_t)ks->n_layers + (size_t)l) * (size_t)ks->block_size + (size_t)(pos[r] % ks->block_size)) *
                   (size_t)KVD;
        memcpy(pk + o, k + (size_t)r * KVD, (size_t)KVD * sizeof(float));
        memcpy(pv + o, v + (size_t)r * KVD, (size_t)KVD * sizeof(float));
    }
    skpo_paged_kv pkv = {pk, pv, ks->n_layers, ks->block_size, KVD};
    op->attention_paged(att, q, N, pos, blocks, &pkv, l, NH, NKV, HS);
    model_linear(m, pw + PK_O, x, att, L->wo, L->bo, N, QD, C, 1); // residual: x += att Wo^T
    if (m->lora) skpo_lora_fwd(m->lora, op, l, SKPO_LORA_O, x, att, N); // LoRA
    op->rmsnorm(ln, NULL, x, L->ln2, N, C, (float)c->rms_norm_eps);
    model_linear(m, pw + PK_G, gate, ln, L->wg, NULL, N, C, F, 0);
    model_linear(m, pw + PK_U, up, ln, L->wu, NULL, N, C, F, 0);
    if (m->lora) { // LoRA
        skpo_lora_fwd(m->lora, op, l, SKPO_LORA_GATE, gate, ln, N);
        skpo_lora_fwd(m->lora, op, l, SKPO_LORA_UP, up, ln, N);
    }
    op->swiglu(gate, gate, up, (size_t)N * F);
    model_linear(m, pw + PK_D, x, gate, L->wd, NULL, N, F, C, 1); // residual: x += h Wd^T
    if (m->lora) skpo_lora_fwd(m->lora, op, l, SKPO_LORA_DOWN, x, gate, N); // LoRA
}

skpo_status skpo_model_step(skpo_model *m, skpo_kv *kv, const int *seq, int nseq, const int32_t *toks,
                            const int *off, float *logits, skpo_err *err) {
    if (m->cuda) return model_cuda_step(m, kv, seq, nseq, toks, off, logits, err);
    if (skpo_kv_pool_ctx(kv))
        return skpo_err_set(err, SKPO_ERANGE, "step: the kv cache lives on a device, the model on the cpu");
    skpo_status s = model_step_check(m, seq, nseq, toks, off, err);
    if (s) return s;
    model_pack(m);
    const skpo_config *c = &m->c;
    const skpo_kv_shape *ks = skpo_kv_get_shape(kv);
    int N = off[nseq], C = c->hidden_size, F = c->intermediate_size, V = c->vocab_size;
    int QD = c->num_attention_heads * c->head_dim, KVD = c->num_key_value_heads * c->head_dim;
    SKPO_ASSERT(ks->n_layers == c->num_hidden_layers && ks->kv_dim == KVD);
    int *pos = skpo_xmalloc((size_t)N * sizeof(int));
    const int **blocks = skpo_xmalloc((size_t)N * sizeof(int *));
    if ((s = step_reserve(m, kv, seq, nseq, off, pos, blocks, err))) {
        free(pos);
        free(blocks);
        return s;
    }
    float *x = skpo_xmalloc((size_t)N * C * sizeof(float)), *ln = skpo_xmalloc((size_t)N * C * sizeof(float));
    float *q = skpo_xmalloc((size_t)N * QD * sizeof(float)), *att = skpo_xmalloc((size_t)N * QD * sizeof(float));
    float *k = skpo_xmalloc((size_t)N * KVD * sizeof(float)), *v = skpo_xmalloc((size_t)N * KVD * sizeof(float));
    float *gate = skpo_xmalloc((size_t)N * F * sizeof(float)), *up = skpo_xmalloc((size_t)N * F * sizeof(float));
    m->ops->embed(x, m->wte, toks, N, C);
    for (int l = 0; l < c->num_hidden_layers; l++) step_layer(m, l, x, N, pos, blocks, kv, ln, q, k, v, att, gate, up);
    // Only the last new row of each sequence needs logits.
    for (int i = 0; i < nseq; i++) memcpy(ln + (size_t)i * C, x + (size_t)(off[i + 1] - 1) * C, (size_t)C * sizeof(float));
    m->ops->rmsnorm(x, NULL, ln, m->normf, nseq, C, (float)c->rms_norm_eps);
    model_linear(m, c->num_hidden_layers * PK_PER_LAYER, logits, x, m->lm_head, NULL, nseq, C, V, 0);
    free(x); free(ln); free(q); free(att); free(k); free(v); free(gate); free(up);
    free(pos);
    free(blocks);
    return SKPO_OK;
}
