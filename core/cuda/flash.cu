// flash.cu - tensor-core (WMMA bf16, fp32 accumulate) causal attention over
// packed sequences for training: FlashAttention-2 style forward (64-query
// tiles, online softmax, scores never in global memory) and backward (64-key
// tiles own their dK/dV for every query head of their KV group, so no atomics
// there; dQ accumulates in fp32 through atomics). Head sizes 64 and 128.
// Same contract as skpo_cuda_attention / _backward (lse in units of the
// scaled scores), opt-in through SKPO_ATTN=flash until it has run against
// them on a GPU (tests/unit/test_cuda_train.c compares the two).
#include "common.cuh"
#include "cuda/cuda_train.h"

#include <mma.h>

using namespace nvcuda;

#define FT 64   // rows of a query or key tile
#define FW 4    // warps per block: 16 rows each

typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> facc;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa_row;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::col_major> fa_col;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb_row;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb_col;

// Tile rows r0.. of a (T, ld) bf16 matrix at column offset col into s (FT x HS); zero past T.
template <int HS>
__device__ void load_tile(bf16 *s, const bf16 *g, int r0, int T, int ld, int col) {
    for (int i = threadIdx.x; i < FT * HS; i += blockDim.x) {
        int r = i / HS, d = i % HS, t = r0 + r;
        s[i] = t < T ? g[(size_t)t * ld + col + d] : __float2bfloat16(0.f);
    }
}

// Forward shared memory: Q, K, V tiles (bf16), S (fp32) and P (bf16) of the
// tile, each row's first key, per-row rescale factors, a 16x16 fp32 staging
// tile per warp.
template <int HS>
static size_t fwd_smem() {
    return (size_t)3 * FT * HS * 2 + FT * FT * 4 + FT * FT * 2 + 2 * FT * 4 + (size_t)FW * 256 * 4;
}

