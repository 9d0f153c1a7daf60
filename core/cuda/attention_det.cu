// attention_det.cu - the backward of the simple causal attention (attention.cu)
// without atomics, for SKPO_DETERMINISTIC=1: the same math, but every sum has
// one fixed order, so two runs give the same bits whatever order the blocks
// run in. Two passes instead of one:
//   1. one warp per (query row t, head h) walks keys s0..t: dq_t (as the
//      one-pass kernel) and D_t,h = dout . out, kept for pass 2;
//   2. one warp per (key row j, KV head hk) walks the queries j..end of its
//      sequence and the G heads of its group, in that order:
//      dk_j = sum ds q scale, dv_j = sum p dout, written once (no atomics).
// Pass 2 recomputes the scores pass 1 saw (p, dp): about twice the arithmetic
// of the one-pass kernel, and no contended atomics. A packed batch's runs
// (base/attn_mask.h) restrict pass 1 to [s0, pre_end) + [own0, t] and pass 2
// to the queries [j, q_end[j]), as in attention.cu.
#include "common.cuh"
#include "cuda/cuda_train.h"

#define DET_MAX_HS 256
#define DET_PER_LANE (DET_MAX_HS / 32)

// Pass 1: dq (bf16) and D (fp32, T x nh).
__global__ void k_attn_bwd_dq(bf16 *dq, float *Dw, const bf16 *dout, const bf16 *out, const float *lse, const bf16 *q,
                              const bf16 *k, const bf16 *v, const int32_t *seq_of, const int32_t *seq_start,
                              const int32_t *pre_end, const int32_t *own0, int T, int nh, int nkv, int hs, float scale) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (warp >= T * nh) return;   // whole warps only
    int t = warp / nh, h = warp % nh, hk = h / (nh / nkv), s0 = seq_start[seq_of[t]];
    int pe = pre_end ? pre_end[t] : s0, o0 = pre_end ? own0[t] : s0;   // keys [s0, pe) then [o0, t]
    size_t qo = (size_t)t * nh * hs + (size_t)h * hs;
    int kd = nkv * hs;
    float qr[DET_PER_LANE], gr[DET_PER_LANE], acc[DET_PER_LANE], D = 0.f;
#pragma unroll
    for (int i = 0; i < DET_PER_LANE; i++) {
        int d = lane + 32 * i;
        qr[i] = d < hs ? __bfloat162float(q[qo + d]) : 0.f;
        gr[i] = d < hs ? __bfloat162float(dout[qo + d]) : 0.f;
        acc[i] = 0.f;
        if (d < hs) D += gr[i] * __bfloat162float(out[qo + d]);
    }
    D = warp_sum(D);
    float L = lse[(size_t)t * nh + h];
    for (int j = s0; j <= t; j++) {
        if (j == pe) j = o0;
        const bf16 *kr = k + (size_t)j * kd + (size_t)hk * hs, *vr = v + (size_t)j * kd + (size_t)hk * hs;
        float s = 0.f, dp = 0.f;
#pragma unroll
        for (int i = 0; i < DET_PER_LANE; i++) {
            int d = lane + 32 * i;
            if (d < hs) s += qr[i] * __bfloat162float(kr[d]), dp += gr[i] * __bfloat162float(vr[d]);
        }
        s = warp_sum(s) * scale;
        dp = warp_sum(dp);
        float ds = expf(s - L) * (dp - D);
#pragma unroll
        for (int i = 0; i < DET_PER_LANE; i++) {
            int d = lane + 32 * i;
            if (d < hs) acc[i] += ds * __bfloat162float(kr[d]) * scale;
        }
    }
#pragma unroll
    for (int i = 0; i < DET_PER_LANE; i++) {
        int d = lane + 32 * i;
        if (d < hs) dq[qo + d] = __float2bfloat16(acc[i]);
    }
    if (lane == 0) Dw[(size_t)t * nh + h] = D;
}

// Pass 2: dk, dv (fp32) of key j for KV head hk, overwritten.
__global__ void k_attn_bwd_dkv(float *dk, float *dv, const float *Dw, const bf16 *dout, const float *lse, const bf16 *q,
                               const bf16 *k, const bf16 *v, const int32_t *seq_of, const int32_t *seq_start,
                               const int32_t *q_end, int T, int nh, int nkv, int hs, float scale) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (warp >= T * nkv) return;   // whole warps only
    // the queries that see key j: the rest of its sequence, or of its segment of a packed row
    int j = warp / nkv, hk = warp % nkv, G = nh / nkv, end = q_end ? q_end[j] : seq_start[seq_of[j] + 1];
    int kd = nkv * hs;
    size_t ko = (size_t)j * kd + (size_t)hk * hs;
    float kr[DET_PER_LANE], vr[DET_PER_LANE], ak[DET_PER_LANE], av[DET_PER_LANE];
