// decode.cu - paged attention for query rows at any position on the tensor
// cores: the kernel behind skpo_cuda_attention_paged for head_dim 64, 128 and
// 256 (cuda_infer.h). Decode reads every K/V row of every sequence once per
// layer, so it runs at the HBM bandwidth only if the loads are wide and always
// in flight, and the arithmetic (2 x group flops per byte) stays off the FMA
// pipes:
//   - a block owns one (row, KV head, split): the G query heads of the group
//     are the rows of one 16 x hs MMA tile (padded with zeros), so each K/V
//     row is read once for all of them;
//   - the page ids of the block's positions are read once into shared memory
//     (one block-table lookup per KV block), then K/V move as 16-byte vectors;
//   - tiles of 16 KiB of K+V are double-buffered: the next tile's loads are in
//     registers while the current one (in shared memory) is multiplied;
//   - S = Q K^T and O += P V run as bf16 WMMA with fp32 accumulation; the
//     online softmax is fp32 (P rounded to bf16 for the MMA, l sums the
//     rounded values, so O / l is a convex combination);
//   - rows that the device cannot fill are split over positions
//     (flash-decoding) into as many blocks as the occupancy API says fit one
//     wave; the split count depends only on N, the table width and the device,
//     so a captured graph replays correctly.
#include "common.cuh"
#include "cuda/cuda_infer.h"

#include <mma.h>
#include <stdlib.h>
#include <string.h>

using namespace nvcuda;

#define DA_THREADS 128
#define DA_ROWS 16          // query heads of a group, padded to one MMA tile
#define DA_MAX_SPLITS 64

typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> da_acc;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> da_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> da_b_row;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> da_b_col;

// Shapes of one head size. Row strides are 16 bytes past a multiple of 128
// (bf16) or 32 bytes (fp32), so rows start 4 or 8 banks apart: the WMMA loads
// and the per-row scalar accesses below are free of bank conflicts. Every
// region starts 32-byte aligned, as load_matrix_sync requires.
template <int HS> struct da_shape {
    static constexpr int TILE = 4096 / HS;                     // positions per tile: 16 KiB of K + V
    static constexpr int KLD = HS + 8;                         // bf16 stride of sQ, sK, sV
    static constexpr int FLD = HS + 8;                         // fp32 stride of sF (S, then the tile's P V)
    static constexpr int PLD = TILE + 8;                       // bf16 stride of sP
    static constexpr int VPT = TILE * HS / 8 / DA_THREADS;     // 16-byte vectors of K (and of V) per thread
    static constexpr size_t FIXED = (size_t)DA_ROWS * KLD * 2 + 2 * (size_t)TILE * KLD * 2 +
                                    (size_t)DA_ROWS * FLD * 4 + (size_t)DA_ROWS * PLD * 2;
    static_assert(VPT * 8 * DA_THREADS == TILE * HS, "tile and block do not divide");
    static_assert(TILE % 16 == 0 && TILE / 16 <= DA_THREADS / 32, "one warp per 16 score columns");
};

__device__ __forceinline__ size_t da_row(int page, int n_layers, int layer, int bs, int row, int kd) {
    return (((size_t)page * n_layers + layer) * bs + row) * kd;
}

// This thread's share of the tile at positions j0 .. j0 + nt - 1 (KV head hk)
// into registers; rows past nt are zeros (their scores are masked and a zero
// V row keeps 0 x garbage out of the P V product).
template <int HS>
__device__ __forceinline__ void da_fetch(uint4 *rk, uint4 *rv, const bf16 *pk, const bf16 *pv, const int32_t *sPage,
                                         int p0, int j0, int nt, int n_layers, int layer, int bs, int kd, int hk) {
#pragma unroll
    for (int u = 0; u < da_shape<HS>::VPT; u++) {
        int v = threadIdx.x + DA_THREADS * u, row = v / (HS / 8), c = v % (HS / 8);
        if (row < nt) {
            int p = j0 + row;
            size_t o = da_row(sPage[p / bs - p0], n_layers, layer, bs, p % bs, kd) + (size_t)hk * HS + (size_t)c * 8;
            rk[u] = *(const uint4 *)(pk + o);
            rv[u] = *(const uint4 *)(pv + o);
        } else {
            rk[u] = rv[u] = make_uint4(0u, 0u, 0u, 0u);
        }
    }
}

