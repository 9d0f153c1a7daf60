// infer.cu - what the inference path adds to the backend (see cuda_infer.h):
// async copies and pinned staging memory, a float32-output linear layer for
// the logits, paged attention for query rows at any position, CUDA graphs.
#include "common.cuh"
#include "cuda/cuda_infer.h"

#include <stdlib.h>

// --- memory and copies ---------------------------------------------------------------

extern "C" skpo_status skpo_cuda_host_alloc(void **p, size_t bytes, skpo_err *err) {
    cudaError_t e = cudaMallocHost(p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        cudaGetLastError();
        *p = NULL;
        return skpo_err_set(err, SKPO_ENOMEM, "cannot allocate %zu KiB of pinned host memory: %s", bytes >> 10,
                            cudaGetErrorString(e));
    }
    return SKPO_OK;
}

extern "C" void skpo_cuda_host_free(void *p) {
    if (p) cudaFreeHost(p);
}

extern "C" skpo_status skpo_cuda_h2d_async(skpo_cuda *c, void *dst, const void *src, size_t bytes, skpo_err *err) {
    if (bytes) CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, STREAM(c)), err);
    return SKPO_OK;
}

extern "C" skpo_status skpo_cuda_d2h_async(skpo_cuda *c, void *dst, const void *src, size_t bytes, skpo_err *err) {
    if (bytes) CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, STREAM(c)), err);
    return SKPO_OK;
}

extern "C" skpo_status skpo_cuda_d2d_async(skpo_cuda *c, void *dst, const void *src, size_t bytes, skpo_err *err) {
    if (bytes) CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, STREAM(c)), err);
    return SKPO_OK;
}

struct skpo_cuda_event {
    cudaEvent_t e;
};

extern "C" skpo_status skpo_cuda_event_new(skpo_cuda_event **out, skpo_err *err) {
    cudaEvent_t e;
    *out = NULL;
    CU(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), err);
    *out = (skpo_cuda_event *)skpo_xcalloc(1, sizeof **out);
    (*out)->e = e;
    return SKPO_OK;
}

extern "C" void skpo_cuda_event_free(skpo_cuda_event *e) {
    if (!e) return;
    cudaEventDestroy(e->e);
    free(e);
}

extern "C" skpo_status skpo_cuda_event_record(skpo_cuda *c, skpo_cuda_event *e, skpo_err *err) {
    CU(cudaEventRecord(e->e, STREAM(c)), err);
    return SKPO_OK;
}

extern "C" skpo_status skpo_cuda_event_wait(skpo_cuda_event *e, skpo_err *err) {
    CU(cudaEventSynchronize(e->e), err);
    return SKPO_OK;
}

extern "C" size_t skpo_cuda_mem_total(skpo_cuda *c) {
    size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return t;
}

// --- logits: bf16 GEMM with a float32 result --------------------------------------------

extern "C" skpo_status skpo_cuda_linear_f32out(skpo_cuda *c, float *y, const skpo_bf16 *x, const skpo_bf16 *w, int T,
                                               int K, int N, skpo_err *err) {
    if (!T) return SKPO_OK;
    float alpha = 1.f, beta = 0.f;  // column-major view as in skpo_cuda_linear
    CUBLAS(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &alpha, w, CUDA_R_16BF, K, x, CUDA_R_16BF, K,
                        &beta, y, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), err);
    return SKPO_OK;
}

// --- SwiGLU over a fused gate|up GEMM output ----------------------------------------------

__global__ void k_swiglu_fused(bf16 *out, const bf16 *gu, int T, int F) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * F) return;
    size_t t = i / F, f = i - t * F;
    float a = __bfloat162float(gu[t * 2 * F + f]), b = __bfloat162float(gu[t * 2 * F + F + f]);
    out[i] = __float2bfloat16(a / (1.f + expf(-a)) * b);
}

extern "C" skpo_status skpo_cuda_swiglu_fused(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *gu, int T, int F,
                                              skpo_err *err) {
    if (!T) return SKPO_OK;
    size_t n = (size_t)T * F;
    k_swiglu_fused<<<blocks_for(n, 256), 256, 0, c->stream>>>((bf16 *)out, (const bf16 *)gu, T, F);
    LAUNCHED(err);
    return SKPO_OK;
}

