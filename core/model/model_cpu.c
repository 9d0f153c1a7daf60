/*
 * model_cpu.c - the CPU backend of the model (model_impl.h): float32 weights
 * in host memory (and their bf16 rounding, below), every kernel from
 * cpu/ops.h. It is the
 * readable reference the CUDA backend (model_cuda.c) mirrors op for op. This
 * file is inference over the paged KV cache; scoring and training are in
 * model_train.c. Each layer is
 *     ln = rmsnorm(x) ; q,k,v = ln Wq^T (+b) ... ; rope(q, k) ;
 *     x += attention(q, k, v) Wo^T ; ln = rmsnorm(x) ;
 *     x += (silu(ln Wg^T) * ln Wu^T) Wd^T
 * followed by a final rmsnorm and the lm_head (tied to the embedding or not).
 * Decode, prefill and model_train.c's whole-sequence passes call the same
 * kernels per row (one product, one attention row, one log-softmax), so a
 * token's log-prob does not depend on which of them computed it.
 */
#include "model/model_impl.h"

#include "base/bf16.h"

#include <stdlib.h>
#include <string.h>

// --- compute weights and packed matrices ---------------------------------------------------
//
// Every CPU pass (decode, prefill, scoring, pi_old, the training forward and
// backward) computes with the same weights: those the samplers read. For a
// bf16 checkpoint that is the bf16 rounding of the fp32 masters a trainable
// model holds (mixed precision as on GPUs: the optimizer updates the masters,
// the passes see their rounding), kept in m->cw; a float32 checkpoint
// computes with mem itself. The matrices are packed once per weight version
// (ops.h pack: bf16 panels when bf16-exact), so a pass never re-lays out a
// weight. skpo_model_params (the caller may write the weights) drops both.
static void model_unprepare(skpo_model *m) {
    int n = m->c.num_hidden_layers * PK_PER_LAYER + 1;
    for (int i = 0; m->packed && i < n; i++) m->ops->pack_free(m->packed[i]);
    for (int i = 0; m->packed_t && i < n; i++)
        if (m->packed_t[i]) m->ops->pack_free(m->packed_t[i]);
    free(m->packed);
    free(m->packed_t);
    m->packed = NULL;
    m->packed_t = NULL;
    free(m->cw);
    m->cw = NULL;
}

// The matrix of a slot and its (K, O).
static const float *slot_matrix(const skpo_model *m, int slot, int *K, int *O) {
    const skpo_config *c = &m->c;
    int C = c->hidden_size, F = c->intermediate_size, QD = c->num_attention_heads * c->head_dim;
    int KVD = c->num_key_value_heads * c->head_dim;
    if (slot == c->num_hidden_layers * PK_PER_LAYER) return *K = C, *O = c->vocab_size, m->lm_head;
    const model_layer *L = &m->layers[slot / PK_PER_LAYER];
    switch (slot % PK_PER_LAYER) {
    case PK_Q: return *K = C, *O = QD, L->wq;
    case PK_K: return *K = C, *O = KVD, L->wk;
    case PK_V: return *K = C, *O = KVD, L->wv;
    case PK_O: return *K = QD, *O = C, L->wo;
    case PK_G: return *K = C, *O = F, L->wg;
    case PK_U: return *K = C, *O = F, L->wu;
    default: return *K = F, *O = C, L->wd;
    }
}

void model_cpu_prepare(skpo_model *m) {
    const skpo_config *c = &m->c;
    if (m->packed) return;
    if (m->src_dtype == SKPO_DT_BF16 && m->o.trainable) {
        m->cw = skpo_xmalloc(m->numel * sizeof(float));
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < m->numel; i++) m->cw[i] = skpo_bf16_round(m->mem[i]);
    }
    int n = c->num_hidden_layers * PK_PER_LAYER + 1;
    void **pk = skpo_xmalloc((size_t)n * sizeof *pk);
    for (int slot = 0; slot < n; slot++) {
        int K, O;
        const float *w = slot_matrix(m, slot, &K, &O);
        pk[slot] = m->ops->pack(model_cw(m, w), K, O);
    }
    m->packed = pk;
}

const void *model_cpu_packed_t(skpo_model *m, int slot) {
    if (!m->ops->pack_t) return NULL;
    if (!m->packed_t) m->packed_t = skpo_xcalloc((size_t)m->c.num_hidden_layers * PK_PER_LAYER + 1, sizeof *m->packed_t);
    if (!m->packed_t[slot]) {
        int K, O;
        const float *w = slot_matrix(m, slot, &K, &O);
        m->packed_t[slot] = m->ops->pack_t(model_cw(m, w), K, O);
    }
    return m->packed_t[slot];
}

void model_cpu_linear(const skpo_model *m, int slot, float *out, const float *in, const float *bias, int N, int K, int O,
                      int acc) {
    m->ops->matmul_packed(out, in, m->packed[slot], model_cw(m, bias), N, K, O, acc);
}

// --- inference over the paged cache -----------------------------------------------------------

