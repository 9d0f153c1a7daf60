// ops.cu - elementwise and row kernels of the transformer (forward and
// backward), cuBLAS linear layers, chunked log-prob, AdamW (sampling: sample.cu).
// Math mirrors the CPU reference (fp32 inside every kernel, bf16 storage).
#include "common.cuh"

// --- linear layers (cuBLAS, bf16 in, fp32 accumulate) -------------------------------

__global__ void k_add_bias(bf16 *y, const bf16 *b, int T, int N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)T * N) y[i] = __float2bfloat16(__bfloat162float(y[i]) + __bfloat162float(b[i % N]));
}

// Row-major y(T,N) = x(T,K) W(N,K)^T. In cuBLAS's column-major view this is
// y^T(N,T) = W^T... i.e. gemm(op_T on W stored (K,N) col-major, op_N on x).
extern "C" skpo_status skpo_cuda_linear(skpo_cuda *c, skpo_bf16 *y, const skpo_bf16 *x, const skpo_bf16 *w,
                                        const skpo_bf16 *bias, int T, int K, int N, float beta, skpo_err *err) {
    float alpha = 1.f;
    CUBLAS(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &alpha, w, CUDA_R_16BF, K, x, CUDA_R_16BF, K,
                        &beta, y, CUDA_R_16BF, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), err);
    if (bias) {
        size_t n = (size_t)T * N;
        k_add_bias<<<blocks_for(n, 256), 256, 0, c->stream>>>((bf16 *)y, (const bf16 *)bias, T, N);
        LAUNCHED(err);
    }
    return SKPO_OK;
}

__global__ void k_bias_grad(float *db, const bf16 *dy, int T, int N) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    float s = 0.f;
    for (int t = 0; t < T; t++) s += __bfloat162float(dy[(size_t)t * N + n]);
    db[n] += s;
}

extern "C" skpo_status skpo_cuda_linear_backward(skpo_cuda *c, skpo_bf16 *dx, float *dw, float *dbias,
                                                 const skpo_bf16 *dy, const skpo_bf16 *x, const skpo_bf16 *w, int T,
                                                 int K, int N, skpo_err *err) {
    float one = 1.f, zero = 0.f;
    if (dx)  // dx(T,K) = dy(T,N) W(N,K)
        CUBLAS(cublasGemmEx(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, K, T, N, &one, w, CUDA_R_16BF, K, dy, CUDA_R_16BF, N,
                            &zero, dx, CUDA_R_16BF, K, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), err);
    if (dw)  // dW(N,K) += dy^T x, fp32 accumulation buffer
        CUBLAS(cublasGemmEx(c->blas, CUBLAS_OP_N, CUBLAS_OP_T, K, N, T, &one, x, CUDA_R_16BF, K, dy, CUDA_R_16BF, N,
                            &one, dw, CUDA_R_32F, K, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), err);
    if (dbias) {
        k_bias_grad<<<blocks_for((size_t)N, 256), 256, 0, c->stream>>>(dbias, (const bf16 *)dy, T, N);
        LAUNCHED(err);
    }
    return SKPO_OK;
}

// --- embedding, residual, SwiGLU ------------------------------------------------------

__global__ void k_embed(bf16 *out, const bf16 *wte, const int32_t *ids, int T, int C) {
    int t = blockIdx.x;
    const bf16 *row = wte + (size_t)ids[t] * C;
    for (int i = threadIdx.x; i < C; i += blockDim.x) out[(size_t)t * C + i] = row[i];
}

extern "C" skpo_status skpo_cuda_embed(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *wte, const int32_t *ids, int T,
                                       int C, skpo_err *err) {
    if (!T) return SKPO_OK;
    k_embed<<<T, 256, 0, c->stream>>>((bf16 *)out, (const bf16 *)wte, ids, T, C);
    LAUNCHED(err);
    return SKPO_OK;
}

__global__ void k_embed_bwd(float *dwte, const bf16 *dout, const int32_t *ids, int T, int C) {
    int t = blockIdx.x;
    for (int i = threadIdx.x; i < C; i += blockDim.x)
        atomicAdd(&dwte[(size_t)ids[t] * C + i], __bfloat162float(dout[(size_t)t * C + i]));
}

extern "C" skpo_status skpo_cuda_embed_backward(skpo_cuda *c, float *dwte, const skpo_bf16 *dout, const int32_t *ids,
                                                int T, int C, skpo_err *err) {
    if (!T) return SKPO_OK;
    k_embed_bwd<<<T, 256, 0, c->stream>>>(dwte, (const bf16 *)dout, ids, T, C);
    LAUNCHED(err);
    return SKPO_OK;
}

