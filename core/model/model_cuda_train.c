/*
 * model_cuda_train.c - scoring and training of the CUDA backend (model_impl.h).
 * The math is model_train.c's,
 * op for op, on the device: bf16 activations, fp32 statistics, fp32 weight
 * gradients (cuBLAS accumulates dW into the fp32 buffer). Differences forced
 * by the kernels: attention's dK/dV come out in bf16 (cuDNN, flash) or in fp32
 * (the custom kernels' atomics, rounded to bf16 before their projections);
 * input gradients that several projections feed are accumulated by the GEMM in
 * bf16. Attention takes the path model_cuda_attn_select chooses (SKPO_ATTN:
 * cudnn, flash, custom); cuDNN that cannot take a shape hands over to the own
 * kernels for the rest of the run, once, with a line on stderr.
 * SKPO_DETERMINISTIC=1 swaps the two order-dependent atomic sums (embedding
 * rows, attention dK/dV) for ordered ones and takes the custom attention path
 * (flash's dQ and cuDNN's backward add atomically): the same bits every run.
 * q, k, v run as one GEMM over [Wq; Wk; Wv] (model.c keeps them contiguous)
 * followed by one bias + RoPE + split launch, gate and up as one GEMM into
 * [gate | up]; the GEMMs that feed the residual write fp32 and one launch adds
 * them (+ bias) and computes the next RMSNorm; backward mirrors it (one dW and
 * one dx GEMM per fused projection). With a LoRA adapter, whose low-rank
 * paths need each projection's own output, the projections run one by one.
 * All device memory of a pass comes from one arena that grows to the largest
 * micro-batch seen and is kept until the model is closed.
 */
#include "model/model_impl.h"
#include "model/pack.h"
#include "base/attn_mask.h"

#ifdef SKPO_HAVE_CUDA  // a CPU-only build has no CUDA backend (backends.c does not list one)

#include "cuda/cuda_dnn.h"
#include "cuda/cuda_infer.h"
#include "cuda/cuda_train.h"

#include <stdio.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

// The lm_head runs on the scored rows in chunks of R rows, R as large as half
// the device memory the rest of the pass leaves free allows, up to 2^31
// logits (4 GiB of bf16: 14k rows at a 152k vocabulary, so a 8 x 1024
// micro-batch is one chunk): every chunk reads the lm_head weight twice and
// reads and writes its fp32 gradient (0.93 GB each way at 1.5B), so 441-row
// chunks of 8 x 1024 tokens would move some 35 GB more than one chunk does.
// Tests lower the cap to run many chunks.
#ifndef LOGIT_CHUNK_ELEMS
#define LOGIT_CHUNK_ELEMS ((size_t)1 << 31)
#endif
#define TRY(call) do { skpo_status s_ = (call); if (s_) return s_; } while (0)

typedef skpo_bf16 bf;

// One layer's activations (pointers into the arena).
typedef struct ct_layer {
    bf *xin, *xout, *ln1, *q, *k, *v, *att, *xmid, *ln2;
    bf *gu, *gate, *up;   // gu (N, 2F) = [gate | up] rows (fused), or gate, up (N, F) each (one by one)
    float *rstd1, *lse, *rstd2;
} ct_layer;

typedef struct cutrain {
    int recompute;
    skpo_status pending;      // a failed zero_grad, reported by the next pass
    skpo_err pending_err;
    char *arena;
    size_t cap;
    // the batch
    int N, S, nseq, R, saved, nl;   // nl: layers with their own activation buffers
    int recomputing;                // this pass saved layer inputs only
    model_attn_path attn;           // this pass's attention path
    int attn_forced;                // SKPO_ATTN named it: no fallback
    int dnn_off;                    // cuDNN failed on an unforced choice: own kernels from now on
    int max_len;                    // longest sequence of the batch
    int det;                        // SKPO_DETERMINISTIC=1: a backward without order-dependent atomics
    int nseg;                       // det: runs of one token id in emb_order
    int fused;                      // fused projections and residual norms (no LoRA adapter)
    float temperature;
    int have_acts;
    int32_t *ids, *pos, *seq_start, *seq_of, *srow, *stgt;
    int packed;                     // rows are packed groups (model/pack.h): the runs mask is on
    int32_t *runs;                  // packed: (3, N) pre_end | own0 | q_end (cuda.h skpo_cuda_runs)
    int32_t *dup;                   // packed: (S) earlier scored tokens on the same row (head backward rounds)
    int dup_rounds;
    // activations
    bf *x;                    // (L + 1 when saved, else 1; N, C)
    bf *ln1, *q, *k, *v, *att, *xmid, *ln2, *gu;   // (nl, N, *); gu: N x 2F a layer
    float *rstd1, *lse, *rstd2;
    bf *h, *lnf, *g, *logits;
    bf *qkv;                  // (N, QD + 2 KVD): the fused q|k|v GEMM's output, then d(q|k|v)
    float *yf;                // (N, C) fp32 output of the GEMMs that feed the residual
    float *rstdf, *logp, *ent;
    // backward scratch (saved passes only)
    bf *dx, *dln, *dq, *datt, *dkb, *dvb, *dh, *dgu, *dlnf, *dg;   // dgu: (N, 2F) [d gate | d up]
    float *dk, *dv, *dlogp, *dent, *colpart, *fwork;
    float *dwork;                   // det: the attention backward's D (N, heads)
    int32_t *emb_order, *emb_seg;   // det: rows sorted by token id, runs of one id
} cutrain;

// model_cuda_close calls it through mc->train_free.
static void cutrain_free(model_cuda *mc) {
    cutrain *t = mc->train;
    if (!t) return;
    skpo_cuda_dfree(t->arena);
    free(t);
    mc->train = NULL;
}

static cutrain *tr(skpo_model *m) {
    if (!model_cuda_of(m)->train) {
        model_cuda_of(m)->train = skpo_xcalloc(1, sizeof(cutrain));
        model_cuda_of(m)->train_free = cutrain_free;
    }
    return model_cuda_of(m)->train;
}

void model_cuda_set_recompute(skpo_model *m, int on) { tr(m)->recompute = on != 0; }

