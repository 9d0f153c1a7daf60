/*
 * ops_cpu.c - the CPU reference backend (ops.h): float32, OpenBLAS sgemm for
 * the matrix products, OpenMP over rows and heads, no fast-math. Reductions
 * use `omp simd reduction`, which lets the compiler vectorise a sum without
 * licensing fast-math anywhere else.
 *
 * Attention is computed row by row (one query row x one head per work item)
 * with the softmax normaliser saved, so memory is O(N * NH) instead of
 * O(T^2); backward recomputes the probabilities (flash-attention style), in
 * two race-free passes: dq per query row, then dk/dv per key row.
 */
#include "cpu/ops.h"
#include "base/common.h"
#include "base/softmax.h"
#include "base/attn_mask.h"
#include "cpu/attn_cpu.h"
#include "cpu/gemm_cpu.h"
#include "cpu/simd_impl.h"

#include <cblas.h>
#include <malloc.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

// --- vector helpers (dot and SKPO_SIMD_CLONES: simd_impl.h) ------------------------------

__attribute__((always_inline)) static inline void axpy(float *y, float a, const float *x, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

// --- dense ---------------------------------------------------------------------------
//
// One thread pool: OpenBLAS runs single-threaded (skpo_ops_cpu sets it) inside
// our OpenMP threads, each taking a slice of the output. Mixing OpenBLAS's own
// pthread pool with OpenMP makes the two pools spin against each other: on 2
// cores batched decode ran 10x slower than single-threaded.

// Slice [*a, *b) of n for thread t of nt, in multiples of 16 where possible.
static void slice(int n, int t, int nt, int *a, int *b) {
    int per = ((n + nt - 1) / nt + 15) / 16 * 16;
    *a = t * per < n ? t * per : n;
    *b = *a + per < n ? *a + per : n;
}

// The forward product, everywhere (sampling, scoring, pi_old, training): the
// batch-invariant one of gemm_cpu.h. Every output element is one fixed-order
// chain of fused multiply-adds over K, whatever N is and wherever the row
// sits, so a sequence's logits are the same bits alone, in any batch, in a
// decode step or in a whole-sequence pass. (sgemm is not: its row tiling
// changes the rounding of edge rows.) The packed variant runs the same
// kernels on a copy made once per weight version.
static void cpu_matmul(float *out, const float *in, const float *w, const float *bias, int N, int K, int O, int acc) {
    skpo_gemm_invariant(out, in, w, NULL, bias, N, K, O, acc);
}

static void *cpu_pack(const float *w, int K, int O) { return skpo_gemm_pack(w, K, O, 1); }
static void *cpu_pack_t(const float *w, int K, int O) { return skpo_gemm_pack_t(w, O, K, 1); }
static void cpu_pack_free(void *p) { skpo_gemm_packed_free(p); }

static void cpu_matmul_packed(float *out, const float *in, const void *wp, const float *bias, int N, int K, int O,
                              int acc) {
    skpo_gemm_invariant(out, in, NULL, wp, bias, N, K, O, acc);
}

// Backward products need no invariance; they run on gemm_cpu.c's kernels
// (din through a transposed packing of w, dw through skpo_gemm_tn) when the
// batch is large enough to pay for the re-layout, else on OpenBLAS sgemm.
// Measured on Zen 4 (2 threads, CPU time, OPENBLAS_CORETYPE unset or Haswell
// alike): see docs/model.md "CPU products".
enum { OWN_BWD_MIN_ROWS = 32 };

static void cpu_matmul_backward(float *din, float *dw, float *dbias, const float *dout, const float *in,
                                const float *w, const void *wt, int N, int K, int O) {
    if (N == 0) return;
    int own = N >= OWN_BWD_MIN_ROWS;
    if (own && din) { // din (N, K) += dout (N, O) @ w (O, K)
        skpo_gemm_packed *pt = wt ? NULL : skpo_gemm_pack_t(w, O, K, 1);
        skpo_gemm_invariant(din, dout, NULL, wt ? wt : pt, NULL, N, O, K, 1);
        skpo_gemm_packed_free(pt);
    }
    if (own && dw) skpo_gemm_tn(dw, dout, in, N, K, O);
#pragma omp parallel
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads(), a, b;
        if (din && !own) { // din[:, a:b] += dout @ w[:, a:b]
            slice(K, t, nt, &a, &b);
            if (b > a)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, b - a, O, 1.0f, dout, O, w + a, K, 1.0f,
                            din + a, K);
        }
        slice(O, t, nt, &a, &b);
        if (dw && !own && b > a) // dw[a:b] += dout[:, a:b]^T @ in
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, b - a, K, N, 1.0f, dout + a, O, in, K, 1.0f,
                        dw + (size_t)a * K, K);
        if (dbias)
            for (int o = a; o < b; o++) {
                float s = 0;
                for (int n = 0; n < N; n++) s += dout[(size_t)n * O + o];
                dbias[o] += s;
            }
    }
}

