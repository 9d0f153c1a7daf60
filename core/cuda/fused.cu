// fused.cu - the elementwise work around the fused projections, one launch
// each (cuda_infer.h, cuda_train.h): the residual add with the RMSNorm that
// follows it, the q|k|v split with bias and RoPE (into the paged KV pool when
// decoding, into q/k/v buffers when training) and its backward, and the
// SwiGLU backward over a [gate | up] GEMM output. fp32 math, one rounding to
// bf16 per stored value.
#include "common.cuh"
#include "cuda/cuda_infer.h"
#include "cuda/cuda_train.h"

// --- residual + RMSNorm ---------------------------------------------------------------------
// One block per row: x_out = bf16(x_in + y + bias), then ln = x_out r w with
// r = 1 / rms(x_out) (of the rounded values, as a separate norm would see
// them). VEC: 8 elements per 16-byte load (C % 8 == 0, every pointer aligned).

#define AN_THREADS 256

__device__ __forceinline__ void an_unpack(float *f, uint4 u) {
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        float2 p = __bfloat1622float2(h[k]);
        f[2 * k] = p.x;
        f[2 * k + 1] = p.y;
    }
}
__device__ __forceinline__ uint4 an_pack(const float *f) {
    uint4 u;
    __nv_bfloat162 *h = (__nv_bfloat162 *)&u;
#pragma unroll
    for (int k = 0; k < 4; k++) h[k] = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
    return u;
}

template <bool VEC>
__global__ void __launch_bounds__(AN_THREADS) k_add_rmsnorm(bf16 *xo, bf16 *ln, float *rstd, const bf16 *xi,
                                                            const float *y, const bf16 *bias, const bf16 *w, int C,
                                                            float eps) {
    __shared__ float shm[32];
    size_t row = (size_t)blockIdx.x * C;
    float ss = 0.f;
    if (VEC) {
        for (int i = threadIdx.x * 8; i < C; i += AN_THREADS * 8) {
            float a[8], b[8];
            an_unpack(a, *(const uint4 *)(xi + row + i));
            float4 y0 = *(const float4 *)(y + row + i), y1 = *(const float4 *)(y + row + i + 4);
            a[0] += y0.x, a[1] += y0.y, a[2] += y0.z, a[3] += y0.w, a[4] += y1.x, a[5] += y1.y, a[6] += y1.z, a[7] += y1.w;
            if (bias) {
                an_unpack(b, *(const uint4 *)(bias + i));
#pragma unroll
                for (int k = 0; k < 8; k++) a[k] += b[k];
            }
            uint4 u = an_pack(a);
            *(uint4 *)(xo + row + i) = u;
            an_unpack(a, u);
#pragma unroll
            for (int k = 0; k < 8; k++) ss += a[k] * a[k];
        }
    } else {
        for (int i = threadIdx.x; i < C; i += AN_THREADS) {
            float v = __bfloat162float(xi[row + i]) + y[row + i] + (bias ? __bfloat162float(bias[i]) : 0.f);
            bf16 h = __float2bfloat16(v);
            xo[row + i] = h;
            v = __bfloat162float(h);
            ss += v * v;
        }
    }
    if (!ln) return;   // uniform: the add only
    ss = block_sum(ss, shm);
    float r = rsqrtf(ss / (float)C + eps);
    if (rstd && threadIdx.x == 0) rstd[blockIdx.x] = r;
    // Each thread reads back the elements it wrote.
    if (VEC) {
        for (int i = threadIdx.x * 8; i < C; i += AN_THREADS * 8) {
            float a[8], b[8];
            an_unpack(a, *(const uint4 *)(xo + row + i));
            an_unpack(b, *(const uint4 *)(w + i));
#pragma unroll
            for (int k = 0; k < 8; k++) a[k] = a[k] * r * b[k];
            *(uint4 *)(ln + row + i) = an_pack(a);
        }
    } else {
        for (int i = threadIdx.x; i < C; i += AN_THREADS)
            ln[row + i] = __float2bfloat16(__bfloat162float(xo[row + i]) * r * __bfloat162float(w[i]));
    }
}

