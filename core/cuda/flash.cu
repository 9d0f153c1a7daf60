// flash.cu - tensor-core (WMMA bf16, fp32 accumulate) causal attention over
// packed sequences for training: FlashAttention-2 style forward (64-query
// tiles, online softmax, scores never in global memory) and backward (64-key
// tiles own their dK/dV for every query head of their KV group, so no atomics
// there; dQ accumulates in fp32 through atomics). Head sizes 64 and 128.
// Same contract as skpo_cuda_attention / _backward (lse in units of the
// scaled scores); the training path where cuDNN is not (SKPO_ATTN=flash,
// cuda_dnn.h; tests/unit/test_cuda_train.c compares it with the simple
// kernels and, through the model, with the CPU).
//
// A packed batch (model/pack.h) passes its runs (cuda.h skpo_cuda_runs,
// base/attn_mask.h): each query row also keeps its prefix end and own-run
// start, an element is visible iff its key is in [row start, pre_end) or in
// [own0, t]; the forward skips key tiles that lie wholly between the query
// tile's prefix runs and own runs (another continuation), and the backward
// stops a key tile's queries at the last one that sees it (q_end).
//
// Shared-memory tiles have padded leading dimensions (LDH, LDS, LDP, LDX):
// a row of 64 or 128 bf16 (128 or 256 bytes) would start every row of a
// 16x16 fragment load in the same banks (8-way conflicts); 16 more bytes per
// row shift consecutive rows by four banks. Every pad keeps WMMA's rules
// (ldm a multiple of 16 bytes, fragment pointers 32-byte aligned: rows and
// columns are taken in multiples of 16).
#include "common.cuh"
#include "cuda/cuda_train.h"

#include <mma.h>

using namespace nvcuda;

#define FT 64   // rows of a query or key tile
#define FW 4    // warps per block: 16 rows each
#define LDS (FT + 4)   // fp32 64-wide tiles (S, P, dP)
#define LDP (FT + 8)   // bf16 64-wide tiles (P, dS)
template <int HS> struct pad {
    static const int H = HS + 8;   // bf16 head_dim-wide tiles (Q, K, V, dO)
    static const int X = HS + 4;   // fp32 head_dim-wide tiles (dQ, dK staging)
};

typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> facc;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa_row;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::col_major> fa_col;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb_row;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb_col;

// Tile rows r0.. of a (T, ldg) bf16 matrix at column offset col into s (FT x HS,
// leading dimension pad<HS>::H); zero past T.
template <int HS>
__device__ void load_tile(bf16 *s, const bf16 *g, int r0, int T, int ldg, int col) {
    for (int i = threadIdx.x; i < FT * HS; i += blockDim.x) {
        int r = i / HS, d = i % HS, t = r0 + r;
        s[r * pad<HS>::H + d] = t < T ? g[(size_t)t * ldg + col + d] : __float2bfloat16(0.f);
    }
}

// The three warp-level products both kernels are made of. Each warp owns a
// strip of 16 rows; K is the inner dimension, NT the number of 16-wide
// column tiles of the result.