skpo_status model_cuda_dev_params(skpo_model *m, skpo_dev_params *out, skpo_err *err) {
    if (!model_cuda_of(m)->master || !model_cuda_of(m)->grad)
        return skpo_err_set(err, SKPO_EUNSUPPORTED, "the model is not a trainable model on cuda");
    *out = (skpo_dev_params){model_cuda_of(m)->cu, model_cuda_of(m)->master, model_cuda_of(m)->w, model_cuda_of(m)->grad, m->numel,
                             &model_cuda_dev_ops};
    return SKPO_OK;
}

skpo_status model_cuda_grad_sumsq(skpo_model *m, double *ss, skpo_err *err) {
    if (!model_cuda_of(m)->grad) return skpo_err_set(err, SKPO_EUNSUPPORTED, "the model has no device gradients");
    return skpo_cuda_sumsq_f64(model_cuda_of(m)->cu, ss, model_cuda_of(m)->grad, m->numel, err);
}

// Master, grad and the activation arena freed: at 7B 61 GB, plus the arena
// (~26 GB for 8k tokens a micro-batch), of device memory the samplers can use
// until the next update. The device optimizer keeps the masters' values (its
// offload took them first; its reload writes them back); the next pass grows
// a new arena.
skpo_status model_cuda_offload(skpo_model *m, skpo_err *err) {
    model_cuda *mc = model_cuda_of(m);
    if (mc->offloaded || !mc->master) return SKPO_OK;
    skpo_status st = skpo_cuda_sync(mc->cu, err);
    if (st) return st;
    skpo_cuda_dfree(mc->master);
    skpo_cuda_dfree(mc->grad);
    mc->master = mc->grad = NULL;
    cutrain *t = mc->train;
    if (t) {
        skpo_cuda_dfree(t->arena);
        t->arena = NULL;
        t->cap = 0;
        t->have_acts = 0;   // a backward now would read freed activations
    }
    mc->offloaded = 1;
    return SKPO_OK;
}

skpo_status model_cuda_reload(skpo_model *m, skpo_err *err) {
    model_cuda *mc = model_cuda_of(m);
    if (!mc->offloaded) return SKPO_OK;
    size_t bytes = m->numel * sizeof(float);
    skpo_status st = skpo_cuda_malloc(mc->cu, (void **)&mc->master, bytes, "fp32 master weights", err);
    if (!st) st = skpo_cuda_malloc(mc->cu, (void **)&mc->grad, bytes, "fp32 gradients", err);
    if (!st) st = skpo_cuda_memset0(mc->cu, mc->grad, bytes, err);
    if (!st) st = skpo_cuda_sync(mc->cu, err);
    if (st) {
        skpo_cuda_dfree(mc->master);
        skpo_cuda_dfree(mc->grad);
        mc->master = mc->grad = NULL;
        return st;
    }
    mc->offloaded = 0;
    return SKPO_OK;
}

// --- the arena ------------------------------------------------------------------------------

typedef struct dims {
    size_t N, S, R, L, C, F, NH, QD, KVD, V, nseq;
} dims;

static dims dims_of(const skpo_model *m, const cutrain *t) {
    const skpo_config *c = &m->c;
    dims d = {(size_t)t->N, (size_t)t->S, (size_t)t->R, (size_t)c->num_hidden_layers, (size_t)c->hidden_size,
              (size_t)c->intermediate_size, (size_t)c->num_attention_heads, 0, 0, (size_t)c->vocab_size,
              (size_t)t->nseq};
    d.QD = d.NH * (size_t)c->head_dim;
    d.KVD = (size_t)c->num_key_value_heads * (size_t)c->head_dim;
    return d;
}

// Two passes: base == NULL measures, otherwise assigns the pointers.
#define TAKE(p, n, type) do { off = (off + 255) & ~(size_t)255; \
    (p) = base ? (type *)(base + off) : (p); off += (size_t)(n) * sizeof(type); } while (0)

static size_t layout(cutrain *t, const dims *d, char *base) {
    size_t off = 0, N = d->N, nl = (size_t)t->nl, nx = t->saved ? d->L + 1 : 1;
    TAKE(t->ids, N, int32_t); TAKE(t->pos, N, int32_t); TAKE(t->seq_start, d->nseq + 1, int32_t);
    TAKE(t->seq_of, N, int32_t);
    TAKE(t->runs, 3 * N, int32_t); TAKE(t->dup, d->S, int32_t);
    TAKE(t->srow, d->S, int32_t); TAKE(t->stgt, d->S, int32_t);
    TAKE(t->x, nx * N * d->C, bf);
    TAKE(t->ln1, nl * N * d->C, bf); TAKE(t->q, nl * N * d->QD, bf);
    TAKE(t->k, nl * N * d->KVD, bf); TAKE(t->v, nl * N * d->KVD, bf);
    TAKE(t->att, nl * N * d->QD, bf); TAKE(t->xmid, nl * N * d->C, bf); TAKE(t->ln2, nl * N * d->C, bf);
    TAKE(t->gu, nl * N * 2 * d->F, bf);
    TAKE(t->rstd1, nl * N, float); TAKE(t->lse, nl * N * d->NH, float); TAKE(t->rstd2, nl * N, float);
    TAKE(t->h, N * d->F, bf); TAKE(t->lnf, N * d->C, bf); TAKE(t->rstdf, N, float);
    TAKE(t->qkv, N * (d->QD + 2 * d->KVD), bf); TAKE(t->yf, N * d->C, float);
    TAKE(t->g, d->R * d->C, bf); TAKE(t->logits, d->R * d->V, bf);
    TAKE(t->logp, d->S, float); TAKE(t->ent, d->S, float);
    if (t->saved) {
        size_t widest = d->C > d->QD + 2 * d->KVD ? d->C : d->QD + 2 * d->KVD;
        TAKE(t->dx, N * d->C, bf); TAKE(t->dln, N * d->C, bf);
        TAKE(t->colpart, (size_t)SKPO_COL_PARTS * widest, float);
        if (t->attn != ATTN_CUSTOM) TAKE(t->fwork, N * d->NH + N * d->QD, float);   // flash (cudnn's fallback)
        if (t->det) {
            TAKE(t->dwork, N * d->NH, float);
            TAKE(t->emb_order, N, int32_t); TAKE(t->emb_seg, N + 1, int32_t);
        }
        TAKE(t->dq, N * d->QD, bf); TAKE(t->datt, N * d->QD, bf);
        TAKE(t->dkb, N * d->KVD, bf); TAKE(t->dvb, N * d->KVD, bf);
        TAKE(t->dk, N * d->KVD, float); TAKE(t->dv, N * d->KVD, float);
        TAKE(t->dh, N * d->F, bf); TAKE(t->dgu, N * 2 * d->F, bf);
        TAKE(t->dlnf, N * d->C, bf); TAKE(t->dg, d->R * d->C, bf);
        TAKE(t->dlogp, d->S, float); TAKE(t->dent, d->S, float);
    }
    return off + 256;
}

