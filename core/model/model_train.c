/*
 * model_train.c - whole-sequence forward (scoring and training) and the full
 * backward pass of the token-level loss through every parameter.
 *
 * A batch is the concatenation of its rows (N tokens): a row is one sequence,
 * causal, or a packed group (model/pack.h), the shared prefix once and then
 * each continuation, which sees the prefix and itself only (base/attn_mask.h).
 * Only the tokens that predict a scored token go through the lm_head, in
 * chunks (the last prefix token of a packed row predicts the first token of
 * every continuation: it appears once per continuation). A training pass keeps the logits for
 * backward when they are small (LOGIT_KEEP_FLOATS); otherwise (T, vocab)
 * logits never exist at once, and backward recomputes each chunk's logits
 * from the saved final-norm output and the saved log-normaliser.
 * Every forward product is the packed batch-invariant one (model_cpu_linear)
 * with the compute weights (model_cw), as in decode (model_cpu.c), so the
 * log-probs here are the bits the sampler wrote.
 * The CPU backend's half for scoring and training (model_impl.h); inference
 * is model_cpu.c. Not here: the optimiser (train/optim).
 */
#include "model/lora.h"
#include "model/model_impl.h"
#include "model/pack.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LOGIT_CHUNK_FLOATS ((size_t)1 << 24) // 64 MiB of logits per chunk
// A training forward keeps all its logits for backward when they fit here
// (256 MiB: a 32k vocabulary up to 2k scored rows); above, backward
// recomputes them chunk by chunk (a 152k vocabulary at 8k rows would be 5 GB).
#define LOGIT_KEEP_FLOATS ((size_t)1 << 26)

static float *falloc(size_t n) { return skpo_xmalloc((n ? n : 1) * sizeof(float)); }

void model_acts_free(model_acts *a) {
    free(a->seq_off); free(a->pos); free(a->ids); free(a->seg);
    free(a->x); free(a->ln1); free(a->rstd1); free(a->q); free(a->k); free(a->v);
    free(a->att); free(a->lse); free(a->xmid); free(a->ln2); free(a->rstd2);
    free(a->gate); free(a->up); free(a->h); free(a->lnf); free(a->rstdf);
    free(a->srow); free(a->stgt); free(a->slse); free(a->sent); free(a->logits);
    memset(a, 0, sizeof *a);
}

// Lay out the batch (model/pack.h: shared prefixes once unless the model
// says not to pack) and allocate activations (per layer when save, else one
// layer's worth).
static void acts_alloc(skpo_model *m, const skpo_seq *seqs, int nseq, int save, model_acts *a) {
    const skpo_config *c = &m->c;
    model_acts_free(a);
    skpo_pack pk;
    skpo_pack_plan(seqs, nseq, model_packs(m), &pk);
    int N = pk.N;
    a->N = N, a->S = pk.S, a->nseq = pk.nrows, a->saved = save;
    a->seq_off = pk.row_off, a->pos = pk.pos, a->ids = pk.ids, a->srow = pk.srow, a->stgt = pk.stgt;
    if (pk.packed) a->seg = pk.seg;
    else free(pk.seg);   // no packed row: the plain causal kernels
    m->last_raw = pk.raw, m->last_packed = pk.N;
    size_t L = save ? (size_t)c->num_hidden_layers : 1, n = (size_t)N;
    size_t C = (size_t)c->hidden_size, F = (size_t)c->intermediate_size, NH = (size_t)c->num_attention_heads;
    size_t QD = NH * c->head_dim, KVD = (size_t)c->num_key_value_heads * c->head_dim;
    a->x = falloc((save ? L + 1 : 1) * n * C);
    a->ln1 = falloc(L * n * C), a->rstd1 = falloc(L * n);
    a->q = falloc(L * n * QD), a->k = falloc(L * n * KVD), a->v = falloc(L * n * KVD);
    a->att = falloc(L * n * QD), a->lse = falloc(L * n * NH);
    a->xmid = falloc(L * n * C), a->ln2 = falloc(L * n * C), a->rstd2 = falloc(L * n);
    a->gate = falloc(L * n * F), a->up = falloc(L * n * F), a->h = falloc(n * F);
    a->lnf = falloc(n * C), a->rstdf = falloc(n);
    a->slse = falloc((size_t)a->S), a->sent = falloc((size_t)a->S);
}

