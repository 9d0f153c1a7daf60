// fake_cuda_train.h - host-memory stand-ins for the training kernels of
// cuda.h and cuda_train.h (backward ops, chunked log-prob, AdamW, sums of
// squares, row gather/scatter), for test_cuda_train_fake.c only. Written
// from each kernel's contract as core/cuda/*.cu implements it, including
// which outputs are overwritten (dx of linear/rmsnorm backward, dq) and which
// accumulate (dW, dbias, dK/dV, embedding rows): that is what the host side
// of core/model/model_cuda_train.c must get right. bf16 storage, fp32 math.
// Include after fake_cuda.h.
#include "cuda/cuda_train.h"

// Page-locking: counted (the offload test checks what is locked, and that
// everything locked is unlocked again).
static size_t fake_locked_bytes;
static long fake_locked;
skpo_status skpo_cuda_host_register(void *p, size_t bytes, skpo_err *err) {
    fake_locked_bytes += bytes;
    fake_locked++;
    return SKPO_OK;
}
void skpo_cuda_host_unregister(void *p) {
    if (p) fake_locked--;
}

skpo_status skpo_cuda_add(skpo_cuda *c, skpo_bf16 *y, const skpo_bf16 *x, size_t n, skpo_err *err) {
    for (size_t i = 0; i < n; i++) fk_st(y, i, fk_ld(y, i) + fk_ld(x, i));
    return SKPO_OK;
}

skpo_status skpo_cuda_d2d(skpo_cuda *c, void *dst, const void *src, size_t bytes, skpo_err *err) {
    memmove(dst, src, bytes);
    return SKPO_OK;
}

// The sequence of each row, from the offsets.
static int fk_seq_start(const int32_t *ss, int nseq, int t) {
    int s = 0;
    while (s + 1 < nseq && ss[s + 1] <= t) s++;
    return ss[s];
}

// Key j is hidden from query t of a packed batch (cuda.h skpo_cuda_runs):
// between t's prefix run and its own run.
static int fk_hidden(const skpo_cuda_runs *ru, int t, int j) { return ru && j >= ru->pre_end[t] && j < ru->own0[t]; }

skpo_status skpo_cuda_attention_runs(skpo_cuda *c, skpo_bf16 *out, float *lse, const skpo_bf16 *q, const skpo_bf16 *k,
                                     const skpo_bf16 *v, const int32_t *seq_start, int nseq, const skpo_cuda_runs *ru,
                                     int T, int nh, int nkv, int hs, skpo_err *err) {
    int qd = nh * hs, kd = nkv * hs;
    float scale = 1.f / sqrtf((float)hs);
    float *s = skpo_xmalloc((size_t)(T ? T : 1) * sizeof *s);
    for (int t = 0; t < T; t++) {
        int s0 = fk_seq_start(seq_start, nseq, t);
        for (int h = 0; h < nh; h++) {
            int hk = h / (nh / nkv);
            float m = -INFINITY, l = 0.f;
            for (int j = s0; j <= t; j++) {
                float d = 0.f;
                if (fk_hidden(ru, t, j)) {
                    s[j] = -INFINITY;
                    continue;
                }
                for (int e = 0; e < hs; e++)
                    d += fk_ld(q, (size_t)t * qd + h * hs + e) * scale * fk_ld(k, (size_t)j * kd + hk * hs + e);
                s[j] = d;
                m = fmaxf(m, d);
            }
            for (int j = s0; j <= t; j++) l += (s[j] = expf(s[j] - m));
            for (int e = 0; e < hs; e++) {
                float a = 0.f;
                for (int j = s0; j <= t; j++) a += s[j] * fk_ld(v, (size_t)j * kd + hk * hs + e);
                fk_st(out, (size_t)t * qd + h * hs + e, a / l);
            }
            if (lse) lse[(size_t)t * nh + h] = m + logf(l);
        }
    }
    free(s);
    return SKPO_OK;
}