static skpo_status arena_fit(skpo_model *m, cutrain *t, skpo_err *err) {
    dims d = dims_of(m, t);
    size_t need = layout(t, &d, NULL);
    if (need > t->cap) {
        skpo_cuda_dfree(t->arena);
        t->arena = NULL;
        t->cap = 0;
        TRY(skpo_cuda_malloc(model_cuda_of(m)->cu, (void **)&t->arena, need,
                             t->saved ? (t->recomputing ? "training activations (try fewer tokens per micro-batch)"
                                                        : "training activations (try --recompute or fewer tokens per micro-batch)")
                                      : "scoring activations (try fewer tokens per batch)",
                             err));
        t->cap = need;
    }
    layout(t, &d, t->arena);
    return SKPO_OK;
}

// Rows of an lm_head chunk (see LOGIT_CHUNK_ELEMS): all scored rows when the
// logits (R x V bf16) and their row buffers fit in half of the device memory
// the rest of the pass leaves free (the arena in use counts as free: it is
// reallocated when it grows).
static int head_rows(const skpo_model *m, cutrain *t) {
    size_t V = (size_t)m->c.vocab_size, C = (size_t)m->c.hidden_size, S = t->S ? (size_t)t->S : 1;
    t->R = 1;
    dims d = dims_of(m, t);
    size_t rest = layout(t, &d, NULL), avail = skpo_cuda_mem_free(model_cuda_of(m)->cu) + t->cap;
    size_t per_row = V * 2 + C * 2 * (t->saved ? 2 : 1), r = avail > rest ? (avail - rest) / 2 / per_row : 1;
    if (r > LOGIT_CHUNK_ELEMS / V) r = LOGIT_CHUNK_ELEMS / V;
    if (r > S) r = S;
    return r < 1 ? 1 : (int)r;
}

static ct_layer layer_of(const skpo_model *m, const cutrain *t, int l) {
    dims d = dims_of(m, t);
    size_t N = d.N, li = t->nl > 1 ? (size_t)l : 0, xi = t->saved ? (size_t)l : 0;
    ct_layer a = {
        .xin = t->x + xi * N * d.C, .xout = t->x + (t->saved ? xi + 1 : 0) * N * d.C,
        .ln1 = t->ln1 + li * N * d.C, .q = t->q + li * N * d.QD, .k = t->k + li * N * d.KVD,
        .v = t->v + li * N * d.KVD, .att = t->att + li * N * d.QD, .xmid = t->xmid + li * N * d.C,
        .ln2 = t->ln2 + li * N * d.C, .gu = t->gu + li * N * 2 * d.F, .gate = t->gu + li * N * 2 * d.F,
        .up = t->gu + li * N * 2 * d.F + N * d.F,
        .rstd1 = t->rstd1 + li * N, .lse = t->lse + li * N * d.NH, .rstd2 = t->rstd2 + li * N,
    };
    return a;
}

// --- the batch --------------------------------------------------------------------------------


// Deterministic mode: the rows of the batch sorted by (token id, row) and
// where each id's run starts, for the embedding backward's ordered sums.
static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}
static skpo_status upload_emb_order(skpo_cuda *cu, cutrain *t, const int32_t *ids, int N, skpo_err *err) {
    uint64_t *key = skpo_xmalloc((size_t)(N ? N : 1) * 8);   // (id, row): ids are checked non-negative
    int32_t *order = skpo_xmalloc((size_t)(N ? N : 1) * 4), *seg = skpo_xmalloc((size_t)(N + 1) * 4);
    for (int i = 0; i < N; i++) key[i] = (uint64_t)(uint32_t)ids[i] << 32 | (uint32_t)i;
    qsort(key, (size_t)N, sizeof *key, cmp_u64);
    int n = 0;
    for (int i = 0; i < N; i++) {
        order[i] = (int32_t)(uint32_t)key[i];
        if (i == 0 || key[i] >> 32 != key[i - 1] >> 32) seg[n++] = i;
    }
    free(key);
    seg[n] = N;
    t->nseg = n;
    skpo_status st = skpo_cuda_h2d(cu, t->emb_order, order, (size_t)N * 4, err);
    if (!st) st = skpo_cuda_h2d(cu, t->emb_seg, seg, (size_t)(n + 1) * 4, err);
    free(order);
    free(seg);
    return st;
}

// The attention path of this pass (model_cuda_attn_select, deterministic
// mode) and whether it packs: a packed batch (model/pack.h) needs a kernel
// that takes the runs mask: the own ones (attention.cu, attention_det.cu,
// flash.cu). cuDNN cannot express the mask: a pass that would pack takes
// flash instead where flash runs (head_dim 64 or 128), unless SKPO_ATTN
// forced cuDNN, which then computes the batch unpacked (docs/model.md
// "Packed layout").
static skpo_status pass_path(skpo_model *m, cutrain *t, const skpo_seq *seqs, int nseq, int *pack, skpo_err *err) {
    const skpo_config *c = &m->c;
    const char *det = getenv("SKPO_DETERMINISTIC");
    t->det = det && *det && strcmp(det, "0");
    TRY(model_cuda_attn_select(model_cuda_of(m)->cu, 1, c->num_attention_heads, c->num_key_value_heads, c->head_dim, &t->attn,
                               &t->attn_forced, err));
    if (t->attn == ATTN_CUDNN && t->dnn_off) t->attn = c->head_dim == 64 || c->head_dim == 128 ? ATTN_FLASH : ATTN_CUSTOM;
    // flash's dQ and cuDNN's backward add with atomics: deterministic mode keeps the custom kernels
    if (t->det) t->attn = ATTN_CUSTOM;
    *pack = 0;
    if (!model_packs(m)) return SKPO_OK;
    long raw, packed;
    skpo_pack_count(seqs, nseq, 1, &raw, &packed);
    if (packed == raw) return SKPO_OK;   // nothing shared: the pass as it was
    int hs = c->head_dim;
    if (t->attn == ATTN_CUDNN && !t->attn_forced && (hs == 64 || hs == 128)) t->attn = ATTN_FLASH;
    *pack = t->attn != ATTN_CUDNN;
    return SKPO_OK;
}