// --- paged attention for rows at arbitrary positions ------------------------------------
// Grid (N rows, nkv heads, S splits); block = one warp per query head of the
// KV group (G = nh / nkv <= 16). K/V tiles of 32 positions are staged in
// shared memory (float) once for the whole group; within a tile each lane
// scores one position against the warp's query (q in shared memory, broadcast
// float4 reads; K rows padded by 4 floats so each quarter-warp's 128-bit loads
// hit distinct banks), the warp
// updates its online softmax once per tile, and each lane accumulates hs/32
// output dims. With S > 1 (few rows, long contexts: flash-decoding) split z
// covers positions [z*chunk, (z+1)*chunk) and writes its unnormalised partial
// (m, l, acc) to `part`; k_attn_combine merges the splits.

#define PG_TILE 32
#define PG_MAX_HS 256
#define PG_MAX_SPLITS 64

__device__ __forceinline__ size_t pg_row(int block, int n_layers, int layer, int block_size, int row, int kv_dim) {
    return (((size_t)block * n_layers + layer) * block_size + row) * kv_dim;
}

// At most 16 warps per block: ~90 registers a thread (sm_90, no spills) x 512
// threads fit the register file.
__global__ void __launch_bounds__(512, 1) k_attn_paged(bf16 *out, float *part, const bf16 *q, const bf16 *pk, const bf16 *pv, const int32_t *bt,
                             int max_blocks, const int32_t *row_seq, const int32_t *row_pos, int n_layers, int layer,
                             int block_size, int nh, int nkv, int hs, int chunk, float scale) {
    extern __shared__ float sh[];
    int r = blockIdx.x, hk = blockIdx.y, z = blockIdx.z, S = gridDim.z, G = nh / nkv;
    int g = threadIdx.x >> 5, lane = threadIdx.x & 31, nthr = blockDim.x;
    int ks = hs + 4, kd = nkv * hs, qd = nh * hs, h = hk * G + g;
    int len = row_pos[r] + 1, jb = z * chunk, je = min(len, jb + chunk);
    float *pp = part ? part + (((size_t)r * nh + h) * S + z) * (hs + 2) : NULL;
    if (jb >= len) {  // this split is past the row's end (uniform over the block)
        if (pp && lane == 0) { pp[0] = -INFINITY; pp[1] = 0.f; }
        return;
    }
    float *qs = sh;                      // (G, hs)
    float *Ks = qs + (size_t)G * hs;     // (TILE, hs + 4)
    float *Vs = Ks + PG_TILE * ks;       // (TILE, hs)
    float *Ps = Vs + PG_TILE * hs;       // (G, TILE)
    const bf16 *qrow = (const bf16 *)q + (size_t)r * qd + (size_t)hk * G * hs;
    for (int i = threadIdx.x; i < G * hs; i += nthr) qs[i] = __bfloat162float(qrow[i]) * scale;
    const int32_t *table = bt + (size_t)row_seq[r] * max_blocks;
    float m = -INFINITY, l = 0.f, acc[PG_MAX_HS / 32];
#pragma unroll
    for (int i = 0; i < PG_MAX_HS / 32; i++) acc[i] = 0.f;
    for (int j0 = jb; j0 < je; j0 += PG_TILE) {
        int nt = min(PG_TILE, je - j0);
        __syncthreads();  // the previous tile is consumed (and qs is written)
        for (int i = threadIdx.x; i < nt * hs; i += nthr) {
            int j = i / hs, d = i - j * hs, p = j0 + j;
            size_t o = pg_row(table[p / block_size], n_layers, layer, block_size, p % block_size, kd) + (size_t)hk * hs + d;
            Ks[j * ks + d] = __bfloat162float(((const bf16 *)pk)[o]);
            Vs[j * hs + d] = __bfloat162float(((const bf16 *)pv)[o]);
        }
        __syncthreads();
        const float4 *q4 = (const float4 *)(qs + (size_t)g * hs);
        float s = -INFINITY;
        if (lane < nt) {
            const float4 *k4 = (const float4 *)(Ks + lane * ks);
            float dot = 0.f;
            for (int d = 0; d < hs / 4; d++) {
                float4 a = q4[d], b = k4[d];
                dot += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
            }
            s = dot;
        }
        float mn = fmaxf(m, warp_max(s));  // finite: nt >= 1
        float corr = expf(m - mn), p = lane < nt ? expf(s - mn) : 0.f;
        l = l * corr + warp_sum(p);
        Ps[g * PG_TILE + lane] = p;
        __syncwarp();
        const float *pw = Ps + g * PG_TILE;
        int nt4 = nt & ~3;  // rows past nt hold stale data: never multiply them, even by 0
#pragma unroll
        for (int i = 0; i < PG_MAX_HS / 32; i++) {
            int d = lane + 32 * i;
            if (d < hs) {
                float a = acc[i] * corr;
                for (int j = 0; j < nt4; j += 4) {
                    float4 pj = *(const float4 *)(pw + j);
                    a += pj.x * Vs[j * hs + d] + pj.y * Vs[(j + 1) * hs + d] + pj.z * Vs[(j + 2) * hs + d] +
                         pj.w * Vs[(j + 3) * hs + d];
                }
                for (int j = nt4; j < nt; j++) a += pw[j] * Vs[j * hs + d];
                acc[i] = a;
            }
        }
        m = mn;
        __syncwarp();
    }
    if (pp) {
        if (lane == 0) { pp[0] = m; pp[1] = l; }
#pragma unroll
        for (int i = 0; i < PG_MAX_HS / 32; i++)
            if (lane + 32 * i < hs) pp[2 + lane + 32 * i] = acc[i];
        return;
    }
    bf16 *orow = out + (size_t)r * qd + (size_t)h * hs;
#pragma unroll
    for (int i = 0; i < PG_MAX_HS / 32; i++)
        if (lane + 32 * i < hs) orow[lane + 32 * i] = __float2bfloat16(acc[i] / l);
}

