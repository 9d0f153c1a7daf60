// attention.cu - causal grouped-query attention on the GPU.
// Prefill/training: one warp per (query row, head) streams over the keys of its
// sequence with an online softmax (flash-style: the T x T score matrix is never
// stored); each lane owns hs/32 dimensions. Decode: the same loop over a
// paged KV pool through block tables. Backward recomputes probabilities from the
// saved log-sum-exp.
#include "common.cuh"

#define MAX_HS 256
#define PER_LANE (MAX_HS / 32)

// Prefill / training forward.
__global__ void k_attn_fwd(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const int32_t *seq_of,
                           const int32_t *seq_start, int T, int nh, int nkv, int hs, float scale) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (warp >= T * nh) return;
    int t = warp / nh, h = warp % nh, hk = h / (nh / nkv);
    int s0 = seq_start[seq_of[t]];
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

__global__ void k_seq_of(int32_t *seq_of, const int32_t *seq_start, int nseq) {
    int s = blockIdx.x;
    if (s >= nseq) return;
    for (int t = seq_start[s] + threadIdx.x; t < seq_start[s + 1]; t += blockDim.x) seq_of[t] = s;
}

extern "C" skpo_status skpo_cuda_attention(skpo_cuda *c, skpo_bf16 *out, float *lse, const skpo_bf16 *q,
                                           const skpo_bf16 *k, const skpo_bf16 *v, const int32_t *seq_start, int nseq,
                                           int T, int nh, int nkv, int hs, skpo_err *err) {
    if (!T) return SKPO_OK;
    if (hs > MAX_HS || nh % nkv) return skpo_err_set(err, SKPO_EUNSUPPORTED, "attention: head_dim %d / heads %d/%d unsupported", hs, nh, nkv);
    int32_t *seq_of;
    skpo_status st = skpo_cuda_malloc(c, (void **)&seq_of, (size_t)T * sizeof(int32_t), "attention index", err);
    if (st) return st;
    k_seq_of<<<nseq, 256, 0, c->stream>>>(seq_of, seq_start, nseq);
    size_t threads = (size_t)T * nh * 32;
    k_attn_fwd<<<blocks_for(threads, 128), 128, 0, c->stream>>>((bf16 *)out, lse, (const bf16 *)q, (const bf16 *)k,
                                                                 (const bf16 *)v, seq_of, seq_start, T, nh, nkv, hs,
                                                                 1.f / sqrtf((float)hs));
    cudaError_t e = cudaGetLastError(), es = cudaStreamSynchronize(c->stream);  // a kernel fault shows at the sync
    if (e == cudaSuccess) e = es;
    cudaFree(seq_of);
    if (e != cudaSuccess) return skpo_cuda_fail(err, e, "attention kernel", __FILE__, __LINE__);
    return SKPO_OK;
}

// Backward: per (query row, head) warp. D = dout . out; for each key j:
// p = exp(s_j - lse), dp = dout . v_j, ds = p (dp - D); dq += ds k_j scale;
// dk_j += ds q scale; dv_j += p dout (fp32 atomics: several query heads share a
// KV head and every later row touches key j).
__global__ void k_attn_bwd(bf16 *dq, float *dk, float *dv, const bf16 *dout, const bf16 *out, const float *lse,
                           const bf16 *q, const bf16 *k, const bf16 *v, const int32_t *seq_of, const int32_t *seq_start,
                           int T, int nh, int nkv, int hs, float scale) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (warp >= T * nh) return;
    int t = warp / nh, h = warp % nh, hk = h / (nh / nkv);
    int s0 = seq_start[seq_of[t]];
    int qd = nh * hs, kd = nkv * hs;
    float qr[PER_LANE], go[PER_LANE], dqr[PER_LANE];
    float D = 0.f;
#pragma unroll
    for (int i = 0; i < PER_LANE; i++) {
        int d = lane + 32 * i;
        size_t o = (size_t)t * qd + h * hs + d;
        qr[i] = d < hs ? __bfloat162float(q[o]) : 0.f;
        go[i] = d < hs ? __bfloat162float(dout[o]) : 0.f;
        if (d < hs) D += go[i] * __bfloat162float(out[o]);
        dqr[i] = 0.f;
    }
    D = warp_sum(D);
    float L = lse[(size_t)t * nh + h];
    // Keys from t down: concurrent warps (neighbouring queries) then hit
    // different keys' dK/dV at any moment; walking up from s0 together, every
    // warp of a sequence added into the same addresses at the same time.
    for (int j = t; j >= s0; j--) {
        const bf16 *kr = k + (size_t)j * kd + hk * hs, *vr = v + (size_t)j * kd + hk * hs;
        float s = 0.f, dp = 0.f;
#pragma unroll
        for (int i = 0; i < PER_LANE; i++) {
            int d = lane + 32 * i;
            if (d < hs) {
                s += qr[i] * __bfloat162float(kr[d]);
                dp += go[i] * __bfloat162float(vr[d]);
            }
        }
        s = warp_sum(s) * scale;
        dp = warp_sum(dp);
        float p = expf(s - L), ds = p * (dp - D);
#pragma unroll
        for (int i = 0; i < PER_LANE; i++) {
            int d = lane + 32 * i;
            if (d < hs) {
                dqr[i] += ds * __bfloat162float(kr[d]) * scale;
                atomicAdd(&dk[(size_t)j * kd + hk * hs + d], ds * qr[i] * scale);
                atomicAdd(&dv[(size_t)j * kd + hk * hs + d], p * go[i]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < PER_LANE; i++)
        if (lane + 32 * i < hs) dq[(size_t)t * qd + h * hs + lane + 32 * i] = __float2bfloat16(dqr[i]);
}

extern "C" skpo_status skpo_cuda_attention_backward(skpo_cuda *c, skpo_bf16 *dq, float *dk, float *dv,
                                                    const skpo_bf16 *dout, const skpo_bf16 *out, const float *lse,
                                                    const skpo_bf16 *q, const skpo_bf16 *k, const skpo_bf16 *v,
                                                    const int32_t *seq_start, int nseq, int T, int nh, int nkv, int hs,
                                                    skpo_err *err) {
    if (!T) return SKPO_OK;
    if (hs > MAX_HS || nh % nkv) return skpo_err_set(err, SKPO_EUNSUPPORTED, "attention: head_dim %d unsupported", hs);
    int32_t *seq_of;
    skpo_status st = skpo_cuda_malloc(c, (void **)&seq_of, (size_t)T * sizeof(int32_t), "attention index", err);
    if (st) return st;
    k_seq_of<<<nseq, 256, 0, c->stream>>>(seq_of, seq_start, nseq);
    size_t threads = (size_t)T * nh * 32;
    k_attn_bwd<<<blocks_for(threads, 128), 128, 0, c->stream>>>(
        (bf16 *)dq, dk, dv, (const bf16 *)dout, (const bf16 *)out, lse, (const bf16 *)q, (const bf16 *)k,
        (const bf16 *)v, seq_of, seq_start, T, nh, nkv, hs, 1.f / sqrtf((float)hs));
    cudaError_t e = cudaGetLastError(), es = cudaStreamSynchronize(c->stream);  // a kernel fault shows at the sync
    if (e == cudaSuccess) e = es;
    cudaFree(seq_of);
    if (e != cudaSuccess) return skpo_cuda_fail(err, e, "attention backward kernel", __FILE__, __LINE__);
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
