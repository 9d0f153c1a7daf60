// fake_cuda.h - a host-memory stand-in for the CUDA backend (cuda.h and
// cuda_infer.h), for test_cuda_model_fake.c only: "device" memory is malloc,
// every kernel is a plain loop with bf16 storage (round to nearest even) and
// fp32 math, written from the kernels' contracts and not from the CPU model.
// It lets CI (no GPU) run core/model/model_cuda.c's host side for real: parameter
// offsets, staging of tokens/positions/slots/block tables, the device KV pool
// and its copy-on-write, scratch growth, sync to and from the host, errors.
// Graphs record the kernels' arguments at capture and replay them.
// Include once, from a test that defines SKPO_HAVE_CUDA before any header.
#include "cuda/cuda.h"
#include "cuda/cuda_dnn.h"
#include "cuda/cuda_infer.h"
#include "gen/sampler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct skpo_cuda {
    int device;
};

static size_t fake_free_bytes = (size_t)8 << 30;  // what mem_free reports
static long fake_live_allocs;                     // device allocations not yet freed
static size_t fake_live_bytes;                    // their bytes (each block's size sits before it)

int skpo_cuda_device_count(void) { return 1; }
skpo_status skpo_cuda_init(int device, skpo_cuda **out, skpo_err *err) {
    if (device != 0) return skpo_err_set(err, SKPO_EDEVICE, "no CUDA device %d (fake backend)", device);
    *out = skpo_xcalloc(1, sizeof **out);
    return SKPO_OK;
}
void skpo_cuda_free_ctx(skpo_cuda *c) { free(c); }
size_t skpo_cuda_mem_free(skpo_cuda *c) { return fake_free_bytes; }
size_t skpo_cuda_mem_total(skpo_cuda *c) { return (size_t)16 << 30; }
skpo_status skpo_cuda_malloc(skpo_cuda *c, void **p, size_t bytes, const char *what, skpo_err *err) {
    if (bytes > fake_free_bytes)
        return skpo_err_set(err, SKPO_ENOMEM, "out of GPU memory allocating %zu MiB for %s", bytes >> 20, what);
    char *b = malloc(bytes + 16);
    memcpy(b, &bytes, sizeof bytes);
    *p = b + 16;
    memset(*p, 0xA5, bytes);  // garbage, like fresh device memory
    fake_live_allocs++;
    fake_live_bytes += bytes;
    return SKPO_OK;
}
void skpo_cuda_dfree(void *p) {
    if (!p) return;
    char *b = (char *)p - 16;
    size_t bytes;
    memcpy(&bytes, b, sizeof bytes);
    fake_live_allocs--;
    fake_live_bytes -= bytes;
    free(b);
}
skpo_status skpo_cuda_h2d(skpo_cuda *c, void *d, const void *s, size_t n, skpo_err *e) { memcpy(d, s, n); return SKPO_OK; }
skpo_status skpo_cuda_d2h(skpo_cuda *c, void *d, const void *s, size_t n, skpo_err *e) { memcpy(d, s, n); return SKPO_OK; }
skpo_status skpo_cuda_h2d_async(skpo_cuda *c, void *d, const void *s, size_t n, skpo_err *e) { memcpy(d, s, n); return SKPO_OK; }
skpo_status skpo_cuda_d2h_async(skpo_cuda *c, void *d, const void *s, size_t n, skpo_err *e) { memcpy(d, s, n); return SKPO_OK; }
skpo_status skpo_cuda_d2d_async(skpo_cuda *c, void *d, const void *s, size_t n, skpo_err *e) { memmove(d, s, n); return SKPO_OK; }
skpo_status skpo_cuda_memset0(skpo_cuda *c, void *p, size_t n, skpo_err *e) { memset(p, 0, n); return SKPO_OK; }
skpo_status skpo_cuda_sync(skpo_cuda *c, skpo_err *e) { return SKPO_OK; }
// The draw of the host sampler (sampler.h), row by row: the device sampler's contract.
skpo_status skpo_cuda_sample(skpo_cuda *c, int32_t *tok, float *logp, const float *logits, int B, int V, float temp,
                             int top_k, float top_p, const float *coin, skpo_err *err) {
    skpo_sampler s;
    skpo_sampler_init(&s, V);
    skpo_sample_params p = {.temperature = temp, .top_p = top_p, .top_k = top_k};
    for (int b = 0; b < B; b++) tok[b] = skpo_sample(&s, logits + (size_t)b * V, &p, coin[b], &logp[b]);
    skpo_sampler_destroy(&s);
    return SKPO_OK;
}
static size_t fake_pinned_bytes;  // pinned host buffers not yet freed (size before each, as on the device)
skpo_status skpo_cuda_host_alloc(void **p, size_t bytes, skpo_err *err) {
    char *b = skpo_xmalloc(bytes + 16);
    memcpy(b, &bytes, sizeof bytes);
    fake_pinned_bytes += bytes;
    *p = b + 16;
    return SKPO_OK;
}
void skpo_cuda_host_free(void *p) {
    if (!p) return;
    size_t bytes;
    memcpy(&bytes, (char *)p - 16, sizeof bytes);
    fake_pinned_bytes -= bytes;
    free((char *)p - 16);
}
// Events: every call here completes before it returns, so a wait never waits.
struct skpo_cuda_event { int recorded; };
skpo_status skpo_cuda_event_new(skpo_cuda_event **out, skpo_err *err) { *out = skpo_xcalloc(1, sizeof **out); return SKPO_OK; }
void skpo_cuda_event_free(skpo_cuda_event *e) { free(e); }
skpo_status skpo_cuda_event_record(skpo_cuda *c, skpo_cuda_event *e, skpo_err *err) { e->recorded++; return SKPO_OK; }
skpo_status skpo_cuda_event_wait(skpo_cuda_event *e, skpo_err *err) { return SKPO_OK; }
// IPC within one process: the handle carries the pointer, "mapping" returns it
// (model_cuda.c's export and open_shared host code runs as on a GPU).
static long fake_mapped;  // handles opened and not yet closed
skpo_status skpo_cuda_ipc_export(skpo_cuda *c, const void *p, unsigned char h[SKPO_CUDA_IPC_BYTES], skpo_err *err) {
    memset(h, 0, SKPO_CUDA_IPC_BYTES);
    memcpy(h, &p, sizeof p);
    return SKPO_OK;
}
skpo_status skpo_cuda_ipc_open(skpo_cuda *c, const unsigned char h[SKPO_CUDA_IPC_BYTES], void **p, skpo_err *err) {
    memcpy(p, h, sizeof *p);
    fake_mapped++;
    return SKPO_OK;
}
void skpo_cuda_ipc_close(void *p) { if (p) fake_mapped--; }
skpo_status skpo_cuda_pci_id(skpo_cuda *c, char *out, int len, skpo_err *err) {
    snprintf(out, (size_t)len, "0000:fa:ke.0");
    return SKPO_OK;
}