__global__ void k_add(bf16 *y, const bf16 *x, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2bfloat16(__bfloat162float(y[i]) + __bfloat162float(x[i]));
}

extern "C" skpo_status skpo_cuda_add(skpo_cuda *c, skpo_bf16 *y, const skpo_bf16 *x, size_t n, skpo_err *err) {
    if (!n) return SKPO_OK;
    k_add<<<blocks_for(n, 256), 256, 0, c->stream>>>((bf16 *)y, (const bf16 *)x, n);
    LAUNCHED(err);
    return SKPO_OK;
}

__device__ __forceinline__ float sigmoidf_(float x) { return 1.f / (1.f + expf(-x)); }

__global__ void k_swiglu(bf16 *out, const bf16 *g, const bf16 *u, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float a = __bfloat162float(g[i]);
    out[i] = __float2bfloat16(a * sigmoidf_(a) * __bfloat162float(u[i]));
}

extern "C" skpo_status skpo_cuda_swiglu(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *gate, const skpo_bf16 *up,
                                        size_t n, skpo_err *err) {
    if (!n) return SKPO_OK;
    k_swiglu<<<blocks_for(n, 256), 256, 0, c->stream>>>((bf16 *)out, (const bf16 *)gate, (const bf16 *)up, n);
    LAUNCHED(err);
    return SKPO_OK;
}

__global__ void k_swiglu_bwd(bf16 *dg, bf16 *du, const bf16 *dout, const bf16 *g, const bf16 *u, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float a = __bfloat162float(g[i]), b = __bfloat162float(u[i]), d = __bfloat162float(dout[i]);
    float s = sigmoidf_(a);
    dg[i] = __float2bfloat16(d * b * s * (1.f + a * (1.f - s)));
    du[i] = __float2bfloat16(d * a * s);
}

extern "C" skpo_status skpo_cuda_swiglu_backward(skpo_cuda *c, skpo_bf16 *dgate, skpo_bf16 *dup, const skpo_bf16 *dout,
                                                 const skpo_bf16 *gate, const skpo_bf16 *up, size_t n, skpo_err *err) {
    if (!n) return SKPO_OK;
    k_swiglu_bwd<<<blocks_for(n, 256), 256, 0, c->stream>>>((bf16 *)dgate, (bf16 *)dup, (const bf16 *)dout,
                                                            (const bf16 *)gate, (const bf16 *)up, n);
    LAUNCHED(err);
    return SKPO_OK;
}

// --- RMSNorm ---------------------------------------------------------------------------

__global__ void k_rmsnorm(bf16 *out, float *rstd, const bf16 *x, const bf16 *w, int C, float eps) {
    __shared__ float shm[32];
    size_t row = (size_t)blockIdx.x * C;
    float ss = 0.f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        float v = __bfloat162float(x[row + i]);
        ss += v * v;
    }
    ss = block_sum(ss, shm);
    float r = rsqrtf(ss / (float)C + eps);
    if (rstd && threadIdx.x == 0) rstd[blockIdx.x] = r;
    for (int i = threadIdx.x; i < C; i += blockDim.x)
        out[row + i] = __float2bfloat16(__bfloat162float(x[row + i]) * r * __bfloat162float(w[i]));
}

extern "C" skpo_status skpo_cuda_rmsnorm(skpo_cuda *c, skpo_bf16 *out, float *rstd, const skpo_bf16 *x,
                                         const skpo_bf16 *w, int T, int C, float eps, skpo_err *err) {
    if (!T) return SKPO_OK;
    k_rmsnorm<<<T, 256, 0, c->stream>>>((bf16 *)out, rstd, (const bf16 *)x, (const bf16 *)w, C, eps);
    LAUNCHED(err);
    return SKPO_OK;
}

// dx_i = r w_i dy_i - r^3 x_i mean_j(dy_j w_j x_j);  dw_i += dy_i x_i r
__global__ void k_rmsnorm_bwd(bf16 *dx, float *dw, const bf16 *dy, const bf16 *x, const bf16 *w, const float *rstd, int C) {
    __shared__ float shm[32];
    size_t row = (size_t)blockIdx.x * C;
    float r = rstd[blockIdx.x], dot = rmsnorm_bwd_mean(dy, x, w, row, C, shm);
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        float xi = __bfloat162float(x[row + i]), gi = __bfloat162float(dy[row + i]);
        dx[row + i] = __float2bfloat16(rmsnorm_bwd_dx(r, __bfloat162float(w[i]), gi, xi, dot));
        atomicAdd(&dw[i], gi * xi * r);
    }
}