// One warp per (row, head): merge the S partials by their maxima.
__global__ void k_attn_combine(bf16 *out, const float *part, int N, int nh, int hs, int S) {
    int w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (w >= N * nh) return;
    const float *pp = part + (size_t)w * S * (hs + 2);
    float M = -INFINITY;
    for (int z = 0; z < S; z++) M = fmaxf(M, pp[(size_t)z * (hs + 2)]);
    float L = 0.f;
    for (int z = 0; z < S; z++) {
        const float *pz = pp + (size_t)z * (hs + 2);
        if (pz[1] > 0.f) L += pz[1] * expf(pz[0] - M);
    }
    for (int d = lane; d < hs; d += 32) {
        float a = 0.f;
        for (int z = 0; z < S; z++) {
            const float *pz = pp + (size_t)z * (hs + 2);
            if (pz[1] > 0.f) a += pz[2 + d] * expf(pz[0] - M);
        }
        out[(size_t)w * hs + d] = __float2bfloat16(a / L);
    }
}

// Blocks worth filling the device with (two waves of one block per SM).
static int pg_target_blocks(skpo_cuda *c) {
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, c->device) != cudaSuccess || sms <= 0) {
        cudaGetLastError();
        sms = 32;
    }
    return 2 * sms;
}

extern "C" size_t skpo_cuda_attention_paged_work(skpo_cuda *c, int nh, int nkv, int hs) {
    // Splitting only happens while N * nkv < target, and then S * N <= target / nkv + N.
    size_t target = (size_t)pg_target_blocks(c);
    size_t simt = (2 * target / (size_t)(nkv > 0 ? nkv : 1) + 1) * (size_t)nh * (size_t)(hs + 2) * sizeof(float);
    size_t mma = skpo_cuda_attention_paged_mma_work(c, nh, nkv, hs);   // decode.cu
    return simt > mma ? simt : mma;
}