skpo_status skpo_cuda_attention(skpo_cuda *c, skpo_bf16 *out, float *lse, const skpo_bf16 *q, const skpo_bf16 *k,
                                const skpo_bf16 *v, const int32_t *seq_start, int nseq, int T, int nh, int nkv, int hs,
                                skpo_err *err) {
    return skpo_cuda_attention_runs(c, out, lse, q, k, v, seq_start, nseq, NULL, T, nh, nkv, hs, err);
}

skpo_status skpo_cuda_attention_backward_runs(skpo_cuda *c, skpo_bf16 *dq, float *dk, float *dv,
                                              const skpo_bf16 *dout, const skpo_bf16 *out, const float *lse,
                                              const skpo_bf16 *q, const skpo_bf16 *k, const skpo_bf16 *v,
                                              const int32_t *seq_start, int nseq, const skpo_cuda_runs *ru, int T,
                                              int nh, int nkv, int hs, skpo_err *err) {
    int qd = nh * hs, kd = nkv * hs;
    float scale = 1.f / sqrtf((float)hs);
    float *dqr = skpo_xmalloc((size_t)hs * sizeof *dqr);
    for (int t = 0; t < T; t++) {
        int s0 = fk_seq_start(seq_start, nseq, t);
        for (int h = 0; h < nh; h++) {
            int hk = h / (nh / nkv);
            size_t o = (size_t)t * qd + (size_t)h * hs;
            float D = 0.f, L = lse[(size_t)t * nh + h];
            for (int e = 0; e < hs; e++) D += fk_ld(dout, o + e) * fk_ld(out, o + e), dqr[e] = 0.f;
            for (int j = s0; j <= t; j++) {
                if (fk_hidden(ru, t, j)) continue;
                size_t kr = (size_t)j * kd + (size_t)hk * hs;
                float sc = 0.f, dp = 0.f;
                for (int e = 0; e < hs; e++) sc += fk_ld(q, o + e) * fk_ld(k, kr + e), dp += fk_ld(dout, o + e) * fk_ld(v, kr + e);
                float p = expf(sc * scale - L), ds = p * (dp - D);
                for (int e = 0; e < hs; e++) {
                    dqr[e] += ds * fk_ld(k, kr + e) * scale;
                    dk[kr + e] += ds * fk_ld(q, o + e) * scale;
                    dv[kr + e] += p * fk_ld(dout, o + e);
                }
            }
            for (int e = 0; e < hs; e++) fk_st(dq, o + e, dqr[e]);
        }
    }
    free(dqr);
    return SKPO_OK;
}

skpo_status skpo_cuda_attention_backward(skpo_cuda *c, skpo_bf16 *dq, float *dk, float *dv, const skpo_bf16 *dout,
                                         const skpo_bf16 *out, const float *lse, const skpo_bf16 *q, const skpo_bf16 *k,
                                         const skpo_bf16 *v, const int32_t *seq_start, int nseq, int T, int nh, int nkv,
                                         int hs, skpo_err *err) {
    return skpo_cuda_attention_backward_runs(c, dq, dk, dv, dout, out, lse, q, k, v, seq_start, nseq, NULL, T, nh, nkv,
                                             hs, err);
}

// Row statistics of z = logits / temp: logZ and E[z].
static void fk_row_lse(const skpo_bf16 *z, int V, float inv_t, float *logz, float *ez) {
    float m = -INFINITY, s = 0.f, w = 0.f;
    for (int i = 0; i < V; i++) m = fmaxf(m, fk_ld(z, i) * inv_t);
    for (int i = 0; i < V; i++) {
        float zi = fk_ld(z, i) * inv_t, e = expf(zi - m);
        s += e, w += e * zi;
    }
    *logz = m + logf(s);
    *ez = w / s;
}

skpo_status skpo_cuda_logprob(skpo_cuda *c, float *logp, float *entropy, const skpo_bf16 *logits, const int32_t *target,
                              int T, int V, float temp, skpo_err *err) {
    for (int t = 0; t < T; t++) {
        const skpo_bf16 *z = logits + (size_t)t * V;
        float logz, ez;
        fk_row_lse(z, V, 1.f / temp, &logz, &ez);
        logp[t] = fk_ld(z, target[t]) / temp - logz;
        if (entropy) entropy[t] = logz - ez;
    }
    return SKPO_OK;
}