// Per scored token k, how many earlier scored tokens share its row (the
// rounds of skpo_cuda_rows_scatter_add); returns the rounds needed.
static int dup_rounds(const skpo_pack *pk, int32_t *dup) {
    int *seen = skpo_xcalloc((size_t)(pk->N ? pk->N : 1), sizeof(int)), rounds = pk->S ? 1 : 0;
    for (int k = 0; k < pk->S; k++) {
        dup[k] = seen[pk->srow[k]]++;
        if (dup[k] + 1 > rounds) rounds = dup[k] + 1;
    }
    free(seen);
    return rounds;
}

// Size the pass, fit the arena and upload ids, positions, offsets, the
// packed batch's runs and the scored rows.
static skpo_status batch_upload(skpo_model *m, cutrain *t, const skpo_seq *seqs, int nseq, int save, skpo_err *err) {
    long raw = 0;
    for (int i = 0; i < nseq; i++) raw += seqs[i].n;
    if (raw > INT32_MAX / 3) return skpo_err_set(err, SKPO_ERANGE, "%ld tokens in one pass", raw);
    int pack;
    TRY(pass_path(m, t, seqs, nseq, &pack, err));
    skpo_pack pk;
    skpo_pack_plan(seqs, nseq, pack, &pk);
    m->last_raw = pk.raw, m->last_packed = pk.N;
    int N = pk.N, S = pk.S, R = pk.nrows;
    t->N = N, t->S = S, t->nseq = R, t->saved = save, t->packed = pk.packed;
    t->nl = save && !t->recompute ? m->c.num_hidden_layers : 1;
    t->recomputing = save && t->recompute;
    t->max_len = 0;
    for (int i = 0; i < R; i++)
        if (pk.row_off[i + 1] - pk.row_off[i] > t->max_len) t->max_len = pk.row_off[i + 1] - pk.row_off[i];
    t->fused = !m->lora;
    t->R = head_rows(m, t);
    skpo_status st = arena_fit(m, t, err);
    int32_t *so = skpo_xmalloc((size_t)(N ? N : 1) * 4), *runs = skpo_xmalloc((size_t)(N ? N : 1) * 3 * 4);
    int32_t *dup = skpo_xmalloc((size_t)(S ? S : 1) * 4);
    for (int r = 0; r < R; r++)
        for (int j = pk.row_off[r]; j < pk.row_off[r + 1]; j++) so[j] = r;
    t->dup_rounds = dup_rounds(&pk, dup);
    skpo_cuda *cu = model_cuda_of(m)->cu;
    if (!st && t->det && save) st = upload_emb_order(cu, t, pk.ids, N, err);
    if (!st) st = skpo_cuda_h2d(cu, t->ids, pk.ids, (size_t)N * 4, err);
    if (!st) st = skpo_cuda_h2d(cu, t->pos, pk.pos, (size_t)N * 4, err);
    if (!st) st = skpo_cuda_h2d(cu, t->seq_start, pk.row_off, (size_t)(R + 1) * 4, err);
    if (!st) st = skpo_cuda_h2d(cu, t->seq_of, so, (size_t)N * 4, err);
    if (!st) st = skpo_cuda_h2d(cu, t->srow, pk.srow, (size_t)S * 4, err);
    if (!st) st = skpo_cuda_h2d(cu, t->stgt, pk.stgt, (size_t)S * 4, err);
    if (!st && t->packed) {
        skpo_mask_runs(pk.row_off, R, pk.seg, runs, runs + N, runs + 2 * (size_t)N);
        st = skpo_cuda_h2d(cu, t->runs, runs, (size_t)N * 3 * 4, err);
        if (!st) st = skpo_cuda_h2d(cu, t->dup, dup, (size_t)S * 4, err);
    }
    free(so), free(runs), free(dup);
    skpo_pack_free(&pk);
    return st;
}

// The runs of a packed pass (NULL: causal rows).
static skpo_cuda_runs pass_runs(const cutrain *t) {
    size_t N = (size_t)t->N;
    skpo_cuda_runs r = {t->runs, t->runs + N, t->runs + 2 * N};
    return r;
}

// --- forward ----------------------------------------------------------------------------------

#define W(p) model_cuda_w(m, (p))
#define G(p) model_cuda_grad(m, (p))

// cuDNN refused a shape it was not forced to take: the own kernels from now on.
static void attn_fallback(skpo_model *m, cutrain *t, const skpo_err *why) {
    int hs = m->c.head_dim;
    t->attn = hs == 64 || hs == 128 ? ATTN_FLASH : ATTN_CUSTOM;
    t->dnn_off = 1;
    fprintf(stderr, "skpo: training attention falls back to %s: %s\n", model_attn_names[t->attn], why->msg);
}

static skpo_status attn_fwd(skpo_model *m, cutrain *t, const ct_layer *a, skpo_err *err) {
    const skpo_config *c = &m->c;
    skpo_cuda *cu = model_cuda_of(m)->cu;
    int N = t->N, NH = c->num_attention_heads, NKV = c->num_key_value_heads, HS = c->head_dim;
    float *lse = t->saved ? a->lse : NULL;   // scoring needs no statistics
    if (t->attn == ATTN_CUDNN) {
        skpo_status s = skpo_cudnn_attention(cu, a->att, lse, a->q, a->k, a->v, t->seq_start, t->nseq, t->max_len, N,
                                             NH, NKV, HS, err);
        if (s != SKPO_EUNSUPPORTED || t->attn_forced) return s;
        attn_fallback(m, t, err);
    }
    skpo_cuda_runs ru = pass_runs(t);
    if (t->attn == ATTN_FLASH)
        return skpo_cuda_flash_attention_runs(cu, a->att, lse, a->q, a->k, a->v, t->seq_of, t->seq_start,
                                              t->packed ? &ru : NULL, N, NH, NKV, HS, err);
    return skpo_cuda_attention_runs(cu, a->att, lse, a->q, a->k, a->v, t->seq_start, t->nseq, t->packed ? &ru : NULL, N,
                                    NH, NKV, HS, err);
}