// Pointers to layer l's activations (layer 0's buffers when not saved).
typedef struct layer_acts {
    float *xin, *xout, *ln1, *rstd1, *q, *k, *v, *att, *lse, *xmid, *ln2, *rstd2, *gate, *up;
} layer_acts;

static layer_acts acts_layer(const skpo_model *m, const model_acts *a, int l) {
    const skpo_config *c = &m->c;
    size_t n = (size_t)a->N, li = a->saved ? (size_t)l : 0;
    size_t C = (size_t)c->hidden_size, F = (size_t)c->intermediate_size, NH = (size_t)c->num_attention_heads;
    size_t QD = NH * c->head_dim, KVD = (size_t)c->num_key_value_heads * c->head_dim;
    layer_acts la = {
        .xin = a->x + li * n * C, .xout = a->x + (a->saved ? li + 1 : 0) * n * C,
        .ln1 = a->ln1 + li * n * C, .rstd1 = a->rstd1 + li * n,
        .q = a->q + li * n * QD, .k = a->k + li * n * KVD, .v = a->v + li * n * KVD,
        .att = a->att + li * n * QD, .lse = a->lse + li * n * NH,
        .xmid = a->xmid + li * n * C, .ln2 = a->ln2 + li * n * C, .rstd2 = a->rstd2 + li * n,
        .gate = a->gate + li * n * F, .up = a->up + li * n * F,
    };
    return la;
}

static void layer_forward(skpo_model *m, model_acts *a, int l) {
    const skpo_config *c = &m->c;
    const skpo_ops *op = m->ops;
    const model_layer *L = &m->layers[l];
    layer_acts la = acts_layer(m, a, l);
    int N = a->N, C = c->hidden_size, F = c->intermediate_size, NH = c->num_attention_heads;
    int NKV = c->num_key_value_heads, HS = c->head_dim, QD = NH * HS, KVD = NKV * HS;
    float eps = (float)c->rms_norm_eps;
    int pw = l * PK_PER_LAYER;
    op->rmsnorm(la.ln1, la.rstd1, la.xin, model_cw(m, L->ln1), N, C, eps);
    model_cpu_linear(m, pw + PK_Q, la.q, la.ln1, L->bq, N, C, QD, 0);
    model_cpu_linear(m, pw + PK_K, la.k, la.ln1, L->bk, N, C, KVD, 0);
    model_cpu_linear(m, pw + PK_V, la.v, la.ln1, L->bv, N, C, KVD, 0);
    if (m->lora) { // LoRA (lora.h): the low-rank path of each targeted projection
        skpo_lora_fwd(m->lora, op, l, SKPO_LORA_Q, la.q, la.ln1, N);
        skpo_lora_fwd(m->lora, op, l, SKPO_LORA_K, la.k, la.ln1, N);
        skpo_lora_fwd(m->lora, op, l, SKPO_LORA_V, la.v, la.ln1, N);
    }
    op->rope(la.q, a->pos, m->inv_freq, N, NH, HS, 0);
    op->rope(la.k, a->pos, m->inv_freq, N, NKV, HS, 0);
    op->attention(la.att, la.lse, la.q, la.k, la.v, a->seq_off, a->nseq, a->seg, NH, NKV, HS);
    memcpy(la.xmid, la.xin, (size_t)N * C * sizeof(float));
    model_cpu_linear(m, pw + PK_O, la.xmid, la.att, L->bo, N, QD, C, 1); // xmid = xin + att Wo^T
    if (m->lora) skpo_lora_fwd(m->lora, op, l, SKPO_LORA_O, la.xmid, la.att, N); // LoRA
    op->rmsnorm(la.ln2, la.rstd2, la.xmid, model_cw(m, L->ln2), N, C, eps);
    model_cpu_linear(m, pw + PK_G, la.gate, la.ln2, NULL, N, C, F, 0);
    model_cpu_linear(m, pw + PK_U, la.up, la.ln2, NULL, N, C, F, 0);
    if (m->lora) { // LoRA
        skpo_lora_fwd(m->lora, op, l, SKPO_LORA_GATE, la.gate, la.ln2, N);
        skpo_lora_fwd(m->lora, op, l, SKPO_LORA_UP, la.up, la.ln2, N);
    }
    op->swiglu(a->h, la.gate, la.up, (size_t)N * F);
    memmove(la.xout, la.xmid, (size_t)N * C * sizeof(float));      // xout may alias xin (not saved)
    model_cpu_linear(m, pw + PK_D, la.xout, a->h, NULL, N, F, C, 1); // xout = xmid + h Wd^T
    if (m->lora) skpo_lora_fwd(m->lora, op, l, SKPO_LORA_DOWN, la.xout, a->h, N); // LoRA
}