skpo_status skpo_cuda_logprob_backward(skpo_cuda *c, skpo_bf16 *dlogits, const skpo_bf16 *logits, const int32_t *target,
                                       const float *dlogp, const float *dent, int T, int V, float temp, skpo_err *err) {
    float inv_t = 1.f / temp;
    for (int t = 0; t < T; t++) {
        const skpo_bf16 *z = logits + (size_t)t * V;
        float logz, ez, gl = dlogp ? dlogp[t] : 0.f, ge = dent ? dent[t] : 0.f;
        fk_row_lse(z, V, inv_t, &logz, &ez);   // before the row is overwritten (in place is allowed)
        for (int i = 0; i < V; i++) {
            float zi = fk_ld(z, i) * inv_t, p = expf(zi - logz);
            float d = gl * ((i == target[t] ? 1.f : 0.f) - p) - ge * p * (zi - ez);
            fk_st(dlogits, (size_t)t * V + i, d * inv_t);
        }
    }
    return SKPO_OK;
}

skpo_status skpo_cuda_linear_dx(skpo_cuda *c, skpo_bf16 *dx, const skpo_bf16 *dy, const skpo_bf16 *w, int T, int K, int N,
                                float beta, skpo_err *err) {
    for (int t = 0; t < T; t++)
        for (int k = 0; k < K; k++) {
            float a = 0.f;
            for (int n = 0; n < N; n++) a += fk_ld(dy, (size_t)t * N + n) * fk_ld(w, (size_t)n * K + k);
            if (beta != 0.f) a += beta * fk_ld(dx, (size_t)t * K + k);
            fk_st(dx, (size_t)t * K + k, a);
        }
    return SKPO_OK;
}

skpo_status skpo_cuda_linear_backward(skpo_cuda *c, skpo_bf16 *dx, float *dw, float *dbias, const skpo_bf16 *dy,
                                      const skpo_bf16 *x, const skpo_bf16 *w, int T, int K, int N, skpo_err *err) {
    if (dx) skpo_cuda_linear_dx(c, dx, dy, w, T, K, N, 0.f, err);   // overwritten
    if (dw)
        for (int n = 0; n < N; n++)
            for (int k = 0; k < K; k++) {
                float a = 0.f;
                for (int t = 0; t < T; t++) a += fk_ld(dy, (size_t)t * N + n) * fk_ld(x, (size_t)t * K + k);
                dw[(size_t)n * K + k] += a;
            }
    if (dbias)
        for (int n = 0; n < N; n++) {
            float a = 0.f;
            for (int t = 0; t < T; t++) a += fk_ld(dy, (size_t)t * N + n);
            dbias[n] += a;
        }
    return SKPO_OK;
}

skpo_status skpo_cuda_rmsnorm_backward(skpo_cuda *c, skpo_bf16 *dx, float *dw, const skpo_bf16 *dy, const skpo_bf16 *x,
                                       const skpo_bf16 *w, const float *rstd, int T, int C, skpo_err *err) {
    for (int t = 0; t < T; t++) {
        size_t row = (size_t)t * C;
        float r = rstd[t], dot = 0.f;
        for (int i = 0; i < C; i++) dot += fk_ld(dy, row + i) * fk_ld(w, i) * fk_ld(x, row + i);
        dot /= (float)C;
        for (int i = 0; i < C; i++) {
            float xi = fk_ld(x, row + i), gi = fk_ld(dy, row + i);
            fk_st(dx, row + i, r * fk_ld(w, i) * gi - r * r * r * xi * dot);
            dw[i] += gi * xi * r;
        }
    }
    return SKPO_OK;
}

