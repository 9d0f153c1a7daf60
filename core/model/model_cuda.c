/*
 * model_cuda.c - a model's device mirror (bf16 weights at the host offsets,
 * fp32 master/grad when trainable), the KV pool on the device, and inference
 * steps over it (the CUDA backend of model_impl.h). Host code only: every kernel comes from
 * cuda.h / cuda_infer.h and runs on the model's one stream.
 *
 * A step reserves KV positions on the host (kvcache.c, copy-on-write blocks
 * are copied on the device by the pool callback), uploads one packed int32
 * staging buffer (tokens, positions, slots, block tables), then runs
 *     x = embed(toks); ln = rmsnorm(x)
 *     per layer: qkv = ln [Wq; Wk; Wv]^T                  one GEMM (model.c's layout)
 *                q, k, v = rope(qkv + b); k, v -> pool     one launch
 *                att = paged attention over 0..pos
 *                x += att Wo^T (+bo); ln = rmsnorm(x)      GEMM (fp32 out) + one launch
 *                h = silu(ln Wg^T) * ln Wu^T               one GEMM into [gate | up] + one launch
 *                x += h Wd^T; ln = rmsnorm(x) (next layer) GEMM (fp32 out) + one launch
 * and the logits (fp32) of the last row of each sequence: 8 launches a layer
 * (9 when attention splits). Activations are bf16 (the residual stream too),
 * accumulation fp32. Scratch grows to the largest batch seen and is reused:
 * no device allocation in a steady state. The staging buffer is double-
 * buffered in pinned memory and guarded by events, so a step never waits for
 * the device: the one host synchronisation of a decode step is the caller's
 * (the logits copy, or model_cuda_sample.c's draw).
 * Pure decode steps (one row per sequence) are captured in a CUDA graph per
 * (batch bucket, table width, K and V pool) and replayed (SKPO_CUDA_GRAPHS=0
 * turns that off); the batch is padded to its bucket with rows that write and
 * read only a pad block past the end of the pool.
 */
#include "model/model_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef SKPO_HAVE_CUDA  // a CPU-only build has no CUDA backend (backends.c does not list one)

#include "cuda/cuda.h"
#include "cuda/cuda_dnn.h"
#include "cuda/cuda_infer.h"

#include <omp.h>

static int visible_devices(void) { return skpo_cuda_device_count(); }

#define MIB(x) ((size_t)(x) >> 20)
enum { KV_BLOCK = 16, MAX_GRAPHS = 8 };

typedef struct step_graph {
    int nseq, max_blocks;  // nseq: the batch bucket
    const void *kv_k, *kv_v; // graphs bake in both pool addresses
    skpo_cuda_graph *g;
    unsigned long used;    // LRU stamp
} step_graph;

// The `infer` part of model_cuda: step scratch sized to the largest step seen.
typedef struct infer_state {
    size_t cap_rows, cap_seqs, cap_ints;
    skpo_bf16 *act;        // bufs_of's activations (cap_rows rows, cap_seqs last rows)
    float *yf;             // (cap_rows, C) fp32 output of the GEMMs that feed the residual
    float *logits;         // (cap_seqs, V)
    int32_t *dints;        // staging on the device
    int32_t *hints[2];     // pinned host staging, alternating steps
    skpo_cuda_event *staged[2];  // recorded after the upload from hints[i]: rewrite it once done
    int cur;               // the hints buffer of the next step
    float *attn_work;      // split-attention partials (flash-decoding)
    size_t attn_work_bytes;
    int last_nseq;         // rows of logits valid (0 before any step)
    int graphs_off;
    model_attn_path attn;  // prefill attention: cudnn or custom (cuda_dnn.h), chosen per prefill step
    int attn_forced;       // SKPO_ATTN chose it: no fallback
    int dnn_off;           // cuDNN refused an unforced prefill: the own kernel from then on
    step_graph graphs[MAX_GRAPHS];
    unsigned long clock;
} infer_state;

static skpo_status infer_reserve(skpo_model *m, size_t N, size_t nseq, size_t nints, skpo_err *err);
static void graphs_drop(infer_state *in);

skpo_status model_cuda_probe(int device, skpo_err *err) {
    int n = skpo_cuda_device_count();
    if (device < 0 || device >= n)
        return skpo_err_set(err, SKPO_EDEVICE, "no CUDA device %d visible (%d visible; check CUDA_VISIBLE_DEVICES and the driver)",
                            device, n);
    return SKPO_OK;
}

skpo_cuda *model_cuda_ctx(const skpo_model *m) { return model_cuda_of(m) ? model_cuda_of(m)->cu : NULL; }

const char *const model_attn_names[ATTN_NPATHS] = {"custom", "flash", "cudnn"};