// --- elementwise ---------------------------------------------------------------------------
//
// Below PAR_MIN elements an op runs on the calling thread (the grain size
// PyTorch uses too): waking the team costs more than the work, and on a busy
// machine every fork/join waits for a thread the scheduler may have parked.
enum { PAR_MIN = 1 << 15 };

static void cpu_rmsnorm(float *out, float *rstd, const float *in, const float *w, int N, int C, float eps) {
#pragma omp parallel for schedule(static) if ((size_t)N * C >= PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = in + (size_t)n * C;
        float *y = out + (size_t)n * C;
        float ss = 0;
#pragma omp simd reduction(+ : ss)
        for (int i = 0; i < C; i++) ss += x[i] * x[i];
        float r = 1.0f / sqrtf(ss / (float)C + eps);
        for (int i = 0; i < C; i++) y[i] = w[i] * (x[i] * r);
        if (rstd) rstd[n] = r;
    }
}

// y = w * x * r, r = (mean(x^2) + eps)^-1/2:
// dx = r * (w*dy) - x * r^3 / C * sum(w*dy*x); dw = sum_n dy * x * r.
static void cpu_rmsnorm_backward(float *din, float *dw, const float *dout, const float *in, const float *w,
                                 const float *rstd, int N, int C) {
    if (din) {
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *x = in + (size_t)n * C, *dy = dout + (size_t)n * C;
            float *dx = din + (size_t)n * C, r = rstd[n], dot = 0;
#pragma omp simd reduction(+ : dot)
            for (int i = 0; i < C; i++) dot += w[i] * dy[i] * x[i];
            float k = dot * r * r * r / (float)C;
            for (int i = 0; i < C; i++) dx[i] += r * w[i] * dy[i] - k * x[i];
        }
    }
    if (dw) {
        int nt = omp_get_max_threads();
        int cb = (C + nt - 1) / nt;
#pragma omp parallel for schedule(static)
        for (int t = 0; t < nt; t++) {
            int c0 = t * cb, c1 = c0 + cb < C ? c0 + cb : C;
            for (int n = 0; n < N; n++) {
                const float *x = in + (size_t)n * C, *dy = dout + (size_t)n * C;
                float r = rstd[n];
                for (int i = c0; i < c1; i++) dw[i] += dy[i] * x[i] * r;
            }
        }
    }
}

static void cpu_rope(float *x, const int *pos, const float *inv_freq, int N, int nh, int HS, int inverse) {
    int half = HS / 2;
#pragma omp parallel for schedule(static) if ((size_t)N * nh * HS >= PAR_MIN)
    for (int n = 0; n < N; n++) {
        float cs[512], sn[512];
        SKPO_ASSERT(half <= 512);
        for (int i = 0; i < half; i++) {
            float ang = (float)pos[n] * inv_freq[i]; // float32 product, as transformers computes it
            cs[i] = (float)cos((double)ang);
            sn[i] = inverse ? -(float)sin((double)ang) : (float)sin((double)ang);
        }
        for (int h = 0; h < nh; h++) {
            float *v = x + ((size_t)n * nh + h) * HS;
            for (int i = 0; i < half; i++) {
                float a = v[i], b = v[i + half];
                v[i] = a * cs[i] - b * sn[i];
                v[i + half] = b * cs[i] + a * sn[i];
            }
        }
    }
}

#if defined(__x86_64__)
T512 static void swiglu_avx512(float *h, const float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 g = _mm512_maskz_loadu_ps(m, gate + i), u = _mm512_maskz_loadu_ps(m, up + i);
        __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
        _mm512_mask_storeu_ps(h + i, m, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u));
    }
}
#endif

// h = silu(gate) * up; with AVX-512 the exponential is simd_cpu.h's (~1 ulp,
// glibc expf is not vectorised without fast-math).
static void cpu_swiglu(float *h, const float *gate, const float *up, size_t n) {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f")) {
        size_t chunk = 4096; // whole 16-lane vectors per thread
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
        for (size_t c = 0; c < n; c += chunk) swiglu_avx512(h + c, gate + c, up + c, n - c < chunk ? n - c : chunk);
        return;
    }