skpo_status skpo_cuda_swiglu_backward(skpo_cuda *c, skpo_bf16 *dgate, skpo_bf16 *dup, const skpo_bf16 *dout,
                                      const skpo_bf16 *gate, const skpo_bf16 *up, size_t n, skpo_err *err) {
    for (size_t i = 0; i < n; i++) {
        float a = fk_ld(gate, i), b = fk_ld(up, i), d = fk_ld(dout, i), s = 1.f / (1.f + expf(-a));
        fk_st(dgate, i, d * b * s * (1.f + a * (1.f - s)));
        fk_st(dup, i, d * a * s);
    }
    return SKPO_OK;
}

skpo_status skpo_cuda_swiglu_fused_backward(skpo_cuda *c, skpo_bf16 *dgu, const skpo_bf16 *dh, const skpo_bf16 *gu,
                                            int T, int F, skpo_err *err) {
    for (int t = 0; t < T; t++)
        for (int f = 0; f < F; f++) {
            size_t g = (size_t)t * 2 * F + f;
            float a = fk_ld(gu, g), b = fk_ld(gu, g + F), d = fk_ld(dh, (size_t)t * F + f), s = 1.f / (1.f + expf(-a));
            fk_st(dgu, g, d * b * s * (1.f + a * (1.f - s)));
            fk_st(dgu, g + F, d * a * s);
        }
    return SKPO_OK;
}

// [R^-1 dq | R^-1 dk | dv] per row (the inverse rotation: angle -pos inv_freq).
skpo_status skpo_cuda_qkv_rope_backward(skpo_cuda *c, skpo_bf16 *dqkv, const skpo_bf16 *dq, const skpo_bf16 *dk,
                                        const skpo_bf16 *dv, const int32_t *pos, const float *inv_freq, int T, int nh,
                                        int nkv, int hs, skpo_err *err) {
    int half = hs / 2, qd = nh * hs, kd = nkv * hs, W = qd + 2 * kd;
    for (int t = 0; t < T; t++) {
        skpo_bf16 *out = dqkv + (size_t)t * W;
        for (int h = 0; h < nh + nkv; h++)
            for (int d = 0; d < half; d++) {
                int e0 = h * hs + d;
                const skpo_bf16 *src = h < nh ? dq + (size_t)t * qd + e0 : dk + (size_t)t * kd + (e0 - qd);
                float a = fk_ld(src, 0), b = fk_ld(src, half), ang = (float)pos[t] * inv_freq[d], s = sinf(ang), co = cosf(ang);
                fk_st(out, e0, a * co + b * s);
                fk_st(out, e0 + half, b * co - a * s);
            }
        memcpy(out + qd + kd, dv + (size_t)t * kd, (size_t)kd * sizeof *out);
    }
    return SKPO_OK;
}

skpo_status skpo_cuda_embed_backward(skpo_cuda *c, float *dwte, const skpo_bf16 *dout, const int32_t *ids, int T, int C,
                                     skpo_err *err) {
    for (int t = 0; t < T; t++)
        for (int i = 0; i < C; i++) dwte[(size_t)ids[t] * C + i] += fk_ld(dout, (size_t)t * C + i);
    return SKPO_OK;
}

// The host must hand the rows sorted by (id, row) with every run of one id
// starting at seg: checked, then each run summed in that order and added once.
skpo_status skpo_cuda_embed_backward_sorted(skpo_cuda *c, float *dwte, const skpo_bf16 *dout, const int32_t *ids,
                                            const int32_t *order, const int32_t *seg, int nseg, int C, skpo_err *err) {
    for (int s = 0; s < nseg; s++)
        for (int r = seg[s]; r < seg[s + 1]; r++) {
            int same = r == seg[s] || (ids[order[r]] == ids[order[r - 1]] && order[r] > order[r - 1]);
            int fresh = r != seg[s] || s == 0 || ids[order[r]] > ids[order[r - 1]];
            if (!same || !fresh || seg[s + 1] <= seg[s])
                return skpo_err_set(err, SKPO_ERANGE, "fake embed_backward_sorted: row %d of run %d out of order", r, s);
        }
    float *acc = skpo_xmalloc((size_t)(C ? C : 1) * sizeof *acc);
    for (int s = 0; s < nseg; s++) {
        for (int i = 0; i < C; i++) acc[i] = 0.f;
        for (int r = seg[s]; r < seg[s + 1]; r++)
            for (int i = 0; i < C; i++) acc[i] += fk_ld(dout, (size_t)order[r] * C + i);
        for (int i = 0; i < C; i++) dwte[(size_t)ids[order[seg[s]]] * C + i] += acc[i];
    }
    free(acc);
    return SKPO_OK;
}