// bf16 storage rounds as base/bf16.h does (the library's one conversion).
static float fk_ld(const skpo_bf16 *p, size_t i) { return skpo_bf16_to_f32(p[i]); }
static void fk_st(skpo_bf16 *p, size_t i, float v) { p[i] = skpo_f32_to_bf16(v); }

skpo_status skpo_cuda_f32_to_bf16(skpo_cuda *c, skpo_bf16 *d, const float *s, size_t n, skpo_err *e) {
    skpo_f32_to_bf16_host(d, s, n);
    return SKPO_OK;
}
skpo_status skpo_cuda_bf16_to_f32(skpo_cuda *c, float *d, const skpo_bf16 *s, size_t n, skpo_err *e) {
    skpo_bf16_to_f32_host(d, s, n);
    return SKPO_OK;
}

// y(T,N) = x W^T in fp32 from bf16 inputs (widened once per call).
static float *fk_gemm(const skpo_bf16 *x, const skpo_bf16 *w, int T, int K, int N) {
    float *xf = skpo_xmalloc((size_t)T * K * sizeof *xf), *wf = skpo_xmalloc((size_t)N * K * sizeof *wf);
    float *y = skpo_xmalloc((size_t)T * N * sizeof *y);
    skpo_bf16_to_f32_host(xf, x, (size_t)T * K);
    skpo_bf16_to_f32_host(wf, w, (size_t)N * K);
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            float a = 0.f;
            const float *xr = xf + (size_t)t * K, *wr = wf + (size_t)n * K;
            for (int k = 0; k < K; k++) a += xr[k] * wr[k];
            y[(size_t)t * N + n] = a;
        }
    free(xf);
    free(wf);
    return y;
}
static skpo_status fk_linear(skpo_cuda *c, skpo_bf16 *y, const skpo_bf16 *x, const skpo_bf16 *w, const skpo_bf16 *bias,
                             int T, int K, int N, float beta, skpo_err *err) {
    float *a = fk_gemm(x, w, T, K, N);
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            size_t i = (size_t)t * N + n;
            float v = a[i] + (beta != 0.f ? beta * fk_ld(y, i) : 0.f);
            fk_st(y, i, v);
            if (bias) fk_st(y, i, fk_ld(y, i) + fk_ld(bias, n));
        }
    free(a);
    return SKPO_OK;
}
static skpo_status fk_linear_f32out(skpo_cuda *c, float *y, const skpo_bf16 *x, const skpo_bf16 *w, int T, int K, int N,
                                    skpo_err *err) {
    float *a = fk_gemm(x, w, T, K, N);
    memcpy(y, a, (size_t)T * N * sizeof *y);
    free(a);
    return SKPO_OK;
}
static skpo_status fk_embed(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *wte, const int32_t *ids, int T, int C,
                            skpo_err *err) {
    for (int t = 0; t < T; t++) memmove(out + (size_t)t * C, wte + (size_t)ids[t] * C, (size_t)C * sizeof *out);
    return SKPO_OK;
}
static skpo_status fk_rmsnorm(skpo_cuda *c, skpo_bf16 *out, float *rstd, const skpo_bf16 *x, const skpo_bf16 *w, int T,
                              int C, float eps, skpo_err *err) {
    for (int t = 0; t < T; t++) {
        float ss = 0.f;
        for (int i = 0; i < C; i++) ss += fk_ld(x, (size_t)t * C + i) * fk_ld(x, (size_t)t * C + i);
        float r = 1.f / sqrtf(ss / (float)C + eps);
        if (rstd) rstd[t] = r;
        for (int i = 0; i < C; i++) fk_st(out, (size_t)t * C + i, fk_ld(x, (size_t)t * C + i) * r * fk_ld(w, i));
    }
    return SKPO_OK;
}
static void fk_rope(skpo_bf16 *x, const int32_t *pos, const float *inv_freq, int T, int nh, int hs, float sign) {
    int half = hs / 2;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++)
            for (int d = 0; d < half; d++) {
                float ang = (float)pos[t] * inv_freq[d], s = sinf(ang) * sign, co = cosf(ang);
                size_t o = ((size_t)t * nh + h) * hs;
                float a = fk_ld(x, o + d), b = fk_ld(x, o + d + half);
                fk_st(x, o + d, a * co - b * s);
                fk_st(x, o + d + half, b * co + a * s);
            }
}
skpo_status skpo_cuda_rope(skpo_cuda *c, skpo_bf16 *q, skpo_bf16 *k, const int32_t *pos, const float *inv_freq, int T,
                           int nh, int nkv, int hs, int inverse, skpo_err *err) {
    if (q) fk_rope(q, pos, inv_freq, T, nh, hs, inverse ? -1.f : 1.f);
    if (k) fk_rope(k, pos, inv_freq, T, nkv, hs, inverse ? -1.f : 1.f);
    return SKPO_OK;
}
static skpo_status fk_swiglu(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *g, const skpo_bf16 *u, size_t n, skpo_err *e) {
    for (size_t i = 0; i < n; i++) {
        float a = fk_ld(g, i);
        fk_st(out, i, a / (1.f + expf(-a)) * fk_ld(u, i));
    }
    return SKPO_OK;
}
static skpo_status fk_swiglu_fused(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *gu, int T, int F, skpo_err *e) {
    for (int t = 0; t < T; t++)
        for (int f = 0; f < F; f++) {
            float a = fk_ld(gu, (size_t)t * 2 * F + f);
            fk_st(out, (size_t)t * F + f, a / (1.f + expf(-a)) * fk_ld(gu, (size_t)t * 2 * F + F + f));
        }
    return SKPO_OK;
}
static skpo_status fk_qkv_rope(skpo_cuda *c, skpo_bf16 *q, skpo_bf16 *k, skpo_bf16 *v, const skpo_bf16 *qkv,
                               const skpo_bf16 *bias, const int32_t *pos, const float *inv_freq, const int32_t *sb,
                               const int32_t *sr, int T, int nh, int nkv, int hs, int n_layers, int layer, int bs,
                               skpo_err *err) {
    int half = hs / 2, qd = nh * hs, kd = nkv * hs, W = qd + 2 * kd;
    for (int t = 0; t < T; t++) {
        const skpo_bf16 *in = qkv + (size_t)t * W;
        size_t o = sb ? (((size_t)sb[t] * n_layers + layer) * bs + sr[t]) * kd : (size_t)t * kd;
        for (int h = 0; h < nh + nkv; h++)
            for (int d = 0; d < half; d++) {
                int e0 = h * hs + d, e1 = e0 + half;
                float a = fk_ld(in, e0) + (bias ? fk_ld(bias, e0) : 0.f), bb = fk_ld(in, e1) + (bias ? fk_ld(bias, e1) : 0.f);
                float ang = (float)pos[t] * inv_freq[d], s = sinf(ang), co = cosf(ang);
                skpo_bf16 *dst = h < nh ? q + (size_t)t * qd + e0 : k + o + (e0 - qd);
                fk_st(dst, 0, a * co - bb * s);
                fk_st(dst, half, bb * co + a * s);
            }
        for (int i = 0; i < kd; i++) fk_st(v + o, i, fk_ld(in, qd + kd + i) + (bias ? fk_ld(bias, qd + kd + i) : 0.f));
    }
    return SKPO_OK;
}
static skpo_status fk_add_rmsnorm(skpo_cuda *c, skpo_bf16 *xo, skpo_bf16 *ln, float *rstd, const skpo_bf16 *xi,
                                  const float *y, const skpo_bf16 *bias, const skpo_bf16 *w, int T, int C, float eps,
                                  skpo_err *err) {
    for (size_t i = 0; i < (size_t)T * C; i++) fk_st(xo, i, fk_ld(xi, i) + y[i] + (bias ? fk_ld(bias, i % C) : 0.f));
    return ln ? fk_rmsnorm(c, ln, rstd, xo, w, T, C, eps, err) : SKPO_OK;
}
static size_t fk_row(int block, int n_layers, int layer, int bs, int row, int kv_dim) {
    return (((size_t)block * n_layers + layer) * bs + row) * kv_dim;
}
skpo_status skpo_cuda_kv_store(skpo_cuda *c, skpo_bf16 *pk, skpo_bf16 *pv, const skpo_bf16 *k, const skpo_bf16 *v,
                               const int32_t *sb, const int32_t *sr, int T, int n_layers, int layer, int bs, int kv_dim,
                               skpo_err *err) {
    for (int t = 0; t < T; t++) {
        size_t o = fk_row(sb[t], n_layers, layer, bs, sr[t], kv_dim);
        memcpy(pk + o, k + (size_t)t * kv_dim, (size_t)kv_dim * sizeof *pk);
        memcpy(pv + o, v + (size_t)t * kv_dim, (size_t)kv_dim * sizeof *pv);
    }
    return SKPO_OK;
}
static skpo_status fk_attention_paged(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *q, const skpo_bf16 *pk,
                                      const skpo_bf16 *pv, const int32_t *bt, int max_blocks, const int32_t *row_seq,
                                      const int32_t *row_pos, int N, int n_layers, int layer, int bs, int nh, int nkv,
                                      int hs, float *work, size_t work_bytes, skpo_err *err) {
    int kd = nkv * hs, G = nh / nkv;
    float scale = 1.f / sqrtf((float)hs);
    for (int r = 0; r < N; r++) {
        const int32_t *table = bt + (size_t)row_seq[r] * max_blocks;
        int len = row_pos[r] + 1;
        float *s = skpo_xmalloc((size_t)len * sizeof *s);
        for (int h = 0; h < nh; h++) {
            int hk = h / G;
            float m = -INFINITY, l = 0.f;
            for (int j = 0; j < len; j++) {
                size_t o = fk_row(table[j / bs], n_layers, layer, bs, j % bs, kd) + (size_t)hk * hs;
                float d = 0.f;
                for (int e = 0; e < hs; e++) d += fk_ld(q, (size_t)r * nh * hs + (size_t)h * hs + e) * fk_ld(pk, o + e);
                s[j] = d * scale;
                if (s[j] > m) m = s[j];
            }
            for (int j = 0; j < len; j++) l += (s[j] = expf(s[j] - m));
            for (int e = 0; e < hs; e++) {
                float a = 0.f;
                for (int j = 0; j < len; j++)
                    a += s[j] * fk_ld(pv, fk_row(table[j / bs], n_layers, layer, bs, j % bs, kd) + (size_t)hk * hs + e);
                fk_st(out, (size_t)r * nh * hs + (size_t)h * hs + e, a / l);
            }
        }
        free(s);
    }
    return SKPO_OK;
}