extern "C" skpo_status skpo_cuda_attention_paged(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *q,
                                                 const skpo_bf16 *pool_k, const skpo_bf16 *pool_v,
                                                 const int32_t *block_table, int max_blocks, const int32_t *row_seq,
                                                 const int32_t *row_pos, int N, int n_layers, int layer, int block_size,
                                                 int nh, int nkv, int hs, float *work, size_t work_bytes,
                                                 skpo_err *err) {
    if (!N) return SKPO_OK;
    if (skpo_cuda_attention_paged_mma_fits(q, pool_k, pool_v, nh, nkv, hs, max_blocks, block_size))   // decode.cu
        return skpo_cuda_attention_paged_mma(c, out, q, pool_k, pool_v, block_table, max_blocks, row_seq, row_pos, N,
                                             n_layers, layer, block_size, nh, nkv, hs, work, work_bytes, err);
    if (hs > PG_MAX_HS || hs % 4 || nkv <= 0 || nh % nkv || nh / nkv > 16)
        return skpo_err_set(err, SKPO_EUNSUPPORTED, "paged attention: head_dim %d with %d query / %d kv heads unsupported",
                            hs, nh, nkv);
    int G = nh / nkv;
    // Splits: from the shapes only (N, table width), so a captured graph stays valid.
    int tiles = (max_blocks * block_size + PG_TILE - 1) / PG_TILE, blocks = N * nkv, S = 1;
    if (work && blocks < pg_target_blocks(c)) {
        S = (pg_target_blocks(c) + blocks - 1) / blocks;
        if (S > tiles) S = tiles;
        if (S > PG_MAX_SPLITS) S = PG_MAX_SPLITS;
        size_t per = (size_t)N * nh * (hs + 2) * sizeof(float);
        if ((size_t)S * per > work_bytes) S = (int)(work_bytes / per);
        if (S < 1) S = 1;
    }
    int chunk_tiles = (tiles + S - 1) / S;
    if (S > 1) S = (tiles + chunk_tiles - 1) / chunk_tiles;  // no empty trailing splits
    size_t shm = sizeof(float) * ((size_t)G * hs + (size_t)PG_TILE * (hs + 4) + (size_t)PG_TILE * hs + (size_t)G * PG_TILE);
    if (shm > 48 * 1024)
        CU(cudaFuncSetAttribute(k_attn_paged, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm), err);
    dim3 grid((unsigned)N, (unsigned)nkv, (unsigned)S);
    k_attn_paged<<<grid, 32 * G, shm, c->stream>>>((bf16 *)out, S > 1 ? work : NULL, (const bf16 *)q,
                                                   (const bf16 *)pool_k, (const bf16 *)pool_v, block_table, max_blocks,
                                                   row_seq, row_pos, n_layers, layer, block_size, nh, nkv, hs,
                                                   S > 1 ? chunk_tiles * PG_TILE : tiles * PG_TILE,
                                                   1.f / sqrtf((float)hs));
    LAUNCHED(err);
    if (S > 1) {
        size_t threads = (size_t)N * nh * 32;
        k_attn_combine<<<blocks_for(threads, 128), 128, 0, c->stream>>>((bf16 *)out, work, N, nh, hs, S);
        LAUNCHED(err);
    }
    return SKPO_OK;
}

// --- prefill: tiles of rows of one sequence ----------------------------------------------
// Grid (tiles, nkv); block = one warp per query head of the group (G <= 8).
// Shared: the tile's queries (G, PF_ROWS, hs) scaled, K (PG_TILE, hs + 4) and
// V (PG_TILE, hs) as float, each warp's probabilities (PF_ROWS, PG_TILE).
// Per key tile each lane scores one key against all rows of its warp's head
// (K read once per lane, queries as broadcast float4), the online softmax is
// per row (m, l in registers), and each lane accumulates PL = hs/32 output
// dims of every row. K/V rows are fetched as 16-byte vectors, one block-table
// lookup per key.
#define PF_ROWS SKPO_CUDA_PREFILL_ROWS
#define PF_MAX_G 8

// Eight bf16 (one 16-byte load, little-endian pairs) to float: a bf16 is the top half of a float.
__device__ __forceinline__ float pf_bits(uint32_t w) {
    float f;
    memcpy(&f, &w, sizeof f);
    return f;
}
__device__ __forceinline__ void pf_unpack8(float *dst, uint4 u) {
    uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int x = 0; x < 4; x++) {
        dst[2 * x] = pf_bits(w[x] << 16);
        dst[2 * x + 1] = pf_bits(w[x] & 0xffff0000u);
    }
}

// The tile's queries, scaled: sQ (G, PF_ROWS, hs) from rows r0 .. r0+n of the
// KV group's G heads, 8 dims (one 16-byte load) per thread.
__device__ __forceinline__ void pf_load_queries(float *sQ, const bf16 *q, int r0, int n, int G, int hk, int hs, int qd,
                                                float scale) {
    int cpr = hs / 8;
    for (int i = threadIdx.x; i < n * G * cpr; i += blockDim.x) {
        int r = i / (G * cpr), rem = i - r * G * cpr, gg = rem / cpr, c = rem - gg * cpr;
        float f[8];
        pf_unpack8(f, *(const uint4 *)(q + (size_t)(r0 + r) * qd + (size_t)(hk * G + gg) * hs + c * 8));
        float *d = sQ + ((size_t)gg * PF_ROWS + r) * hs + c * 8;
#pragma unroll
        for (int x = 0; x < 8; x++) d[x] = f[x] * scale;
    }
}