// dk, dv overwritten; work is scratch (scribbled on).
skpo_status skpo_cuda_attention_backward_det(skpo_cuda *c, skpo_bf16 *dq, float *dk, float *dv, const skpo_bf16 *dout,
                                             const skpo_bf16 *out, const float *lse, const skpo_bf16 *q,
                                             const skpo_bf16 *k, const skpo_bf16 *v, const int32_t *seq_of,
                                             const int32_t *seq_start, int T, int nh, int nkv, int hs, float *work,
                                             skpo_err *err) {
    int nseq = T ? seq_of[T - 1] + 1 : 0;
    memset(dk, 0, (size_t)T * nkv * hs * 4);
    memset(dv, 0, (size_t)T * nkv * hs * 4);
    for (size_t i = 0; i < (size_t)T * nh; i++) work[i] = NAN;
    return skpo_cuda_attention_backward(c, dq, dk, dv, dout, out, lse, q, k, v, seq_start, nseq, T, nh, nkv, hs, err);
}

skpo_status skpo_cuda_attention_backward_det_runs(skpo_cuda *c, skpo_bf16 *dq, float *dk, float *dv,
                                                  const skpo_bf16 *dout, const skpo_bf16 *out, const float *lse,
                                                  const skpo_bf16 *q, const skpo_bf16 *k, const skpo_bf16 *v,
                                                  const int32_t *seq_of, const int32_t *seq_start,
                                                  const skpo_cuda_runs *ru, int T, int nh, int nkv, int hs,
                                                  float *work, skpo_err *err) {
    int nseq = T ? seq_of[T - 1] + 1 : 0;
    memset(dk, 0, (size_t)T * nkv * hs * 4);
    memset(dv, 0, (size_t)T * nkv * hs * 4);
    for (size_t i = 0; i < (size_t)T * nh; i++) work[i] = NAN;
    return skpo_cuda_attention_backward_runs(c, dq, dk, dv, dout, out, lse, q, k, v, seq_start, nseq, ru, T, nh, nkv,
                                             hs, err);
}

skpo_status skpo_cuda_adamw(skpo_cuda *c, float *w, skpo_bf16 *wb, float *m, float *v, const float *g, size_t n, float lr,
                            float b1, float b2, float eps, float wd, int step, float gscale, skpo_err *err) {
    float bc1 = 1.f - powf(b1, (float)step), bc2 = 1.f - powf(b2, (float)step);
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * gscale, wi = w[i] * (1.f - lr * wd);
        float mi = b1 * m[i] + (1.f - b1) * gi, vi = b2 * v[i] + (1.f - b2) * gi * gi;
        wi -= lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
        m[i] = mi, v[i] = vi, w[i] = wi;
        if (wb) fk_st(wb, i, wi);
    }
    return SKPO_OK;
}