size_t skpo_cuda_attention_paged_work(skpo_cuda *c, int nh, int nkv, int hs) { return 1024; }

// --- graphs: while capturing, kernels are recorded (arguments by value, like
// CUDA kernel nodes) and a launch replays them, so stale-argument bugs show.

typedef struct fk_op {
    int kind;
    void *p[12];
    long n[12];
    float f;
} fk_op;
enum { FK_LINEAR, FK_LINEAR32, FK_EMBED, FK_RMSNORM, FK_SWIGLU, FK_SWIGLU_F, FK_QKV, FK_ATTN, FK_ADDNORM };
struct skpo_cuda_graph {
    fk_op *ops;
    int n;
};
static fk_op *fk_rec;  // ops being captured (one capture at a time)
static int fk_nrec, fk_caprec, fk_capturing;
static long fk_graph_launches;

static skpo_status fk_run(const fk_op *o) {
    void *const *p = o->p;
    const long *n = o->n;
    switch (o->kind) {
    case FK_LINEAR: return fk_linear(NULL, p[0], p[1], p[2], p[3], (int)n[0], (int)n[1], (int)n[2], o->f, NULL);
    case FK_LINEAR32: return fk_linear_f32out(NULL, p[0], p[1], p[2], (int)n[0], (int)n[1], (int)n[2], NULL);
    case FK_EMBED: return fk_embed(NULL, p[0], p[1], p[2], (int)n[0], (int)n[1], NULL);
    case FK_RMSNORM: return fk_rmsnorm(NULL, p[0], p[1], p[2], p[3], (int)n[0], (int)n[1], o->f, NULL);
    case FK_SWIGLU: return fk_swiglu(NULL, p[0], p[1], p[2], (size_t)n[0], NULL);
    case FK_SWIGLU_F: return fk_swiglu_fused(NULL, p[0], p[1], (int)n[0], (int)n[1], NULL);
    case FK_QKV:
        return fk_qkv_rope(NULL, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], (int)n[0], (int)n[1], (int)n[2],
                           (int)n[3], (int)n[4], (int)n[5], (int)n[6], NULL);
    case FK_ADDNORM:
        return fk_add_rmsnorm(NULL, p[0], p[1], p[2], p[3], p[4], p[5], p[6], (int)n[0], (int)n[1], o->f, NULL);
    case FK_ATTN:
        return fk_attention_paged(NULL, p[0], p[1], p[2], p[3], p[4], (int)n[0], p[5], p[6], (int)n[1], (int)n[2],
                                  (int)n[3], (int)n[4], (int)n[5], (int)n[6], (int)n[7], p[7], (size_t)n[8], NULL);
    }
    return SKPO_EUNSUPPORTED;
}

