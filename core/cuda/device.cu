// device.cu - device contexts, memory, copies, bf16 conversion, NCCL.
#include "common.cuh"
#include "cuda/cuda_dnn.h"
#include "cuda/cuda_train.h"

#include <nccl.h>
#include <stdlib.h>
#include <string.h>

skpo_status skpo_cuda_fail(skpo_err *err, cudaError_t e, const char *what, const char *file, int line) {
    return skpo_err_set(err, SKPO_EDEVICE, "cuda: %s: %s (%s:%d)", cudaGetErrorString(e), what, file, line);
}

skpo_status skpo_cublas_fail(skpo_err *err, cublasStatus_t s, const char *what, const char *file, int line) {
    return skpo_err_set(err, SKPO_EDEVICE, "cublas: status %d: %s (%s:%d)", (int)s, what, file, line);
}

cudaError_t skpo_cuda_after_launch(const skpo_cuda *c) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || !c || !c->sync_each) return e;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if ((e = cudaStreamIsCapturing(c->stream, &cs)) != cudaSuccess) return e;
    return cs == cudaStreamCaptureStatusNone ? cudaStreamSynchronize(c->stream) : cudaSuccess;
}

extern "C" int skpo_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "no driver" error
        return 0;
    }
    return n;
}

extern "C" skpo_status skpo_cuda_init(int device, skpo_cuda **out, skpo_err *err) {
    int n = skpo_cuda_device_count();
    if (device < 0 || device >= n)
        return skpo_err_set(err, SKPO_EDEVICE, "no CUDA device %d (%d visible; check CUDA_VISIBLE_DEVICES)", device, n);
    CU(cudaSetDevice(device), err);
    skpo_cuda *c = (skpo_cuda *)skpo_xcalloc(1, sizeof *c);
    c->device = device;
    const char *sync = getenv("SKPO_CUDA_SYNC");
    c->sync_each = sync && *sync && strcmp(sync, "0");
    cudaError_t e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        free(c);
        return skpo_cuda_fail(err, e, "cudaStreamCreate", __FILE__, __LINE__);
    }
    cublasStatus_t s = cublasCreate(&c->blas);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetStream(c->blas, c->stream);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH);
    if (s != CUBLAS_STATUS_SUCCESS) {
        cudaStreamDestroy(c->stream);
        free(c);
        const char *why = skpo_cublas_load_error();
        if (why) return skpo_err_set(err, SKPO_EDEVICE, "%s", why);
        return skpo_cublas_fail(err, s, "cublasCreate", __FILE__, __LINE__);
    }
    *out = c;
    return SKPO_OK;
}

extern "C" void *skpo_cuda_stream_of(skpo_cuda *c) { return (void *)c->stream; }
extern "C" void **skpo_cuda_dnn_slot(skpo_cuda *c) { return &c->dnn; }

extern "C" void skpo_cuda_free_ctx(skpo_cuda *c) {
    if (!c) return;
    skpo_cudnn_free_state(c->dnn);
    cublasDestroy(c->blas);
    cudaStreamDestroy(c->stream);
    free(c);
}

extern "C" size_t skpo_cuda_mem_free(skpo_cuda *c) {
    size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) != cudaSuccess) {
        cudaGetLastError();  // else the next LAUNCHED() reports it as a kernel launch failure
        return 0;
    }
    return f;
}

static_assert(sizeof(cudaIpcMemHandle_t) == SKPO_CUDA_IPC_BYTES, "cudaIpcMemHandle_t is not 64 bytes");

extern "C" skpo_status skpo_cuda_ipc_export(skpo_cuda *c, const void *p, unsigned char handle[SKPO_CUDA_IPC_BYTES],
                                            skpo_err *err) {
    cudaIpcMemHandle_t h;
    CU(cudaSetDevice(c->device), err);
    CU(cudaIpcGetMemHandle(&h, (void *)p), err);
    memcpy(handle, &h, sizeof h);
    return SKPO_OK;
}

