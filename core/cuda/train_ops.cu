// train_ops.cu - small kernels the device training pass needs beyond ops.cu:
// row gather / scatter for the scored rows of the lm_head, the input-gradient
// GEMM with accumulation (several projections feed one normed input), and a
// deterministic sum of squares in double (the same bits on every rank, so
// data-parallel replicas that clip with it stay identical).
#include "common.cuh"

#include "cuda/cuda_train.h"

__global__ void k_rows_gather(bf16 *dst, const bf16 *src, const int32_t *rows, int C) {
    const bf16 *s = src + (size_t)rows[blockIdx.x] * C;
    bf16 *d = dst + (size_t)blockIdx.x * C;
    for (int i = threadIdx.x; i < C; i += blockDim.x) d[i] = s[i];
}

extern "C" skpo_status skpo_cuda_rows_gather(skpo_cuda *c, skpo_bf16 *dst, const skpo_bf16 *src, const int32_t *rows,
                                             int n, int C, skpo_err *err) {
    if (!n) return SKPO_OK;
    k_rows_gather<<<n, 256, 0, c->stream>>>((bf16 *)dst, (const bf16 *)src, rows, C);
    LAUNCHED(err);
    return SKPO_OK;
}

__global__ void k_rows_scatter(bf16 *dst, const bf16 *src, const int32_t *rows, int C) {
    bf16 *d = dst + (size_t)rows[blockIdx.x] * C;
    const bf16 *s = src + (size_t)blockIdx.x * C;
    for (int i = threadIdx.x; i < C; i += blockDim.x) d[i] = s[i];
}

extern "C" skpo_status skpo_cuda_rows_scatter(skpo_cuda *c, skpo_bf16 *dst, const skpo_bf16 *src, const int32_t *rows,
                                              int n, int C, skpo_err *err) {
    if (!n) return SKPO_OK;
    k_rows_scatter<<<n, 256, 0, c->stream>>>((bf16 *)dst, (const bf16 *)src, rows, C);
    LAUNCHED(err);
    return SKPO_OK;
}

// dst[rows[i]] += src[i] (fp32) for the i whose dup[i] == round: rows may
// repeat (a packed row's last prefix token predicts the first token of every
// continuation); within one round they do not, and rounds run in order, so
// the sums have one fixed order (no atomics).
__global__ void k_rows_scatter_add(float *dst, const bf16 *src, const int32_t *rows, const int32_t *dup, int round,
                                   int C) {
    if (dup[blockIdx.x] != round) return;
    float *d = dst + (size_t)rows[blockIdx.x] * C;
    const bf16 *s = src + (size_t)blockIdx.x * C;
    for (int i = threadIdx.x; i < C; i += blockDim.x) d[i] += __bfloat162float(s[i]);
}

extern "C" skpo_status skpo_cuda_rows_scatter_add(skpo_cuda *c, float *dst, const skpo_bf16 *src, const int32_t *rows,
                                                  const int32_t *dup, int rounds, int n, int C, skpo_err *err) {
    for (int r = 0; n && r < rounds; r++) {
        k_rows_scatter_add<<<n, 256, 0, c->stream>>>(dst, (const bf16 *)src, rows, dup, r, C);
        LAUNCHED(err);
    }
    return SKPO_OK;
}

// dx(T,K) = beta dx + dy(T,N) W(N,K): the same GEMM as linear_backward's dx,
// with beta exposed so q/k/v (and gate/up) accumulate into one input gradient.
extern "C" skpo_status skpo_cuda_linear_dx(skpo_cuda *c, skpo_bf16 *dx, const skpo_bf16 *dy, const skpo_bf16 *w, int T,
                                           int K, int N, float beta, skpo_err *err) {
    if (!T) return SKPO_OK;
    float one = 1.f;
    CUBLAS(cublasGemmEx(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, K, T, N, &one, w, CUDA_R_16BF, K, dy, CUDA_R_16BF, N, &beta,
                        dx, CUDA_R_16BF, K, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
           err);
    return SKPO_OK;
}

// Embedding backward without atomics (SKPO_DETERMINISTIC=1): the rows come
// sorted by token id (order, runs of one id starting at seg); one block per
// (run, 256 columns) sums its rows in that order and adds once.
__global__ void k_embed_bwd_sorted(float *dwte, const bf16 *dout, const int32_t *ids, const int32_t *order,
                                   const int32_t *seg, int C) {
    int i = blockIdx.y * blockDim.x + threadIdx.x, a = seg[blockIdx.x], b = seg[blockIdx.x + 1];
    if (i >= C) return;
    float s = 0.f;
    for (int r = a; r < b; r++) s += __bfloat162float(dout[(size_t)order[r] * C + i]);
    dwte[(size_t)ids[order[a]] * C + i] += s;
}

extern "C" skpo_status skpo_cuda_embed_backward_sorted(skpo_cuda *c, float *dwte, const skpo_bf16 *dout,
                                                       const int32_t *ids, const int32_t *order, const int32_t *seg,
                                                       int nseg, int C, skpo_err *err) {
    if (!nseg) return SKPO_OK;
    k_embed_bwd_sorted<<<dim3((unsigned)nseg, blocks_for((size_t)C, 256)), 256, 0, c->stream>>>(
        dwte, (const bf16 *)dout, ids, order, seg, C);
    LAUNCHED(err);
    return SKPO_OK;
}

// Fixed grid and fixed reduction order: per-thread strided sums in double, a
// block tree, then one block sums the partials in index order.
#define SQ_BLOCKS 512
#define SQ_THREADS 256

__global__ void k_sumsq_part(double *part, const float *g, size_t n) {
    __shared__ double shm[SQ_THREADS];
    double s = 0;
    for (size_t i = (size_t)blockIdx.x * SQ_THREADS + threadIdx.x; i < n; i += (size_t)SQ_BLOCKS * SQ_THREADS)
        s += (double)g[i] * (double)g[i];
    shm[threadIdx.x] = s;
    __syncthreads();
    for (int o = SQ_THREADS / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) shm[threadIdx.x] += shm[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) part[blockIdx.x] = shm[0];
}

__global__ void k_sumsq_final(double *out, const double *part) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        double s = 0;
        for (int k = 0; k < SQ_BLOCKS; k++) s += part[k];
        out[0] = s;
    }
}

