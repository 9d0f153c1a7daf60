// attention.cu - causal grouped-query attention on the GPU.
// Prefill/training: one warp per (query row, head) streams over the keys of its
// sequence with an online softmax (flash-style: the T x T score matrix is never
// stored); each lane owns hs/32 dimensions. Decode: the same loop over a
// paged KV pool through block tables. Backward recomputes probabilities from the
// saved log-sum-exp. A row finds its sequence by binary search over
// seq_start (no index buffer, no allocation, no synchronisation per call).
// A packed batch (model/pack.h) passes its runs (base/attn_mask.h): query t
// then walks the keys [row start, pre_end[t]) and [own0[t], t] only, the keys
// of its own unpacked sequence in the same order.
#include "common.cuh"
#include "cuda/cuda_dnn.h"

#define MAX_HS 256
#define PER_LANE (MAX_HS / 32)

// The first row of row t's sequence: the largest s with seq_start[s] <= t
// (empty sequences share their start with the next one).
__device__ __forceinline__ int seq_first_row(const int32_t *seq_start, int nseq, int t) {
    int lo = 0, hi = nseq;
    while (hi - lo > 1) {
        int mid = (lo + hi) >> 1;
        if (seq_start[mid] <= t) lo = mid;
        else hi = mid;
    }
    return seq_start[lo];
}

// Prefill / training forward.
__global__ void k_attn_fwd(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const int32_t *seq_start,
                           int nseq, const int32_t *pre_end, const int32_t *own0, int T, int nh, int nkv, int hs,
                           float scale) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (warp >= T * nh) return;
    int t = warp / nh, h = warp % nh, hk = h / (nh / nkv);
    int s0 = seq_first_row(seq_start, nseq, t);
    int pe = pre_end ? pre_end[t] : s0, o0 = pre_end ? own0[t] : s0;   // keys [s0, pe) then [o0, t]
    int qd = nh * hs, kd = nkv * hs;
    // Per-lane arrays are indexed by unrolled constants only, so they stay in
    // registers (a runtime index puts them in local memory).
    float qr[PER_LANE], acc[PER_LANE];
#pragma unroll
    for (int i = 0; i < PER_LANE; i++) {
        int d = lane + 32 * i;
        qr[i] = d < hs ? __bfloat162float(q[(size_t)t * qd + h * hs + d]) * scale : 0.f;
        acc[i] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    for (int j = s0; j <= t; j++) {
        if (j == pe) j = o0;   // past the prefix run: the own run (o0 >= pe; plain rows: pe = o0 = s0)
        const bf16 *kr = k + (size_t)j * kd + hk * hs;
        float dot = 0.f;
#pragma unroll
        for (int i = 0; i < PER_LANE; i++)
            if (lane + 32 * i < hs) dot += qr[i] * __bfloat162float(kr[lane + 32 * i]);
        dot = warp_sum(dot);
        float mn = fmaxf(m, dot), corr = expf(m - mn), p = expf(dot - mn);
        l = l * corr + p;
        const bf16 *vr = v + (size_t)j * kd + hk * hs;
#pragma unroll
        for (int i = 0; i < PER_LANE; i++)
            if (lane + 32 * i < hs) acc[i] = acc[i] * corr + p * __bfloat162float(vr[lane + 32 * i]);
        m = mn;
    }
#pragma unroll
    for (int i = 0; i < PER_LANE; i++)
        if (lane + 32 * i < hs) out[(size_t)t * qd + h * hs + lane + 32 * i] = __float2bfloat16(acc[i] / l);
    if (lse && lane == 0) lse[(size_t)t * nh + h] = m + logf(l);
}

// cuDNN's index tensors (cuda_dnn.h): sequence lengths and element offsets of
// each sequence in the packed q/out, k/v and log-sum-exp tensors; entries
// B..Bp-1 pad the batch to its bucket as empty sequences at the end.
__global__ void k_sdpa_index(int32_t *idx, const int32_t *seq_start, const int32_t *last, const int32_t *pos, int B,
                             int Bp, int nh, int nkv, int hs) {
    for (int b = threadIdx.x; b <= Bp; b += blockDim.x) {
        int first, len_q = 0, len_kv = 0, c = b < B ? b : B;
        if (seq_start) {
            first = seq_start[c];
            if (b < B) len_q = len_kv = seq_start[b + 1] - first;
        } else {
            first = c ? last[c - 1] + 1 : 0;
            if (b < B) len_q = last[b] + 1 - first, len_kv = pos[last[b]] + 1;
        }
        if (b < Bp) idx[b] = len_q, idx[Bp + b] = len_kv;
        idx[2 * Bp + b] = first * nh * hs;
        idx[3 * Bp + 1 + b] = first * nkv * hs;
        idx[4 * Bp + 2 + b] = first * nh;
    }
}