extern "C" skpo_status skpo_cuda_ipc_open(skpo_cuda *c, const unsigned char handle[SKPO_CUDA_IPC_BYTES], void **p,
                                          skpo_err *err) {
    cudaIpcMemHandle_t h;
    memcpy(&h, handle, sizeof h);
    CU(cudaSetDevice(c->device), err);
    CU(cudaIpcOpenMemHandle(p, h, cudaIpcMemLazyEnablePeerAccess), err);
    return SKPO_OK;
}

extern "C" void skpo_cuda_ipc_close(void *p) {
    if (p && cudaIpcCloseMemHandle(p) != cudaSuccess) cudaGetLastError();
}

extern "C" skpo_status skpo_cuda_pci_id(skpo_cuda *c, char *out, int len, skpo_err *err) {
    CU(cudaDeviceGetPCIBusId(out, len, c->device), err);
    return SKPO_OK;
}

extern "C" skpo_status skpo_cuda_malloc(skpo_cuda *c, void **p, size_t bytes, const char *what, skpo_err *err) {
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        return skpo_err_set(err, SKPO_ENOMEM, "out of GPU memory allocating %zu MiB for %s (%zu MiB free)",
                            bytes >> 20, what ? what : "buffer", skpo_cuda_mem_free(c) >> 20);
    }
    CU(e, err);
    return SKPO_OK;
}

extern "C" void skpo_cuda_dfree(void *p) {
    if (p) cudaFree(p);
}

extern "C" skpo_status skpo_cuda_host_register(void *p, size_t bytes, skpo_err *err) {
    cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterDefault);
    if (e == cudaSuccess) return SKPO_OK;
    cudaGetLastError();   // else the next LAUNCHED() reports it as a kernel launch failure
    return skpo_cuda_fail(err, e, "cudaHostRegister", __FILE__, __LINE__);
}

extern "C" void skpo_cuda_host_unregister(void *p) {
    if (p && cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
}

extern "C" skpo_status skpo_cuda_h2d(skpo_cuda *c, void *dst, const void *src, size_t bytes, skpo_err *err) {
    CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, STREAM(c)), err);
    CU(cudaStreamSynchronize(STREAM(c)), err);
    return SKPO_OK;
}

extern "C" skpo_status skpo_cuda_d2h(skpo_cuda *c, void *dst, const void *src, size_t bytes, skpo_err *err) {
    CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, STREAM(c)), err);
    CU(cudaStreamSynchronize(STREAM(c)), err);
    return SKPO_OK;
}

extern "C" skpo_status skpo_cuda_memset0(skpo_cuda *c, void *p, size_t bytes, skpo_err *err) {
    CU(cudaMemsetAsync(p, 0, bytes, STREAM(c)), err);
    return SKPO_OK;
}

extern "C" skpo_status skpo_cuda_sync(skpo_cuda *c, skpo_err *err) {
    CU(cudaStreamSynchronize(STREAM(c)), err);
    return SKPO_OK;
}

// --- bf16 conversion ------------------------------------------------------------

__global__ void k_f32_to_bf16(bf16 *d, const float *s, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) d[i] = __float2bfloat16(s[i]);
}
__global__ void k_bf16_to_f32(float *d, const bf16 *s, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) d[i] = __bfloat162float(s[i]);
}

extern "C" skpo_status skpo_cuda_f32_to_bf16(skpo_cuda *c, skpo_bf16 *dst, const float *src, size_t n, skpo_err *err) {
    if (!n) return SKPO_OK;
    k_f32_to_bf16<<<blocks_for(n, 256), 256, 0, STREAM(c)>>>((bf16 *)dst, src, n);
    LAUNCHED(err);
    return SKPO_OK;
}

extern "C" skpo_status skpo_cuda_bf16_to_f32(skpo_cuda *c, float *dst, const skpo_bf16 *src, size_t n, skpo_err *err) {
    if (!n) return SKPO_OK;
    k_bf16_to_f32<<<blocks_for(n, 256), 256, 0, STREAM(c)>>>(dst, (const bf16 *)src, n);
    LAUNCHED(err);
    return SKPO_OK;
}