static skpo_status fk_exec(fk_op o) {
    if (!fk_capturing) return fk_run(&o);
    if (fk_nrec == fk_caprec) {
        fk_caprec = fk_caprec ? 2 * fk_caprec : 64;
        fk_rec = skpo_xrealloc(fk_rec, (size_t)fk_caprec * sizeof *fk_rec);
    }
    fk_rec[fk_nrec++] = o;
    return SKPO_OK;
}
#define FKP(x) ((void *)(uintptr_t)(x))

skpo_status skpo_cuda_linear(skpo_cuda *c, skpo_bf16 *y, const skpo_bf16 *x, const skpo_bf16 *w, const skpo_bf16 *bias,
                             int T, int K, int N, float beta, skpo_err *err) {
    return fk_exec((fk_op){FK_LINEAR, {y, FKP(x), FKP(w), FKP(bias)}, {T, K, N}, beta});
}
skpo_status skpo_cuda_linear_f32out(skpo_cuda *c, float *y, const skpo_bf16 *x, const skpo_bf16 *w, int T, int K, int N,
                                    skpo_err *err) {
    return fk_exec((fk_op){FK_LINEAR32, {y, FKP(x), FKP(w)}, {T, K, N}, 0});
}
skpo_status skpo_cuda_embed(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *wte, const int32_t *ids, int T, int C,
                            skpo_err *err) {
    return fk_exec((fk_op){FK_EMBED, {out, FKP(wte), FKP(ids)}, {T, C}, 0});
}
skpo_status skpo_cuda_rmsnorm(skpo_cuda *c, skpo_bf16 *out, float *rstd, const skpo_bf16 *x, const skpo_bf16 *w, int T,
                              int C, float eps, skpo_err *err) {
    return fk_exec((fk_op){FK_RMSNORM, {out, rstd, FKP(x), FKP(w)}, {T, C}, eps});
}
skpo_status skpo_cuda_swiglu(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *g, const skpo_bf16 *u, size_t n, skpo_err *e) {
    return fk_exec((fk_op){FK_SWIGLU, {out, FKP(g), FKP(u)}, {(long)n}, 0});
}
skpo_status skpo_cuda_swiglu_fused(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *gu, int T, int F, skpo_err *e) {
    return fk_exec((fk_op){FK_SWIGLU_F, {out, FKP(gu)}, {T, F}, 0});
}
skpo_status skpo_cuda_qkv_rope(skpo_cuda *c, skpo_bf16 *q, skpo_bf16 *k, skpo_bf16 *v, const skpo_bf16 *qkv,
                               const skpo_bf16 *bias, const int32_t *pos, const float *inv_freq, const int32_t *sb,
                               const int32_t *sr, int T, int nh, int nkv, int hs, int n_layers, int layer, int bs,
                               skpo_err *err) {
    return fk_exec((fk_op){FK_QKV, {q, k, v, FKP(qkv), FKP(bias), FKP(pos), FKP(inv_freq), FKP(sb), FKP(sr)},
                           {T, nh, nkv, hs, n_layers, layer, bs}, 0});
}
skpo_status skpo_cuda_add_rmsnorm(skpo_cuda *c, skpo_bf16 *xo, skpo_bf16 *ln, float *rstd, const skpo_bf16 *xi,
                                  const float *y, const skpo_bf16 *bias, const skpo_bf16 *w, int T, int C, float eps,
                                  skpo_err *err) {
    return fk_exec((fk_op){FK_ADDNORM, {xo, ln, rstd, FKP(xi), FKP(y), FKP(bias), FKP(w)}, {T, C}, eps});
}
skpo_status skpo_cuda_attention_paged(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *q, const skpo_bf16 *pk,
                                      const skpo_bf16 *pv, const int32_t *bt, int max_blocks, const int32_t *row_seq,
                                      const int32_t *row_pos, int N, int n_layers, int layer, int bs, int nh, int nkv,
                                      int hs, float *work, size_t work_bytes, skpo_err *err) {
    return fk_exec((fk_op){FK_ATTN, {out, FKP(q), FKP(pk), FKP(pv), FKP(bt), FKP(row_seq), FKP(row_pos), work},
                           {max_blocks, N, n_layers, layer, bs, nh, nkv, hs, (long)work_bytes}, 0});
}