skpo_status model_cuda_attn_select(skpo_cuda *cu, int training, int nh, int nkv, int hs, model_attn_path *path,
                                   int *forced, skpo_err *err) {
    const char *env = getenv("SKPO_ATTN");
    int flash_ok = training && (hs == 64 || hs == 128);
    *forced = env && *env;
    if (*forced) {
        int i = 0;
        while (i < ATTN_NPATHS && strcmp(env, model_attn_names[i])) i++;
        if (i == ATTN_NPATHS)
            return skpo_err_set(err, SKPO_ERANGE, "SKPO_ATTN=%s: no such attention path (cudnn, flash or custom)", env);
        if (i == ATTN_CUDNN) {
            skpo_err e = {0};
            if (skpo_cudnn_check(cu, &e)) return skpo_err_set(err, SKPO_EUNSUPPORTED, "SKPO_ATTN=cudnn: %s", e.msg);
        }
        if (i == ATTN_FLASH && !training) i = ATTN_CUSTOM;   // prefill has no flash kernel
        if (i == ATTN_FLASH && !flash_ok)
            return skpo_err_set(err, SKPO_EUNSUPPORTED, "SKPO_ATTN=flash: head_dim %d (the flash kernels take 64 or 128)", hs);
        *path = (model_attn_path)i;
        return SKPO_OK;
    }
    *path = skpo_cudnn_check(cu, NULL) == SKPO_OK ? ATTN_CUDNN : flash_ok ? ATTN_FLASH : ATTN_CUSTOM;
    return SKPO_OK;
}

// Host float32 -> bf16 in chunks through pinned memory (n elements from src to dst).
static skpo_status upload_bf16(skpo_cuda *cu, skpo_bf16 *dst, const float *src, size_t n, skpo_err *err) {
    enum { CHUNK = 1 << 24 };
    skpo_bf16 *h;
    skpo_status s = skpo_cuda_host_alloc((void **)&h, (size_t)CHUNK * sizeof *h, err);
    for (size_t o = 0; o < n && !s; o += CHUNK) {
        size_t k = n - o < CHUNK ? n - o : CHUNK;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < k; i += 4096) skpo_f32_to_bf16_host(h + i, src + o + i, k - i < 4096 ? k - i : 4096);
        s = skpo_cuda_h2d(cu, dst + o, h, k * sizeof *h, err);
    }
    skpo_cuda_host_free(h);
    return s;
}

static skpo_status download_bf16(skpo_cuda *cu, float *dst, const skpo_bf16 *src, size_t n, skpo_err *err) {
    enum { CHUNK = 1 << 24 };
    skpo_bf16 *h;
    skpo_status s = skpo_cuda_host_alloc((void **)&h, (size_t)CHUNK * sizeof *h, err);
    for (size_t o = 0; o < n && !s; o += CHUNK) {
        size_t k = n - o < CHUNK ? n - o : CHUNK;
        if ((s = skpo_cuda_d2h(cu, h, src + o, k * sizeof *h, err))) break;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < k; i += 4096) skpo_bf16_to_f32_host(dst + o + i, h + i, k - i < 4096 ? k - i : 4096);
    }
    skpo_cuda_host_free(h);
    return s;
}

skpo_status model_cuda_sync_from_host(skpo_model *m, skpo_err *err) {
    model_cuda *mc = model_cuda_of(m);
    SKPO_ASSERT(mc);
    if (mc->offloaded) return skpo_err_set(err, SKPO_EUNSUPPORTED, "the model's masters are offloaded: reload them first");
    skpo_status s;
    if (mc->master) {  // the master is the truth; the bf16 copy is derived from it on the device
        if ((s = skpo_cuda_h2d(mc->cu, mc->master, m->mem, m->numel * sizeof(float), err))) return s;
        if ((s = skpo_cuda_f32_to_bf16(mc->cu, mc->w, mc->master, m->numel, err))) return s;
    } else if ((s = upload_bf16(mc->cu, mc->w, m->mem, m->numel, err))) {
        return s;
    }
    if ((s = skpo_cuda_h2d(mc->cu, mc->inv_freq, m->inv_freq, (size_t)(m->c.head_dim / 2) * sizeof(float), err)))
        return s;
    return skpo_cuda_sync(mc->cu, err);
}

skpo_status model_cuda_sync_to_host(const skpo_model *m, skpo_err *err) {
    return model_cuda_sync_to_host_range(m, 0, m->numel, err);
}

skpo_status model_cuda_sync_to_host_range(const skpo_model *m, size_t a, size_t b, skpo_err *err) {
    model_cuda *mc = model_cuda_of(m);
    SKPO_ASSERT(mc && a <= b && b <= m->numel);
    skpo_status s = skpo_cuda_sync(mc->cu, err);
    if (s || a == b) return s;
    if (mc->offloaded) return skpo_err_set(err, SKPO_EUNSUPPORTED, "the model's masters are offloaded: reload them first");
    if (mc->master) return skpo_cuda_d2h(mc->cu, m->mem + a, mc->master + a, (b - a) * sizeof(float), err);
    return download_bf16(mc->cu, m->mem + a, mc->w + a, b - a, err);
}

static void infer_free(model_cuda *mc);

void model_cuda_close(skpo_model *m) {
    model_cuda *mc = model_cuda_of(m);
    if (!mc) return;
    if (mc->cu) skpo_cuda_sync(mc->cu, NULL);
    if (mc->train && mc->train_free) mc->train_free(mc);
    infer_free(mc);
    if (mc->w_shared) skpo_cuda_ipc_close(mc->w);
    else skpo_cuda_dfree(mc->w);
    skpo_cuda_dfree(mc->master);
    skpo_cuda_dfree(mc->grad);
    skpo_cuda_dfree(mc->inv_freq);
    skpo_cuda_free_ctx(mc->cu);
    free(mc);
    m->be_ctx = NULL;
}