static int chunk_rows(const skpo_model *m) {
    size_t r = LOGIT_CHUNK_FLOATS / (size_t)m->c.vocab_size;
    return r < 1 ? 1 : r > 4096 ? 4096 : (int)r;
}

// Scored rows through the lm_head, chunk by chunk: logp, entropy, lse. A
// training pass keeps the logits (a->logits) when they fit LOGIT_KEEP_FLOATS.
static void head_forward(skpo_model *m, model_acts *a, float *logp, float *ent) {
    int C = m->c.hidden_size, V = m->c.vocab_size, R = chunk_rows(m);
    int keep = a->saved && (size_t)a->S * V <= LOGIT_KEEP_FLOATS;
    float *g = falloc((size_t)R * C), *scratch = keep ? NULL : falloc((size_t)R * V);
    if (keep) a->logits = falloc((size_t)a->S * V);
    for (int s0 = 0; s0 < a->S; s0 += R) {
        int n = a->S - s0 < R ? a->S - s0 : R;
        float *logits = keep ? a->logits + (size_t)s0 * V : scratch;
        for (int i = 0; i < n; i++)
            memcpy(g + (size_t)i * C, a->lnf + (size_t)a->srow[s0 + i] * C, (size_t)C * sizeof(float));
        model_cpu_linear(m, m->c.num_hidden_layers * PK_PER_LAYER, logits, g, NULL, n, C, V, 0);
        m->ops->logprob(logp + s0, a->sent + s0, a->slse + s0, logits, a->stgt + s0, n, V, a->temperature);
        if (ent) memcpy(ent + s0, a->sent + s0, (size_t)n * sizeof(float));
    }
    free(g);
    free(scratch);
}

skpo_status model_forward_seqs(skpo_model *m, const skpo_seq *seqs, int nseq, float temperature, int save,
                               float *logp, float *entropy, model_acts *a, skpo_err *err) {
    skpo_status s = model_check_seqs(m, seqs, nseq, temperature, err);
    if (s) return s;
    acts_alloc(m, seqs, nseq, save, a);
    model_cpu_prepare(m);
    a->temperature = temperature;
    const skpo_config *c = &m->c;
    m->ops->embed(a->x, model_cw(m, m->wte), a->ids, a->N, c->hidden_size);
    for (int l = 0; l < c->num_hidden_layers; l++) layer_forward(m, a, l);
    float *xl = a->x + (save ? (size_t)c->num_hidden_layers * a->N * c->hidden_size : 0);
    m->ops->rmsnorm(a->lnf, a->rstdf, xl, model_cw(m, m->normf), a->N, c->hidden_size, (float)c->rms_norm_eps);
    head_forward(m, a, logp, entropy);
    for (int i = 0; i < a->S; i++)
        if (!isfinite(logp[i]) || !isfinite(a->sent[i]))
            return skpo_err_set(err, SKPO_ENUMERIC, "non-finite log-prob at scored token %d", i);
    return SKPO_OK;
}

skpo_status model_cpu_logprobs(skpo_model *m, const skpo_seq *seqs, int nseq, float temperature, float *logp,
                               float *entropy, skpo_err *err) {
    model_acts a = {0};
    skpo_status s = model_forward_seqs(m, seqs, nseq, temperature, 0, logp, entropy, &a, err);
    model_acts_free(&a);
    return s;
}

skpo_status model_cpu_train_forward(skpo_model *m, const skpo_seq *seqs, int nseq, float temperature, float *logp,
                                    float *entropy, skpo_err *err) {
    if (!m->grad && !m->lora) // LoRA trains the adapter of a frozen base
        return skpo_err_set(err, SKPO_EUNSUPPORTED, "train_forward on a model loaded without trainable = 1");
    m->have_acts = 0;
    skpo_status s = model_forward_seqs(m, seqs, nseq, temperature, 1, logp, entropy, &m->acts, err);
    if (!s) m->have_acts = 1;
    return s;
}

// --- backward ----------------------------------------------------------------------------------