extern "C" skpo_status skpo_cuda_sdpa_index(skpo_cuda *c, int32_t *idx, const int32_t *seq_start, int B, int Bp, int nh,
                                            int nkv, int hs, skpo_err *err) {
    k_sdpa_index<<<1, 256, 0, c->stream>>>(idx, seq_start, (const int32_t *)NULL, (const int32_t *)NULL, B, Bp, nh, nkv,
                                           hs);
    LAUNCHED(err);
    return SKPO_OK;
}

extern "C" skpo_status skpo_cuda_sdpa_index_paged(skpo_cuda *c, int32_t *idx, const int32_t *last, const int32_t *pos,
                                                  int B, int Bp, int nh, int nkv, int hs, skpo_err *err) {
    k_sdpa_index<<<1, 256, 0, c->stream>>>(idx, (const int32_t *)NULL, last, pos, B, Bp, nh, nkv, hs);
    LAUNCHED(err);
    return SKPO_OK;
}

extern "C" skpo_status skpo_cuda_attention_runs(skpo_cuda *c, skpo_bf16 *out, float *lse, const skpo_bf16 *q,
                                                const skpo_bf16 *k, const skpo_bf16 *v, const int32_t *seq_start,
                                                int nseq, const skpo_cuda_runs *runs, int T, int nh, int nkv, int hs,
                                                skpo_err *err) {
    if (!T) return SKPO_OK;
    if (hs > MAX_HS || nh % nkv) return skpo_err_set(err, SKPO_EUNSUPPORTED, "attention: head_dim %d / heads %d/%d unsupported", hs, nh, nkv);
    size_t threads = (size_t)T * nh * 32;
    k_attn_fwd<<<blocks_for(threads, 128), 128, 0, c->stream>>>(
        (bf16 *)out, lse, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, seq_start, nseq,
        runs ? runs->pre_end : (const int32_t *)NULL, runs ? runs->own0 : (const int32_t *)NULL, T, nh, nkv, hs,
        1.f / sqrtf((float)hs));
    LAUNCHED(err);
    return SKPO_OK;
}

extern "C" skpo_status skpo_cuda_attention(skpo_cuda *c, skpo_bf16 *out, float *lse, const skpo_bf16 *q,
                                           const skpo_bf16 *k, const skpo_bf16 *v, const int32_t *seq_start, int nseq,
                                           int T, int nh, int nkv, int hs, skpo_err *err) {
    return skpo_cuda_attention_runs(c, out, lse, q, k, v, seq_start, nseq, NULL, T, nh, nkv, hs, err);
}

// Backward: one warp per (query row t, KV head hk) walks the keys of t's
// sequence once for all G = nh / nkv query heads of the group. Per head h:
// D_h = dout_h . out_h; for each key j: p = exp(s_j - lse_h), dp = dout_h . v_j,
// ds = p (dp - D_h); dq_h += ds k_j scale. The group's contributions to key j,
// dk_j += sum_h ds q_h scale and dv_j += sum_h p dout_h, are summed in
// registers and added with one fp32 atomic per element (every later row of
// the sequence touches key j too). q, dout and the dq accumulators of the
// group live in the warp's slice of shared memory; lane l owns dims l + 32 i,
// so lanes never share a word (no bank conflicts, no barriers beyond the warp).
__host__ __device__ __forceinline__ size_t bwd_warp_floats(int G, int hs) { return (size_t)3 * G * hs + 2 * G; }