// dq, and dK / dV into t->dkb / t->dvb (bf16), from t->datt.
static skpo_status attn_bwd(skpo_model *m, cutrain *t, const ct_layer *a, skpo_err *err) {
    const skpo_config *c = &m->c;
    skpo_cuda *cu = model_cuda_of(m)->cu;
    int N = t->N, NH = c->num_attention_heads, NKV = c->num_key_value_heads, HS = c->head_dim, KVD = NKV * HS;
    if (t->attn == ATTN_CUDNN) {
        skpo_status s = skpo_cudnn_attention_backward(cu, t->dq, t->dkb, t->dvb, t->datt, a->att, a->lse, a->q, a->k,
                                                      a->v, t->seq_start, t->nseq, t->max_len, N, NH, NKV, HS, err);
        if (s != SKPO_EUNSUPPORTED || t->attn_forced) return s;
        attn_fallback(m, t, err);
    }
    skpo_cuda_runs ru = pass_runs(t);
    const skpo_cuda_runs *rp = t->packed ? &ru : NULL;
    if (t->attn == ATTN_FLASH)
        return skpo_cuda_flash_attention_backward_runs(cu, t->dq, t->dkb, t->dvb, t->datt, a->att, a->lse, a->q, a->k,
                                                       a->v, t->seq_of, t->seq_start, rp, N, NH, NKV, HS, t->fwork, err);
    if (t->det) {   // two passes, no atomics: dk, dv written once
        TRY(skpo_cuda_attention_backward_det_runs(cu, t->dq, t->dk, t->dv, t->datt, a->att, a->lse, a->q, a->k, a->v,
                                                  t->seq_of, t->seq_start, rp, N, NH, NKV, HS, t->dwork, err));
    } else {
        TRY(skpo_cuda_memset0(cu, t->dk, (size_t)N * KVD * 4, err));
        TRY(skpo_cuda_memset0(cu, t->dv, (size_t)N * KVD * 4, err));
        TRY(skpo_cuda_attention_backward_runs(cu, t->dq, t->dk, t->dv, t->datt, a->att, a->lse, a->q, a->k, a->v,
                                              t->seq_start, t->nseq, rp, N, NH, NKV, HS, err));
    }
    TRY(skpo_cuda_f32_to_bf16(cu, t->dkb, t->dk, (size_t)N * KVD, err));
    return skpo_cuda_f32_to_bf16(cu, t->dvb, t->dv, (size_t)N * KVD, err);
}

// Layer l from a.xin; full = 0 stops after the MLP input (recomputation in
// backward needs nothing past gate/up). prenormed: a->ln1 and a->rstd1 were
// made by the previous layer's residual launch (fused passes).
static skpo_status layer_fwd(skpo_model *m, cutrain *t, int l, const ct_layer *a, int full, int prenormed,
                             skpo_err *err) {
    const skpo_config *c = &m->c;
    const model_layer *L = &m->layers[l];
    skpo_cuda *cu = model_cuda_of(m)->cu;
    int N = t->N, C = c->hidden_size, F = c->intermediate_size, NH = c->num_attention_heads;
    int NKV = c->num_key_value_heads, HS = c->head_dim, QD = NH * HS, KVD = NKV * HS;
    float eps = (float)c->rms_norm_eps;
    if (!prenormed) TRY(skpo_cuda_rmsnorm(cu, a->ln1, a->rstd1, a->xin, W(L->ln1), N, C, eps, err));
    if (t->fused) {   // one GEMM over [Wq; Wk; Wv], then biases, RoPE and the split in one launch
        TRY(skpo_cuda_linear(cu, t->qkv, a->ln1, W(L->wq), NULL, N, C, QD + 2 * KVD, 0.f, err));
        TRY(skpo_cuda_qkv_rope(cu, a->q, a->k, a->v, t->qkv, W(L->bq), t->pos, model_cuda_of(m)->inv_freq, NULL, NULL, N, NH,
                               NKV, HS, 0, 0, 0, err));
    } else {
        TRY(skpo_cuda_linear(cu, a->q, a->ln1, W(L->wq), W(L->bq), N, C, QD, 0.f, err));
        TRY(skpo_cuda_linear(cu, a->k, a->ln1, W(L->wk), W(L->bk), N, C, KVD, 0.f, err));
        TRY(skpo_cuda_linear(cu, a->v, a->ln1, W(L->wv), W(L->bv), N, C, KVD, 0.f, err));
        if (m->lora) { // LoRA (lora.h): the low-rank path of each targeted projection
            TRY(skpo_lora_cuda_fwd(m->lora, cu, l, SKPO_LORA_Q, a->q, a->ln1, N, err));
            TRY(skpo_lora_cuda_fwd(m->lora, cu, l, SKPO_LORA_K, a->k, a->ln1, N, err));
            TRY(skpo_lora_cuda_fwd(m->lora, cu, l, SKPO_LORA_V, a->v, a->ln1, N, err));
        }
        TRY(skpo_cuda_rope(cu, a->q, a->k, t->pos, model_cuda_of(m)->inv_freq, N, NH, NKV, HS, 0, err));
    }
    TRY(attn_fwd(m, t, a, err));
    if (t->fused) {   // xmid = xin + att Wo^T (+bo) and ln2 = rmsnorm(xmid): a GEMM and one launch
        TRY(skpo_cuda_linear_f32out(cu, t->yf, a->att, W(L->wo), N, QD, C, err));
        TRY(skpo_cuda_add_rmsnorm(cu, a->xmid, a->ln2, a->rstd2, a->xin, t->yf, W(L->bo), W(L->ln2), N, C, eps, err));
        TRY(skpo_cuda_linear(cu, a->gu, a->ln2, W(L->wg), NULL, N, C, 2 * F, 0.f, err));   // [gate | up]
    } else {
        TRY(skpo_cuda_d2d(cu, a->xmid, a->xin, (size_t)N * C * 2, err));
        TRY(skpo_cuda_linear(cu, a->xmid, a->att, W(L->wo), W(L->bo), N, QD, C, 1.f, err));   // xmid = xin + att Wo^T
        if (m->lora) TRY(skpo_lora_cuda_fwd(m->lora, cu, l, SKPO_LORA_O, a->xmid, a->att, N, err)); // LoRA
        TRY(skpo_cuda_rmsnorm(cu, a->ln2, a->rstd2, a->xmid, W(L->ln2), N, C, eps, err));
        TRY(skpo_cuda_linear(cu, a->gate, a->ln2, W(L->wg), NULL, N, C, F, 0.f, err));
        TRY(skpo_cuda_linear(cu, a->up, a->ln2, W(L->wu), NULL, N, C, F, 0.f, err));
        if (m->lora) { // LoRA
            TRY(skpo_lora_cuda_fwd(m->lora, cu, l, SKPO_LORA_GATE, a->gate, a->ln2, N, err));
            TRY(skpo_lora_cuda_fwd(m->lora, cu, l, SKPO_LORA_UP, a->up, a->ln2, N, err));
        }
    }
    if (!full) return SKPO_OK;
    if (t->fused) {   // xout = xmid + h Wd^T, and the next norm: layer l + 1's input, or the final one
        TRY(skpo_cuda_swiglu_fused(cu, t->h, a->gu, N, F, err));
        TRY(skpo_cuda_linear_f32out(cu, t->yf, t->h, W(L->wd), N, F, C, err));
        if (l + 1 == c->num_hidden_layers)
            return skpo_cuda_add_rmsnorm(cu, a->xout, t->lnf, t->rstdf, a->xmid, t->yf, NULL, W(m->normf), N, C, eps, err);
        ct_layer nx = layer_of(m, t, l + 1);
        return skpo_cuda_add_rmsnorm(cu, a->xout, nx.ln1, nx.rstd1, a->xmid, t->yf, NULL, W(m->layers[l + 1].ln1), N, C,
                                     eps, err);
    }
    TRY(skpo_cuda_swiglu(cu, t->h, a->gate, a->up, (size_t)N * F, err));
    TRY(skpo_cuda_d2d(cu, a->xout, a->xmid, (size_t)N * C * 2, err));   // xout may be xin (scoring)
    TRY(skpo_cuda_linear(cu, a->xout, t->h, W(L->wd), NULL, N, F, C, 1.f, err));
    return m->lora ? skpo_lora_cuda_fwd(m->lora, cu, l, SKPO_LORA_DOWN, a->xout, t->h, N, err) : SKPO_OK; // LoRA
}