// Each warp owns 16 query rows. The softmax walks them one row at a time with
// the lanes across the row's 64 columns (consecutive words: no bank
// conflicts); m and l of the warp's rows stay in registers (warp-uniform). O
// stays in accumulator fragments for the whole key loop and is rescaled there:
// a fragment loaded from a tile holding each element's row index says which
// row each of a lane's fragment elements belongs to (the layout is opaque to
// WMMA, this asks the hardware), so O never goes through shared memory until
// the final 1/l.
template <int HS>
__global__ void __launch_bounds__(FW * 32) k_flash_fwd(bf16 *out, float *lse, const bf16 *q, const bf16 *k,
                                                      const bf16 *v, const int32_t *seq_of, const int32_t *seq_start,
                                                      int T, int nh, int nkv, float scale) {
    extern __shared__ __align__(128) unsigned char sm[];
    bf16 *sQ = (bf16 *)sm, *sK = sQ + FT * HS, *sV = sK + FT * HS;
    float *sS = (float *)(sV + FT * HS);
    bf16 *sP = (bf16 *)(sS + FT * FT);
    float *sC = (float *)(sP + FT * FT);
    int *sS0 = (int *)(sC + FT);
    float *sX = (float *)(sS0 + FT);
    int h = blockIdx.y, hk = h / (nh / nkv), t0 = blockIdx.x * FT, qd = nh * HS, kd = nkv * HS;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *wx = sX + warp * 256;
    load_tile<HS>(sQ, q, t0, T, qd, h * HS);
    for (int i = threadIdx.x; i < FT; i += blockDim.x) sS0[i] = t0 + i < T ? seq_start[seq_of[t0 + i]] : 0x7fffffff;
    for (int e = lane; e < 256; e += 32) wx[e] = (float)(e / 16);   // row index of each element of a 16x16 tile
    __syncwarp();
    facc rowmap, o[HS / 16];
    wmma::load_matrix_sync(rowmap, wx, 16, wmma::mem_row_major);
    for (int n = 0; n < HS / 16; n++) wmma::fill_fragment(o[n], 0.f);
    float m[16], l[16];
#pragma unroll
    for (int rr = 0; rr < 16; rr++) m[rr] = -INFINITY, l[rr] = 0.f;
    int tlast = min(T, t0 + FT) - 1, jbeg = seq_start[seq_of[t0]];
    __syncthreads();
    for (int j0 = jbeg; j0 <= tlast; j0 += FT) {
        load_tile<HS>(sK, k, j0, T, kd, hk * HS);
        load_tile<HS>(sV, v, j0, T, kd, hk * HS);
        __syncthreads();
        for (int nt = 0; nt < FT / 16; nt++) {   // S = Q K^T for this warp's rows
            facc acc;
            wmma::fill_fragment(acc, 0.f);
            for (int kk = 0; kk < HS; kk += 16) {
                fa_row a;
                fb_col b;
                wmma::load_matrix_sync(a, sQ + warp * 16 * HS + kk, HS);
                wmma::load_matrix_sync(b, sK + nt * 16 * HS + kk, HS);
                wmma::mma_sync(acc, a, b, acc);
            }
            wmma::store_matrix_sync(sS + warp * 16 * FT + nt * 16, acc, FT, wmma::mem_row_major);
        }
        __syncwarp();
#pragma unroll
        for (int rr = 0; rr < 16; rr++) {   // one row at a time, lanes across its columns
            int r = warp * 16 + rr, t = t0 + r, s0 = sS0[r], ja = j0 + lane, jb = ja + 32;
            float xa = (t < T && ja >= s0 && ja <= t) ? sS[r * FT + lane] * scale : -INFINITY;
            float xb = (t < T && jb >= s0 && jb <= t) ? sS[r * FT + lane + 32] * scale : -INFINITY;
            float mnew = fmaxf(m[rr], warp_max(fmaxf(xa, xb)));
            float corr = mnew == -INFINITY ? 1.f : expf(m[rr] - mnew);
            float pa = xa == -INFINITY ? 0.f : expf(xa - mnew), pb = xb == -INFINITY ? 0.f : expf(xb - mnew);
            sP[r * FT + lane] = __float2bfloat16(pa);
            sP[r * FT + lane + 32] = __float2bfloat16(pb);
            l[rr] = l[rr] * corr + warp_sum(pa + pb);
            m[rr] = mnew;
            if (lane == 0) sC[r] = corr;
        }
        __syncwarp();
        for (int nt = 0; nt < HS / 16; nt++) {   // O = O * corr (in the fragments), O += P V
            for (int e = 0; e < o[nt].num_elements; e++) o[nt].x[e] *= sC[warp * 16 + (int)rowmap.x[e]];
            for (int kk = 0; kk < FT; kk += 16) {
                fa_row a;
                fb_row b;
                wmma::load_matrix_sync(a, sP + warp * 16 * FT + kk, FT);
                wmma::load_matrix_sync(b, sV + kk * HS + nt * 16, HS);
                wmma::mma_sync(o[nt], a, b, o[nt]);
            }
        }
        __syncthreads();   // K/V are rewritten next
    }
    if (lane == 0)
#pragma unroll
        for (int rr = 0; rr < 16; rr++) sC[warp * 16 + rr] = l[rr] > 0.f ? 1.f / l[rr] : 0.f;
    __syncwarp();
    for (int nt = 0; nt < HS / 16; nt++) {   // O / l through this warp's staging tile
        for (int e = 0; e < o[nt].num_elements; e++) o[nt].x[e] *= sC[warp * 16 + (int)rowmap.x[e]];
        wmma::store_matrix_sync(wx, o[nt], 16, wmma::mem_row_major);
        __syncwarp();
        for (int e = lane; e < 256; e += 32) {
            int t = t0 + warp * 16 + e / 16;
            if (t < T) out[(size_t)t * qd + h * HS + nt * 16 + e % 16] = __float2bfloat16(wx[e]);
        }
        __syncwarp();
    }
    if (lse && lane == 0)
#pragma unroll
        for (int rr = 0; rr < 16; rr++) {
            int t = t0 + warp * 16 + rr;
            if (t < T) lse[(size_t)t * nh + h] = m[rr] + logf(l[rr]);
        }
}

// D[t,h] = dout . out (one warp per row and head).
__global__ void k_flash_d(float *D, const bf16 *dout, const bf16 *out, int T, int nh, int hs) {
    int w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (w >= T * nh) return;
    size_t o = (size_t)(w / nh) * nh * hs + (size_t)(w % nh) * hs;
    float s = 0.f;
    for (int d = lane; d < hs; d += 32) s += __bfloat162float(dout[o + d]) * __bfloat162float(out[o + d]);
    s = warp_sum(s);
    if (!lane) D[w] = s;
}