// The step runs q, k, v and gate, up as one GEMM each: model.c's layout_order
// keeps [Wq; Wk; Wv], [bq | bk | bv] and [Wg; Wu] contiguous.
static void check_fused_layout(const skpo_model *m) {
    const skpo_config *c = &m->c;
    size_t C = (size_t)c->hidden_size, F = (size_t)c->intermediate_size;
    size_t QD = (size_t)c->num_attention_heads * c->head_dim, KVD = (size_t)c->num_key_value_heads * c->head_dim;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        const model_layer *L = &m->layers[l];
        SKPO_ASSERT(L->wk == L->wq + QD * C && L->wv == L->wk + KVD * C && L->wu == L->wg + F * C);
        SKPO_ASSERT(!L->bq ? !L->bk && !L->bv : L->bk == L->bq + QD && L->bv == L->bk + KVD);
    }
}

// The scratch every inference step uses (both ways of opening).
static skpo_status infer_open(skpo_model *m, skpo_err *err) {
    model_cuda *mc = model_cuda_of(m);
    infer_state *in = skpo_xcalloc(1, sizeof(infer_state));
    mc->infer = in;
    check_fused_layout(m);
    in->graphs_off = getenv("SKPO_CUDA_GRAPHS") && !strcmp(getenv("SKPO_CUDA_GRAPHS"), "0");
    skpo_status s = model_cuda_attn_select(mc->cu, 0, m->c.num_attention_heads, m->c.num_key_value_heads,
                                           m->c.head_dim, &in->attn, &in->attn_forced, err);
    if (s) return s;
    in->attn_work_bytes = skpo_cuda_attention_paged_work(mc->cu, m->c.num_attention_heads, m->c.num_key_value_heads,
                                                         m->c.head_dim);
    for (int i = 0; i < 2 && !s; i++) s = skpo_cuda_event_new(&in->staged[i], err);
    return s ? s : skpo_cuda_malloc(mc->cu, (void **)&in->attn_work, in->attn_work_bytes, "attention partials", err);
}

skpo_status model_cuda_open(skpo_model *m, int device, model_cuda **out, skpo_err *err) {
    SKPO_ASSERT(!model_cuda_of(m));
    model_cuda *mc = skpo_xcalloc(1, sizeof *mc);
    skpo_status s = skpo_cuda_init(device, &mc->cu, err);
    if (s) {
        free(mc);
        return s;
    }
    m->be_ctx = mc;
    size_t n = m->numel, half = (size_t)(m->c.head_dim / 2);
    // Checked before any upload: bf16 weights, plus fp32 master and grad (and
    // room for the optimizer's moments kept elsewhere) when trainable.
    size_t need = n * 2 + (m->o.trainable ? n * 12 : 0), avail = skpo_cuda_mem_free(mc->cu);
    if (need > avail) {
        s = skpo_err_set(err, SKPO_ENOMEM,
                         "checkpoint too large for CUDA device %d: %zu M parameters need %zu MiB (bf16 weights%s) but "
                         "%zu MiB of %zu MiB are free",
                         device, n / 1000000, MIB(need), m->o.trainable ? " + fp32 master, grads, optimizer" : "",
                         MIB(avail), MIB(skpo_cuda_mem_total(mc->cu)));
        model_cuda_close(m);
        return s;
    }
    s = skpo_cuda_malloc(mc->cu, (void **)&mc->w, n * sizeof(skpo_bf16), "bf16 weights", err);
    if (!s) s = skpo_cuda_malloc(mc->cu, (void **)&mc->inv_freq, half * sizeof(float), "rope frequencies", err);
    if (!s && m->o.trainable) {
        s = skpo_cuda_malloc(mc->cu, (void **)&mc->master, n * sizeof(float), "fp32 master weights", err);
        if (!s) s = skpo_cuda_malloc(mc->cu, (void **)&mc->grad, n * sizeof(float), "fp32 gradients", err);
        if (!s) s = skpo_cuda_memset0(mc->cu, mc->grad, n * sizeof(float), err);
    }
    if (!s) s = model_cuda_sync_from_host(m, err);
    if (!s) s = infer_open(m, err);
    if (s) {
        model_cuda_close(m);
        return s;
    }
    if (out) *out = mc;
    return SKPO_OK;
}

// The exporter's side of model.h's weights sharing: the bf16 weights are one
// allocation, so one handle lends them all (the importer uses the same offsets).
static skpo_status cuda_export_weights(const skpo_model *m, skpo_weights_handle *h, skpo_err *err) {
    model_cuda *mc = model_cuda_of(m);
    skpo_status s = skpo_cuda_pci_id(mc->cu, h->device, (int)sizeof h->device, err);
    return s ? s : skpo_cuda_ipc_export(mc->cu, mc->w, h->ipc, err);
}

// The importer's: the device of h, the weights mapped, only the RoPE table uploaded.
static skpo_status cuda_open_shared(skpo_model *m, const skpo_weights_handle *h, skpo_err *err) {
    SKPO_ASSERT(!model_cuda_of(m) && !m->o.trainable);
    model_cuda *mc = skpo_xcalloc(1, sizeof *mc);
    skpo_status s = skpo_cuda_init(0, &mc->cu, err);
    if (s) {
        free(mc);
        return s;
    }
    m->be_ctx = mc;
    char pci[32];
    size_t half = (size_t)(m->c.head_dim / 2);
    if (!(s = skpo_cuda_pci_id(mc->cu, pci, (int)sizeof pci, err)) && strcmp(pci, h->device))
        s = skpo_err_set(err, SKPO_EDEVICE, "the shared weights are on GPU %s, this process has GPU %s", h->device, pci);
    if (!s && !(s = skpo_cuda_ipc_open(mc->cu, h->ipc, (void **)&mc->w, err))) mc->w_shared = 1;
    if (!s) s = skpo_cuda_malloc(mc->cu, (void **)&mc->inv_freq, half * sizeof(float), "rope frequencies", err);
    if (!s) s = skpo_cuda_h2d(mc->cu, mc->inv_freq, m->inv_freq, half * sizeof(float), err);
    if (!s) s = skpo_cuda_sync(mc->cu, err);
    if (!s) s = infer_open(m, err);
    if (s) model_cuda_close(m);
    return s;
}