static skpo_status head_fwd(skpo_model *m, cutrain *t, skpo_err *err) {
    skpo_cuda *cu = model_cuda_of(m)->cu;
    int C = m->c.hidden_size, V = m->c.vocab_size;
    for (int s0 = 0; s0 < t->S; s0 += t->R) {
        int n = t->S - s0 < t->R ? t->S - s0 : t->R;
        TRY(skpo_cuda_rows_gather(cu, t->g, t->lnf, t->srow + s0, n, C, err));
        TRY(skpo_cuda_linear(cu, t->logits, t->g, W(m->lm_head), NULL, n, C, V, 0.f, err));
        TRY(skpo_cuda_logprob(cu, t->logp + s0, t->ent + s0, t->logits, t->stgt + s0, n, V, t->temperature, err));
    }
    return SKPO_OK;
}

static skpo_status forward(skpo_model *m, const skpo_seq *seqs, int nseq, float temperature, int save, float *logp,
                           float *entropy, skpo_err *err) {
    cutrain *t = tr(m);
    if (t->pending) {
        t->pending = SKPO_OK;
        *err = t->pending_err;
        return SKPO_EDEVICE;
    }
    t->have_acts = 0;
    TRY(model_check_seqs(m, seqs, nseq, temperature, err));
    TRY(batch_upload(m, t, seqs, nseq, save, err));
    t->temperature = temperature;
    if (t->N == 0) {
        t->have_acts = save;
        return SKPO_OK;
    }
    const skpo_config *c = &m->c;
    skpo_cuda *cu = model_cuda_of(m)->cu;
    int N = t->N, C = c->hidden_size;
    if (m->lora) TRY(skpo_lora_cuda_sync(m->lora, cu, N, err)); // LoRA: the adapter's current weights
    TRY(skpo_cuda_embed(cu, t->x, W(m->wte), t->ids, N, C, err));
    for (int l = 0; l < c->num_hidden_layers; l++) {
        ct_layer a = layer_of(m, t, l);
        TRY(layer_fwd(m, t, l, &a, 1, t->fused && l > 0, err));
    }
    bf *xl = t->x + (save ? (size_t)c->num_hidden_layers * N * C : 0);
    if (!t->fused)   // (fused: the last layer's residual launch made lnf)
        TRY(skpo_cuda_rmsnorm(cu, t->lnf, t->rstdf, xl, W(m->normf), N, C, (float)c->rms_norm_eps, err));
    TRY(head_fwd(m, t, err));
    float *ent = skpo_xmalloc((size_t)(t->S ? t->S : 1) * 4);
    skpo_status st = skpo_cuda_d2h(cu, logp, t->logp, (size_t)t->S * 4, err);
    if (!st) st = skpo_cuda_d2h(cu, ent, t->ent, (size_t)t->S * 4, err);
    for (int i = 0; !st && i < t->S; i++)
        if (!isfinite(logp[i]) || !isfinite(ent[i]))
            st = skpo_err_set(err, SKPO_ENUMERIC, "non-finite log-prob at scored token %d", i);
    if (!st && entropy) memcpy(entropy, ent, (size_t)t->S * 4);
    free(ent);
    if (!st && save) t->have_acts = 1;
    return st;
}