template <int HS>
static size_t bwd_smem() {
    return (size_t)4 * FT * HS * 2 + 2 * FT * FT * 4 + 2 * FT * FT * 2 + (size_t)FT * HS * 4 + 3 * FT * 4;
}

template <int HS>
__global__ void __launch_bounds__(FW * 32) k_flash_bwd(float *dq32, bf16 *dk, bf16 *dv, const bf16 *dout, const float *lse,
                                                      const float *D, const bf16 *q, const bf16 *k, const bf16 *v,
                                                      const int32_t *seq_of, const int32_t *seq_start, int T, int nh,
                                                      int nkv, float scale) {
    extern __shared__ __align__(128) unsigned char sm[];
    bf16 *sK = (bf16 *)sm, *sV = sK + FT * HS, *sQ = sV + FT * HS, *sdO = sQ + FT * HS;
    float *sP32 = (float *)(sdO + FT * HS), *sdP = sP32 + FT * FT;
    bf16 *sP = (bf16 *)(sdP + FT * FT), *sdS = sP + FT * FT;
    float *sX = (float *)(sdS + FT * FT), *sLse = sX + FT * HS, *sD = sLse + FT;
    int *sQs = (int *)(sD + FT);
    int hk = blockIdx.y, G = nh / nkv, j0 = blockIdx.x * FT, qd = nh * HS, kd = nkv * HS;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    load_tile<HS>(sK, k, j0, T, kd, hk * HS);
    load_tile<HS>(sV, v, j0, T, kd, hk * HS);
    int qend = seq_start[seq_of[min(T, j0 + FT) - 1] + 1] - 1;   // last query that sees a key of the tile
    facc dK[HS / 16], dV[HS / 16];
    for (int n = 0; n < HS / 16; n++) wmma::fill_fragment(dK[n], 0.f), wmma::fill_fragment(dV[n], 0.f);
    for (int h = hk * G; h < hk * G + G; h++) {
        for (int q0 = j0; q0 <= qend; q0 += FT) {
            __syncthreads();   // the previous tile's readers are done
            load_tile<HS>(sQ, q, q0, T, qd, h * HS);
            load_tile<HS>(sdO, dout, q0, T, qd, h * HS);
            for (int i = threadIdx.x; i < FT; i += blockDim.x) {
                int t = q0 + i;
                int ok = t < T && t <= qend;
                sLse[i] = ok ? lse[(size_t)t * nh + h] : 0.f;
                sD[i] = ok ? D[(size_t)t * nh + h] : 0.f;
                sQs[i] = ok ? seq_start[seq_of[t]] : 0x7fffffff;
            }
            __syncthreads();
            for (int nt = 0; nt < FT / 16; nt++) {   // S^T = K Q^T (this warp's 16 keys)
                facc acc;
                wmma::fill_fragment(acc, 0.f);
                for (int kk = 0; kk < HS; kk += 16) {
                    fa_row a;
                    fb_col b;
                    wmma::load_matrix_sync(a, sK + warp * 16 * HS + kk, HS);
                    wmma::load_matrix_sync(b, sQ + nt * 16 * HS + kk, HS);
                    wmma::mma_sync(acc, a, b, acc);
                }
                wmma::store_matrix_sync(sP32 + warp * 16 * FT + nt * 16, acc, FT, wmma::mem_row_major);
            }
            __syncwarp();
            for (int e = lane; e < 16 * FT; e += 32) {   // P^T, masked
                int rk = warp * 16 + e / FT, c = e % FT, j = j0 + rk, t = q0 + c;
                int ok = j < T && t >= j && sQs[c] <= j;   // t in j's sequence, at or after j
                float p = ok ? expf(sP32[rk * FT + c] * scale - sLse[c]) : 0.f;
                sP32[rk * FT + c] = p;
                sP[rk * FT + c] = __float2bfloat16(p);
            }
            __syncwarp();
            for (int nt = 0; nt < HS / 16; nt++)   // dV += P^T dO
                for (int kk = 0; kk < FT; kk += 16) {
                    fa_row a;
                    fb_row b;
                    wmma::load_matrix_sync(a, sP + warp * 16 * FT + kk, FT);
                    wmma::load_matrix_sync(b, sdO + kk * HS + nt * 16, HS);
                    wmma::mma_sync(dV[nt], a, b, dV[nt]);
                }
            for (int nt = 0; nt < FT / 16; nt++) {   // dP^T = V dO^T
                facc acc;
                wmma::fill_fragment(acc, 0.f);
                for (int kk = 0; kk < HS; kk += 16) {
                    fa_row a;
                    fb_col b;
                    wmma::load_matrix_sync(a, sV + warp * 16 * HS + kk, HS);
                    wmma::load_matrix_sync(b, sdO + nt * 16 * HS + kk, HS);
                    wmma::mma_sync(acc, a, b, acc);
                }
                wmma::store_matrix_sync(sdP + warp * 16 * FT + nt * 16, acc, FT, wmma::mem_row_major);
            }
            __syncwarp();
            for (int e = lane; e < 16 * FT; e += 32) {   // dS^T = P^T (dP^T - D) * scale
                int rk = warp * 16 + e / FT, c = e % FT;
                sdS[rk * FT + c] = __float2bfloat16(sP32[rk * FT + c] * (sdP[rk * FT + c] - sD[c]) * scale);
            }
            __syncthreads();   // dQ reads every warp's dS^T rows
            for (int nt = 0; nt < HS / 16; nt++)   // dK += dS^T Q
                for (int kk = 0; kk < FT; kk += 16) {
                    fa_row a;
                    fb_row b;
                    wmma::load_matrix_sync(a, sdS + warp * 16 * FT + kk, FT);
                    wmma::load_matrix_sync(b, sQ + kk * HS + nt * 16, HS);
                    wmma::mma_sync(dK[nt], a, b, dK[nt]);
                }
            for (int nt = 0; nt < HS / 16; nt++) {   // dQ = dS K for this warp's 16 queries
                facc acc;
                wmma::fill_fragment(acc, 0.f);
                for (int kk = 0; kk < FT; kk += 16) {
                    fa_col a;   // dS = (dS^T)^T: column-major view of sdS
                    fb_row b;
                    wmma::load_matrix_sync(a, sdS + kk * FT + warp * 16, FT);
                    wmma::load_matrix_sync(b, sK + kk * HS + nt * 16, HS);
                    wmma::mma_sync(acc, a, b, acc);
                }
                wmma::store_matrix_sync(sX + warp * 16 * HS + nt * 16, acc, HS, wmma::mem_row_major);
            }
            __syncwarp();
            for (int e = lane; e < 16 * HS; e += 32) {
                int rr = warp * 16 + e / HS, t = q0 + rr;
                if (t < T && t <= qend) atomicAdd(&dq32[(size_t)t * qd + h * HS + e % HS], sX[rr * HS + e % HS]);
            }
        }
    }
    // dK, dV of this warp's 16 keys, through the staging buffer.
    for (int which = 0; which < 2; which++) {
        __syncwarp();
        for (int nt = 0; nt < HS / 16; nt++)
            wmma::store_matrix_sync(sX + warp * 16 * HS + nt * 16, which ? dV[nt] : dK[nt], HS, wmma::mem_row_major);
        __syncwarp();
        bf16 *dst = which ? dv : dk;
        for (int e = lane; e < 16 * HS; e += 32) {
            int rr = warp * 16 + e / HS, j = j0 + rr;
            if (j < T) dst[(size_t)j * kd + hk * HS + e % HS] = __float2bfloat16(sX[rr * HS + e % HS]);
        }
    }
}