static int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

extern "C" skpo_status skpo_cuda_add_rmsnorm(skpo_cuda *c, skpo_bf16 *x_out, skpo_bf16 *ln, float *rstd,
                                             const skpo_bf16 *x_in, const float *y, const skpo_bf16 *bias,
                                             const skpo_bf16 *w, int T, int C, float eps, skpo_err *err) {
    if (!T) return SKPO_OK;
    int vec = C % 8 == 0 && aligned16(x_out) && aligned16(x_in) && aligned16(y) && (!ln || (aligned16(ln) && aligned16(w))) &&
              (!bias || aligned16(bias));
    if (vec)
        k_add_rmsnorm<true><<<T, AN_THREADS, 0, c->stream>>>((bf16 *)x_out, (bf16 *)ln, rstd, (const bf16 *)x_in, y,
                                                             (const bf16 *)bias, (const bf16 *)w, C, eps);
    else
        k_add_rmsnorm<false><<<T, AN_THREADS, 0, c->stream>>>((bf16 *)x_out, (bf16 *)ln, rstd, (const bf16 *)x_in, y,
                                                              (const bf16 *)bias, (const bf16 *)w, C, eps);
    LAUNCHED(err);
    return SKPO_OK;
}

// --- q|k|v: bias, RoPE, split ------------------------------------------------------------------
// One block per row. The row's cos / sin table (hs / 2 each) is made once in
// shared memory and serves every head. Pairs (d, d + hs/2) of the q heads and
// then the k heads (contiguous in the fused row), then the v elements.

#define QR_THREADS 128

__device__ __forceinline__ void qr_table(float *sc, float p, const float *inv_freq, int half) {
    for (int d = threadIdx.x; d < half; d += blockDim.x) sincosf(p * inv_freq[d], &sc[half + d], &sc[d]);
    __syncthreads();
}

__device__ __forceinline__ float qr_bias(const bf16 *b, int i) { return b ? __bfloat162float(b[i]) : 0.f; }

__global__ void __launch_bounds__(QR_THREADS) k_qkv_rope(bf16 *q, bf16 *k, bf16 *v, const bf16 *qkv, const bf16 *bias,
                                                         const int32_t *pos, const float *inv_freq, const int32_t *sb,
                                                         const int32_t *sr, int nh, int nkv, int hs, int n_layers,
                                                         int layer, int bs) {
    extern __shared__ float qr_sc[];   // cos (hs / 2), sin (hs / 2)
    int t = blockIdx.x, half = hs / 2, qd = nh * hs, kd = nkv * hs;
    qr_table(qr_sc, (float)pos[t], inv_freq, half);
    const bf16 *in = qkv + (size_t)t * (qd + 2 * kd);
    size_t ko = sb ? (((size_t)sb[t] * n_layers + layer) * bs + sr[t]) * kd : (size_t)t * kd;
    bf16 *qr = q + (size_t)t * qd, *kr = k + ko, *vr = v + ko;
    for (int i = threadIdx.x; i < (nh + nkv) * half; i += QR_THREADS) {
        int h = i / half, d = i - h * half, e0 = h * hs + d, e1 = e0 + half;
        float a = __bfloat162float(in[e0]) + qr_bias(bias, e0), b = __bfloat162float(in[e1]) + qr_bias(bias, e1);
        float co = qr_sc[d], s = qr_sc[half + d];
        bf16 *dst = e0 < qd ? qr + e0 : kr + (e0 - qd);
        dst[0] = __float2bfloat16(a * co - b * s);
        dst[half] = __float2bfloat16(b * co + a * s);
    }
    for (int i = threadIdx.x; i < kd; i += QR_THREADS)
        vr[i] = __float2bfloat16(__bfloat162float(in[qd + kd + i]) + qr_bias(bias, qd + kd + i));
}