// --- the KV pool on the device ---------------------------------------------------------------

// Bytes of one pool block (K or V) of the model's caches.
static size_t pool_block_bytes(const skpo_model *m) {
    return (size_t)m->c.num_hidden_layers * KV_BLOCK * (size_t)(m->c.num_key_value_heads * m->c.head_dim) *
           sizeof(skpo_bf16);
}

// The pool holds one block more than the cache hands out: the pad block that
// the padding rows of a bucketed decode graph write and read.
static skpo_status pool_alloc(void *ctx, size_t bytes, void **k, void **v, skpo_err *err) {
    skpo_cuda *cu = model_cuda_of((const skpo_model *)ctx)->cu;
    size_t avail = skpo_cuda_mem_free(cu);
    bytes += pool_block_bytes(ctx);
    *k = *v = NULL;
    if (2 * bytes > avail)
        return skpo_err_set(err, SKPO_ENOMEM,
                            "kv cache needs %zu MiB on the GPU (K and V, bf16) but %zu MiB are free "
                            "(lower --kv-tokens or --batch)",
                            MIB(2 * bytes), MIB(avail));
    skpo_status s = skpo_cuda_malloc(cu, k, bytes, "kv cache keys", err);
    if (!s) s = skpo_cuda_malloc(cu, v, bytes, "kv cache values", err);
    if (s) {
        skpo_cuda_dfree(*k);
        *k = NULL;
    }
    return s;
}

// Graphs bake in the pool: none may outlive it (a new pool can reuse the
// address of this K, or of this V, but not necessarily both).
static void pool_release(void *ctx, void *k, void *v) {
    const skpo_model *m = ctx;
    if (model_cuda_of(m) && model_cuda_of(m)->infer) {
        skpo_cuda_sync(model_cuda_of(m)->cu, NULL);
        graphs_drop(model_cuda_of(m)->infer);
    }
    skpo_cuda_dfree(k);
    skpo_cuda_dfree(v);
}

// Copy-on-write on the model's stream: ordered before the step that writes the block.
static void pool_copy_block(void *ctx, void *k, void *v, size_t block_bytes, int dst, int src) {
    skpo_cuda *cu = model_cuda_of((const skpo_model *)ctx)->cu;
    skpo_err e = {0};
    char *pk = k, *pv = v;
    if (skpo_cuda_d2d_async(cu, pk + (size_t)dst * block_bytes, pk + (size_t)src * block_bytes, block_bytes, &e) ||
        skpo_cuda_d2d_async(cu, pv + (size_t)dst * block_bytes, pv + (size_t)src * block_bytes, block_bytes, &e))
        skpo_die("kv cache copy-on-write: %s", e.msg);  // a launch failure here is a broken device
}

static const skpo_kv_pool_ops POOL_OPS = {
    .elem_bytes = sizeof(skpo_bf16), .alloc = pool_alloc, .release = pool_release, .copy_block = pool_copy_block};

skpo_kv *model_cuda_kv_new(const skpo_model *m, size_t max_tokens, int max_seqs, skpo_err *err) {
    SKPO_ASSERT(model_cuda_of(m));
    skpo_kv_shape sh = {
        .n_layers = m->c.num_hidden_layers,
        .kv_dim = m->c.num_key_value_heads * m->c.head_dim,
        .block_size = KV_BLOCK,
        .n_blocks = (max_tokens + KV_BLOCK - 1) / KV_BLOCK + (size_t)(max_seqs > 0 ? max_seqs : 1),
        .max_seqs = max_seqs,
    };
    skpo_kv *kv = skpo_kv_new_ext(&sh, &POOL_OPS, (void *)m, err);
    if (kv) graphs_drop(model_cuda_of(m)->infer);  // recorded for other pools (belt and braces: release drops them too)
    // Scratch for a decode step of every sequence now, not mid-generation.
    size_t n = max_seqs > 0 ? (size_t)max_seqs : 1;
    if (kv && infer_reserve((skpo_model *)m, n, n, 6 * n, err)) {
        skpo_kv_free(kv);
        return NULL;
    }
    return kv;
}

// --- step scratch ------------------------------------------------------------------------------

static void graphs_drop(infer_state *in) {
    for (int i = 0; i < MAX_GRAPHS; i++) {
        skpo_cuda_graph_free(in->graphs[i].g);
        memset(&in->graphs[i], 0, sizeof in->graphs[i]);
    }
}

static void infer_free(model_cuda *mc) {
    infer_state *in = mc->infer;
    if (!in) return;
    graphs_drop(in);
    skpo_cuda_dfree(in->act);
    skpo_cuda_dfree(in->yf);
    skpo_cuda_dfree(in->logits);
    skpo_cuda_dfree(in->dints);
    for (int i = 0; i < 2; i++) {
        skpo_cuda_host_free(in->hints[i]);
        skpo_cuda_event_free(in->staged[i]);
    }
    skpo_cuda_dfree(in->attn_work);
    free(in);
    mc->infer = NULL;
}

