// common.cuh - shared by the CUDA backend's translation units: the context
// struct, error macros that add file:line to a real function, bf16 helpers
// and warp/block reductions.
#pragma once
extern "C" {
#include "base/common.h"
}
#include "cuda/cuda.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

struct skpo_cuda {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    int sync_each;   // SKPO_CUDA_SYNC=1: synchronise after every launch (debugging)
    void *dnn;       // cuDNN handle, graphs and buffers (sdpa_cudnn.cpp), made on first use
};

skpo_status skpo_cuda_fail(skpo_err *err, cudaError_t e, const char *what, const char *file, int line);
skpo_status skpo_cublas_fail(skpo_err *err, cublasStatus_t s, const char *what, const char *file, int line);

#define CU(call, err) do { cudaError_t e_ = (call); \
    if (e_ != cudaSuccess) return skpo_cuda_fail((err), e_, #call, __FILE__, __LINE__); } while (0)
// After a launch: the launch error; with SKPO_CUDA_SYNC=1 also the stream
// synchronised (outside graph capture), so an asynchronous fault is reported
// at the launch that caused it, not at some later call.
cudaError_t skpo_cuda_after_launch(const skpo_cuda *c);
#define LAUNCH_FAILED(e, err) skpo_cuda_fail((err), (e), c && c->sync_each ? \
    "kernel failed (SKPO_CUDA_SYNC=1: at this launch)" : "kernel launch", __FILE__, __LINE__)
#define LAUNCHED(err) do { cudaError_t e_ = skpo_cuda_after_launch(c); \
    if (e_ != cudaSuccess) return LAUNCH_FAILED(e_, err); } while (0)
#define CUBLAS(call, err) do { cublasStatus_t s_ = (call); \
    if (s_ != CUBLAS_STATUS_SUCCESS) return skpo_cublas_fail((err), s_, #call, __FILE__, __LINE__); \
    if (c->sync_each) LAUNCHED(err); } while (0)

typedef __nv_bfloat16 bf16;

__device__ __forceinline__ float ld(const skpo_bf16 *p, size_t i) { return __bfloat162float(((const bf16 *)p)[i]); }
__device__ __forceinline__ void st(skpo_bf16 *p, size_t i, float v) { ((bf16 *)p)[i] = __float2bfloat16(v); }

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// Block-wide sum for blockDim.x a multiple of 32 (<= 1024); result on all threads.
__device__ __forceinline__ float block_sum(float v, float *shm) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) shm[w] = v;
    __syncthreads();
    v = (threadIdx.x < (unsigned)nw) ? shm[threadIdx.x] : 0.f;
    if (w == 0) v = warp_sum(v);
    if (threadIdx.x == 0) shm[0] = v;
    __syncthreads();
    return shm[0];
}
__device__ __forceinline__ float block_max(float v, float *shm) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) shm[w] = v;
    __syncthreads();
    v = (threadIdx.x < (unsigned)nw) ? shm[threadIdx.x] : -INFINITY;
    if (w == 0) v = warp_max(v);
    if (threadIdx.x == 0) shm[0] = v;
    __syncthreads();
    return shm[0];
}

// RMSNorm backward, one row per block: mean_i(dy_i w_i x_i) and the input
// gradient of element i, r w_i dy_i - r^3 x_i mean (r = 1/rms of the row).
__device__ __forceinline__ float rmsnorm_bwd_mean(const bf16 *dy, const bf16 *x, const bf16 *w, size_t row, int C,
                                                   float *shm) {
    float dot = 0.f;
    for (int i = threadIdx.x; i < C; i += blockDim.x)
        dot += __bfloat162float(dy[row + i]) * __bfloat162float(w[i]) * __bfloat162float(x[row + i]);
    return block_sum(dot, shm) / (float)C;
}
__device__ __forceinline__ float rmsnorm_bwd_dx(float r, float wi, float gi, float xi, float mean) {
    return r * wi * gi - r * r * r * xi * mean;
}

// One element of PyTorch AdamW: w -= lr wd w; m = b1 m + (1-b1) g;
// v = b2 v + (1-b2) g^2; w -= lr (m / bc1) / (sqrt(v / bc2) + eps), with
// bc = 1 - beta^t and g scaled by gscale (clipping); wb (nullable) gets bf16(w).
__device__ __forceinline__ void adamw_elem(float *w, bf16 *wb, float *m, float *v, const float *g, size_t i, size_t mi,
                                           float lr, float b1, float b2, float eps, float wd, float bc1, float bc2,
                                           float gscale) {
    float gi = g[i] * gscale, wi = w[i] * (1.f - lr * wd);
    float mm = b1 * m[mi] + (1.f - b1) * gi, vv = b2 * v[mi] + (1.f - b2) * gi * gi;
    wi -= lr * (mm / bc1) / (sqrtf(vv / bc2) + eps);
    m[mi] = mm;
    v[mi] = vv;
    w[i] = wi;
    if (wb) wb[i] = __float2bfloat16(wi);
}

static inline unsigned blocks_for(size_t n, unsigned threads) { return (unsigned)((n + threads - 1) / threads); }
#define STREAM(c) ((c) ? (c)->stream : (cudaStream_t)0)