extern "C" skpo_status skpo_cuda_sumsq_f64(skpo_cuda *c, double *host_out, const float *g, size_t n, skpo_err *err) {
    *host_out = 0;
    if (!n) return SKPO_OK;
    double *part;
    skpo_status st = skpo_cuda_malloc(c, (void **)&part, (SQ_BLOCKS + 1) * sizeof(double), "sum of squares", err);
    if (st) return st;
    k_sumsq_part<<<SQ_BLOCKS, SQ_THREADS, 0, c->stream>>>(part, g, n);
    k_sumsq_final<<<1, 32, 0, c->stream>>>(part + SQ_BLOCKS, part);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaMemcpyAsync(host_out, part + SQ_BLOCKS, sizeof(double), cudaMemcpyDeviceToHost, c->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    cudaFree(part);
    if (e != cudaSuccess) return skpo_cuda_fail(err, e, "sum of squares", __FILE__, __LINE__);
    return SKPO_OK;
}

extern "C" skpo_status skpo_cuda_d2d(skpo_cuda *c, void *dst, const void *src, size_t bytes, skpo_err *err) {
    if (!bytes) return SKPO_OK;
    CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream), err);
    return SKPO_OK;
}

// --- column sums (bias and norm-weight gradients) without atomics -------------------------
// Stage 1: COL_PARTS row ranges x column blocks, each thread sums its column
// over its rows (adjacent threads read adjacent columns); stage 2 adds the
// partials in order. Deterministic, and no T-fold contention on N addresses.

__global__ void k_colsum_part(float *part, const bf16 *a, const bf16 *b, const float *r, int T, int N, int rows) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    int t0 = blockIdx.y * rows, t1 = min(T, t0 + rows);
    float s = 0.f;
    for (int t = t0; t < t1; t++) {
        float v = __bfloat162float(a[(size_t)t * N + n]);
        if (b) v *= __bfloat162float(b[(size_t)t * N + n]) * r[t];
        s += v;
    }
    part[(size_t)blockIdx.y * N + n] = s;
}

__global__ void k_colsum_final(float *dst, const float *part, int parts, int N) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    float s = 0.f;
    for (int p = 0; p < parts; p++) s += part[(size_t)p * N + n];
    dst[n] += s;
}

extern "C" skpo_status skpo_cuda_colsum(skpo_cuda *c, float *dst, const skpo_bf16 *a, const skpo_bf16 *b, const float *r,
                                        int T, int N, float *scratch, skpo_err *err) {
    if (!T || !N) return SKPO_OK;
    int rows = (T + SKPO_COL_PARTS - 1) / SKPO_COL_PARTS, parts = (T + rows - 1) / rows;
    dim3 grid(blocks_for((size_t)N, 256), parts);
    k_colsum_part<<<grid, 256, 0, c->stream>>>(scratch, (const bf16 *)a, (const bf16 *)b, r, T, N, rows);
    k_colsum_final<<<blocks_for((size_t)N, 256), 256, 0, c->stream>>>(dst, scratch, parts, N);
    LAUNCHED(err);
    return SKPO_OK;
}

// dx += r w dy - r^3 x mean(dy w x): the residual gradient accumulates in place.
__global__ void k_rmsnorm_bwd_acc(bf16 *dx, const bf16 *dy, const bf16 *x, const bf16 *w, const float *rstd, int C) {
    __shared__ float shm[32];
    size_t row = (size_t)blockIdx.x * C;
    float r = rstd[blockIdx.x], dot = rmsnorm_bwd_mean(dy, x, w, row, C, shm);
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        float xi = __bfloat162float(x[row + i]), gi = __bfloat162float(dy[row + i]);
        float d = rmsnorm_bwd_dx(r, __bfloat162float(w[i]), gi, xi, dot);
        dx[row + i] = __float2bfloat16(__bfloat162float(dx[row + i]) + d);
    }
}

extern "C" skpo_status skpo_cuda_rmsnorm_backward_acc(skpo_cuda *c, skpo_bf16 *dx, const skpo_bf16 *dy, const skpo_bf16 *x,
                                                      const skpo_bf16 *w, const float *rstd, int T, int C, skpo_err *err) {
    if (!T) return SKPO_OK;
    k_rmsnorm_bwd_acc<<<T, 256, 0, c->stream>>>((bf16 *)dx, (const bf16 *)dy, (const bf16 *)x, (const bf16 *)w, rstd, C);
    LAUNCHED(err);
    return SKPO_OK;
}