// Prefill: the tiles must cover rows 0..N-1 in order, each at most
// SKPO_CUDA_PREFILL_ROWS rows of one sequence at consecutive positions (the
// kernel's contract); then the same loops as the paged kernel.
skpo_status skpo_cuda_attention_prefill(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *q, const skpo_bf16 *pk,
                                        const skpo_bf16 *pv, const int32_t *bt, int max_blocks, const int32_t *row_seq,
                                        const int32_t *row_pos, const int32_t *tiles, int ntiles, int N, int n_layers,
                                        int layer, int bs, int nh, int nkv, int hs, skpo_err *err) {
    SKPO_ASSERT(!fk_capturing);
    int next = 0;
    for (int i = 0; i < ntiles; i++) {
        int r0 = tiles[2 * i], n = tiles[2 * i + 1];
        if (r0 != next || n < 1 || n > SKPO_CUDA_PREFILL_ROWS || r0 + n > N)
            return skpo_err_set(err, SKPO_ERANGE, "fake prefill: tile %d = rows %d + %d after row %d", i, r0, n, next);
        for (int r = r0 + 1; r < r0 + n; r++)
            if (row_seq[r] != row_seq[r0] || row_pos[r] != row_pos[r - 1] + 1)
                return skpo_err_set(err, SKPO_ERANGE, "fake prefill: tile %d mixes sequences or positions at row %d", i, r);
        next = r0 + n;
    }
    if (next != N) return skpo_err_set(err, SKPO_ERANGE, "fake prefill: tiles cover %d of %d rows", next, N);
    return fk_attention_paged(c, out, q, pk, pv, bt, max_blocks, row_seq, row_pos, N, n_layers, layer, bs, nh, nkv, hs,
                              NULL, 0, err);
}