#endif
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        h[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

static void cpu_swiglu_backward(float *dgate, float *dup, const float *dh, const float *gate, const float *up,
                                size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i], s = 1.0f / (1.0f + expf(-g));
        float d = dh[i];
        dup[i] = d * g * s;
        dgate[i] = d * up[i] * s * (1.0f + g * (1.0f - s));
    }
}

static void cpu_embed(float *out, const float *wte, const int32_t *ids, int N, int C) {
#pragma omp parallel for schedule(static) if ((size_t)N * C >= PAR_MIN)
    for (int n = 0; n < N; n++) memcpy(out + (size_t)n * C, wte + (size_t)ids[n] * C, (size_t)C * sizeof(float));
}

// Parallel over column blocks so rows with the same id never race.
static void cpu_embed_backward(float *dwte, const float *dout, const int32_t *ids, int N, int C) {
    int nt = omp_get_max_threads();
    int cb = (C + nt - 1) / nt;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < nt; t++) {
        int c0 = t * cb, c1 = c0 + cb < C ? c0 + cb : C;
        for (int n = 0; n < N; n++) {
            float *d = dwte + (size_t)ids[n] * C;
            const float *s = dout + (size_t)n * C;
            for (int i = c0; i < c1; i++) d[i] += s[i];
        }
    }
}

// --- attention ------------------------------------------------------------------------------
//
// Which keys a query sees is base/attn_mask.h: two runs per query (the
// prefix of a packed row, then its own segment up to itself; a plain row has
// the second only) and one run of queries per key. The runs are computed once
// per call (mask_runs), so the kernels never test pairs.

static int max_seq_len(const int *seq_off, int nseq) {
    int m = 0;
    for (int s = 0; s < nseq; s++)
        if (seq_off[s + 1] - seq_off[s] > m) m = seq_off[s + 1] - seq_off[s];
    return m;
}

// pre_end, own0, q_end (N each) of skpo_mask_runs, in one allocation (free runs->pre_end).
typedef struct mask_runs { int *pre_end, *own0, *q_end; } mask_runs;

static mask_runs mask_runs_new(const int *seq_off, int nseq, const int *seg) {
    size_t N = (size_t)seq_off[nseq];
    int *m = skpo_xmalloc(3 * (N ? N : 1) * sizeof(int));
    mask_runs r = {m, m + N, m + 2 * N};
    skpo_mask_runs(seq_off, nseq, seg, r.pre_end, r.own0, r.q_end);
    return r;
}

// The keys of query row r as spans (at most two) for kv head offset ko.
static int row_spans(skpo_kv_span *sp, const float *k, const float *v, size_t ks, size_t ko, int a, int pe, int o0,
                     int r) {
    int n = 0;
    if (pe > a) sp[n++] = (skpo_kv_span){k + (size_t)a * ks + ko, v + (size_t)a * ks + ko, ks, pe - a};
    sp[n++] = (skpo_kv_span){k + (size_t)o0 * ks + ko, v + (size_t)o0 * ks + ko, ks, r - o0 + 1};
    return n;
}

// Forward attention of every row goes through skpo_attn_row's arithmetic
// (attn_cpu.h), the same per-row arithmetic as decode over the paged cache: a
// sequence's whole-sequence pass gives the bits its prefill and decode steps
// gave, and a packed continuation the bits of its unpacked sequence. Rows go
// R at a time (skpo_attn_rows: consecutive rows of one segment, which see the
// same keys but for their last few), so each key is read once for R rows.
static void cpu_attention(float *out, float *lse, const float *q, const float *k, const float *v, const int *seq_off,
                          int nseq, const int *seg, int NH, int NKV, int HS) {
    int N = seq_off[nseq], T = max_seq_len(seq_off, nseq), grp = NH / NKV, R = skpo_attn_rows_max(HS);
    float scale = 1.0f / sqrtf((float)HS);
    size_t ks = (size_t)NKV * HS, qs = (size_t)NH * HS;
    mask_runs mr = mask_runs_new(seq_off, nseq, seg);
    // Chunks of up to R rows, none across a segment: chunk c starts at row c0[c].
    int *row0 = skpo_xmalloc((size_t)(N ? N : 1) * sizeof(int)), *c0 = skpo_xmalloc((size_t)(N + 1) * sizeof(int)), nc = 0;
    for (int s = 0; s < nseq; s++)
        for (int r = seq_off[s]; r < seq_off[s + 1]; r++) {
            row0[r] = seq_off[s];
            if (r == seq_off[s] || mr.own0[r] != mr.own0[r - 1] || r - c0[nc - 1] == R) c0[nc++] = r;
        }
    c0[nc] = N;
#pragma omp parallel
    {
        float *p = skpo_xmalloc((size_t)R * (T ? T : 1) * sizeof(float)), l[4];
#pragma omp for schedule(dynamic, 8)
        for (long it = 0; it < (long)nc * NH; it++) {
            int c = (int)(it / NH), h = (int)(it % NH), r = c0[c], nr = c0[c + 1] - r;
            skpo_kv_span sp[2];
            int nsp = row_spans(sp, k, v, ks, (size_t)(h / grp) * HS, row0[r], mr.pre_end[r], mr.own0[r], r);
            size_t at = (size_t)r * NH + (size_t)h;
            skpo_attn_rows(out + at * HS, qs, q + at * HS, qs, sp, nsp, nr, HS, scale, p, (size_t)T, l);
            for (int u = 0; lse && u < nr; u++) lse[at + (size_t)u * NH] = l[u];
        }
        free(p);
    }
    free(c0);
    free(row0);
    free(mr.pre_end);
}