// Activation pointers of a step inside in->act (layout fixed by cap_rows /
// cap_seqs); each buffer starts 256-byte aligned (16-byte vector loads).
typedef struct step_bufs {
    skpo_bf16 *x, *ln, *qkv, *q, *att, *gu, *h, *xl, *lnl;
} step_bufs;

static size_t al128(size_t n) { return (n + 127) / 128 * 128; }

// Elements of in->act for R rows and S last rows; fills b when non-NULL.
static size_t bufs_layout(const skpo_model *m, size_t R, size_t S, skpo_bf16 *base, step_bufs *b) {
    const skpo_config *c = &m->c;
    size_t C = (size_t)c->hidden_size, F = (size_t)c->intermediate_size;
    size_t QD = (size_t)c->num_attention_heads * c->head_dim, KVD = (size_t)c->num_key_value_heads * c->head_dim;
    size_t n[9] = {R * C, R * C, R * (QD + 2 * KVD), R * QD, R * QD, R * 2 * F, R * F, S * C, S * C}, off = 0;
    skpo_bf16 **p[9] = {&b->x, &b->ln, &b->qkv, &b->q, &b->att, &b->gu, &b->h, &b->xl, &b->lnl};
    for (int i = 0; i < 9; i++) {
        if (base) *p[i] = base + off;
        off += al128(n[i]);
    }
    return off;
}

static step_bufs bufs_of(const skpo_model *m, const infer_state *in) {
    step_bufs b;
    bufs_layout(m, in->cap_rows, in->cap_seqs, in->act, &b);
    return b;
}

// Grow the scratch to hold a step of N rows, nseq sequences and nints staging ints.
static skpo_status infer_reserve(skpo_model *m, size_t N, size_t nseq, size_t nints, skpo_err *err) {
    model_cuda *mc = model_cuda_of(m);
    infer_state *in = mc->infer;
    const skpo_config *c = &m->c;
    skpo_status s;
    if (N > in->cap_rows || nseq > in->cap_seqs) {
        // Grow by half at least, so a slowly growing batch reallocates O(log) times.
        size_t R = in->cap_rows, S = in->cap_seqs;
        if (N > R) R = N > R + R / 2 ? N : R + R / 2;
        if (nseq > S) S = nseq > S + S / 2 ? nseq : S + S / 2;
        step_bufs none;
        size_t elems = bufs_layout(m, R, S, NULL, &none);
        s = skpo_cuda_sync(mc->cu, err);  // the old buffers may still be in use
        if (s) return s;
        graphs_drop(in);                  // they point into the old buffers
        skpo_cuda_dfree(in->act);
        skpo_cuda_dfree(in->yf);
        skpo_cuda_dfree(in->logits);
        in->act = NULL;
        in->yf = NULL;
        in->logits = NULL;
        in->cap_rows = in->cap_seqs = 0;
        in->last_nseq = 0;
        s = skpo_cuda_malloc(mc->cu, (void **)&in->act, elems * sizeof(skpo_bf16), "step activations", err);
        if (!s) s = skpo_cuda_malloc(mc->cu, (void **)&in->yf, R * (size_t)c->hidden_size * sizeof(float), "step activations", err);
        if (!s) s = skpo_cuda_malloc(mc->cu, (void **)&in->logits, S * (size_t)c->vocab_size * sizeof(float), "logits", err);
        if (s) return s;
        in->cap_rows = R;
        in->cap_seqs = S;
    }
    if (nints > in->cap_ints) {
        size_t n = nints * 2;
        if ((s = skpo_cuda_sync(mc->cu, err))) return s;
        graphs_drop(in);
        skpo_cuda_dfree(in->dints);
        in->dints = NULL;
        for (int i = 0; i < 2; i++) {
            skpo_cuda_host_free(in->hints[i]);
            in->hints[i] = NULL;
        }
        in->cap_ints = 0;
        s = skpo_cuda_malloc(mc->cu, (void **)&in->dints, n * sizeof(int32_t), "step indices", err);
        for (int i = 0; i < 2 && !s; i++) s = skpo_cuda_host_alloc((void **)&in->hints[i], n * sizeof(int32_t), err);
        if (s) return s;
        in->cap_ints = n;
    }
    return SKPO_OK;
}

// --- one step ----------------------------------------------------------------------------------



// Device views of the staging ints of a step.
typedef struct step_ix {
    const int32_t *toks, *pos, *row_seq, *slot_b, *slot_r, *last, *bt, *tiles;
    int N, nseq, MB, ntiles, max_q;   // max_q: most new rows of one sequence
} step_ix;

#define TRY(call) do { skpo_status s_ = (call); if (s_) return s_; } while (0)
#define W(p) model_cuda_w(m, (p))