// cuDNN (cuda_dnn.h) exists on the fake only when SKPO_ATTN=cudnn asks for
// it, so the default paths stay those of the own kernels' fakes; its prefill
// checks the index contract (rows sequence by sequence, last[] increasing,
// max_q a bound, positions consecutive, table entries in the pool) and runs
// the paged loops.
int skpo_cudnn_compiled(void) { return 1; }
skpo_status skpo_cudnn_check(skpo_cuda *c, skpo_err *err) {
    const char *a = getenv("SKPO_ATTN");
    if (a && !strcmp(a, "cudnn")) return SKPO_OK;
    return skpo_err_set(err, SKPO_EUNSUPPORTED, "fake backend: cuDNN only under SKPO_ATTN=cudnn");
}
skpo_status skpo_cudnn_attention_paged(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *q, const skpo_bf16 *pool_k,
                                       const skpo_bf16 *pool_v, const int32_t *bt, int max_blocks, const int32_t *last,
                                       const int32_t *pos, int nseq, int max_q, int N, int n_layers, int layer,
                                       int n_blocks, int bs, int nh, int nkv, int hs, skpo_err *err) {
    SKPO_ASSERT(!fk_capturing);
    if (nseq < 1 || last[nseq - 1] != N - 1)
        return skpo_err_set(err, SKPO_ERANGE, "fake cudnn prefill: %d sequences end at row %d of %d", nseq,
                            nseq ? last[nseq - 1] : -1, N);
    int32_t *row_seq = skpo_xmalloc((size_t)N * sizeof *row_seq);
    skpo_status st = SKPO_OK;
    for (int b = 0, r0 = 0; b < nseq && !st; r0 = last[b++] + 1) {
        int n = last[b] + 1 - r0;
        if (n < 1 || n > max_q) st = skpo_err_set(err, SKPO_ERANGE, "fake cudnn prefill: sequence %d has %d rows (max_q %d)", b, n, max_q);
        for (int r = r0; r <= last[b] && !st; r++) {
            row_seq[r] = b;
            if (r > r0 && pos[r] != pos[r - 1] + 1) st = skpo_err_set(err, SKPO_ERANGE, "fake cudnn prefill: row %d position", r);
            if (pos[r] / bs >= max_blocks) st = skpo_err_set(err, SKPO_ERANGE, "fake cudnn prefill: row %d past the table", r);
        }
        for (int j = 0; j <= pos[last[b]] / bs && !st; j++)
            if (bt[(size_t)b * max_blocks + j] < 0 || bt[(size_t)b * max_blocks + j] >= n_blocks)
                st = skpo_err_set(err, SKPO_ERANGE, "fake cudnn prefill: block %d of sequence %d outside the pool", j, b);
    }
    if (!st)
        st = fk_attention_paged(c, out, q, pool_k, pool_v, bt, max_blocks, row_seq, pos, N, n_layers, layer, bs, nh, nkv,
                                hs, NULL, 0, err);
    free(row_seq);
    return st;
}