template <int HS>
__device__ __forceinline__ void da_stash(bf16 *sK, bf16 *sV, const uint4 *rk, const uint4 *rv) {
#pragma unroll
    for (int u = 0; u < da_shape<HS>::VPT; u++) {
        int v = threadIdx.x + DA_THREADS * u, row = v / (HS / 8), c = v % (HS / 8);
        *(uint4 *)(sK + row * da_shape<HS>::KLD + c * 8) = rk[u];
        *(uint4 *)(sV + row * da_shape<HS>::KLD + c * 8) = rv[u];
    }
}

// S = Q K^T (16 x TILE, fp32) into sF: warp w owns score columns 16 w .. 16 w + 15.
template <int HS> __device__ __forceinline__ void da_scores(float *sF, const bf16 *sQ, const bf16 *sK, int warp) {
    typedef da_shape<HS> D;
    if (warp >= D::TILE / 16) return;
    da_acc acc;
    wmma::fill_fragment(acc, 0.f);
#pragma unroll
    for (int kk = 0; kk < HS; kk += 16) {
        da_a fa;
        da_b_col fb;
        wmma::load_matrix_sync(fa, sQ + kk, D::KLD);
        wmma::load_matrix_sync(fb, sK + warp * 16 * D::KLD + kk, D::KLD);
        wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(sF + warp * 16, acc, D::FLD, wmma::mem_row_major);
}

// Online softmax of this thread's row over the tile's nt positions (column 0
// is always a real position, so the new max is finite): P (bf16) into sP,
// m and l updated, the row's outputs rescaled. The 8 threads of a row are
// lanes 8 k .. 8 k + 7 of one warp.
template <int HS>
__device__ __forceinline__ void da_softmax(bf16 *sP, const float *sF, float *o, float &m, float &l, int row, int k8,
                                           int nt, float scale) {
    typedef da_shape<HS> D;
    float x[D::TILE / 8], mx = -INFINITY;
#pragma unroll
    for (int e = 0; e < D::TILE / 8; e++) {
        int col = k8 + 8 * e;
        x[e] = col < nt ? sF[row * D::FLD + col] * scale : -INFINITY;
        mx = fmaxf(mx, x[e]);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
    float mn = fmaxf(m, mx), corr = expf(m - mn), ps = 0.f;
#pragma unroll
    for (int e = 0; e < D::TILE / 8; e++) {
        bf16 pb = __float2bfloat16(expf(x[e] - mn));
        sP[row * D::PLD + k8 + 8 * e] = pb;
        ps += __bfloat162float(pb);
    }
    ps += __shfl_xor_sync(0xffffffffu, ps, 1);
    ps += __shfl_xor_sync(0xffffffffu, ps, 2);
    ps += __shfl_xor_sync(0xffffffffu, ps, 4);
    l = l * corr + ps;
    m = mn;
#pragma unroll
    for (int e = 0; e < HS / 8; e++) o[e] *= corr;
}

// The tile's P V (16 x hs, fp32) into sF: warp w owns output columns w hs / 4 ..
template <int HS> __device__ __forceinline__ void da_pv(float *sF, const bf16 *sP, const bf16 *sV, int warp) {
    typedef da_shape<HS> D;
#pragma unroll
    for (int f = 0; f < HS / 64; f++) {
        int col = warp * (HS / 4) + f * 16;
        da_acc acc;
        wmma::fill_fragment(acc, 0.f);
#pragma unroll
        for (int kk = 0; kk < D::TILE; kk += 16) {
            da_a fa;
            da_b_row fb;
            wmma::load_matrix_sync(fa, sP + kk, D::PLD);
            wmma::load_matrix_sync(fb, sV + kk * D::KLD + col, D::KLD);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(sF + col, acc, D::FLD, wmma::mem_row_major);
    }
}

// The block's page ids (one block-table lookup per KV block) and the group's
// queries (rows >= G zero, 8 bf16 per 16-byte load).
template <int HS>
__device__ __forceinline__ void da_prologue(int32_t *sPage, bf16 *sQ, const int32_t *table, int p0, int np,
                                            const bf16 *qg, int G) {
    for (int i = threadIdx.x; i < np; i += DA_THREADS) sPage[i] = table[p0 + i];
    for (int i = threadIdx.x; i < DA_ROWS * (HS / 8); i += DA_THREADS) {
        int g = i / (HS / 8), c = i % (HS / 8);
        uint4 v = g < G ? *(const uint4 *)(qg + (size_t)g * HS + c * 8) : make_uint4(0u, 0u, 0u, 0u);
        *(uint4 *)(sQ + g * da_shape<HS>::KLD + c * 8) = v;
    }
}

// Row `row` of the tile (query head h) out: normalised, or with S > 1 the
// unnormalised (m, l, acc) partial of split z.
template <int HS>
__device__ __forceinline__ void da_write(bf16 *out, float *part, const float *o, float m, float l, size_t r, int nh,
                                         int h, int S, int z, int k8) {
    if (S > 1) {
        float *pp = part + ((r * nh + h) * S + z) * (HS + 2);
        if (k8 == 0) pp[0] = m, pp[1] = l;
#pragma unroll
        for (int e = 0; e < HS / 8; e++) pp[2 + k8 + 8 * e] = o[e];
        return;
    }
    bf16 *orow = out + r * nh * HS + (size_t)h * HS;
    float inv = 1.f / l;
#pragma unroll
    for (int e = 0; e < HS / 8; e++) orow[k8 + 8 * e] = __float2bfloat16(o[e] * inv);
}

// Grid (N rows, nkv, S splits), DA_THREADS threads. Thread t owns row t / 8
// of the 16 x hs output tile (query head hk G + t / 8 when below G) at
// columns t % 8 + 8 e, and the same row of the score tile at columns
// t % 8 + 8 e; the 8 threads of a row keep identical copies of its running
// max m and sum l. Split z covers positions [z chunk, (z + 1) chunk) and with
// S > 1 writes its unnormalised (m, l, acc) to part (k_da_combine merges).
template <int HS>
__global__ void __launch_bounds__(DA_THREADS) k_attn_decode(bf16 *out, float *part, const bf16 *q, const bf16 *pk,
                                                            const bf16 *pv, const int32_t *bt, int max_blocks,
                                                            const int32_t *row_seq, const int32_t *row_pos, int n_layers,
                                                            int layer, int bs, int nh, int nkv, int chunk, float scale) {
    typedef da_shape<HS> D;
    extern __shared__ __align__(128) unsigned char da_smem[];
    bf16 *sQ = (bf16 *)da_smem;                          // (16, KLD)
    bf16 *sK = sQ + DA_ROWS * D::KLD;                    // (TILE, KLD)
    bf16 *sV = sK + D::TILE * D::KLD;                    // (TILE, KLD)
    float *sF = (float *)(sV + D::TILE * D::KLD);        // (16, FLD)
    bf16 *sP = (bf16 *)(sF + DA_ROWS * D::FLD);          // (16, PLD)
    int32_t *sPage = (int32_t *)(sP + DA_ROWS * D::PLD); // page ids of the split's positions
    int r = blockIdx.x, hk = blockIdx.y, z = blockIdx.z, S = gridDim.z, G = nh / nkv, tid = threadIdx.x;
    int kd = nkv * HS, row = tid >> 3, k8 = tid & 7, warp = tid >> 5;
    int len = row_pos[r] + 1, jb = z * chunk, je = min(len, jb + chunk);
    if (jb >= len) {   // past this row's end (uniform over the block; only when S > 1)
        if (tid < G) {
            float *pp = part + (((size_t)r * nh + hk * G + tid) * S + z) * (HS + 2);
            pp[0] = -INFINITY;
            pp[1] = 0.f;
        }
        return;
    }
    int p0 = jb / bs, np = (je - 1) / bs - p0 + 1;
    da_prologue<HS>(sPage, sQ, bt + (size_t)row_seq[r] * max_blocks, p0, np,
                    q + (size_t)r * nh * HS + (size_t)hk * G * HS, G);
    __syncthreads();   // sPage (and sQ) written
    uint4 rk[D::VPT], rv[D::VPT];
    float o[HS / 8], m = -INFINITY, l = 0.f;
#pragma unroll
    for (int e = 0; e < HS / 8; e++) o[e] = 0.f;
    int ntiles = (je - jb + D::TILE - 1) / D::TILE;
    da_fetch<HS>(rk, rv, pk, pv, sPage, p0, jb, min(D::TILE, je - jb), n_layers, layer, bs, kd, hk);
    da_stash<HS>(sK, sV, rk, rv);
    __syncthreads();
    for (int i = 0; i < ntiles; i++) {
        int j0 = jb + i * D::TILE, nt = min(D::TILE, je - j0);
        if (i + 1 < ntiles)   // the next tile's loads fly while this one is multiplied
            da_fetch<HS>(rk, rv, pk, pv, sPage, p0, j0 + D::TILE, min(D::TILE, je - j0 - D::TILE), n_layers, layer, bs,
                         kd, hk);
        da_scores<HS>(sF, sQ, sK, warp);
        __syncthreads();
        da_softmax<HS>(sP, sF, o, m, l, row, k8, nt, scale);
        __syncthreads();   // sP written, sF free
        da_pv<HS>(sF, sP, sV, warp);
        __syncthreads();
#pragma unroll
        for (int e = 0; e < HS / 8; e++) o[e] += sF[row * D::FLD + k8 + 8 * e];
        if (i + 1 < ntiles) da_stash<HS>(sK, sV, rk, rv);
        __syncthreads();   // sK, sV hold the next tile; sF is free again
    }
    if (row < G) da_write<HS>(out, part, o, m, l, (size_t)r, nh, hk * G + row, S, z, k8);
}

// One thread per output element: merge the S partials of its (row, head) by
// their maxima (a split that saw no position has l = 0 and is skipped).
__global__ void k_da_combine(bf16 *out, const float *part, int hs, int S, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    size_t w = i / hs;
    int d = (int)(i - w * hs);
    const float *pp = part + w * S * (hs + 2);
    float M = -INFINITY, L = 0.f, a = 0.f;
    for (int z = 0; z < S; z++) M = fmaxf(M, pp[(size_t)z * (hs + 2)]);
    for (int z = 0; z < S; z++) {
        const float *pz = pp + (size_t)z * (hs + 2);
        if (pz[1] > 0.f) {
            float f = expf(pz[0] - M);
            L += pz[1] * f;
            a += pz[2 + d] * f;
        }
    }
    out[i] = __float2bfloat16(a / L);
}

// --- launch ------------------------------------------------------------------------------

static int da_sms(skpo_cuda *c) {
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, c->device) != cudaSuccess || sms <= 0) {
        cudaGetLastError();
        sms = 32;
    }
    return sms;
}

template <int HS> static size_t da_smem(int npages) { return da_shape<HS>::FIXED + (size_t)npages * sizeof(int32_t); }

// Resident blocks per SM for a launch with `smem` bytes (the occupancy API),
// cached: the answer depends only on the kernel, the bytes and the device.
template <int HS> static int da_per_sm(size_t smem) {
    static size_t key[8];
    static int val[8], next;
    for (int i = 0; i < 8; i++)
        if (key[i] == smem && val[i]) return val[i];
    int n = 0;
    if (smem > 48 * 1024 && cudaFuncSetAttribute(k_attn_decode<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 (int)smem) != cudaSuccess)
        n = 0;
    else if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k_attn_decode<HS>, DA_THREADS, smem) != cudaSuccess)
        n = 0;
    if (n <= 0) {
        cudaGetLastError();
        return 1;   // the launch itself reports what is wrong
    }
    key[next] = smem;
    val[next] = n;
    next = (next + 1) % 8;
    return n;
}