static skpo_kv *cpu_kv_new(const skpo_model *m, size_t max_tokens, int max_seqs, skpo_err *err) {
    skpo_kv_shape sh = {
        .n_layers = m->c.num_hidden_layers,
        .kv_dim = m->c.num_key_value_heads * m->c.head_dim,
        .block_size = 16,
        .n_blocks = (max_tokens + 15) / 16 + (size_t)(max_seqs > 0 ? max_seqs : 1), // partial last blocks
        .max_seqs = max_seqs,
    };
    return skpo_kv_new(&sh, err);
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

// One layer on N new rows; x (N, C) is updated in place. K/V go into the cache.
static void step_layer(skpo_model *m, int l, float *x, int N, const int *pos, const int **blocks, skpo_kv *kv,
                       float *ln, float *q, float *k, float *v, float *att, float *gate, float *up) {
    const skpo_config *c = &m->c;
    const skpo_ops *op = m->ops;
    const model_layer *L = &m->layers[l];
    int C = c->hidden_size, F = c->intermediate_size, NH = c->num_attention_heads, NKV = c->num_key_value_heads;
    int HS = c->head_dim, QD = NH * HS, KVD = NKV * HS, pw = l * PK_PER_LAYER;
    op->rmsnorm(ln, NULL, x, model_cw(m, L->ln1), N, C, (float)c->rms_norm_eps);
    model_cpu_linear(m, pw + PK_Q, q, ln, L->bq, N, C, QD, 0);
    model_cpu_linear(m, pw + PK_K, k, ln, L->bk, N, C, KVD, 0);
    model_cpu_linear(m, pw + PK_V, v, ln, L->bv, N, C, KVD, 0);
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
    model_cpu_linear(m, pw + PK_O, x, att, L->bo, N, QD, C, 1); // residual: x += att Wo^T
    if (m->lora) skpo_lora_fwd(m->lora, op, l, SKPO_LORA_O, x, att, N); // LoRA
    op->rmsnorm(ln, NULL, x, model_cw(m, L->ln2), N, C, (float)c->rms_norm_eps);
    model_cpu_linear(m, pw + PK_G, gate, ln, NULL, N, C, F, 0);
    model_cpu_linear(m, pw + PK_U, up, ln, NULL, N, C, F, 0);
    if (m->lora) { // LoRA
        skpo_lora_fwd(m->lora, op, l, SKPO_LORA_GATE, gate, ln, N);
        skpo_lora_fwd(m->lora, op, l, SKPO_LORA_UP, up, ln, N);
    }
    op->swiglu(gate, gate, up, (size_t)N * F);
    model_cpu_linear(m, pw + PK_D, x, gate, NULL, N, F, C, 1); // residual: x += h Wd^T
    if (m->lora) skpo_lora_fwd(m->lora, op, l, SKPO_LORA_DOWN, x, gate, N); // LoRA
}

static skpo_status cpu_step(skpo_model *m, skpo_kv *kv, const int *seq, int nseq, const int32_t *toks,
                            const int *off, float *logits, skpo_err *err) {
    if (skpo_kv_pool_ctx(kv))
        return skpo_err_set(err, SKPO_ERANGE, "step: the kv cache lives on a device, the model on the cpu");
    skpo_status s = model_step_check(m, seq, nseq, toks, off, err);
    if (s) return s;
    model_cpu_prepare(m);
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
    m->ops->embed(x, model_cw(m, m->wte), toks, N, C);
    for (int l = 0; l < c->num_hidden_layers; l++) step_layer(m, l, x, N, pos, blocks, kv, ln, q, k, v, att, gate, up);
    // Only the last new row of each sequence needs logits.
    for (int i = 0; i < nseq; i++) memcpy(ln + (size_t)i * C, x + (size_t)(off[i + 1] - 1) * C, (size_t)C * sizeof(float));
    m->ops->rmsnorm(x, NULL, ln, model_cw(m, m->normf), nseq, C, (float)c->rms_norm_eps);
    model_cpu_linear(m, c->num_hidden_layers * PK_PER_LAYER, logits, x, NULL, nseq, C, V, 0);
    free(x); free(ln); free(q); free(att); free(k); free(v); free(gate); free(up);
    free(pos);
    free(blocks);
    return SKPO_OK;
}

// --- the backend ----------------------------------------------------------------------------------

static int cpu_visible(void) { return 1; }

static void cpu_close(skpo_model *m) {
    model_unprepare(m);
    model_acts_free(&m->acts);
}

static skpo_status cpu_zero_grad(skpo_model *m, skpo_err *err) {
    if (m->grad) memset(m->grad, 0, m->numel * sizeof(float));
    return SKPO_OK;
}

const model_backend model_backend_cpu = {
    .name = "cpu",
    .device = SKPO_DEV_CPU,
    .can_pack = 1,
    .visible = cpu_visible,
    .close = cpu_close,
    .host_weights_changed = model_unprepare,   // compute and packed copies would go stale
    .kv_new = cpu_kv_new,
    .step = cpu_step,
    .logprobs = model_cpu_logprobs,
    .train_forward = model_cpu_train_forward,
    .train_backward = model_cpu_train_backward,
    .zero_grad = cpu_zero_grad,
};