extern "C" skpo_status skpo_cuda_qkv_rope(skpo_cuda *c, skpo_bf16 *q, skpo_bf16 *k, skpo_bf16 *v, const skpo_bf16 *qkv,
                                          const skpo_bf16 *bias, const int32_t *pos, const float *inv_freq,
                                          const int32_t *slot_block, const int32_t *slot_row, int T, int nh, int nkv,
                                          int hs, int n_layers, int layer, int block_size, skpo_err *err) {
    if (!T) return SKPO_OK;
    k_qkv_rope<<<T, QR_THREADS, (size_t)hs * sizeof(float), c->stream>>>(
        (bf16 *)q, (bf16 *)k, (bf16 *)v, (const bf16 *)qkv, (const bf16 *)bias, pos, inv_freq, slot_block, slot_row, nh,
        nkv, hs, n_layers, layer, block_size);
    LAUNCHED(err);
    return SKPO_OK;
}

// The inverse rotation of dq and dk, packed with dv into the fused row.
__global__ void __launch_bounds__(QR_THREADS) k_qkv_rope_bwd(bf16 *dqkv, const bf16 *dq, const bf16 *dk, const bf16 *dv,
                                                             const int32_t *pos, const float *inv_freq, int nh, int nkv,
                                                             int hs) {
    extern __shared__ float qr_sc[];
    int t = blockIdx.x, half = hs / 2, qd = nh * hs, kd = nkv * hs;
    qr_table(qr_sc, (float)pos[t], inv_freq, half);
    bf16 *out = dqkv + (size_t)t * (qd + 2 * kd);
    const bf16 *gq = dq + (size_t)t * qd, *gk = dk + (size_t)t * kd;
    for (int i = threadIdx.x; i < (nh + nkv) * half; i += QR_THREADS) {
        int h = i / half, d = i - h * half, e0 = h * hs + d;
        const bf16 *src = e0 < qd ? gq + e0 : gk + (e0 - qd);
        float a = __bfloat162float(src[0]), b = __bfloat162float(src[half]), co = qr_sc[d], s = qr_sc[half + d];
        out[e0] = __float2bfloat16(a * co + b * s);
        out[e0 + half] = __float2bfloat16(b * co - a * s);
    }
    for (int i = threadIdx.x; i < kd; i += QR_THREADS) out[qd + kd + i] = dv[(size_t)t * kd + i];
}

extern "C" skpo_status skpo_cuda_qkv_rope_backward(skpo_cuda *c, skpo_bf16 *dqkv, const skpo_bf16 *dq,
                                                   const skpo_bf16 *dk, const skpo_bf16 *dv, const int32_t *pos,
                                                   const float *inv_freq, int T, int nh, int nkv, int hs, skpo_err *err) {
    if (!T) return SKPO_OK;
    k_qkv_rope_bwd<<<T, QR_THREADS, (size_t)hs * sizeof(float), c->stream>>>(
        (bf16 *)dqkv, (const bf16 *)dq, (const bf16 *)dk, (const bf16 *)dv, pos, inv_freq, nh, nkv, hs);
    LAUNCHED(err);
    return SKPO_OK;
}

// --- SwiGLU backward over [gate | up] ---------------------------------------------------------------

__global__ void k_swiglu_fused_bwd(bf16 *dgu, const bf16 *dh, const bf16 *gu, int F, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    size_t t = i / F, f = i - t * F, g = t * 2 * F + f;
    float a = __bfloat162float(gu[g]), b = __bfloat162float(gu[g + F]), d = __bfloat162float(dh[i]);
    float s = 1.f / (1.f + expf(-a));
    dgu[g] = __float2bfloat16(d * b * s * (1.f + a * (1.f - s)));
    dgu[g + F] = __float2bfloat16(d * a * s);
}

extern "C" skpo_status skpo_cuda_swiglu_fused_backward(skpo_cuda *c, skpo_bf16 *dgu, const skpo_bf16 *dh,
                                                       const skpo_bf16 *gu, int T, int F, skpo_err *err) {
    size_t n = (size_t)T * F;
    if (!n) return SKPO_OK;
    k_swiglu_fused_bwd<<<blocks_for(n, 256), 256, 0, c->stream>>>((bf16 *)dgu, (const bf16 *)dh, (const bf16 *)gu, F, n);
    LAUNCHED(err);
    return SKPO_OK;
}