// d(loss)/d(lnf) (N, C) from the head, recomputing logits chunk by chunk.
static void head_backward(skpo_model *m, model_acts *a, const float *dlogp, const float *dent, float *dlnf) {
    int C = m->c.hidden_size, V = m->c.vocab_size, R = chunk_rows(m);
    float *g = falloc((size_t)R * C), *dg = falloc((size_t)R * C), *scratch = a->logits ? NULL : falloc((size_t)R * V);
    float *dW = model_grad_of(m, m->lm_head);
    memset(dlnf, 0, (size_t)a->N * C * sizeof(float));
    for (int s0 = 0; s0 < a->S; s0 += R) {
        int n = a->S - s0 < R ? a->S - s0 : R;
        for (int i = 0; i < n; i++)
            memcpy(g + (size_t)i * C, a->lnf + (size_t)a->srow[s0 + i] * C, (size_t)C * sizeof(float));
        float *logits = a->logits ? a->logits + (size_t)s0 * V : scratch;
        if (!a->logits) model_cpu_linear(m, m->c.num_hidden_layers * PK_PER_LAYER, logits, g, NULL, n, C, V, 0);
        m->ops->logprob_backward(logits, a->stgt + s0, a->slse + s0, dent ? a->sent + s0 : NULL, dlogp + s0,
                                 dent ? dent + s0 : NULL, n, V, a->temperature);
        memset(dg, 0, (size_t)n * C * sizeof(float));
        m->ops->matmul_backward(dg, dW, NULL, logits, g, model_cw(m, m->lm_head),
                                model_cpu_packed_t(m, m->c.num_hidden_layers * PK_PER_LAYER), n, C, V);
        for (int i = 0; i < n; i++) { // serial: a packed row's last prefix token recurs
            float *d = dlnf + (size_t)a->srow[s0 + i] * C;
            for (int j = 0; j < C; j++) d[j] += dg[(size_t)i * C + j];
        }
    }
    free(g);
    free(dg);
    free(scratch);
}

typedef struct bwd_scratch {
    float *dln, *dq, *dk, *dv, *datt, *dh, *dgate, *dup;
} bwd_scratch;

// dx (N, C) holds d(loss)/d(xout) on entry and d(loss)/d(xin) on return.
static void layer_backward(skpo_model *m, model_acts *a, int l, float *dx, bwd_scratch *b) {
    const skpo_config *c = &m->c;
    const skpo_ops *op = m->ops;
    const model_layer *L = &m->layers[l];
    layer_acts la = acts_layer(m, a, l);
    int N = a->N, C = c->hidden_size, F = c->intermediate_size, NH = c->num_attention_heads;
    int NKV = c->num_key_value_heads, HS = c->head_dim, QD = NH * HS, KVD = NKV * HS;
#define G(w) model_grad_of(m, (w))
#define W(w) model_cw(m, (w))   // values: what the forward computed with
#define PT(slot) model_cpu_packed_t(m, l * PK_PER_LAYER + (slot))
    // MLP: xout = xmid + (silu(ln2 Wg^T) * ln2 Wu^T) Wd^T
    op->swiglu(a->h, la.gate, la.up, (size_t)N * F);
    memset(b->dh, 0, (size_t)N * F * sizeof(float));
    op->matmul_backward(b->dh, G(L->wd), NULL, dx, a->h, W(L->wd), PT(PK_D), N, F, C);
    if (m->lora) skpo_lora_bwd(m->lora, op, l, SKPO_LORA_DOWN, b->dh, dx, a->h, N); // LoRA
    op->swiglu_backward(b->dgate, b->dup, b->dh, la.gate, la.up, (size_t)N * F);
    memset(b->dln, 0, (size_t)N * C * sizeof(float));
    op->matmul_backward(b->dln, G(L->wg), NULL, b->dgate, la.ln2, W(L->wg), PT(PK_G), N, C, F);
    op->matmul_backward(b->dln, G(L->wu), NULL, b->dup, la.ln2, W(L->wu), PT(PK_U), N, C, F);
    if (m->lora) { // LoRA
        skpo_lora_bwd(m->lora, op, l, SKPO_LORA_GATE, b->dln, b->dgate, la.ln2, N);
        skpo_lora_bwd(m->lora, op, l, SKPO_LORA_UP, b->dln, b->dup, la.ln2, N);
    }
    op->rmsnorm_backward(dx, G(L->ln2), b->dln, la.xmid, W(L->ln2), la.rstd2, N, C); // dx is now d/dxmid
    // attention: xmid = xin + attention(rope(ln1 Wq^T), rope(ln1 Wk^T), ln1 Wv^T) Wo^T
    memset(b->datt, 0, (size_t)N * QD * sizeof(float));
    op->matmul_backward(b->datt, G(L->wo), G(L->bo), dx, la.att, W(L->wo), PT(PK_O), N, QD, C);
    if (m->lora) skpo_lora_bwd(m->lora, op, l, SKPO_LORA_O, b->datt, dx, la.att, N); // LoRA
    op->attention_backward(b->dq, b->dk, b->dv, b->datt, la.att, la.lse, la.q, la.k, la.v, a->seq_off, a->nseq, a->seg,
                           NH, NKV, HS);
    op->rope(b->dq, a->pos, m->inv_freq, N, NH, HS, 1);
    op->rope(b->dk, a->pos, m->inv_freq, N, NKV, HS, 1);
    memset(b->dln, 0, (size_t)N * C * sizeof(float));
    op->matmul_backward(b->dln, G(L->wq), G(L->bq), b->dq, la.ln1, W(L->wq), PT(PK_Q), N, C, QD);
    op->matmul_backward(b->dln, G(L->wk), G(L->bk), b->dk, la.ln1, W(L->wk), PT(PK_K), N, C, KVD);
    op->matmul_backward(b->dln, G(L->wv), G(L->bv), b->dv, la.ln1, W(L->wv), PT(PK_V), N, C, KVD);
    if (m->lora) { // LoRA
        skpo_lora_bwd(m->lora, op, l, SKPO_LORA_Q, b->dln, b->dq, la.ln1, N);
        skpo_lora_bwd(m->lora, op, l, SKPO_LORA_K, b->dln, b->dk, la.ln1, N);
        skpo_lora_bwd(m->lora, op, l, SKPO_LORA_V, b->dln, b->dv, la.ln1, N);
    }
    op->rmsnorm_backward(dx, G(L->ln1), b->dln, la.xin, W(L->ln1), la.rstd1, N, C); // dx is now d/dxin
#undef G
#undef W
#undef PT
}