// Attention of a prefill (or mixed) step's rows: cuDNN over the paged pool,
// or the tiled kernel of infer.cu. cuDNN that cannot take the shape (an
// unforced choice) says so once and hands over to the kernel for good.
static skpo_status prefill_attention(skpo_model *m, skpo_kv *kv, const step_ix *ix, skpo_bf16 *att, const skpo_bf16 *q,
                                     int l, skpo_err *err) {
    infer_state *in = model_cuda_of(m)->infer;
    skpo_cuda *cu = model_cuda_of(m)->cu;
    const skpo_config *c = &m->c;
    const skpo_kv_shape *ks = skpo_kv_get_shape(kv);
    int NH = c->num_attention_heads, NKV = c->num_key_value_heads, HS = c->head_dim;
    skpo_bf16 *pk = skpo_kv_pool_raw_k(kv), *pv = skpo_kv_pool_raw_v(kv);
    TRY(model_cuda_attn_select(cu, 0, NH, NKV, HS, &in->attn, &in->attn_forced, err));
    if (in->dnn_off && !in->attn_forced) in->attn = ATTN_CUSTOM;
    if (in->attn == ATTN_CUDNN) {
        skpo_status s = skpo_cudnn_attention_paged(cu, att, q, pk, pv, ix->bt, ix->MB, ix->last, ix->pos, ix->nseq,
                                                   ix->max_q, ix->N, ks->n_layers, l, (int)ks->n_blocks,
                                                   ks->block_size, NH, NKV, HS, err);
        if (s != SKPO_EUNSUPPORTED || in->attn_forced) return s;
        fprintf(stderr, "skpo: prefill attention falls back to the own kernel: %s\n", err->msg);
        in->dnn_off = 1;
    }
    return skpo_cuda_attention_prefill(cu, att, q, pk, pv, ix->bt, ix->MB, ix->row_seq, ix->pos, ix->tiles, ix->ntiles,
                                       ix->N, ks->n_layers, l, ks->block_size, NH, NKV, HS, err);
}

// Every kernel of one step, in order, on the model's stream (capturable: no
// allocation, no synchronisation, no host reads of device data).
static skpo_status step_launch(skpo_model *m, skpo_kv *kv, const step_ix *ix, skpo_err *err) {
    model_cuda *mc = model_cuda_of(m);
    infer_state *in = mc->infer;
    skpo_cuda *cu = mc->cu;
    const skpo_config *c = &m->c;
    const skpo_kv_shape *ks = skpo_kv_get_shape(kv);
    step_bufs b = bufs_of(m, in);
    int N = ix->N, C = c->hidden_size, F = c->intermediate_size, V = c->vocab_size, L = c->num_hidden_layers;
    int NH = c->num_attention_heads, NKV = c->num_key_value_heads, HS = c->head_dim, QD = NH * HS, KVD = NKV * HS;
    float eps = (float)c->rms_norm_eps;
    skpo_bf16 *pk = skpo_kv_pool_raw_k(kv), *pv = skpo_kv_pool_raw_v(kv);
    TRY(skpo_cuda_embed(cu, b.x, W(m->wte), ix->toks, N, C, err));
    TRY(skpo_cuda_rmsnorm(cu, b.ln, NULL, b.x, W(m->layers[0].ln1), N, C, eps, err));
    for (int l = 0; l < L; l++) {
        const model_layer *Ly = &m->layers[l];
        // q | k | v in one GEMM; biases, RoPE, K/V rows into the pool: one launch
        TRY(skpo_cuda_linear(cu, b.qkv, b.ln, W(Ly->wq), NULL, N, C, QD + 2 * KVD, 0.f, err));
        TRY(skpo_cuda_qkv_rope(cu, b.q, pk, pv, b.qkv, W(Ly->bq), ix->pos, mc->inv_freq, ix->slot_b, ix->slot_r, N, NH,
                               NKV, HS, ks->n_layers, l, ks->block_size, err));
        if (N > ix->nseq)   // runs of rows of one sequence: tiles of rows share the K/V staging
            TRY(prefill_attention(m, kv, ix, b.att, b.q, l, err));
        else
            TRY(skpo_cuda_attention_paged(cu, b.att, b.q, pk, pv, ix->bt, ix->MB, ix->row_seq, ix->pos, N, ks->n_layers,
                                          l, ks->block_size, NH, NKV, HS, in->attn_work, in->attn_work_bytes, err));
        // x += att Wo^T (+bo); ln = rmsnorm(x)
        TRY(skpo_cuda_linear_f32out(cu, in->yf, b.att, W(Ly->wo), N, QD, C, err));
        TRY(skpo_cuda_add_rmsnorm(cu, b.x, b.ln, NULL, b.x, in->yf, W(Ly->bo), W(Ly->ln2), N, C, eps, err));
        // gate | up in one GEMM; x += (silu(gate) * up) Wd^T; ln = the next layer's input norm
        TRY(skpo_cuda_linear(cu, b.gu, b.ln, W(Ly->wg), NULL, N, C, 2 * F, 0.f, err));
        TRY(skpo_cuda_swiglu_fused(cu, b.h, b.gu, N, F, err));
        TRY(skpo_cuda_linear_f32out(cu, in->yf, b.h, W(Ly->wd), N, F, C, err));
        TRY(skpo_cuda_add_rmsnorm(cu, b.x, l + 1 < L ? b.ln : NULL, NULL, b.x, in->yf, NULL,
                                  l + 1 < L ? W(m->layers[l + 1].ln1) : NULL, N, C, eps, err));
    }
    // Only the last new row of each sequence needs logits: gather them (an
    // embedding lookup with x as the table), final norm, lm_head in fp32.
    TRY(skpo_cuda_embed(cu, b.xl, b.x, ix->last, ix->nseq, C, err));
    TRY(skpo_cuda_rmsnorm(cu, b.lnl, NULL, b.xl, W(m->normf), ix->nseq, C, eps, err));
    TRY(skpo_cuda_linear_f32out(cu, in->logits, b.lnl, W(m->lm_head), ix->nseq, C, V, err));
    return SKPO_OK;
}