// c (16 x 16 NT, ld ldc) = a b^T: a is 16 rows of K, b is 16 NT rows of K
// (S = Q K^T in the forward, S^T = K Q^T and dP^T = V dO^T in the backward).
template <int K, int NT>
__device__ __forceinline__ void warp_mma_abt(float *c, int ldc, const bf16 *a, int lda, const bf16 *b, int ldb) {
    for (int nt = 0; nt < NT; nt++) {
        facc acc;
        wmma::fill_fragment(acc, 0.f);
        for (int kk = 0; kk < K; kk += 16) {
            fa_row fa;
            fb_col fb;
            wmma::load_matrix_sync(fa, a + kk, lda);
            wmma::load_matrix_sync(fb, b + nt * 16 * ldb + kk, ldb);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(c + nt * 16, acc, ldc, wmma::mem_row_major);
    }
}

// acc[nt] += a b[:, 16 nt ..]: a is 16 rows of K, b is K rows of 16 NT, the
// result stays in fragments (O += P V; dV += P^T dO and dK += dS^T Q).
template <int K, int NT>
__device__ __forceinline__ void warp_mma_ab_acc(facc *acc, const bf16 *a, int lda, const bf16 *b, int ldb) {
    for (int nt = 0; nt < NT; nt++)
        for (int kk = 0; kk < K; kk += 16) {
            fa_row fa;
            fb_row fb;
            wmma::load_matrix_sync(fa, a + kk, lda);
            wmma::load_matrix_sync(fb, b + kk * ldb + nt * 16, ldb);
            wmma::mma_sync(acc[nt], fa, fb, acc[nt]);
        }
}

// c (16 x 16 NT) = a^T b: a is a K x 16 column strip of a row-major matrix
// (the column-major view of its transpose), b is K rows of 16 NT (dQ = dS K
// with dS^T in shared memory).
template <int K, int NT>
__device__ __forceinline__ void warp_mma_atb(float *c, int ldc, const bf16 *a, int lda, const bf16 *b, int ldb) {
    for (int nt = 0; nt < NT; nt++) {
        facc acc;
        wmma::fill_fragment(acc, 0.f);
        for (int kk = 0; kk < K; kk += 16) {
            fa_col fa;
            fb_row fb;
            wmma::load_matrix_sync(fa, a + kk * lda, lda);
            wmma::load_matrix_sync(fb, b + kk * ldb + nt * 16, ldb);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(c + nt * 16, acc, ldc, wmma::mem_row_major);
    }
}

// o[nt] *= c[row] for each element of a warp's 16-row accumulator strip; rowmap
// holds each element's row (see k_flash_fwd).
template <int NT>
__device__ __forceinline__ void scale_rows(facc *o, const facc &rowmap, const float *c) {
    for (int nt = 0; nt < NT; nt++)
        for (int e = 0; e < o[nt].num_elements; e++) o[nt].x[e] *= c[(int)rowmap.x[e]];
}

// Forward shared memory: Q, K, V tiles (bf16), S (fp32) and P (bf16) of the
// tile, per-row rescale factors, each row's first key, prefix end and own
// start, the tile's gap (FT ints), a 16x16 fp32 staging tile per warp.
template <int HS>
static size_t fwd_smem() {
    return (size_t)3 * FT * pad<HS>::H * 2 + FT * LDS * 4 + FT * LDP * 2 + 5 * FT * 4 + (size_t)FW * 256 * 4;
}

// Online softmax over one key tile (attend_row in core/cpu/ops_cpu.c, one
// tile at a time): for the warp's 16 query rows, mask S to the row's own
// sequence and the causal past, raise the running max m, write
// P = exp(S * scale - m) (bf16, for P V) and corr = exp(m_old - m) per row,
// and fold P's row sums into l. One row at a time, the lanes across its 64
// columns (consecutive words: no bank conflicts); m and l stay in registers.
__device__ __forceinline__ bool fl_visible(int t, int j, int s0, int pe, int o0) {
    return j <= t && ((j >= s0 && j < pe) || j >= o0);   // plain rows: pe = o0 = s0
}

__device__ __forceinline__ void fwd_online_softmax(float *m, float *l, bf16 *sP, float *sC, const float *sS,
                                                   const int *sS0, const int *sPe, const int *sO0, int warp, int lane,
                                                   int t0, int j0, int T, float scale) {
#pragma unroll
    for (int rr = 0; rr < 16; rr++) {
        int r = warp * 16 + rr, t = t0 + r, s0 = sS0[r], pe = sPe[r], o0 = sO0[r], ja = j0 + lane, jb = ja + 32;
        float xa = (t < T && fl_visible(t, ja, s0, pe, o0)) ? sS[r * LDS + lane] * scale : -INFINITY;
        float xb = (t < T && fl_visible(t, jb, s0, pe, o0)) ? sS[r * LDS + lane + 32] * scale : -INFINITY;
        float mnew = fmaxf(m[rr], warp_max(fmaxf(xa, xb)));
        float corr = mnew == -INFINITY ? 1.f : expf(m[rr] - mnew);
        float pa = xa == -INFINITY ? 0.f : expf(xa - mnew), pb = xb == -INFINITY ? 0.f : expf(xb - mnew);
        sP[r * LDP + lane] = __float2bfloat16(pa);
        sP[r * LDP + lane + 32] = __float2bfloat16(pb);
        l[rr] = l[rr] * corr + warp_sum(pa + pb);
        m[rr] = mnew;
        if (lane == 0) sC[r] = corr;
    }
}

// out = O / l for the warp's 16 rows, through its 16x16 staging tile wx, and
// lse = m + log l (the log-normaliser attend_row returns).
template <int HS>
__device__ __forceinline__ void fwd_write_out(bf16 *out, float *lse, facc *o, const facc &rowmap, float *wx, float *sC,
                                              const float *m, const float *l, int warp, int lane, int t0, int T, int h,
                                              int nh) {
    int qd = nh * HS;
    if (lane == 0)
#pragma unroll
        for (int rr = 0; rr < 16; rr++) sC[warp * 16 + rr] = l[rr] > 0.f ? 1.f / l[rr] : 0.f;
    __syncwarp();
    scale_rows<HS / 16>(o, rowmap, sC + warp * 16);
    for (int nt = 0; nt < HS / 16; nt++) {
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

// Each warp owns 16 query rows; per key tile: S = Q K^T, online softmax,
// O = O * corr + P V. O stays in accumulator fragments for the whole key loop
// and is rescaled there: a fragment loaded from a tile holding each element's
// row index says which row each of a lane's fragment elements belongs to (the
// layout is opaque to WMMA, this asks the hardware), so O never goes through
// shared memory until the final 1/l.
template <int HS>
__global__ void __launch_bounds__(FW * 32) k_flash_fwd(bf16 *out, float *lse, const bf16 *q, const bf16 *k,
                                                      const bf16 *v, const int32_t *seq_of, const int32_t *seq_start,
                                                      const int32_t *pre_end, const int32_t *own0, int T, int nh,
                                                      int nkv, float scale) {
    extern __shared__ __align__(128) unsigned char sm[];
    const int LH = pad<HS>::H;
    bf16 *sQ = (bf16 *)sm, *sK = sQ + FT * LH, *sV = sK + FT * LH;
    float *sS = (float *)(sV + FT * LH);
    bf16 *sP = (bf16 *)(sS + FT * LDS);
    float *sC = (float *)(sP + FT * LDP);
    int *sS0 = (int *)(sC + FT), *sPe = sS0 + FT, *sO0 = sPe + FT, *sGap = sO0 + FT;
    float *sX = (float *)(sGap + FT);
    int h = blockIdx.y, hk = h / (nh / nkv), t0 = blockIdx.x * FT, qd = nh * HS, kd = nkv * HS;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *wx = sX + warp * 256;
    load_tile<HS>(sQ, q, t0, T, qd, h * HS);
    for (int i = threadIdx.x; i < FT; i += blockDim.x) {
        int t = t0 + i, s0 = t < T ? seq_start[seq_of[t]] : 0x7fffffff;
        sS0[i] = s0;
        sPe[i] = t < T && pre_end ? pre_end[t] : s0;
        sO0[i] = t < T && pre_end ? own0[t] : s0;
    }
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
    if (threadIdx.x == 0) {   // the keys no query of the tile sees: [max prefix end, min own start)
        int gpe = jbeg, go0 = 0x7fffffff;
        for (int i = 0; i <= tlast - t0; i++) gpe = max(gpe, sPe[i]), go0 = min(go0, sO0[i]);
        sGap[0] = gpe, sGap[1] = go0;
    }
    __syncthreads();
    int gap0 = sGap[0], gap1 = sGap[1];
    for (int j0 = jbeg; j0 <= tlast; j0 += FT) {
        if (j0 >= gap0 && j0 + FT <= gap1) continue;   // a tile of other continuations only (uniform per block)
        load_tile<HS>(sK, k, j0, T, kd, hk * HS);
        load_tile<HS>(sV, v, j0, T, kd, hk * HS);
        __syncthreads();
        warp_mma_abt<HS, FT / 16>(sS + warp * 16 * LDS, LDS, sQ + warp * 16 * LH, LH, sK, LH);   // S = Q K^T
        __syncwarp();
        fwd_online_softmax(m, l, sP, sC, sS, sS0, sPe, sO0, warp, lane, t0, j0, T, scale);
        __syncwarp();
        scale_rows<HS / 16>(o, rowmap, sC + warp * 16);                              // O = O * corr
        warp_mma_ab_acc<FT, HS / 16>(o, sP + warp * 16 * LDP, LDP, sV, LH);          // O += P V
        __syncthreads();   // K/V are rewritten next
    }
    fwd_write_out<HS>(out, lse, o, rowmap, wx, sC, m, l, warp, lane, t0, T, h, nh);
}

// D[t,h] = dout . out (one warp per row and head; dot_rows in core/cpu/ops_cpu.c).
__global__ void k_flash_d(float *D, const bf16 *dout, const bf16 *out, int T, int nh, int hs) {
    int w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (w >= T * nh) return;
    size_t o = (size_t)(w / nh) * nh * hs + (size_t)(w % nh) * hs;
    float s = 0.f;
    for (int d = lane; d < hs; d += 32) s += __bfloat162float(dout[o + d]) * __bfloat162float(out[o + d]);
    s = warp_sum(s);
    if (!lane) D[w] = s;
}

// The dK accumulator of a warp's 16 keys: fragments in registers at head_dim
// 64; at 128, 8 + 8 fragments of dK and dV pass ptxas's 255 registers (it
// spilled, one block per SM), so dK lives in shared memory (fp32, ld X) and
// each update loads, accumulates and stores its fragments.
template <int HS> struct dk_smem { static const bool on = HS > 64; };

// Backward shared memory: K, V, Q, dO tiles; P^T and dP^T in fp32 (the dQ
// staging sX reuses them once dS^T is made); P^T and dS^T in bf16; dK when it
// is not in registers; per query row its lse, D, first key, prefix end and
// own start.
template <int HS>
static size_t bwd_smem() {
    return (size_t)4 * FT * pad<HS>::H * 2 + 2 * FT * LDS * 4 + 2 * FT * LDP * 2 +
           (dk_smem<HS>::on ? (size_t)FT * pad<HS>::X * 4 : 0) + 5 * FT * 4;
}

// The backward's query tile q0.. of head h: Q and dO rows, and per row its
// lse, D and first key (rows past the last query that sees the key tile are
// zero and start nowhere).
template <int HS>
__device__ __forceinline__ void bwd_load_q_tile(bf16 *sQ, bf16 *sdO, float *sLse, float *sD, int *sQs, int *sQpe,
                                                int *sQo0, const bf16 *q, const bf16 *dout, const float *lse,
                                                const float *D, const int32_t *seq_of, const int32_t *seq_start,
                                                const int32_t *pre_end, const int32_t *own0, int q0, int qend,
                                                int T, int h, int nh) {
    int qd = nh * HS;
    load_tile<HS>(sQ, q, q0, T, qd, h * HS);
    load_tile<HS>(sdO, dout, q0, T, qd, h * HS);
    for (int i = threadIdx.x; i < FT; i += blockDim.x) {
        int t = q0 + i;
        int ok = t < T && t <= qend;
        sLse[i] = ok ? lse[(size_t)t * nh + h] : 0.f;
        sD[i] = ok ? D[(size_t)t * nh + h] : 0.f;
        sQs[i] = ok ? seq_start[seq_of[t]] : 0x7fffffff;
        sQpe[i] = ok && pre_end ? pre_end[t] : sQs[i];
        sQo0[i] = ok && pre_end ? own0[t] : sQs[i];
    }
}

// P^T_jt = exp(S^T_jt * scale - lse_t) for the warp's 16 keys j, zero unless t
// is in j's sequence at or after j; kept in fp32 (for dS) and bf16 (for dV).
__device__ __forceinline__ void bwd_probs(float *sP32, bf16 *sP, const float *sLse, const int *sQs, const int *sQpe,
                                          const int *sQo0, int warp, int lane, int j0, int q0, int T, float scale) {
    for (int e = lane; e < 16 * FT; e += 32) {
        int rk = warp * 16 + e / FT, c = e % FT, j = j0 + rk, t = q0 + c;
        int ok = j < T && fl_visible(t, j, sQs[c], sQpe[c], sQo0[c]);
        float p = ok ? expf(sP32[rk * LDS + c] * scale - sLse[c]) : 0.f;
        sP32[rk * LDS + c] = p;
        sP[rk * LDP + c] = __float2bfloat16(p);
    }
}

// dS^T = P^T (dP^T - D) * scale for the warp's 16 keys (dS of attend_bwd_q).
__device__ __forceinline__ void bwd_dscores(bf16 *sdS, const float *sP32, const float *sdP, const float *sD, int warp,
                                            int lane, float scale) {
    for (int e = lane; e < 16 * FT; e += 32) {
        int rk = warp * 16 + e / FT, c = e % FT;
        sdS[rk * LDP + c] = __float2bfloat16(sP32[rk * LDS + c] * (sdP[rk * LDS + c] - sD[c]) * scale);
    }
}

// dK += dS^T Q for the warp's 16 keys: a = its dS^T rows, b = the Q tile.
template <int HS>
__device__ __forceinline__ void bwd_dk(facc *dK, float *wdK, const bf16 *a, const bf16 *b) {
    if constexpr (!dk_smem<HS>::on) {
        warp_mma_ab_acc<FT, HS / 16>(dK, a, LDP, b, pad<HS>::H);
    } else {
        for (int nt = 0; nt < HS / 16; nt++) {
            facc acc;
            wmma::load_matrix_sync(acc, wdK + nt * 16, pad<HS>::X, wmma::mem_row_major);
            for (int kk = 0; kk < FT; kk += 16) {
                fa_row fa;
                fb_row fb;
                wmma::load_matrix_sync(fa, a + kk, LDP);
                wmma::load_matrix_sync(fb, b + kk * pad<HS>::H + nt * 16, pad<HS>::H);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(wdK + nt * 16, acc, pad<HS>::X, wmma::mem_row_major);
        }
    }
}

// dq32 += the warp's 16 query rows of dQ staged in sX (fp32 atomics: every key
// tile's block adds to the same rows).
template <int HS>
__device__ __forceinline__ void bwd_add_dq(float *dq32, const float *sX, int warp, int lane, int q0, int qend, int T,
                                           int h, int nh) {
    int qd = nh * HS;
    for (int e = lane; e < 16 * HS; e += 32) {
        int rr = warp * 16 + e / HS, t = q0 + rr;
        if (t < T && t <= qend) atomicAdd(&dq32[(size_t)t * qd + h * HS + e % HS], sX[rr * pad<HS>::X + e % HS]);
    }
}

// dK, dV of this warp's 16 keys (bf16), from fragments through the staging
// buffer sX, or from dK's shared-memory rows.
template <int HS>
__device__ __forceinline__ void bwd_write_kv(bf16 *dk, bf16 *dv, facc *dK, facc *dV, float *sX, const float *sdK,
                                             int warp, int lane, int j0, int T, int hk, int nkv) {
    int kd = nkv * HS;
    const int LX = pad<HS>::X;
    for (int which = 0; which < 2; which++) {
        const float *src = sX;
        __syncwarp();
        if (which == 0 && dk_smem<HS>::on) src = sdK;
        else
            for (int nt = 0; nt < HS / 16; nt++)
                wmma::store_matrix_sync(sX + warp * 16 * LX + nt * 16, which ? dV[nt] : dK[nt], LX,
                                        wmma::mem_row_major);
        __syncwarp();
        bf16 *dst = which ? dv : dk;
        for (int e = lane; e < 16 * HS; e += 32) {
            int rr = warp * 16 + e / HS, j = j0 + rr;
            if (j < T) dst[(size_t)j * kd + hk * HS + e % HS] = __float2bfloat16(src[rr * LX + e % HS]);
        }
    }
}

// One block per 64-key tile of KV head hk (attend_bwd_kv and attend_bwd_q in
// core/cpu/ops_cpu.c, a tile at a time): for every query head of the group
// and every query tile that sees the keys, recompute P^T from S^T = K Q^T and
// lse, then dV += P^T dO, dP^T = V dO^T, dS^T, dK += dS^T Q and dQ += dS K.
template <int HS>
__global__ void __launch_bounds__(FW * 32) k_flash_bwd(float *dq32, bf16 *dk, bf16 *dv, const bf16 *dout, const float *lse,
                                                      const float *D, const bf16 *q, const bf16 *k, const bf16 *v,
                                                      const int32_t *seq_of, const int32_t *seq_start,
                                                      const int32_t *q_end, const int32_t *pre_end,
                                                      const int32_t *own0, int T, int nh, int nkv, float scale) {
    extern __shared__ __align__(128) unsigned char sm[];
    const int LH = pad<HS>::H, LX = pad<HS>::X;
    static_assert(FT * pad<HS>::X <= 2 * FT * LDS, "the dQ staging must fit in P^T and dP^T");
    bf16 *sK = (bf16 *)sm, *sV = sK + FT * LH, *sQ = sV + FT * LH, *sdO = sQ + FT * LH;
    float *sP32 = (float *)(sdO + FT * LH), *sdP = sP32 + FT * LDS;
    float *sX = sP32;   // dQ staging: P^T and dP^T are dead once dS^T is made (barrier between)
    bf16 *sP = (bf16 *)(sdP + FT * LDS), *sdS = sP + FT * LDP;
    float *sdK = (float *)(sdS + FT * LDP);
    float *sLse = sdK + (dk_smem<HS>::on ? FT * LX : 0), *sD = sLse + FT;
    int *sQs = (int *)(sD + FT), *sQpe = sQs + FT, *sQo0 = sQpe + FT;
    int hk = blockIdx.y, G = nh / nkv, j0 = blockIdx.x * FT, kd = nkv * HS;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    load_tile<HS>(sK, k, j0, T, kd, hk * HS);
    load_tile<HS>(sV, v, j0, T, kd, hk * HS);
    int qend = seq_start[seq_of[min(T, j0 + FT) - 1] + 1] - 1;   // last query that sees a key of the tile
    if (q_end) {   // packed: a continuation's keys are seen up to the end of their segment only
        qend = j0;
        for (int j = j0; j < min(T, j0 + FT); j++) qend = max(qend, q_end[j] - 1);
    }
    facc dK[dk_smem<HS>::on ? 1 : HS / 16], dV[HS / 16];
    float *wdK = sdK + warp * 16 * LX;
    if constexpr (dk_smem<HS>::on)
        for (int e = lane; e < 16 * LX; e += 32) wdK[e] = 0.f;
    else
        for (int n = 0; n < HS / 16; n++) wmma::fill_fragment(dK[n], 0.f);
    for (int n = 0; n < HS / 16; n++) wmma::fill_fragment(dV[n], 0.f);
    const bf16 *wK = sK + warp * 16 * LH, *wV = sV + warp * 16 * LH;   // this warp's 16 keys
    for (int h = hk * G; h < hk * G + G; h++) {
        for (int q0 = j0; q0 <= qend; q0 += FT) {
            __syncthreads();   // the previous tile's readers are done
            bwd_load_q_tile<HS>(sQ, sdO, sLse, sD, sQs, sQpe, sQo0, q, dout, lse, D, seq_of, seq_start, pre_end, own0,
                                q0, qend, T, h, nh);
            __syncthreads();
            warp_mma_abt<HS, FT / 16>(sP32 + warp * 16 * LDS, LDS, wK, LH, sQ, LH);    // S^T = K Q^T
            __syncwarp();
            bwd_probs(sP32, sP, sLse, sQs, sQpe, sQo0, warp, lane, j0, q0, T, scale);
            __syncwarp();
            warp_mma_ab_acc<FT, HS / 16>(dV, sP + warp * 16 * LDP, LDP, sdO, LH);     // dV += P^T dO
            warp_mma_abt<HS, FT / 16>(sdP + warp * 16 * LDS, LDS, wV, LH, sdO, LH);   // dP^T = V dO^T
            __syncwarp();
            bwd_dscores(sdS, sP32, sdP, sD, warp, lane, scale);
            __syncthreads();   // dQ reads every warp's dS^T rows; P^T, dP^T are dead from here
            bwd_dk<HS>(dK, wdK, sdS + warp * 16 * LDP, sQ);                           // dK += dS^T Q
            warp_mma_atb<FT, HS / 16>(sX + warp * 16 * LX, LX, sdS + warp * 16, LDP, sK, LH);   // dQ = dS K
            __syncwarp();
            bwd_add_dq<HS>(dq32, sX, warp, lane, q0, qend, T, h, nh);
        }
    }
    bwd_write_kv<HS>(dk, dv, dK, dV, sX, wdK - warp * 16 * LX, warp, lane, j0, T, hk, nkv);
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
                              const skpo_bf16 *v, const int32_t *seq_of, const int32_t *seq_start, const skpo_cuda_runs *ru,
                              int T, int nh, int nkv, skpo_err *err) {
    size_t sm = fwd_smem<HS>();
    CU(cudaFuncSetAttribute(k_flash_fwd<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm), err);
    dim3 grid((T + FT - 1) / FT, nh);
    k_flash_fwd<HS><<<grid, FW * 32, sm, c->stream>>>((bf16 *)out, lse, (const bf16 *)q, (const bf16 *)k,
                                                      (const bf16 *)v, seq_of, seq_start,
                                                      ru ? ru->pre_end : (const int32_t *)NULL,
                                                      ru ? ru->own0 : (const int32_t *)NULL, T, nh, nkv,
                                                      1.f / sqrtf((float)HS));
    LAUNCHED(err);
    return SKPO_OK;
}

extern "C" skpo_status skpo_cuda_flash_attention(skpo_cuda *c, skpo_bf16 *out, float *lse, const skpo_bf16 *q,
                                                 const skpo_bf16 *k, const skpo_bf16 *v, const int32_t *seq_of,
                                                 const int32_t *seq_start, int T, int nh, int nkv, int hs,
                                                 skpo_err *err) {
    return skpo_cuda_flash_attention_runs(c, out, lse, q, k, v, seq_of, seq_start, NULL, T, nh, nkv, hs, err);
}

extern "C" skpo_status skpo_cuda_flash_attention_runs(skpo_cuda *c, skpo_bf16 *out, float *lse, const skpo_bf16 *q,
                                                      const skpo_bf16 *k, const skpo_bf16 *v, const int32_t *seq_of,
                                                      const int32_t *seq_start, const skpo_cuda_runs *ru, int T, int nh,
                                                      int nkv, int hs, skpo_err *err) {
    if (!T) return SKPO_OK;
    if (nh % nkv) return skpo_err_set(err, SKPO_EUNSUPPORTED, "flash attention: %d heads over %d KV heads", nh, nkv);
    if (hs == 64) return fwd_launch<64>(c, out, lse, q, k, v, seq_of, seq_start, ru, T, nh, nkv, err);
    if (hs == 128) return fwd_launch<128>(c, out, lse, q, k, v, seq_of, seq_start, ru, T, nh, nkv, err);
    return skpo_err_set(err, SKPO_EUNSUPPORTED, "flash attention: head_dim %d (64 or 128)", hs);
}

template <int HS>
static skpo_status bwd_launch(skpo_cuda *c, float *dq32, skpo_bf16 *dk, skpo_bf16 *dv, const skpo_bf16 *dout,
                              const float *lse, const float *D, const skpo_bf16 *q, const skpo_bf16 *k,
                              const skpo_bf16 *v, const int32_t *seq_of, const int32_t *seq_start, const skpo_cuda_runs *ru,
                              int T, int nh, int nkv, skpo_err *err) {
    size_t sm = bwd_smem<HS>();
    CU(cudaFuncSetAttribute(k_flash_bwd<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm), err);
    dim3 grid((T + FT - 1) / FT, nkv);
    k_flash_bwd<HS><<<grid, FW * 32, sm, c->stream>>>(dq32, (bf16 *)dk, (bf16 *)dv, (const bf16 *)dout, lse, D,
                                                      (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, seq_of,
                                                      seq_start, ru ? ru->q_end : (const int32_t *)NULL,
                                                      ru ? ru->pre_end : (const int32_t *)NULL,
                                                      ru ? ru->own0 : (const int32_t *)NULL, T, nh, nkv,
                                                      1.f / sqrtf((float)HS));
    LAUNCHED(err);
    return SKPO_OK;
}

extern "C" skpo_status skpo_cuda_flash_attention_backward(skpo_cuda *c, skpo_bf16 *dq, skpo_bf16 *dk, skpo_bf16 *dv,
                                                          const skpo_bf16 *dout, const skpo_bf16 *out, const float *lse,
                                                          const skpo_bf16 *q, const skpo_bf16 *k, const skpo_bf16 *v,
                                                          const int32_t *seq_of, const int32_t *seq_start, int T,
                                                          int nh, int nkv, int hs, float *work, skpo_err *err) {
    return skpo_cuda_flash_attention_backward_runs(c, dq, dk, dv, dout, out, lse, q, k, v, seq_of, seq_start, NULL, T,
                                                   nh, nkv, hs, work, err);
}

extern "C" skpo_status skpo_cuda_flash_attention_backward_runs(skpo_cuda *c, skpo_bf16 *dq, skpo_bf16 *dk,
                                                               skpo_bf16 *dv, const skpo_bf16 *dout,
                                                               const skpo_bf16 *out, const float *lse,
                                                               const skpo_bf16 *q, const skpo_bf16 *k,
                                                               const skpo_bf16 *v, const int32_t *seq_of,
                                                               const int32_t *seq_start, const skpo_cuda_runs *ru,
                                                               int T, int nh, int nkv, int hs, float *work,
                                                               skpo_err *err) {
    if (!T) return SKPO_OK;
    if (nh % nkv || (hs != 64 && hs != 128))
        return skpo_err_set(err, SKPO_EUNSUPPORTED, "flash attention: head_dim %d (64 or 128), heads %d/%d", hs, nh, nkv);
    float *D = work, *dq32 = work + (size_t)T * nh;
    size_t nq = (size_t)T * nh * hs;
    CU(cudaMemsetAsync(dq32, 0, nq * sizeof(float), c->stream), err);
    size_t threads = (size_t)T * nh * 32;
    k_flash_d<<<blocks_for(threads, 256), 256, 0, c->stream>>>(D, (const bf16 *)dout, (const bf16 *)out, T, nh, hs);
    LAUNCHED(err);
    skpo_status st = hs == 64 ? bwd_launch<64>(c, dq32, dk, dv, dout, lse, D, q, k, v, seq_of, seq_start, ru, T, nh, nkv, err)
                              : bwd_launch<128>(c, dq32, dk, dv, dout, lse, D, q, k, v, seq_of, seq_start, ru, T, nh, nkv, err);
    if (st) return st;
    return skpo_cuda_f32_to_bf16(c, dq, dq32, nq, err);
}