// Keys and values j0 .. j0+nt of KV head hk into sK (row stride ks) and sV:
// one block-table lookup per key (sOff), then 16-byte vectors.
__device__ __forceinline__ void pf_load_kv_tile(float *sK, float *sV, size_t *sOff, const bf16 *pk, const bf16 *pv,
                                                const int32_t *table, int j0, int nt, int n_layers, int layer,
                                                int block_size, int hk, int hs, int kd) {
    int ks = hs + 4, cpr = hs / 8;
    __syncthreads();   // the previous tile is consumed (and the queries are written)
    if ((int)threadIdx.x < nt) {
        int p = j0 + threadIdx.x;
        sOff[threadIdx.x] = pg_row(table[p / block_size], n_layers, layer, block_size, p % block_size, kd) +
                            (size_t)hk * hs;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < nt * cpr; i += blockDim.x) {
        int j = i / cpr, c = i - j * cpr;
        size_t o = sOff[j] + (size_t)c * 8;
        pf_unpack8(sK + j * ks + c * 8, *(const uint4 *)(pk + o));
        pf_unpack8(sV + j * hs + c * 8, *(const uint4 *)(pv + o));
    }
    __syncthreads();
}

// s[r] = q_r . k_lane for the warp's n rows qw (already scaled): each lane
// scores one key, K read once, the queries as broadcast float4.
__device__ __forceinline__ void pf_scores(float *s, const float *qw, const float *sK, int lane, int nt, int n, int hs) {
#pragma unroll
    for (int r = 0; r < PF_ROWS; r++) s[r] = 0.f;
    if (lane < nt) {
        const float4 *k4 = (const float4 *)(sK + lane * (hs + 4));
        for (int d = 0; d < hs / 4; d++) {
            float4 b = k4[d];
#pragma unroll
            for (int r = 0; r < PF_ROWS; r++)
                if (r < n) {
                    float4 a = ((const float4 *)(qw + r * hs))[d];
                    s[r] += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
                }
        }
    }
}

// Online softmax of the tile for each row r (position p0 + r sees keys up to
// itself): raise m, rescale l and the output by exp(m_old - m), write
// P = exp(s - m) to pw for the P V step.
template <int PL>
__device__ __forceinline__ void pf_online_softmax(float *m, float *l, float (*acc)[PL], float *pw, const float *s,
                                                  int lane, int nt, int j0, int p0, int n) {
    int j = j0 + lane;
#pragma unroll
    for (int r = 0; r < PF_ROWS; r++) {
        if (r >= n) break;
        // Rows past this tile's keys keep their state (their keys end before j0).
        int ok = lane < nt && j <= p0 + r;
        float x = ok ? s[r] : -INFINITY, mx = warp_max(x);
        float mn = fmaxf(m[r], mx);
        float corr = m[r] == -INFINITY ? 0.f : expf(m[r] - mn), pr = ok ? expf(x - mn) : 0.f;
        l[r] = l[r] * corr + warp_sum(pr);
        m[r] = mn;
        pw[r * PG_TILE + lane] = pr;
#pragma unroll
        for (int i = 0; i < PL; i++) acc[r][i] *= corr;
    }
}

// acc[r] += P_r V over the tile's nt keys, four at a time; each lane owns PL
// output dims (lane + 32 i) of every row.
template <int PL>
__device__ __forceinline__ void pf_accumulate_pv(float (*acc)[PL], const float *pw, const float *sV, int lane, int nt,
                                                 int n, int hs) {
    int nt4 = nt & ~3;   // V rows past nt hold stale data: never multiply them, even by 0
    for (int jj = 0; jj < nt; jj += 4) {
        float vv[4][PL];
#pragma unroll
        for (int u = 0; u < 4; u++)
#pragma unroll
            for (int i = 0; i < PL; i++) {
                int d = lane + 32 * i;
                vv[u][i] = (jj + u < nt && d < hs) ? sV[(jj + u) * hs + d] : 0.f;
            }
#pragma unroll
        for (int r = 0; r < PF_ROWS; r++) {
            if (r >= n) break;
            float4 p4;
            if (jj < nt4) p4 = *(const float4 *)(pw + r * PG_TILE + jj);
            else p4 = make_float4(pw[r * PG_TILE + jj], jj + 1 < nt ? pw[r * PG_TILE + jj + 1] : 0.f,
                                  jj + 2 < nt ? pw[r * PG_TILE + jj + 2] : 0.f, 0.f);
#pragma unroll
            for (int i = 0; i < PL; i++) acc[r][i] += p4.x * vv[0][i] + p4.y * vv[1][i] + p4.z * vv[2][i] + p4.w * vv[3][i];
        }
    }
}