__global__ void k_seq_of_rows(int32_t *seq_of, const int32_t *seq_start, int nseq) {
    int s = blockIdx.x;
    for (int t = seq_start[s] + threadIdx.x; t < seq_start[s + 1]; t += blockDim.x) seq_of[t] = s;
}

extern "C" skpo_status skpo_cuda_flash_seq_of(skpo_cuda *c, int32_t *seq_of, const int32_t *seq_start, int nseq,
                                              skpo_err *err) {
    if (!nseq) return SKPO_OK;
    k_seq_of_rows<<<nseq, 256, 0, c->stream>>>(seq_of, seq_start, nseq);
    LAUNCHED(err);
    return SKPO_OK;
}

template <int HS>
static skpo_status fwd_launch(skpo_cuda *c, skpo_bf16 *out, float *lse, const skpo_bf16 *q, const skpo_bf16 *k,
                              const skpo_bf16 *v, const int32_t *seq_of, const int32_t *seq_start, int T, int nh, int nkv,
                              skpo_err *err) {
    size_t sm = fwd_smem<HS>();
    CU(cudaFuncSetAttribute(k_flash_fwd<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm), err);
    dim3 grid((T + FT - 1) / FT, nh);
    k_flash_fwd<HS><<<grid, FW * 32, sm, c->stream>>>((bf16 *)out, lse, (const bf16 *)q, (const bf16 *)k,
                                                      (const bf16 *)v, seq_of, seq_start, T, nh, nkv,
                                                      1.f / sqrtf((float)HS));
    LAUNCHED(err);
    return SKPO_OK;
}