// dq (HS) of query row qr over the keys k[0..n) (row stride ks):
// dS_j = P_j (dO.v_j - D), dq += scale sum_j dS_j k_j.
SKPO_SIMD_CLONES
static void attend_bwd_q(float *dqr, const float *qr, const float *dor, const float *k, const float *v, size_t ks,
                         int n, int HS, float scale, float l, float D) {
    for (int j = 0; j < n; j++) {
        const float *kj = k + (size_t)j * ks, *vj = v + (size_t)j * ks;
        float P = expf(dot(qr, kj, HS) * scale - l);
        axpy(dqr, P * (dot(dor, vj, HS) - D) * scale, kj, HS);
    }
}

// dk, dv (HS) of key row j from query rows i in [j, s1) of heads h0 .. h0+grp.
SKPO_SIMD_CLONES
static void attend_bwd_kv(float *dkj, float *dvj, const float *kj, const float *vj, const float *q, const float *dout,
                          const float *lse, const float *D, int j, int s1, int h0, int grp, int NH, int HS,
                          float scale) {
    memset(dkj, 0, (size_t)HS * sizeof(float));
    memset(dvj, 0, (size_t)HS * sizeof(float));
    for (int h = h0; h < h0 + grp; h++)
        for (int i = j; i < s1; i++) {
            size_t ih = (size_t)i * NH + h;
            const float *qi = q + ih * HS, *doi = dout + ih * HS;
            float P = expf(dot(qi, kj, HS) * scale - lse[ih]);
            axpy(dkj, P * (dot(doi, vj, HS) - D[ih]) * scale, qi, HS);
            axpy(dvj, P, doi, HS);
        }
}

SKPO_SIMD_CLONES
static void dot_rows(float *D, const float *a, const float *b, long n, int HS) {
    for (long it = 0; it < n; it++) D[it] = dot(a + it * HS, b + it * HS, HS);
}