#pragma unroll
    for (int i = 0; i < DET_PER_LANE; i++) {
        int d = lane + 32 * i;
        kr[i] = d < hs ? __bfloat162float(k[ko + d]) : 0.f;
        vr[i] = d < hs ? __bfloat162float(v[ko + d]) : 0.f;
        ak[i] = av[i] = 0.f;
    }
    for (int t = j; t < end; t++)
        for (int g = 0; g < G; g++) {
            int h = hk * G + g;
            size_t qo = (size_t)t * nh * hs + (size_t)h * hs;
            float qv[DET_PER_LANE], gv[DET_PER_LANE], s = 0.f, dp = 0.f;
#pragma unroll
            for (int i = 0; i < DET_PER_LANE; i++) {
                int d = lane + 32 * i;
                qv[i] = d < hs ? __bfloat162float(q[qo + d]) : 0.f;
                gv[i] = d < hs ? __bfloat162float(dout[qo + d]) : 0.f;
                s += qv[i] * kr[i];
                dp += gv[i] * vr[i];
            }
            s = warp_sum(s) * scale;
            dp = warp_sum(dp);
            float p = expf(s - lse[(size_t)t * nh + h]), ds = p * (dp - Dw[(size_t)t * nh + h]);
#pragma unroll
            for (int i = 0; i < DET_PER_LANE; i++) ak[i] += ds * qv[i] * scale, av[i] += p * gv[i];
        }
#pragma unroll
    for (int i = 0; i < DET_PER_LANE; i++) {
        int d = lane + 32 * i;
        if (d < hs) dk[ko + d] = ak[i], dv[ko + d] = av[i];
    }
}

extern "C" skpo_status skpo_cuda_attention_backward_det(skpo_cuda *c, skpo_bf16 *dq, float *dk, float *dv,
                                                        const skpo_bf16 *dout, const skpo_bf16 *out, const float *lse,
                                                        const skpo_bf16 *q, const skpo_bf16 *k, const skpo_bf16 *v,
                                                        const int32_t *seq_of, const int32_t *seq_start, int T, int nh,
                                                        int nkv, int hs, float *work, skpo_err *err) {
    return skpo_cuda_attention_backward_det_runs(c, dq, dk, dv, dout, out, lse, q, k, v, seq_of, seq_start, NULL, T, nh,
                                                 nkv, hs, work, err);
}

extern "C" skpo_status skpo_cuda_attention_backward_det_runs(skpo_cuda *c, skpo_bf16 *dq, float *dk, float *dv,
                                                             const skpo_bf16 *dout, const skpo_bf16 *out,
                                                             const float *lse, const skpo_bf16 *q, const skpo_bf16 *k,
                                                             const skpo_bf16 *v, const int32_t *seq_of,
                                                             const int32_t *seq_start, const skpo_cuda_runs *runs,
                                                             int T, int nh, int nkv, int hs, float *work,
                                                             skpo_err *err) {
    if (!T) return SKPO_OK;
    if (hs > DET_MAX_HS || nh % nkv)
        return skpo_err_set(err, SKPO_EUNSUPPORTED, "attention: head_dim %d / heads %d/%d unsupported", hs, nh, nkv);
    float scale = 1.f / sqrtf((float)hs);
    k_attn_bwd_dq<<<blocks_for((size_t)T * nh * 32, 128), 128, 0, c->stream>>>(
        (bf16 *)dq, work, (const bf16 *)dout, (const bf16 *)out, lse, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v,
        seq_of, seq_start, runs ? runs->pre_end : (const int32_t *)NULL, runs ? runs->own0 : (const int32_t *)NULL, T,
        nh, nkv, hs, scale);
    LAUNCHED(err);
    k_attn_bwd_dkv<<<blocks_for((size_t)T * nkv * 32, 128), 128, 0, c->stream>>>(
        dk, dv, work, (const bf16 *)dout, lse, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, seq_of, seq_start,
        runs ? runs->q_end : (const int32_t *)NULL, T, nh, nkv, hs, scale);
    LAUNCHED(err);
    return SKPO_OK;
}