extern "C" skpo_status skpo_cuda_rmsnorm_backward(skpo_cuda *c, skpo_bf16 *dx, float *dw, const skpo_bf16 *dy,
                                                  const skpo_bf16 *x, const skpo_bf16 *w, const float *rstd, int T, int C,
                                                  skpo_err *err) {
    if (!T) return SKPO_OK;
    k_rmsnorm_bwd<<<T, 256, 0, c->stream>>>((bf16 *)dx, dw, (const bf16 *)dy, (const bf16 *)x, (const bf16 *)w, rstd, C);
    LAUNCHED(err);
    return SKPO_OK;
}

// --- RoPE (Hugging Face rotate-half) ---------------------------------------------------------

__global__ void k_rope(bf16 *x, const int32_t *pos, const float *inv_freq, int T, int nheads, int hs, float sign) {
    int half = hs / 2;
    size_t n = (size_t)T * nheads * half;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int d = (int)(i % half);
    size_t th = i / half;          // t * nheads + h
    int t = (int)(th / nheads);
    float ang = (float)pos[t] * inv_freq[d];
    float s, co;
    sincosf(ang, &s, &co);
    s *= sign;
    bf16 *p = x + th * hs;
    float a = __bfloat162float(p[d]), b = __bfloat162float(p[d + half]);
    p[d] = __float2bfloat16(a * co - b * s);
    p[d + half] = __float2bfloat16(b * co + a * s);
}

extern "C" skpo_status skpo_cuda_rope(skpo_cuda *c, skpo_bf16 *q, skpo_bf16 *k, const int32_t *pos,
                                      const float *inv_freq, int T, int nh, int nkv, int hs, int inverse, skpo_err *err) {
    if (!T) return SKPO_OK;
    float sign = inverse ? -1.f : 1.f;  // backward of a rotation is the inverse rotation
    size_t nq = (size_t)T * nh * (hs / 2), nk = (size_t)T * nkv * (hs / 2);
    if (q) k_rope<<<blocks_for(nq, 256), 256, 0, c->stream>>>((bf16 *)q, pos, inv_freq, T, nh, hs, sign);
    if (k) k_rope<<<blocks_for(nk, 256), 256, 0, c->stream>>>((bf16 *)k, pos, inv_freq, T, nkv, hs, sign);
    LAUNCHED(err);
    return SKPO_OK;
}

// --- log-prob over a large vocabulary ------------------------------------------------------
// One block per row. Pass over the vocabulary keeping, per thread, an online
// max m, S = sum e^(z-m) and W = sum e^(z-m) z, merged across the block.
// logZ = m + log S; entropy = logZ - W/S.

struct lse_acc { float m, s, w; };

__device__ __forceinline__ lse_acc lse_merge(lse_acc a, lse_acc b) {
    if (b.m == -INFINITY) return a;
    if (a.m == -INFINITY) return b;
    float m = fmaxf(a.m, b.m), ea = expf(a.m - m), eb = expf(b.m - m);
    return {m, a.s * ea + b.s * eb, a.w * ea + b.w * eb};
}

__device__ lse_acc row_lse(const bf16 *z, int V, float inv_t) {
    __shared__ lse_acc shm[32];
    lse_acc a = {-INFINITY, 0.f, 0.f};
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float v = __bfloat162float(z[i]) * inv_t;
        a = lse_merge(a, lse_acc{v, 1.f, v});
    }
    for (int o = 16; o > 0; o >>= 1) {
        lse_acc b = {__shfl_xor_sync(0xffffffffu, a.m, o), __shfl_xor_sync(0xffffffffu, a.s, o),
                     __shfl_xor_sync(0xffffffffu, a.w, o)};
        a = lse_merge(a, b);
    }
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) shm[w] = a;
    __syncthreads();
    if (threadIdx.x == 0) {
        lse_acc r = shm[0];
        for (int k = 1; k < (int)(blockDim.x >> 5); k++) r = lse_merge(r, shm[k]);
        shm[0] = r;
    }
    __syncthreads();
    lse_acc r = shm[0];
    __syncthreads();
    return r;
}