// Decode steps through a CUDA graph: the first time a (batch, table width,
// pool) shape is seen the step runs eagerly (cuBLAS picks its kernels, lazy
// attributes get set), the second time it is captured, then replayed. Any
// capture failure turns graphs off for this model and runs eagerly.
static skpo_status step_graphed(skpo_model *m, skpo_kv *kv, const step_ix *ix, skpo_err *err) {
    infer_state *in = model_cuda_of(m)->infer;
    skpo_cuda *cu = model_cuda_of(m)->cu;
    const void *pk = skpo_kv_pool_raw_k(kv), *pv = skpo_kv_pool_raw_v(kv);
    step_graph *hit = NULL, *lru = &in->graphs[0];
    for (int i = 0; i < MAX_GRAPHS; i++) {
        step_graph *g = &in->graphs[i];
        if (g->used && g->nseq == ix->nseq && g->max_blocks == ix->MB && g->kv_k == pk && g->kv_v == pv) hit = g;
        if (g->used < lru->used) lru = g;
    }
    in->clock++;
    if (hit && hit->g) {
        hit->used = in->clock;
        return skpo_cuda_graph_launch(cu, hit->g, err);
    }
    if (!hit) {  // first sighting: remember it, run eagerly
        skpo_cuda_graph_free(lru->g);
        *lru = (step_graph){.nseq = ix->nseq, .max_blocks = ix->MB, .kv_k = pk, .kv_v = pv, .used = in->clock};
        return step_launch(m, kv, ix, err);
    }
    hit->used = in->clock;
    skpo_err ce = {0};
    if (skpo_cuda_capture_begin(cu, &ce) == SKPO_OK) {
        skpo_status s = step_launch(m, kv, ix, &ce);
        skpo_status e = skpo_cuda_capture_end(cu, &hit->g, s ? NULL : &ce);
        if (!s && !e) return skpo_cuda_graph_launch(cu, hit->g, err);
    }
    fprintf(stderr, "skpo: CUDA graph capture failed, decoding without graphs: %s\n", ce.msg);
    in->graphs_off = 1;
    graphs_drop(in);
    return step_launch(m, kv, ix, err);
}

// Fill the pinned staging ints of a step (positions after the reservation).
// B >= nseq rows of sequences: the nseq real ones, then padding (decode steps
// only) of token 0 at position 0 whose K/V row and block table are the pad block.
static step_ix step_stage(skpo_model *m, skpo_kv *kv, const int *seq, int nseq, int B, const int32_t *toks,
                          const int *off, const int *old, int MB) {
    infer_state *in = model_cuda_of(m)->infer;
    const skpo_kv_shape *ks = skpo_kv_get_shape(kv);
    int N = off[nseq] + (B - nseq), bs = ks->block_size, pad = (int)ks->n_blocks;
    int32_t *h = in->hints[in->cur], *d = in->dints;
    int32_t *ht = h, *hp = h + N, *hs = h + 2 * N, *hb = h + 3 * N, *hr = h + 4 * N, *hl = h + 5 * N;
    int32_t *hbt = hl + B;
    memcpy(ht, toks, (size_t)off[nseq] * sizeof *ht);
    for (int i = 0; i < nseq; i++) {
        int nb;
        const int *blk = skpo_kv_seq_blocks(kv, seq[i], &nb);
        for (int j = 0; j < MB; j++) hbt[(size_t)i * MB + j] = j < nb ? blk[j] : 0;
        for (int r = off[i]; r < off[i + 1]; r++) {
            int p = old[i] + (r - off[i]);
            hp[r] = p;
            hs[r] = i;
            hb[r] = blk[p / bs];
            hr[r] = p % bs;
        }
        hl[i] = off[i + 1] - 1;
    }
    // Row tiles for prefill attention: runs of at most SKPO_CUDA_PREFILL_ROWS rows of one sequence.
    int32_t *hti = hbt + (size_t)B * MB;
    int nt = 0, max_q = 0;
    for (int i = 0; i < nseq; i++) {
        if (off[i + 1] - off[i] > max_q) max_q = off[i + 1] - off[i];
        for (int r = off[i]; r < off[i + 1]; r += SKPO_CUDA_PREFILL_ROWS, nt++) {
            hti[2 * nt] = r;
            hti[2 * nt + 1] = off[i + 1] - r < SKPO_CUDA_PREFILL_ROWS ? off[i + 1] - r : SKPO_CUDA_PREFILL_ROWS;
        }
    }
    for (int i = nseq; i < B; i++) {
        int r = off[nseq] + (i - nseq);
        ht[r] = hp[r] = hr[r] = 0;
        hs[r] = i;
        hb[r] = pad;
        hl[i] = r;
        for (int j = 0; j < MB; j++) hbt[(size_t)i * MB + j] = pad;
    }
    return (step_ix){.toks = d, .pos = d + N, .row_seq = d + 2 * N, .slot_b = d + 3 * N, .slot_r = d + 4 * N,
                     .last = d + 5 * N, .bt = d + 5 * N + B, .tiles = d + 5 * N + B + (size_t)B * MB, .N = N,
                     .nseq = B, .MB = MB, .ntiles = nt, .max_q = max_q};
}

// Decode graphs are kept for a few batch sizes: 1, 2, 4, 8, then powers of two
// and 1.5 x powers of two (12, 16, 24, 32, 48, 64, 96, ...), at most 50% padding.
static int decode_bucket(int n) {
    int p = 1;
    while (p < n) p *= 2;
    return p >= 16 && n <= p / 4 * 3 ? p / 4 * 3 : p;
}