// The warp's query row t for the G heads of KV group hk, into its slice of
// shared memory: q and dout per head, a zeroed dq accumulator, and
// D_h = dout_h . out_h (dot_rows in core/cpu/ops_cpu.c) with lse_h.
__device__ __forceinline__ void bwd_load_row(float *sq, float *sg, float *sdq, float *sD, float *sL, const bf16 *q,
                                             const bf16 *dout, const bf16 *out, const float *lse, int t, int hk, int G,
                                             int nh, int hs, int lane) {
    int qd = nh * hs;
    for (int g = 0; g < G; g++) {
        int h = hk * G + g;
        float D = 0.f;
#pragma unroll
        for (int i = 0; i < PER_LANE; i++) {
            int d = lane + 32 * i;
            if (d < hs) {
                size_t o = (size_t)t * qd + (size_t)h * hs + d;
                float go = __bfloat162float(dout[o]);
                sq[g * hs + d] = __bfloat162float(q[o]);
                sg[g * hs + d] = go;
                sdq[g * hs + d] = 0.f;
                D += go * __bfloat162float(out[o]);
            }
        }
        D = warp_sum(D);
        if (lane == 0) sD[g] = D, sL[g] = lse[(size_t)t * nh + h];
    }
}

// Key j against the row's G heads (attend_bwd_q and attend_bwd_kv in
// core/cpu/ops_cpu.c for one pair): p = exp(s - lse_h), dp = dout_h . v_j,
// ds = p (dp - D_h); dq_h += ds k_j scale in shared memory; the group's
// dk_j += sum_h ds q_h scale and dv_j += sum_h p dout_h with one fp32 atomic
// per element.
__device__ __forceinline__ void bwd_key(float *dk, float *dv, float *sdq, const float *sq, const float *sg,
                                        const float *sD, const float *sL, const bf16 *k, const bf16 *v, int j, int hk,
                                        int G, int nkv, int hs, int lane, float scale) {
    int kd = nkv * hs;
    const bf16 *kr = k + (size_t)j * kd + (size_t)hk * hs, *vr = v + (size_t)j * kd + (size_t)hk * hs;
    float kv_k[PER_LANE], kv_v[PER_LANE], ak[PER_LANE], av[PER_LANE];
#pragma unroll
    for (int i = 0; i < PER_LANE; i++) {
        int d = lane + 32 * i;
        kv_k[i] = d < hs ? __bfloat162float(kr[d]) : 0.f;
        kv_v[i] = d < hs ? __bfloat162float(vr[d]) : 0.f;
        ak[i] = av[i] = 0.f;
    }
    for (int g = 0; g < G; g++) {
        const float *qg = sq + g * hs, *gg = sg + g * hs;
        float s = 0.f, dp = 0.f;
#pragma unroll
        for (int i = 0; i < PER_LANE; i++) {
            int d = lane + 32 * i;
            if (d < hs) {
                s += qg[d] * kv_k[i];
                dp += gg[d] * kv_v[i];
            }
        }
        s = warp_sum(s) * scale;
        dp = warp_sum(dp);
        float p = expf(s - sL[g]), ds = p * (dp - sD[g]);
#pragma unroll
        for (int i = 0; i < PER_LANE; i++) {
            int d = lane + 32 * i;
            if (d < hs) {
                sdq[g * hs + d] += ds * kv_k[i] * scale;
                ak[i] += ds * qg[d] * scale;
                av[i] += p * gg[d];
            }
        }
    }
#pragma unroll
    for (int i = 0; i < PER_LANE; i++) {
        int d = lane + 32 * i;
        if (d < hs) {
            atomicAdd(&dk[(size_t)j * kd + (size_t)hk * hs + d], ak[i]);
            atomicAdd(&dv[(size_t)j * kd + (size_t)hk * hs + d], av[i]);
        }
    }
}