template <int PL>
__global__ void __launch_bounds__(32 * PF_MAX_G) k_attn_prefill(bf16 *out, const bf16 *q, const bf16 *pk, const bf16 *pv,
                                                                 const int32_t *bt, int max_blocks,
                                                                 const int32_t *row_seq, const int32_t *row_pos,
                                                                 const int32_t *tiles, int n_layers, int layer,
                                                                 int block_size, int nh, int nkv, int hs, float scale) {
    extern __shared__ __align__(16) float sh[];
    int hk = blockIdx.y, G = nh / nkv, g = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r0 = tiles[2 * blockIdx.x], n = tiles[2 * blockIdx.x + 1];
    int ks = hs + 4, kd = nkv * hs, qd = nh * hs, h = hk * G + g;
    float *sQ = sh;                               // (G, PF_ROWS, hs)
    float *sK = sQ + (size_t)G * PF_ROWS * hs;    // (PG_TILE, hs + 4)
    float *sV = sK + PG_TILE * ks;                // (PG_TILE, hs)
    float *sP = sV + PG_TILE * hs;                // (G, PF_ROWS, PG_TILE)
    size_t *sOff = (size_t *)(sP + (size_t)G * PF_ROWS * PG_TILE);   // (PG_TILE) pool offsets of the keys
    pf_load_queries(sQ, q, r0, n, G, hk, hs, qd, scale);
    const int32_t *table = bt + (size_t)row_seq[r0] * max_blocks;
    int len = row_pos[r0 + n - 1] + 1, p0 = row_pos[r0];
    float m[PF_ROWS], l[PF_ROWS], acc[PF_ROWS][PL];
#pragma unroll
    for (int r = 0; r < PF_ROWS; r++) {
        m[r] = -INFINITY, l[r] = 0.f;
#pragma unroll
        for (int i = 0; i < PL; i++) acc[r][i] = 0.f;
    }
    float *pw = sP + (size_t)g * PF_ROWS * PG_TILE;
    const float *qw = sQ + (size_t)g * PF_ROWS * hs;
    for (int j0 = 0; j0 < len; j0 += PG_TILE) {
        int nt = min(PG_TILE, len - j0);
        pf_load_kv_tile(sK, sV, sOff, pk, pv, table, j0, nt, n_layers, layer, block_size, hk, hs, kd);
        float s[PF_ROWS];
        pf_scores(s, qw, sK, lane, nt, n, hs);
        pf_online_softmax<PL>(m, l, acc, pw, s, lane, nt, j0, p0, n);
        __syncwarp();
        pf_accumulate_pv<PL>(acc, pw, sV, lane, nt, n, hs);
        __syncwarp();   // pw is rewritten next tile
    }
#pragma unroll
    for (int r = 0; r < PF_ROWS; r++) {   // out = acc / l
        if (r >= n) break;
        bf16 *orow = out + (size_t)(r0 + r) * qd + (size_t)h * hs;
#pragma unroll
        for (int i = 0; i < PL; i++)
            if (lane + 32 * i < hs) orow[lane + 32 * i] = __float2bfloat16(acc[r][i] / l[r]);
    }
}