skpo_status model_cuda_logprobs(skpo_model *m, const skpo_seq *seqs, int nseq, float temperature, float *logp,
                                float *entropy, skpo_err *err) {
    return forward(m, seqs, nseq, temperature, 0, logp, entropy, err);
}

skpo_status model_cuda_train_forward(skpo_model *m, const skpo_seq *seqs, int nseq, float temperature, float *logp,
                                     float *entropy, skpo_err *err) {
    if (model_cuda_of(m)->offloaded)
        return skpo_err_set(err, SKPO_EUNSUPPORTED, "train_forward: the masters are offloaded to the host (reload them first)");
    if (!model_cuda_of(m)->grad && !m->lora) // LoRA trains the adapter of a frozen base
        return skpo_err_set(err, SKPO_EUNSUPPORTED, "train_forward on a model loaded without trainable = 1");
    return forward(m, seqs, nseq, temperature, 1, logp, entropy, err);
}

// --- backward ---------------------------------------------------------------------------------

// dlnf (N, C) from the head, logits recomputed chunk by chunk; dW of the lm_head.
static skpo_status head_bwd(skpo_model *m, cutrain *t, int with_dent, skpo_err *err) {
    skpo_cuda *cu = model_cuda_of(m)->cu;
    int C = m->c.hidden_size, V = m->c.vocab_size;
    TRY(skpo_cuda_memset0(cu, t->dlnf, (size_t)t->N * C * 2, err));
    // packed: a row may predict several scored tokens; their sum goes through yf (fp32, free until the layers)
    if (t->packed) TRY(skpo_cuda_memset0(cu, t->yf, (size_t)t->N * C * 4, err));
    for (int s0 = 0; s0 < t->S; s0 += t->R) {
        int n = t->S - s0 < t->R ? t->S - s0 : t->R;
        TRY(skpo_cuda_rows_gather(cu, t->g, t->lnf, t->srow + s0, n, C, err));
        TRY(skpo_cuda_linear(cu, t->logits, t->g, W(m->lm_head), NULL, n, C, V, 0.f, err));
        // In place: each row's log-normaliser is reduced before any element is overwritten.
        TRY(skpo_cuda_logprob_backward(cu, t->logits, t->logits, t->stgt + s0, t->dlogp + s0,
                                       with_dent ? t->dent + s0 : NULL, n, V, t->temperature, err));
        TRY(skpo_cuda_linear_backward(cu, t->dg, G(m->lm_head), NULL, t->logits, t->g, W(m->lm_head), n, C, V, err));
        if (t->packed) TRY(skpo_cuda_rows_scatter_add(cu, t->yf, t->dg, t->srow + s0, t->dup + s0, t->dup_rounds, n, C, err));
        else TRY(skpo_cuda_rows_scatter(cu, t->dlnf, t->dg, t->srow + s0, n, C, err));
    }
    if (t->packed) TRY(skpo_cuda_f32_to_bf16(cu, t->dlnf, t->yf, (size_t)t->N * C, err));
    return SKPO_OK;
}

// Backward of y = x W^T (+ b) for y (N, O), x (N, K): dW and db accumulate;
// dx (nullable) is overwritten, or accumulated into when acc.
static skpo_status proj_bwd(skpo_model *m, cutrain *t, bf *dx, int acc, const bf *dy, const bf *x, const float *w,
                            const float *b, int N, int K, int O, skpo_err *err) {
    skpo_cuda *cu = model_cuda_of(m)->cu;
    TRY(skpo_cuda_linear_backward(cu, NULL, G(w), NULL, dy, x, W(w), N, K, O, err));
    if (dx) TRY(skpo_cuda_linear_dx(cu, dx, dy, W(w), N, K, O, acc ? 1.f : 0.f, err));
    if (b && G(b)) TRY(skpo_cuda_colsum(cu, G(b), dy, NULL, NULL, N, O, t->colpart, err));
    return SKPO_OK;
}

// RMSNorm backward: t->dx += through the norm of dy; the weight's gradient.
static skpo_status norm_bwd(skpo_model *m, cutrain *t, const bf *dy, const bf *x, const float *w, const float *rstd,
                            skpo_err *err) {
    skpo_cuda *cu = model_cuda_of(m)->cu;
    int N = t->N, C = m->c.hidden_size;
    TRY(skpo_cuda_rmsnorm_backward_acc(cu, t->dx, dy, x, W(w), rstd, N, C, err));
    return G(w) ? skpo_cuda_colsum(cu, G(w), dy, x, rstd, N, C, t->colpart, err) : SKPO_OK; // frozen (LoRA): none
}