// --- NCCL --------------------------------------------------------------------------

struct skpo_nccl {
    ncclComm_t comm;
    skpo_cuda *c;
    skpo_nccl_waiter wait;
    void *wait_ctx;
    int aborted;
};

#define NCCL(call, err) do { ncclResult_t r_ = (call); if (r_ != ncclSuccess) \
    return skpo_err_set((err), SKPO_EDEVICE, "nccl: %s: %s (%s:%d)", ncclGetErrorString(r_), #call, __FILE__, __LINE__); } while (0)
#define NOT_ABORTED(n, err) do { if ((n)->aborted) \
    return skpo_err_set((err), SKPO_EDEVICE, "nccl: the communicator was aborted after an earlier failure"); } while (0)

extern "C" skpo_status skpo_nccl_unique_id(unsigned char id[128], skpo_err *err) {
    ncclUniqueId u;
    static_assert(sizeof u == 128, "NCCL unique id size");
    NCCL(ncclGetUniqueId(&u), err);
    memcpy(id, &u, 128);
    return SKPO_OK;
}

extern "C" skpo_status skpo_nccl_init(skpo_cuda *c, const unsigned char id[128], int rank, int nranks, skpo_nccl **out,
                                      skpo_err *err) {
    ncclUniqueId u;
    memcpy(&u, id, 128);
    skpo_nccl *n = (skpo_nccl *)skpo_xcalloc(1, sizeof *n);
    n->c = c;
    // NCCL binds the communicator to the current device: make it this context's.
    cudaError_t e = cudaSetDevice(c->device);
    if (e != cudaSuccess) {
        free(n);
        cudaGetLastError();
        return skpo_cuda_fail(err, e, "cudaSetDevice before ncclCommInitRank", __FILE__, __LINE__);
    }
    ncclResult_t r = ncclCommInitRank(&n->comm, nranks, u, rank);
    if (r != ncclSuccess) {
        free(n);
        return skpo_err_set(err, SKPO_EDEVICE, "nccl: cannot init rank %d of %d: %s", rank, nranks, ncclGetErrorString(r));
    }
    *out = n;
    return SKPO_OK;
}

extern "C" void skpo_nccl_set_waiter(skpo_nccl *n, skpo_nccl_waiter fn, void *ctx) {
    n->wait = fn;
    n->wait_ctx = ctx;
}

extern "C" int skpo_nccl_poll(skpo_nccl *n, skpo_err *err) {
    cudaError_t q = cudaStreamQuery(STREAM(n->c));
    if (q == cudaSuccess) return 1;
    if (q != cudaErrorNotReady) {
        cudaGetLastError();
        skpo_cuda_fail(err, q, "waiting for a collective", __FILE__, __LINE__);
        return -1;
    }
    ncclResult_t a = ncclSuccess;
    if (ncclCommGetAsyncError(n->comm, &a) != ncclSuccess || (a != ncclSuccess && a != ncclInProgress)) {
        skpo_err_set(err, SKPO_EDEVICE, "nccl: the communicator failed while waiting (%s: a peer died or its connection broke)",
                     ncclGetErrorString(a));
        return -1;
    }
    return 0;
}

extern "C" void skpo_nccl_abort(skpo_nccl *n) {
    if (n->aborted) return;
    ncclCommAbort(n->comm);   // ends the NCCL kernels stuck on the stream
    n->aborted = 1;
    cudaGetLastError();
}

// The collective just enqueued, and what else is on the stream, done.
static skpo_status nccl_wait(skpo_nccl *n, const char *what, skpo_err *err) {
    if (n->wait) return n->wait(n->wait_ctx, n, what, err);
    CU(cudaStreamSynchronize(STREAM(n->c)), err);
    return SKPO_OK;
}