// The plan of the one-launch AdamW: its segment table, each segment stepped as skpo_cuda_adamw.
struct skpo_cuda_adamw_plan {
    skpo_adamw_seg *segs;
    int n;
};
skpo_status skpo_cuda_adamw_plan_new(skpo_cuda *c, const skpo_adamw_seg *segs, int nseg, skpo_cuda_adamw_plan **out,
                                     skpo_err *err) {
    skpo_cuda_adamw_plan *p = skpo_xcalloc(1, sizeof *p);
    p->segs = skpo_xmalloc((size_t)(nseg ? nseg : 1) * sizeof *segs);
    memcpy(p->segs, segs, (size_t)nseg * sizeof *segs);
    p->n = nseg;
    *out = p;
    return SKPO_OK;
}
void skpo_cuda_adamw_plan_free(skpo_cuda_adamw_plan *p) {
    if (!p) return;
    free(p->segs);
    free(p);
}
skpo_status skpo_cuda_adamw_multi(skpo_cuda *c, const skpo_cuda_adamw_plan *p, float *w, skpo_bf16 *wb, float *m,
                                  float *v, const float *g, float lr, float b1, float b2, float eps, int step,
                                  float gscale, skpo_err *err) {
    for (int i = 0; i < p->n; i++) {
        const skpo_adamw_seg *s = &p->segs[i];
        skpo_cuda_adamw(c, w + s->x, wb ? wb + s->x : NULL, m + s->mo, v + s->mo, g + s->x, s->n, lr, b1, b2, eps, s->wd,
                        step, gscale, err);
    }
    return SKPO_OK;
}

skpo_status skpo_cuda_sumsq_f64(skpo_cuda *c, double *host_out, const float *g, size_t n, skpo_err *err) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)g[i] * g[i];
    *host_out = s;
    return SKPO_OK;
}

skpo_status skpo_cuda_rows_gather(skpo_cuda *c, skpo_bf16 *dst, const skpo_bf16 *src, const int32_t *rows, int n, int C,
                                  skpo_err *err) {
    for (int i = 0; i < n; i++) memcpy(dst + (size_t)i * C, src + (size_t)rows[i] * C, (size_t)C * sizeof *dst);
    return SKPO_OK;
}

skpo_status skpo_cuda_rows_scatter(skpo_cuda *c, skpo_bf16 *dst, const skpo_bf16 *src, const int32_t *rows, int n, int C,
                                   skpo_err *err) {
    for (int i = 0; i < n; i++) memcpy(dst + (size_t)rows[i] * C, src + (size_t)i * C, (size_t)C * sizeof *dst);
    return SKPO_OK;
}

skpo_status skpo_cuda_rows_scatter_add(skpo_cuda *c, float *dst, const skpo_bf16 *src, const int32_t *rows,
                                       const int32_t *dup, int rounds, int n, int C, skpo_err *err) {
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < n; i++)
            if (dup[i] == r)
                for (int e = 0; e < C; e++) dst[(size_t)rows[i] * C + e] += fk_ld(src, (size_t)i * C + e);
    return SKPO_OK;
}

skpo_status skpo_cuda_colsum(skpo_cuda *c, float *dst, const skpo_bf16 *a, const skpo_bf16 *b, const float *r, int T,
                             int N, float *scratch, skpo_err *err) {
    for (int n = 0; n < N; n++) {
        float s = 0.f;
        for (int t = 0; t < T; t++) {
            float v = fk_ld(a, (size_t)t * N + n);
            if (b) v *= fk_ld(b, (size_t)t * N + n) * r[t];
            s += v;
        }
        dst[n] += s;
    }
    for (size_t i = 0; i < (size_t)SKPO_COL_PARTS * N; i++) scratch[i] = NAN;   // scratch only: clobbered
    return SKPO_OK;
}

skpo_status skpo_cuda_rmsnorm_backward_acc(skpo_cuda *c, skpo_bf16 *dx, const skpo_bf16 *dy, const skpo_bf16 *x,
                                           const skpo_bf16 *w, const float *rstd, int T, int C, skpo_err *err) {
    for (int t = 0; t < T; t++) {
        size_t row = (size_t)t * C;
        float r = rstd[t], dot = 0.f;
        for (int i = 0; i < C; i++) dot += fk_ld(dy, row + i) * fk_ld(w, i) * fk_ld(x, row + i);
        dot /= (float)C;
        for (int i = 0; i < C; i++)
            fk_st(dx, row + i, fk_ld(dx, row + i) + r * fk_ld(w, i) * fk_ld(dy, row + i) - r * r * r * fk_ld(x, row + i) * dot);
    }
    return SKPO_OK;
}