// Pages a split of `chunk` positions can touch (it may start mid-page).
static int da_pages(int chunk, int bs) { return (chunk + bs - 1) / bs + 1; }

template <int HS>
static skpo_status da_launch(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *q, const skpo_bf16 *pool_k,
                             const skpo_bf16 *pool_v, const int32_t *bt, int max_blocks, const int32_t *row_seq,
                             const int32_t *row_pos, int N, int n_layers, int layer, int bs, int nh, int nkv,
                             float *work, size_t work_bytes, skpo_err *err) {
    typedef da_shape<HS> D;
    int tiles = (max_blocks * bs + D::TILE - 1) / D::TILE, blocks = N * nkv, S = 1;
    if (work) {   // splits: from the shapes only (N, table width, device)
        int target = da_per_sm<HS>(da_smem<HS>(max_blocks + 1)) * da_sms(c);
        size_t per = (size_t)N * nh * (HS + 2) * sizeof(float);
        if (blocks < target) S = (target + blocks - 1) / blocks;
        if (S > tiles) S = tiles;
        if (S > DA_MAX_SPLITS) S = DA_MAX_SPLITS;
        if ((size_t)S * per > work_bytes) S = (int)(work_bytes / per);
        if (S < 1) S = 1;
    }
    int chunk_tiles = (tiles + S - 1) / S;
    S = (tiles + chunk_tiles - 1) / chunk_tiles;   // no empty trailing splits
    int chunk = chunk_tiles * D::TILE;
    size_t smem = da_smem<HS>(da_pages(chunk, bs));
    if (smem > 227 * 1024)
        return skpo_err_set(err, SKPO_EUNSUPPORTED, "paged attention: %d positions per block need %zu bytes of shared memory",
                            chunk, smem);
    if (smem > 48 * 1024)
        CU(cudaFuncSetAttribute(k_attn_decode<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem), err);
    dim3 grid((unsigned)N, (unsigned)nkv, (unsigned)S);
    k_attn_decode<HS><<<grid, DA_THREADS, smem, c->stream>>>(
        (bf16 *)out, S > 1 ? work : NULL, (const bf16 *)q, (const bf16 *)pool_k, (const bf16 *)pool_v, bt, max_blocks,
        row_seq, row_pos, n_layers, layer, bs, nh, nkv, chunk, 1.f / sqrtf((float)HS));
    LAUNCHED(err);
    if (S > 1) {
        size_t n = (size_t)N * nh * HS;
        k_da_combine<<<blocks_for(n, 256), 256, 0, c->stream>>>((bf16 *)out, work, HS, S, n);
        LAUNCHED(err);
    }
    return SKPO_OK;
}