extern "C" skpo_status skpo_nccl_allreduce_sum(skpo_nccl *n, float *buf, size_t count, skpo_err *err) {
    NOT_ABORTED(n, err);
    NCCL(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, n->comm, STREAM(n->c)), err);
    return nccl_wait(n, "all-reduce", err);
}

extern "C" skpo_status skpo_nccl_reduce_scatter_sum(skpo_nccl *n, float *recv, const float *send, size_t recv_count,
                                                    skpo_err *err) {
    NOT_ABORTED(n, err);
    NCCL(ncclReduceScatter(send, recv, recv_count, ncclFloat32, ncclSum, n->comm, STREAM(n->c)), err);
    return nccl_wait(n, "reduce-scatter", err);
}

extern "C" skpo_status skpo_nccl_allgather(skpo_nccl *n, float *recv, const float *send, size_t send_count, skpo_err *err) {
    NOT_ABORTED(n, err);
    NCCL(ncclAllGather(send, recv, send_count, ncclFloat32, n->comm, STREAM(n->c)), err);
    return nccl_wait(n, "all-gather", err);
}

// Host-side collectives for a communicator without MPI (shared-file
// bootstrap, comm.c): staged through device memory. Declared in cuda_train.h.
// The staged collective's end: the copy back follows it on the stream, so the
// waiter's "stream done" covers both; its failure (abort, timeout) comes first.
static skpo_status staged_end(skpo_nccl *n, void *d, cudaError_t e, ncclResult_t r, const char *what, skpo_err *err) {
    skpo_status st = SKPO_OK;
    if (e == cudaSuccess && r == ncclSuccess) st = nccl_wait(n, what, err);
    cudaFree(d);
    if (st) return st;
    if (r != ncclSuccess) return skpo_err_set(err, SKPO_EDEVICE, "nccl: %s: %s", what, ncclGetErrorString(r));
    if (e != cudaSuccess) return skpo_cuda_fail(err, e, what, __FILE__, __LINE__);
    return SKPO_OK;
}

extern "C" skpo_status skpo_nccl_allreduce_f64_host(skpo_nccl *n, double *buf, size_t count, skpo_err *err) {
    if (!count) return SKPO_OK;
    NOT_ABORTED(n, err);
    void *d = NULL;
    CU(cudaMalloc(&d, count * sizeof(double)), err);
    cudaError_t e = cudaMemcpyAsync(d, buf, count * sizeof(double), cudaMemcpyHostToDevice, STREAM(n->c));
    ncclResult_t r = e == cudaSuccess ? ncclAllReduce(d, d, count, ncclFloat64, ncclSum, n->comm, STREAM(n->c)) : ncclSuccess;
    if (e == cudaSuccess && r == ncclSuccess)
        e = cudaMemcpyAsync(buf, d, count * sizeof(double), cudaMemcpyDeviceToHost, STREAM(n->c));
    return staged_end(n, d, e, r, "all-reduce (f64, host)", err);
}

extern "C" skpo_status skpo_nccl_bcast_host(skpo_nccl *n, void *buf, size_t bytes, int root, skpo_err *err) {
    if (!bytes) return SKPO_OK;
    NOT_ABORTED(n, err);
    void *d = NULL;
    CU(cudaMalloc(&d, bytes), err);
    cudaError_t e = cudaMemcpyAsync(d, buf, bytes, cudaMemcpyHostToDevice, STREAM(n->c));
    ncclResult_t r = e == cudaSuccess ? ncclBroadcast(d, d, bytes, ncclChar, root, n->comm, STREAM(n->c)) : ncclSuccess;
    if (e == cudaSuccess && r == ncclSuccess) e = cudaMemcpyAsync(buf, d, bytes, cudaMemcpyDeviceToHost, STREAM(n->c));
    return staged_end(n, d, e, r, "broadcast (host)", err);
}

extern "C" void skpo_nccl_free(skpo_nccl *n) {
    if (!n) return;
    if (!n->aborted) ncclCommDestroy(n->comm);   // an abort freed it already
    free(n);
}