// The flash kernels' contract on the same loops (so the fake run covers the
// host wiring of SKPO_ATTN=flash): dk / dv come out in bf16, overwritten.
skpo_status skpo_cuda_flash_seq_of(skpo_cuda *c, int32_t *seq_of, const int32_t *seq_start, int nseq, skpo_err *err) {
    for (int s = 0; s < nseq; s++)
        for (int t = seq_start[s]; t < seq_start[s + 1]; t++) seq_of[t] = s;
    return SKPO_OK;
}

skpo_status skpo_cuda_flash_attention(skpo_cuda *c, skpo_bf16 *out, float *lse, const skpo_bf16 *q, const skpo_bf16 *k,
                                      const skpo_bf16 *v, const int32_t *seq_of, const int32_t *seq_start, int T, int nh,
                                      int nkv, int hs, skpo_err *err) {
    int nseq = T ? seq_of[T - 1] + 1 : 0;
    return skpo_cuda_attention(c, out, lse, q, k, v, seq_start, nseq, T, nh, nkv, hs, err);
}

skpo_status skpo_cuda_flash_attention_backward(skpo_cuda *c, skpo_bf16 *dq, skpo_bf16 *dk, skpo_bf16 *dv,
                                               const skpo_bf16 *dout, const skpo_bf16 *out, const float *lse,
                                               const skpo_bf16 *q, const skpo_bf16 *k, const skpo_bf16 *v,
                                               const int32_t *seq_of, const int32_t *seq_start, int T, int nh, int nkv,
                                               int hs, float *work, skpo_err *err) {
    int nseq = T ? seq_of[T - 1] + 1 : 0;
    size_t n = (size_t)T * nkv * hs;
    float *k32 = calloc(n ? n : 1, 4), *v32 = calloc(n ? n : 1, 4);
    skpo_cuda_attention_backward(c, dq, k32, v32, dout, out, lse, q, k, v, seq_start, nseq, T, nh, nkv, hs, err);
    skpo_f32_to_bf16_host(dk, k32, n);
    skpo_f32_to_bf16_host(dv, v32, n);
    free(k32), free(v32);
    for (size_t i = 0; i < (size_t)T * nh * (1 + hs); i++) work[i] = NAN;   // scratch only
    return SKPO_OK;
}

// cuDNN's training contract (cuda_dnn.h) on the same loops: max_len bounds
// every sequence; dk / dv come out in bf16, overwritten.
skpo_status skpo_cudnn_attention(skpo_cuda *c, skpo_bf16 *out, float *lse, const skpo_bf16 *q, const skpo_bf16 *k,
                                 const skpo_bf16 *v, const int32_t *seq_start, int nseq, int max_len, int T, int nh,
                                 int nkv, int hs, skpo_err *err) {
    for (int s = 0; s < nseq; s++)
        if (seq_start[s + 1] - seq_start[s] > max_len)
            return skpo_err_set(err, SKPO_ERANGE, "fake cudnn: sequence %d longer than max_len %d", s, max_len);
    return skpo_cuda_attention(c, out, lse, q, k, v, seq_start, nseq, T, nh, nkv, hs, err);
}

skpo_status skpo_cudnn_attention_backward(skpo_cuda *c, skpo_bf16 *dq, skpo_bf16 *dk, skpo_bf16 *dv,
                                          const skpo_bf16 *dout, const skpo_bf16 *out, const float *lse,
                                          const skpo_bf16 *q, const skpo_bf16 *k, const skpo_bf16 *v,
                                          const int32_t *seq_start, int nseq, int max_len, int T, int nh, int nkv,
                                          int hs, skpo_err *err) {
    size_t n = (size_t)T * nkv * hs;
    float *k32 = calloc(n ? n : 1, 4), *v32 = calloc(n ? n : 1, 4);
    skpo_status st = skpo_cuda_attention_backward(c, dq, k32, v32, dout, out, lse, q, k, v, seq_start, nseq, T, nh,
                                                  nkv, hs, err);
    skpo_f32_to_bf16_host(dk, k32, n);
    skpo_f32_to_bf16_host(dv, v32, n);
    free(k32), free(v32);
    return st;
}