// SKPO_DECODE_ATTN=simt keeps the CUDA-core kernel (infer.cu) for comparison.
extern "C" int skpo_cuda_attention_paged_mma_fits(const void *q, const void *pool_k, const void *pool_v, int nh, int nkv,
                                                  int hs, int max_blocks, int block_size) {
    static int simt = -1;
    if (simt < 0) {
        const char *e = getenv("SKPO_DECODE_ATTN");
        simt = e && !strcmp(e, "simt");
    }
    int aligned = (((uintptr_t)q | (uintptr_t)pool_k | (uintptr_t)pool_v) & 15) == 0;
    return !simt && aligned && (hs == 64 || hs == 128 || hs == 256) && nkv > 0 && nh % nkv == 0 &&
           nh / nkv <= DA_ROWS && block_size > 0 && max_blocks > 0 && da_pages(max_blocks * block_size, block_size) <= 8192;
}

extern "C" skpo_status skpo_cuda_attention_paged_mma(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *q,
                                                     const skpo_bf16 *pool_k, const skpo_bf16 *pool_v,
                                                     const int32_t *block_table, int max_blocks, const int32_t *row_seq,
                                                     const int32_t *row_pos, int N, int n_layers, int layer,
                                                     int block_size, int nh, int nkv, int hs, float *work,
                                                     size_t work_bytes, skpo_err *err) {
    if (!N) return SKPO_OK;
    if (!skpo_cuda_attention_paged_mma_fits(q, pool_k, pool_v, nh, nkv, hs, max_blocks, block_size))
        return skpo_err_set(err, SKPO_EUNSUPPORTED,
                            "tensor-core paged attention: head_dim %d with %d query / %d kv heads unsupported", hs, nh, nkv);
    if (hs == 64)
        return da_launch<64>(c, out, q, pool_k, pool_v, block_table, max_blocks, row_seq, row_pos, N, n_layers, layer,
                             block_size, nh, nkv, work, work_bytes, err);
    if (hs == 128)
        return da_launch<128>(c, out, q, pool_k, pool_v, block_table, max_blocks, row_seq, row_pos, N, n_layers, layer,
                              block_size, nh, nkv, work, work_bytes, err);
    return da_launch<256>(c, out, q, pool_k, pool_v, block_table, max_blocks, row_seq, row_pos, N, n_layers, layer,
                          block_size, nh, nkv, work, work_bytes, err);
}

// Blocks of one wave (the split target) for the largest kernel footprint: the
// most split partials the launch above can ask for is 2 x target / nkv rows.
extern "C" size_t skpo_cuda_attention_paged_mma_work(skpo_cuda *c, int nh, int nkv, int hs) {
    int per = hs <= 64 ? da_per_sm<64>(da_smem<64>(2)) : hs <= 128 ? da_per_sm<128>(da_smem<128>(2))
                                                                    : da_per_sm<256>(da_smem<256>(2));
    size_t target = (size_t)per * (size_t)da_sms(c);
    return (2 * target / (size_t)(nkv > 0 ? nkv : 1) + 1) * (size_t)nh * (size_t)(hs + 2) * sizeof(float);
}