template <int PL>
static skpo_status prefill_launch(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *q, const skpo_bf16 *pool_k,
                                  const skpo_bf16 *pool_v, const int32_t *bt, int max_blocks, const int32_t *row_seq,
                                  const int32_t *row_pos, const int32_t *tiles, int ntiles, int n_layers, int layer,
                                  int block_size, int nh, int nkv, int hs, skpo_err *err) {
    int G = nh / nkv;
    size_t shm = sizeof(float) * ((size_t)G * PF_ROWS * hs + (size_t)PG_TILE * (hs + 4) + (size_t)PG_TILE * hs +
                                  (size_t)G * PF_ROWS * PG_TILE) +
                 PG_TILE * sizeof(size_t);
    if (shm > 48 * 1024)
        CU(cudaFuncSetAttribute(k_attn_prefill<PL>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm), err);
    dim3 grid((unsigned)ntiles, (unsigned)nkv);
    k_attn_prefill<PL><<<grid, 32 * G, shm, c->stream>>>((bf16 *)out, (const bf16 *)q, (const bf16 *)pool_k,
                                                         (const bf16 *)pool_v, bt, max_blocks, row_seq, row_pos, tiles,
                                                         n_layers, layer, block_size, nh, nkv, hs,
                                                         1.f / sqrtf((float)hs));
    LAUNCHED(err);
    return SKPO_OK;
}

extern "C" skpo_status skpo_cuda_attention_prefill(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *q,
                                                   const skpo_bf16 *pool_k, const skpo_bf16 *pool_v,
                                                   const int32_t *block_table, int max_blocks, const int32_t *row_seq,
                                                   const int32_t *row_pos, const int32_t *tiles, int ntiles, int N,
                                                   int n_layers, int layer, int block_size, int nh, int nkv, int hs,
                                                   skpo_err *err) {
    if (!N) return SKPO_OK;
    // 16-byte loads: q and the pools must be 16-byte aligned (rows are, for hs % 8 == 0).
    int misaligned = (((uintptr_t)q | (uintptr_t)pool_k | (uintptr_t)pool_v) & 15) != 0;
    if (nkv <= 0 || nh % nkv || nh / nkv > PF_MAX_G || hs % 8 || hs > 128 || !ntiles || misaligned)
        return skpo_cuda_attention_paged(c, out, q, pool_k, pool_v, block_table, max_blocks, row_seq, row_pos, N,
                                         n_layers, layer, block_size, nh, nkv, hs, NULL, 0, err);
    if (hs <= 32)
        return prefill_launch<1>(c, out, q, pool_k, pool_v, block_table, max_blocks, row_seq, row_pos, tiles, ntiles,
                                 n_layers, layer, block_size, nh, nkv, hs, err);
    if (hs <= 64)
        return prefill_launch<2>(c, out, q, pool_k, pool_v, block_table, max_blocks, row_seq, row_pos, tiles, ntiles,
                                 n_layers, layer, block_size, nh, nkv, hs, err);
    return prefill_launch<4>(c, out, q, pool_k, pool_v, block_table, max_blocks, row_seq, row_pos, tiles, ntiles,
                             n_layers, layer, block_size, nh, nkv, hs, err);
}

// --- CUDA graphs -------------------------------------------------------------------------

struct skpo_cuda_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

extern "C" skpo_status skpo_cuda_capture_begin(skpo_cuda *c, skpo_err *err) {
    CU(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal), err);
    return SKPO_OK;
}

extern "C" skpo_status skpo_cuda_capture_end(skpo_cuda *c, skpo_cuda_graph **out, skpo_err *err) {
    *out = NULL;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &g);
    if (e != cudaSuccess) {
        cudaGetLastError();  // the failed capture is over; the stream is usable again
        if (g) cudaGraphDestroy(g);
        return skpo_cuda_fail(err, e, "cudaStreamEndCapture", __FILE__, __LINE__);
    }
    cudaGraphExec_t x;
    e = cudaGraphInstantiate(&x, g, 0);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cudaGraphDestroy(g);
        return skpo_cuda_fail(err, e, "cudaGraphInstantiate", __FILE__, __LINE__);
    }
    skpo_cuda_graph *r = (skpo_cuda_graph *)skpo_xcalloc(1, sizeof *r);
    r->graph = g;
    r->exec = x;
    *out = r;
    return SKPO_OK;
}

extern "C" skpo_status skpo_cuda_graph_launch(skpo_cuda *c, skpo_cuda_graph *g, skpo_err *err) {
    CU(cudaGraphLaunch(g->exec, c->stream), err);
    return SKPO_OK;
}

extern "C" void skpo_cuda_graph_free(skpo_cuda_graph *g) {
    if (!g) return;
    cudaGraphExecDestroy(g->exec);
    cudaGraphDestroy(g->graph);
    free(g);
}