__global__ void k_attn_bwd(bf16 *dq, float *dk, float *dv, const bf16 *dout, const bf16 *out, const float *lse,
                           const bf16 *q, const bf16 *k, const bf16 *v, const int32_t *seq_start, int nseq,
                           const int32_t *pre_end, const int32_t *own0, int T, int nh, int nkv, int hs, float scale) {
    extern __shared__ float sh[];
    int wib = threadIdx.x >> 5, lane = threadIdx.x & 31, G = nh / nkv;
    int warp = blockIdx.x * (blockDim.x >> 5) + wib;
    if (warp >= T * nkv) return;   // whole warps only
    int t = warp / nkv, hk = warp - t * nkv;
    int s0 = seq_first_row(seq_start, nseq, t);
    int qd = nh * hs;
    float *sq = sh + (size_t)wib * bwd_warp_floats(G, hs), *sg = sq + (size_t)G * hs, *sdq = sg + (size_t)G * hs;
    float *sD = sdq + (size_t)G * hs, *sL = sD + G;
    bwd_load_row(sq, sg, sdq, sD, sL, q, dout, out, lse, t, hk, G, nh, hs, lane);
    __syncwarp();
    // Keys from t down: concurrent warps (neighbouring queries) then hit
    // different keys' dK/dV at any moment.
    // A packed row's query sees its own run [o0, t] and the prefix run [s0, pe) (plain rows: o0 = s0, pe = s0).
    int pe = pre_end ? pre_end[t] : s0, o0 = pre_end ? own0[t] : s0;
    for (int j = t; j >= o0; j--) bwd_key(dk, dv, sdq, sq, sg, sD, sL, k, v, j, hk, G, nkv, hs, lane, scale);
    for (int j = pe - 1; j >= s0; j--) bwd_key(dk, dv, sdq, sq, sg, sD, sL, k, v, j, hk, G, nkv, hs, lane, scale);
    for (int g = 0; g < G; g++)
#pragma unroll
        for (int i = 0; i < PER_LANE; i++) {
            int d = lane + 32 * i;
            if (d < hs) dq[(size_t)t * qd + (size_t)(hk * G + g) * hs + d] = __float2bfloat16(sdq[g * hs + d]);
        }
}

extern "C" skpo_status skpo_cuda_attention_backward(skpo_cuda *c, skpo_bf16 *dq, float *dk, float *dv,
                                                    const skpo_bf16 *dout, const skpo_bf16 *out, const float *lse,
                                                    const skpo_bf16 *q, const skpo_bf16 *k, const skpo_bf16 *v,
                                                    const int32_t *seq_start, int nseq, int T, int nh, int nkv, int hs,
                                                    skpo_err *err) {
    return skpo_cuda_attention_backward_runs(c, dq, dk, dv, dout, out, lse, q, k, v, seq_start, nseq, NULL, T, nh, nkv,
                                             hs, err);
}

extern "C" skpo_status skpo_cuda_attention_backward_runs(skpo_cuda *c, skpo_bf16 *dq, float *dk, float *dv,
                                                         const skpo_bf16 *dout, const skpo_bf16 *out, const float *lse,
                                                         const skpo_bf16 *q, const skpo_bf16 *k, const skpo_bf16 *v,
                                                         const int32_t *seq_start, int nseq, const skpo_cuda_runs *runs,
                                                         int T, int nh, int nkv, int hs, skpo_err *err) {
    if (!T) return SKPO_OK;
    if (hs > MAX_HS || nh % nkv) return skpo_err_set(err, SKPO_EUNSUPPORTED, "attention: head_dim %d unsupported", hs);
    // Up to 4 warps a block within 48 KiB of shared memory (one warp: raised to its need).
    size_t per = bwd_warp_floats(nh / nkv, hs) * sizeof(float);
    int wpb = (int)((48 * 1024) / per);
    if (wpb > 4) wpb = 4;
    if (wpb < 1) wpb = 1;
    if ((size_t)wpb * per > 48 * 1024)
        CU(cudaFuncSetAttribute(k_attn_bwd, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)per), err);
    size_t warps = (size_t)T * nkv;
    k_attn_bwd<<<blocks_for(warps, (unsigned)wpb), 32 * wpb, (size_t)wpb * per, c->stream>>>(
        (bf16 *)dq, dk, dv, (const bf16 *)dout, (const bf16 *)out, lse, (const bf16 *)q, (const bf16 *)k,
        (const bf16 *)v, seq_start, nseq, runs ? runs->pre_end : (const int32_t *)NULL,
        runs ? runs->own0 : (const int32_t *)NULL, T, nh, nkv, hs, 1.f / sqrtf((float)hs));
    LAUNCHED(err);
    return SKPO_OK;
}

// --- paged KV ---------------------------------------------------------------------------

__device__ __forceinline__ size_t pool_row(int block, int n_layers, int layer, int block_size, int row, int kv_dim) {
    return (((size_t)block * n_layers + layer) * block_size + row) * kv_dim;
}

