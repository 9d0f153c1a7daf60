/*
 * cublas_load.c - cuBLAS loaded when the CUDA backend first asks for it.
 *
 * Why not link it: libcublas pulls in libcublasLt, whose half a million
 * relocations cost every process ~55 ms and 25k page faults at start, CPU
 * runs and `--help` included (measured: skpo-score on the tiny model took
 * 0.10 s whole against 0.02 s for a CUDA=0 build). The backend uses five
 * entry points; each one here resolves the real one on first use, through
 * dlopen of libcublas.so.<major> (the same search as a NEEDED entry: the
 * caller's RUNPATH, LD_LIBRARY_PATH, ld.so.cache).
 *
 * The definitions are weak: the CPU emulator of tests/emu defines its own
 * cuBLAS and wins at link time.
 */
#ifdef SKPO_HAVE_CUDA
#include "cuda/cuda.h"

#include <cublas_v2.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#define STR_(x) #x
#define STR(x) STR_(x)
static const char LIBNAME[] = "libcublas.so." STR(CUBLAS_VER_MAJOR);

static struct {
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*destroy)(cublasHandle_t);
    cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
    cublasStatus_t (*set_math)(cublasHandle_t, cublasMath_t);
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                              const void *, cudaDataType, int, const void *, cudaDataType, int, const void *, void *,
                              cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
    char why[256];
} L;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void) {
    void *h = dlopen(LIBNAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(L.why, sizeof L.why, "cannot load %s: %s", LIBNAME, dlerror());
        return;
    }
    // POSIX: a data pointer from dlsym converts to a function pointer.
#define SYM(field, name)                                                                                               \
    if (!(*(void **)&L.field = dlsym(h, name))) {                                                                     \
        snprintf(L.why, sizeof L.why, "%s has no %s", LIBNAME, name);                                                  \
        return;                                                                                                        \
    }
    SYM(destroy, "cublasDestroy_v2")
    SYM(set_stream, "cublasSetStream_v2")
    SYM(set_math, "cublasSetMathMode")
    SYM(gemm_ex, "cublasGemmEx")
    SYM(create, "cublasCreate_v2") // last: set means all are
#undef SYM
}

const char *skpo_cublas_load_error(void) {
    pthread_once(&once, load);
    return L.create ? NULL : L.why;
}

__attribute__((weak)) cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
    return skpo_cublas_load_error() ? CUBLAS_STATUS_NOT_INITIALIZED : L.create(h);
}

// The others run only on a handle cublasCreate made, so the library is loaded.
__attribute__((weak)) cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
    return L.destroy ? L.destroy(h) : CUBLAS_STATUS_NOT_INITIALIZED;
}

__attribute__((weak)) cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
    return L.set_stream ? L.set_stream(h, s) : CUBLAS_STATUS_NOT_INITIALIZED;
}

__attribute__((weak)) cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) {
    return L.set_math ? L.set_math(h, m) : CUBLAS_STATUS_NOT_INITIALIZED;
}

__attribute__((weak)) cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                  int n, int k, const void *alpha, const void *A, cudaDataType At,
                                                  int lda, const void *B, cudaDataType Bt, int ldb, const void *beta,
                                                  void *C, cudaDataType Ct, int ldc, cublasComputeType_t ct,
                                                  cublasGemmAlgo_t algo) {
    return L.gemm_ex ? L.gemm_ex(h, ta, tb, m, n, k, alpha, A, At, lda, B, Bt, ldb, beta, C, Ct, ldc, ct, algo)
                     : CUBLAS_STATUS_NOT_INITIALIZED;
}
#endif