// P_ij = exp(q_i.k_j * scale - lse_i); dS_ij = P_ij (dO_i.v_j - D_i), D_i = dO_i.O_i;
// dq_i = scale * sum_j dS_ij k_j; dk_j = scale * sum_i dS_ij q_i; dv_j = sum_i P_ij dO_i.
// The AVX-512 tiles (attn_cpu.h) take packed rows too: they mask each tile
// by the runs and skip the tiles no pair of which is visible.
static void cpu_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *out,
                                   const float *lse, const float *q, const float *k, const float *v,
                                   const int *seq_off, int nseq, const int *seg, int NH, int NKV, int HS) {
    int N = seq_off[nseq], grp = NH / NKV;
    float scale = 1.0f / sqrtf((float)HS);
    size_t ks = (size_t)NKV * HS;
    float *D = skpo_xmalloc((size_t)(N ? N : 1) * NH * sizeof(float));
    mask_runs mr = mask_runs_new(seq_off, nseq, seg);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < N; r++) dot_rows(D + (size_t)r * NH, dout + (size_t)r * NH * HS, out + (size_t)r * NH * HS, NH, HS);
    if (skpo_attn_fast_ok(HS)) { // tiles per (row, kv head): attn_cpu.h
        size_t nscr = 0; // floats of the largest row's key blocks
        for (int s = 0; s < nseq; s++) {
            skpo_attn_runs ru = {mr.pre_end + seq_off[s], mr.own0 + seq_off[s], seq_off[s]};
            size_t f = skpo_attn_bwd_scratch(seq_off[s + 1] - seq_off[s], seg ? &ru : NULL, HS);
            nscr = f > nscr ? f : nscr;
        }
        // Longest rows first: a packed row is a whole group, several times a
        // plain row's work, and taken last it would leave the other threads idle.
        int *order = skpo_xmalloc((size_t)(nseq ? nseq : 1) * sizeof(int));
        for (int s = 0; s < nseq; s++) order[s] = s;
        for (int a = 1; a < nseq; a++) // insertion sort, stable: rows are few
            for (int b = a; b > 0 && seq_off[order[b] + 1] - seq_off[order[b]] >
                                          seq_off[order[b - 1] + 1] - seq_off[order[b - 1]]; b--) {
                int t = order[b];
                order[b] = order[b - 1], order[b - 1] = t;
            }
#pragma omp parallel
        {
            float *scr = skpo_xmalloc(nscr * sizeof(float) + 64);
#pragma omp for schedule(dynamic, 1)
            for (long it = 0; it < (long)nseq * NKV; it++) {
                int s = order[it / NKV], g = (int)(it % NKV), s0 = seq_off[s];
                size_t qo = (size_t)s0 * NH * HS, ko = (size_t)s0 * ks;
                skpo_attn_runs ru = {mr.pre_end + s0, mr.own0 + s0, s0};
                skpo_attn_bwd_group(dq + qo, dk + ko, dv + ko, dout + qo, lse + (size_t)s0 * NH, D + (size_t)s0 * NH,
                                    q + qo, k + ko, v + ko, seq_off[s + 1] - s0, seg ? &ru : NULL, NH, NKV, g, HS,
                                    scale, scr);
            }
            free(scr);
        }
        free(order);
        free(mr.pre_end);
        free(D);
        return;
    }
    int *row0 = skpo_xmalloc((size_t)(N ? N : 1) * sizeof(int));
    for (int s = 0; s < nseq; s++)
        for (int r = seq_off[s]; r < seq_off[s + 1]; r++) row0[r] = seq_off[s];
#pragma omp parallel for schedule(dynamic, 8)
    for (long it = 0; it < (long)N * NH; it++) {
        int r = (int)(it / NH), h = (int)(it % NH), g = h / grp, a = row0[r], pe = mr.pre_end[r], o0 = mr.own0[r];
        size_t ko = (size_t)g * HS;
        memset(dq + it * HS, 0, (size_t)HS * sizeof(float));
        if (pe > a)
            attend_bwd_q(dq + it * HS, q + it * HS, dout + it * HS, k + (size_t)a * ks + ko, v + (size_t)a * ks + ko,
                         ks, pe - a, HS, scale, lse[it], D[it]);
        attend_bwd_q(dq + it * HS, q + it * HS, dout + it * HS, k + (size_t)o0 * ks + ko, v + (size_t)o0 * ks + ko, ks,
                     r - o0 + 1, HS, scale, lse[it], D[it]);
    }
#pragma omp parallel for schedule(dynamic, 8)
    for (long it = 0; it < (long)N * NKV; it++) {
        int j = (int)(it / NKV), g = (int)(it % NKV);
        attend_bwd_kv(dk + it * HS, dv + it * HS, k + it * HS, v + it * HS, q, dout, lse, D, j, mr.q_end[j], g * grp,
                      grp, NH, HS, scale);
    }
    free(row0);
    free(mr.pre_end);
    free(D);
}

// Each row's keys as spans, one per cache block (attn_cpu.h).
static void cpu_attention_paged(float *out, const float *q, int N, const int *pos, const int *const *blocks,
                                const skpo_paged_kv *kv, int layer, int NH, int NKV, int HS) {
    int T = 0, grp = NH / NKV, bs = kv->block_size;
    for (int r = 0; r < N; r++)
        if (pos[r] + 1 > T) T = pos[r] + 1;
    float scale = 1.0f / sqrtf((float)HS);
    size_t lstride = (size_t)bs * kv->kv_dim, bstride = (size_t)kv->n_layers * lstride;
    int maxsp = (T + bs - 1) / bs;
#pragma omp parallel
    {
        float *p = skpo_xmalloc((size_t)(T ? T : 1) * sizeof(float));
        skpo_kv_span *sp = skpo_xmalloc((size_t)(maxsp ? maxsp : 1) * sizeof *sp);
#pragma omp for schedule(dynamic, 4)
        for (long it = 0; it < (long)N * NH; it++) {
            int r = (int)(it / NH), h = (int)(it % NH), nsp = 0;
            size_t off = (size_t)layer * lstride + (size_t)(h / grp) * HS;
            for (int j0 = 0; j0 <= pos[r]; j0 += bs, nsp++) {
                size_t b = (size_t)blocks[r][j0 / bs] * bstride + off;
                sp[nsp] = (skpo_kv_span){kv->pool_k + b, kv->pool_v + b, (size_t)kv->kv_dim,
                                         pos[r] - j0 + 1 < bs ? pos[r] - j0 + 1 : bs};
            }
            skpo_attn_row(out + it * HS, q + it * HS, sp, nsp, HS, scale, p);
        }
        free(sp);
        free(p);
    }
}