skpo_status model_cpu_train_backward(skpo_model *m, const float *dlogp, const float *dentropy, skpo_err *err) {
    if (!m->have_acts) return skpo_err_set(err, SKPO_EUNSUPPORTED, "train_backward without a train_forward before it");
    model_acts *a = &m->acts;
    model_cpu_prepare(m);
    for (int i = 0; i < a->S; i++)
        if (!isfinite(dlogp[i]) || (dentropy && !isfinite(dentropy[i])))
            return skpo_err_set(err, SKPO_ENUMERIC, "non-finite loss gradient at scored token %d", i);
    const skpo_config *c = &m->c;
    size_t N = (size_t)a->N, C = (size_t)c->hidden_size, F = (size_t)c->intermediate_size;
    size_t QD = (size_t)c->num_attention_heads * c->head_dim, KVD = (size_t)c->num_key_value_heads * c->head_dim;
    float *dlnf = falloc(N * C), *dx = falloc(N * C);
    head_backward(m, a, dlogp, dentropy, dlnf);
    memset(dx, 0, N * C * sizeof(float));
    float *xl = a->x + (size_t)c->num_hidden_layers * N * C;
    m->ops->rmsnorm_backward(dx, model_grad_of(m, m->normf), dlnf, xl, model_cw(m, m->normf), a->rstdf, (int)N, (int)C);
    bwd_scratch b = {
        .dln = dlnf, .dq = falloc(N * QD), .dk = falloc(N * KVD), .dv = falloc(N * KVD), .datt = falloc(N * QD),
        .dh = falloc(N * F), .dgate = falloc(N * F), .dup = falloc(N * F),
    };
    for (int l = c->num_hidden_layers - 1; l >= 0; l--) layer_backward(m, a, l, dx, &b);
    if (m->grad) m->ops->embed_backward(model_grad_of(m, m->wte), dx, a->ids, (int)N, (int)C); // frozen base (LoRA): none
    free(b.dq); free(b.dk); free(b.dv); free(b.datt); free(b.dh); free(b.dgate); free(b.dup);
    free(dlnf);
    free(dx);
    m->have_acts = 0;
    model_acts_free(a);
    return SKPO_OK;
}