// t->dx holds d/dxout on entry and d/dxin on return.
static skpo_status layer_bwd(skpo_model *m, cutrain *t, int l, const ct_layer *a, skpo_err *err) {
    const skpo_config *c = &m->c;
    const model_layer *L = &m->layers[l];
    skpo_cuda *cu = model_cuda_of(m)->cu;
    int N = t->N, C = c->hidden_size, F = c->intermediate_size, NH = c->num_attention_heads;
    int NKV = c->num_key_value_heads, HS = c->head_dim, QD = NH * HS, KVD = NKV * HS;
    bf *dgate = t->dgu, *dup = t->dgu + (size_t)N * F;   // one-by-one views
    // MLP: xout = xmid + (silu(ln2 Wg^T) * ln2 Wu^T) Wd^T
    if (t->fused) TRY(skpo_cuda_swiglu_fused(cu, t->h, a->gu, N, F, err));
    else TRY(skpo_cuda_swiglu(cu, t->h, a->gate, a->up, (size_t)N * F, err));
    TRY(proj_bwd(m, t, t->dh, 0, t->dx, t->h, L->wd, NULL, N, F, C, err));
    if (m->lora) TRY(skpo_lora_cuda_bwd(m->lora, cu, l, SKPO_LORA_DOWN, t->dh, t->dx, t->h, N, err)); // LoRA
    if (t->fused) {   // one dW and one dx GEMM over [Wg; Wu]
        TRY(skpo_cuda_swiglu_fused_backward(cu, t->dgu, t->dh, a->gu, N, F, err));
        TRY(proj_bwd(m, t, t->dln, 0, t->dgu, a->ln2, L->wg, NULL, N, C, 2 * F, err));
    } else {
        TRY(skpo_cuda_swiglu_backward(cu, dgate, dup, t->dh, a->gate, a->up, (size_t)N * F, err));
        TRY(proj_bwd(m, t, t->dln, 0, dgate, a->ln2, L->wg, NULL, N, C, F, err));
        TRY(proj_bwd(m, t, t->dln, 1, dup, a->ln2, L->wu, NULL, N, C, F, err));
        if (m->lora) { // LoRA
            TRY(skpo_lora_cuda_bwd(m->lora, cu, l, SKPO_LORA_GATE, t->dln, dgate, a->ln2, N, err));
            TRY(skpo_lora_cuda_bwd(m->lora, cu, l, SKPO_LORA_UP, t->dln, dup, a->ln2, N, err));
        }
    }
    TRY(norm_bwd(m, t, t->dln, a->xmid, L->ln2, a->rstd2, err));   // dx is now d/dxmid
    // attention: xmid = xin + attention(rope(ln1 Wq^T), rope(ln1 Wk^T), ln1 Wv^T) Wo^T
    TRY(proj_bwd(m, t, t->datt, 0, t->dx, a->att, L->wo, L->bo, N, QD, C, err));
    if (m->lora) TRY(skpo_lora_cuda_bwd(m->lora, cu, l, SKPO_LORA_O, t->datt, t->dx, a->att, N, err)); // LoRA
    TRY(attn_bwd(m, t, a, err));
    if (t->fused) {   // [R^-1 dq | R^-1 dk | dv]: one dW GEMM, one dx GEMM, one bias colsum
        TRY(skpo_cuda_qkv_rope_backward(cu, t->qkv, t->dq, t->dkb, t->dvb, t->pos, model_cuda_of(m)->inv_freq, N, NH, NKV, HS, err));
        TRY(proj_bwd(m, t, t->dln, 0, t->qkv, a->ln1, L->wq, L->bq, N, C, QD + 2 * KVD, err));
    } else {
        TRY(skpo_cuda_rope(cu, t->dq, t->dkb, t->pos, model_cuda_of(m)->inv_freq, N, NH, NKV, HS, 1, err));
        TRY(proj_bwd(m, t, t->dln, 0, t->dq, a->ln1, L->wq, L->bq, N, C, QD, err));
        TRY(proj_bwd(m, t, t->dln, 1, t->dkb, a->ln1, L->wk, L->bk, N, C, KVD, err));
        TRY(proj_bwd(m, t, t->dln, 1, t->dvb, a->ln1, L->wv, L->bv, N, C, KVD, err));
        if (m->lora) { // LoRA
            TRY(skpo_lora_cuda_bwd(m->lora, cu, l, SKPO_LORA_Q, t->dln, t->dq, a->ln1, N, err));
            TRY(skpo_lora_cuda_bwd(m->lora, cu, l, SKPO_LORA_K, t->dln, t->dkb, a->ln1, N, err));
            TRY(skpo_lora_cuda_bwd(m->lora, cu, l, SKPO_LORA_V, t->dln, t->dvb, a->ln1, N, err));
        }
    }
    return norm_bwd(m, t, t->dln, a->xin, L->ln1, a->rstd1, err);   // dx is now d/dxin
}

static skpo_status backward(skpo_model *m, cutrain *t, const float *dlogp, const float *dent, skpo_err *err) {
    const skpo_config *c = &m->c;
    skpo_cuda *cu = model_cuda_of(m)->cu;
    int N = t->N, C = c->hidden_size;
    TRY(skpo_cuda_h2d(cu, t->dlogp, dlogp, (size_t)t->S * 4, err));
    if (dent) TRY(skpo_cuda_h2d(cu, t->dent, dent, (size_t)t->S * 4, err));
    TRY(head_bwd(m, t, dent != NULL, err));
    bf *xl = t->x + (size_t)c->num_hidden_layers * N * C;
    TRY(skpo_cuda_memset0(cu, t->dx, (size_t)N * C * 2, err));
    TRY(norm_bwd(m, t, t->dlnf, xl, m->normf, t->rstdf, err));
    for (int l = c->num_hidden_layers - 1; l >= 0; l--) {
        ct_layer a = layer_of(m, t, l);
        if (t->recomputing) TRY(layer_fwd(m, t, l, &a, 0, 0, err));   // recompute the layer from its saved input
        TRY(layer_bwd(m, t, l, &a, err));
    }
    if (G(m->wte) && t->det)
        TRY(skpo_cuda_embed_backward_sorted(cu, G(m->wte), t->dx, t->ids, t->emb_order, t->emb_seg, t->nseg, C, err));
    else if (G(m->wte))
        TRY(skpo_cuda_embed_backward(cu, G(m->wte), t->dx, t->ids, N, C, err)); // frozen (LoRA): none
    if (m->lora) TRY(skpo_lora_cuda_grads_to_host(m->lora, cu, err)); // LoRA: host AdamW
    return skpo_cuda_sync(cu, err);
}

skpo_status model_cuda_train_backward(skpo_model *m, const float *dlogp, const float *dentropy, skpo_err *err) {
    cutrain *t = tr(m);
    if (!t->have_acts) return skpo_err_set(err, SKPO_EUNSUPPORTED, "train_backward without a train_forward before it");
    for (int i = 0; i < t->S; i++)
        if (!isfinite(dlogp[i]) || (dentropy && !isfinite(dentropy[i])))
            return skpo_err_set(err, SKPO_ENUMERIC, "non-finite loss gradient at scored token %d", i);
    t->have_acts = 0;
    return t->N ? backward(m, t, dlogp, dentropy, err) : SKPO_OK;
}

skpo_status model_cuda_zero_grad(skpo_model *m, skpo_err *err) {
    if (!model_cuda_of(m)->grad) return SKPO_OK;
    skpo_status st = skpo_cuda_memset0(model_cuda_of(m)->cu, model_cuda_of(m)->grad, m->numel * sizeof(float), err);
    if (st) {
        cutrain *t = tr(m);
        t->pending = st;
        t->pending_err = *err;
    }
    return st;
}
#endif /* SKPO_HAVE_CUDA */