__global__ void k_kv_store(bf16 *pk, bf16 *pv, const bf16 *k, const bf16 *v, const int32_t *sb, const int32_t *sr, int T,
                           int n_layers, int layer, int block_size, int kv_dim) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * kv_dim) return;
    int t = (int)(i / kv_dim), d = (int)(i % kv_dim);
    size_t o = pool_row(sb[t], n_layers, layer, block_size, sr[t], kv_dim) + d;
    pk[o] = k[i];
    pv[o] = v[i];
}

extern "C" skpo_status skpo_cuda_kv_store(skpo_cuda *c, skpo_bf16 *pool_k, skpo_bf16 *pool_v, const skpo_bf16 *k,
                                          const skpo_bf16 *v, const int32_t *slot_block, const int32_t *slot_row, int T,
                                          int n_layers, int layer, int block_size, int kv_dim, skpo_err *err) {
    if (!T) return SKPO_OK;
    size_t n = (size_t)T * kv_dim;
    k_kv_store<<<blocks_for(n, 256), 256, 0, c->stream>>>((bf16 *)pool_k, (bf16 *)pool_v, (const bf16 *)k,
                                                          (const bf16 *)v, slot_block, slot_row, T, n_layers, layer,
                                                          block_size, kv_dim);
    LAUNCHED(err);
    return SKPO_OK;
}

// Decode: one warp per (sequence, head), online softmax over the sequence's
// positions through its block table.
__global__ void k_attn_decode(bf16 *out, const bf16 *q, const bf16 *pk, const bf16 *pv, const int32_t *bt, int max_blocks,
                              const int32_t *len, int B, int n_layers, int layer, int block_size, int nh, int nkv,
                              int hs, float scale) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (warp >= B * nh) return;
    int b = warp / nh, h = warp % nh, hk = h / (nh / nkv), kd = nkv * hs;
    float qr[PER_LANE], acc[PER_LANE];
#pragma unroll
    for (int i = 0; i < PER_LANE; i++) {
        int d = lane + 32 * i;
        qr[i] = d < hs ? __bfloat162float(q[(size_t)b * nh * hs + h * hs + d]) * scale : 0.f;
        acc[i] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    const int32_t *table = bt + (size_t)b * max_blocks;
    for (int j = 0; j < len[b]; j++) {
        size_t o = pool_row(table[j / block_size], n_layers, layer, block_size, j % block_size, kd) + hk * hs;
        float dot = 0.f;
#pragma unroll
        for (int i = 0; i < PER_LANE; i++)
            if (lane + 32 * i < hs) dot += qr[i] * __bfloat162float(pk[o + lane + 32 * i]);
        dot = warp_sum(dot);
        float mn = fmaxf(m, dot), corr = expf(m - mn), p = expf(dot - mn);
        l = l * corr + p;
#pragma unroll
        for (int i = 0; i < PER_LANE; i++)
            if (lane + 32 * i < hs) acc[i] = acc[i] * corr + p * __bfloat162float(pv[o + lane + 32 * i]);
        m = mn;
    }
#pragma unroll
    for (int i = 0; i < PER_LANE; i++)
        if (lane + 32 * i < hs)
            out[(size_t)b * nh * hs + h * hs + lane + 32 * i] = __float2bfloat16(l > 0.f ? acc[i] / l : 0.f);
}

extern "C" skpo_status skpo_cuda_attention_decode(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *q,
                                                  const skpo_bf16 *pool_k, const skpo_bf16 *pool_v,
                                                  const int32_t *block_table, int max_blocks, const int32_t *seq_len, int B,
                                                  int n_layers, int layer, int block_size, int nh, int nkv, int hs,
                                                  skpo_err *err) {
    if (!B) return SKPO_OK;
    if (hs > MAX_HS || nh % nkv) return skpo_err_set(err, SKPO_EUNSUPPORTED, "attention: head_dim %d unsupported", hs);
    size_t threads = (size_t)B * nh * 32;
    k_attn_decode<<<blocks_for(threads, 128), 128, 0, c->stream>>>(
        (bf16 *)out, (const bf16 *)q, (const bf16 *)pool_k, (const bf16 *)pool_v, block_table, max_blocks, seq_len, B,
        n_layers, layer, block_size, nh, nkv, hs, 1.f / sqrtf((float)hs));
    LAUNCHED(err);
    return SKPO_OK;
}