// --- log-probs ---------------------------------------------------------------------------------

// The sampler's log-softmax (base/softmax.h), so a scored token's log-prob is
// the float the sampler wrote for it. Entropy from the same exponentials:
// H = log(sum) - sum_i e_i x_i / sum, x_i = (logits_i - m) / T.
static void cpu_logprob(float *logp, float *ent, float *lse, const float *logits, const int32_t *tgt, int N, int V,
                        float temperature) {
    float inv = skpo_inv_temperature(temperature);
#pragma omp parallel if (N > 1)
    {
        float *e = skpo_xmalloc((size_t)V * sizeof(float));
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *z = logits + (size_t)n * V;
            float m = skpo_logits_max(z, V);
            if (isnan(m)) { // a NaN or +Inf logit: let the caller's finiteness check report it
                logp[n] = NAN;
                if (ent) ent[n] = NAN;
                if (lse) lse[n] = NAN;
                continue;
            }
            double s = skpo_softmax_exp(e, z, V, m, inv), ls = log(s);
            logp[n] = skpo_softmax_logp(z, tgt[n], m, inv, s);
            if (ent) {
                double sx = 0;
#pragma omp simd reduction(+ : sx)
                for (int i = 0; i < V; i++) sx += (double)(e[i] * ((z[i] - m) * inv));
                ent[n] = (float)(ls - sx / s);
            }
            if (lse) lse[n] = (float)((double)(m * inv) + ls);
        }
        free(e);
    }
}

// With z = logits/T, logp_j = z_j - lse, H = -sum p log p:
// dz_j = dlogp (1[j = y] - p_j) - dH p_j (logp_j + H); dlogits = dz / T.
static void cpu_logprob_backward(float *logits, const int32_t *tgt, const float *lse, const float *ent,
                                 const float *dlogp, const float *dent, int N, int V, float temperature) {
    float it = 1.0f / temperature;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *z = logits + (size_t)n * V;
        float l = lse[n], dl = dlogp ? dlogp[n] : 0.0f, dh = dent ? dent[n] : 0.0f, H = ent ? ent[n] : 0.0f;
        for (int i = 0; i < V; i++) {
            float lp = z[i] * it - l, p = expf(lp);
            z[i] = (-dl * p - dh * p * (lp + H)) * it;
        }
        z[tgt[n]] += dl * it;
    }
}

static const skpo_ops CPU_OPS = {
    .name = "cpu",
    .matmul = cpu_matmul,
    .matmul_backward = cpu_matmul_backward,
    .rmsnorm = cpu_rmsnorm,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .rope = cpu_rope,
    .swiglu = cpu_swiglu,
    .swiglu_backward = cpu_swiglu_backward,
    .embed = cpu_embed,
    .embed_backward = cpu_embed_backward,
    .attention = cpu_attention,
    .attention_backward = cpu_attention_backward,
    .attention_paged = cpu_attention_paged,
    .logprob = cpu_logprob,
    .logprob_backward = cpu_logprob_backward,
    .pack = cpu_pack,
    .pack_t = cpu_pack_t,
    .pack_free = cpu_pack_free,
    .matmul_packed = cpu_matmul_packed,
};

const skpo_ops *skpo_ops_cpu(void) {
    openblas_set_num_threads(1); // see "dense" above: parallelism comes from our OpenMP slices
#if defined(__GLIBC__)
    // A pass allocates and frees activations of tens to hundreds of MiB per
    // micro-batch; above glibc's default mmap threshold each one is a fresh
    // mapping whose every page faults and is zeroed again (~3% of a 125M
    // update). Keeping them in the heap reuses the pages.
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
    return &CPU_OPS;
}