extern "C" skpo_status skpo_cuda_flash_attention(skpo_cuda *c, skpo_bf16 *out, float *lse, const skpo_bf16 *q,
                                                 const skpo_bf16 *k, const skpo_bf16 *v, const int32_t *seq_of,
                                                 const int32_t *seq_start, int T, int nh, int nkv, int hs,
                                                 skpo_err *err) {
    if (!T) return SKPO_OK;
    if (nh % nkv) return skpo_err_set(err, SKPO_EUNSUPPORTED, "flash attention: %d heads over %d KV heads", nh, nkv);
    if (hs == 64) return fwd_launch<64>(c, out, lse, q, k, v, seq_of, seq_start, T, nh, nkv, err);
    if (hs == 128) return fwd_launch<128>(c, out, lse, q, k, v, seq_of, seq_start, T, nh, nkv, err);
    return skpo_err_set(err, SKPO_EUNSUPPORTED, "flash attention: head_dim %d (64 or 128)", hs);
}

template <int HS>
static skpo_status bwd_launch(skpo_cuda *c, float *dq32, skpo_bf16 *dk, skpo_bf16 *dv, const skpo_bf16 *dout,
                              const float *lse, const float *D, const skpo_bf16 *q, const skpo_bf16 *k,
                              const skpo_bf16 *v, const int32_t *seq_of, const int32_t *seq_start, int T, int nh, int nkv,
                              skpo_err *err) {
    size_t sm = bwd_smem<HS>();
    CU(cudaFuncSetAttribute(k_flash_bwd<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm), err);
    dim3 grid((T + FT - 1) / FT, nkv);
    k_flash_bwd<HS><<<grid, FW * 32, sm, c->stream>>>(dq32, (bf16 *)dk, (bf16 *)dv, (const bf16 *)dout, lse, D,
                                                      (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, seq_of,
                                                      seq_start, T, nh, nkv, 1.f / sqrtf((float)HS));
    LAUNCHED(err);
    return SKPO_OK;
}

extern "C" skpo_status skpo_cuda_flash_attention_backward(skpo_cuda *c, skpo_bf16 *dq, skpo_bf16 *dk, skpo_bf16 *dv,
                                                          const skpo_bf16 *dout, const skpo_bf16 *out, const float *lse,
                                                          const skpo_bf16 *q, const skpo_bf16 *k, const skpo_bf16 *v,
                                                          const int32_t *seq_of, const int32_t *seq_start, int T,
                                                          int nh, int nkv, int hs, float *work, skpo_err *err) {
    if (!T) return SKPO_OK;
    if (nh % nkv || (hs != 64 && hs != 128))
        return skpo_err_set(err, SKPO_EUNSUPPORTED, "flash attention: head_dim %d (64 or 128), heads %d/%d", hs, nh, nkv);
    float *D = work, *dq32 = work + (size_t)T * nh;
    size_t nq = (size_t)T * nh * hs;
    CU(cudaMemsetAsync(dq32, 0, nq * sizeof(float), c->stream), err);
    size_t threads = (size_t)T * nh * 32;
    k_flash_d<<<blocks_for(threads, 256), 256, 0, c->stream>>>(D, (const bf16 *)dout, (const bf16 *)out, T, nh, hs);
    LAUNCHED(err);
    skpo_status st = hs == 64 ? bwd_launch<64>(c, dq32, dk, dv, dout, lse, D, q, k, v, seq_of, seq_start, T, nh, nkv, err)
                              : bwd_launch<128>(c, dq32, dk, dv, dout, lse, D, q, k, v, seq_of, seq_start, T, nh, nkv, err);
    if (st) return st;
    return skpo_cuda_f32_to_bf16(c, dq, dq32, nq, err);
}