skpo_status model_cuda_step(skpo_model *m, skpo_kv *kv, const int *seq, int nseq, const int32_t *toks,
                            const int *off, float *logits, skpo_err *err) {
    model_cuda *mc = model_cuda_of(m);
    SKPO_ASSERT(mc);
    if (m->lora) // LoRA: inference on cuda uses a merged adapter (lora.h)
        return skpo_err_set(err, SKPO_EUNSUPPORTED, "step: no low-rank LoRA path in the cuda step (merge the adapter)");
    if (skpo_kv_pool_ctx(kv) != (void *)m)
        return skpo_err_set(err, SKPO_ERANGE, "step: the kv cache was not made by skpo_model_kv_new for this CUDA model");
    skpo_status s = model_step_check(m, seq, nseq, toks, off, err);
    if (s) return s;
    infer_state *in = mc->infer;
    int N = off[nseq], *old = skpo_xmalloc((size_t)nseq * sizeof(int));
    if ((s = model_step_reserve(m, kv, seq, nseq, off, old, err))) {
        free(old);
        return s;
    }
    int MB = 1;
    for (int i = 0; i < nseq; i++) {
        int nb;
        skpo_kv_seq_blocks(kv, seq[i], &nb);
        if (nb > MB) MB = nb;
    }
    // Table width in steps of 16 blocks (256 positions): a decode graph keyed
    // on it then stays valid for 256 tokens instead of 16.
    MB = (MB + 15) / 16 * 16;
    // A graphed decode step runs a bucket of B >= nseq rows (decode_bucket).
    int graphed = N == nseq && !in->graphs_off, B = graphed ? decode_bucket(nseq) : nseq, NB = N + (B - nseq);
    size_t nints = 5 * (size_t)NB + (size_t)B + (size_t)B * (size_t)MB +
                   2 * ((size_t)N / SKPO_CUDA_PREFILL_ROWS + (size_t)nseq);   // + row tiles
    in->last_nseq = 0;
    // The pinned staging of this step was last read by the upload of the step
    // before the previous one: wait for that copy only (long done when a
    // sample synchronised in between), never for the device to go idle. The
    // device-side staging is overwritten in stream order, after the kernels
    // of the previous step have read it.
    if (!(s = infer_reserve(m, (size_t)NB, (size_t)B, nints, err)) && !(s = skpo_cuda_event_wait(in->staged[in->cur], err))) {
        step_ix ix = step_stage(m, kv, seq, nseq, B, toks, off, old, MB);
        s = skpo_cuda_h2d_async(mc->cu, in->dints, in->hints[in->cur], nints * sizeof(int32_t), err);
        if (!s) s = skpo_cuda_event_record(mc->cu, in->staged[in->cur], err);
        in->cur ^= 1;
        if (!s) s = graphed ? step_graphed(m, kv, &ix, err) : step_launch(m, kv, &ix, err);
        if (!s && logits)
            s = skpo_cuda_d2h(mc->cu, logits, in->logits, (size_t)nseq * (size_t)m->c.vocab_size * sizeof(float), err);
    }
    if (s)
        for (int i = 0; i < nseq; i++) skpo_kv_seq_truncate(kv, seq[i], old[i]);
    else
        in->last_nseq = nseq;
    free(old);
    return s;
}

int model_cuda_last_logits(const skpo_model *m, const float **dev_logits) {
    infer_state *in = model_cuda_of(m) ? model_cuda_of(m)->infer : NULL;
    *dev_logits = in && in->last_nseq ? in->logits : NULL;
    return *dev_logits ? in->last_nseq : 0;
}

static skpo_status cuda_open(skpo_model *m, skpo_err *err) { return model_cuda_open(m, 0, NULL, err); }

static skpo_status cuda_step_dev(skpo_model *m, skpo_kv *kv, const int *seq, int nseq, const int32_t *toks,
                                 const int *off, const float **dev_logits, skpo_err *err) {
    skpo_status s = model_cuda_step(m, kv, seq, nseq, toks, off, NULL, err);
    if (!s) model_cuda_last_logits(m, dev_logits);
    return s;
}

const model_backend model_backend_cuda = {
    .name = "cuda",
    .device = SKPO_DEV_CUDA,
    .can_pack = 1,   // on the own attention kernels (model_cuda_train.c pass_path)
    .visible = visible_devices,
    .probe = model_cuda_probe,
    .open = cuda_open,
    .close = model_cuda_close,
    .sync_to_host = model_cuda_sync_to_host,
    .sync_from_host = model_cuda_sync_from_host,
    .sync_to_host_range = model_cuda_sync_to_host_range,
    .offload = model_cuda_offload,
    .reload = model_cuda_reload,
    .kv_new = model_cuda_kv_new,
    .step = model_cuda_step,
    .step_dev = cuda_step_dev,
    .cuda_ctx = model_cuda_ctx,
    .sampler_new = model_cuda_sampler_new,
    .sampler_draw = model_cuda_sampler_draw,
    .sampler_row = model_cuda_sampler_row,
    .sampler_free = model_cuda_sampler_free,
    .logprobs = model_cuda_logprobs,
    .train_forward = model_cuda_train_forward,
    .train_backward = model_cuda_train_backward,
    .zero_grad = model_cuda_zero_grad,
    .set_recompute = model_cuda_set_recompute,
    .dev_params = model_cuda_dev_params,
    .grad_sumsq = model_cuda_grad_sumsq,
    .export_weights = cuda_export_weights,
    .open_shared = cuda_open_shared,
};

#endif /* SKPO_HAVE_CUDA */