__global__ void __launch_bounds__(512) k_logprob(float *logp, float *ent, const bf16 *logits, const int32_t *target, int V, float inv_t) {
    const bf16 *z = logits + (size_t)blockIdx.x * V;
    lse_acc a = row_lse(z, V, inv_t);
    if (threadIdx.x == 0) {
        float logZ = a.m + logf(a.s);
        logp[blockIdx.x] = __bfloat162float(z[target[blockIdx.x]]) * inv_t - logZ;
        if (ent) ent[blockIdx.x] = logZ - a.w / a.s;
    }
}

extern "C" skpo_status skpo_cuda_logprob(skpo_cuda *c, float *logp, float *entropy, const skpo_bf16 *logits,
                                         const int32_t *target, int T, int V, float temp, skpo_err *err) {
    if (!T) return SKPO_OK;
    if (!(temp > 0.f)) return skpo_err_set(err, SKPO_ERANGE, "log-prob temperature must be > 0 (got %g)", temp);
    k_logprob<<<T, 512, 0, c->stream>>>(logp, entropy, (const bf16 *)logits, target, V, 1.f / temp);
    LAUNCHED(err);
    return SKPO_OK;
}

// dz_i = dlogp (1[i=y] - p_i) - dent p_i (z_i - E[z]);  dlogits = dz / T
__global__ void __launch_bounds__(512) k_logprob_bwd(bf16 *dlogits, const bf16 *logits, const int32_t *target, const float *dlogp,
                              const float *dent, int V, float inv_t) {
    size_t row = blockIdx.x;
    const bf16 *z = logits + row * V;
    lse_acc a = row_lse(z, V, inv_t);
    float logZ = a.m + logf(a.s), ez = a.w / a.s;
    float gl = dlogp ? dlogp[row] : 0.f, ge = dent ? dent[row] : 0.f;
    int y = target[row];
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float zi = __bfloat162float(z[i]) * inv_t, p = expf(zi - logZ);
        float d = gl * ((i == y ? 1.f : 0.f) - p) - ge * p * (zi - ez);
        dlogits[row * V + i] = __float2bfloat16(d * inv_t);
    }
}

extern "C" skpo_status skpo_cuda_logprob_backward(skpo_cuda *c, skpo_bf16 *dlogits, const skpo_bf16 *logits,
                                                  const int32_t *target, const float *dlogp, const float *dent, int T,
                                                  int V, float temp, skpo_err *err) {
    if (!T) return SKPO_OK;
    k_logprob_bwd<<<T, 512, 0, c->stream>>>((bf16 *)dlogits, (const bf16 *)logits, target, dlogp, dent, V, 1.f / temp);
    LAUNCHED(err);
    return SKPO_OK;
}

// --- optimizer ----------------------------------------------------------------------------------

__global__ void k_sumsq(float *out, const float *g, size_t n) {
    __shared__ float shm[32];
    float s = 0.f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        s += g[i] * g[i];
    s = block_sum(s, shm);
    if (threadIdx.x == 0) atomicAdd(out, s);
}

extern "C" skpo_status skpo_cuda_sumsq(skpo_cuda *c, float *out, const float *g, size_t n, skpo_err *err) {
    if (!n) return SKPO_OK;
    unsigned blocks = blocks_for(n, 256);
    if (blocks > 1024) blocks = 1024;
    k_sumsq<<<blocks, 256, 0, c->stream>>>(out, g, n);
    LAUNCHED(err);
    return SKPO_OK;
}

// PyTorch AdamW (adamw_elem) on one tensor; optim.cu steps all of them in one launch.
__global__ void k_adamw(float *w, bf16 *wb, float *m, float *v, const float *g, size_t n, float lr, float b1, float b2,
                        float eps, float wd, float bc1, float bc2, float gscale) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) adamw_elem(w, wb, m, v, g, i, i, lr, b1, b2, eps, wd, bc1, bc2, gscale);
}

extern "C" skpo_status skpo_cuda_adamw(skpo_cuda *c, float *w, skpo_bf16 *wb, float *m, float *v, const float *g,
                                       size_t n, float lr, float b1, float b2, float eps, float wd, int step, float gscale,
                                       skpo_err *err) {
    if (!n) return SKPO_OK;
    float bc1 = 1.f - powf(b1, (float)step), bc2 = 1.f - powf(b2, (float)step);
    k_adamw<<<blocks_for(n, 256), 256, 0, c->stream>>>(w, (bf16 *)wb, m, v, g, n, lr, b1, b2, eps, wd, bc1, bc2, gscale);
    LAUNCHED(err);
    return SKPO_OK;
}