skpo_status skpo_cuda_capture_begin(skpo_cuda *c, skpo_err *err) {
    SKPO_ASSERT(!fk_capturing);
    fk_capturing = 1;
    fk_nrec = 0;
    return SKPO_OK;
}
skpo_status skpo_cuda_capture_end(skpo_cuda *c, skpo_cuda_graph **out, skpo_err *err) {
    SKPO_ASSERT(fk_capturing);
    fk_capturing = 0;
    skpo_cuda_graph *g = skpo_xcalloc(1, sizeof *g);
    g->n = fk_nrec;
    g->ops = skpo_xmalloc((size_t)(fk_nrec ? fk_nrec : 1) * sizeof *g->ops);
    memcpy(g->ops, fk_rec, (size_t)fk_nrec * sizeof *g->ops);
    free(fk_rec);
    fk_rec = NULL;
    fk_nrec = fk_caprec = 0;
    *out = g;
    return SKPO_OK;
}
skpo_status skpo_cuda_graph_launch(skpo_cuda *c, skpo_cuda_graph *g, skpo_err *err) {
    fk_graph_launches++;
    for (int i = 0; i < g->n; i++) {
        skpo_status s = fk_run(&g->ops[i]);
        if (s) return skpo_err_set(err, s, "fake graph node %d failed", i);
    }
    return SKPO_OK;
}
void skpo_cuda_graph_free(skpo_cuda_graph *g) {
    if (!g) return;
    free(g->ops);
    free(g);
}
