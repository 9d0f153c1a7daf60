// cuda_emu.h - device side of the CUDA emulator (tests/emu/README.md): lets
// core/cuda/*.cu compile with g++ and run on the CPU. Every CUDA thread of a
// block is a fiber (ucontext) of one OS thread; __syncthreads and every warp
// shuffle are real barriers (a thread that exits before a barrier its warp or
// block is waiting at is reported as a deadlock, not papered over), blocks run
// one after the other, and __shared__ becomes function-static storage (one
// block at a time). Launch configurations are checked against the device
// limits the way the driver does. Included (g++ -include) before each .cu.
#pragma once
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <type_traits>

#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __shared__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#undef __noinline__
#define __noinline__ __attribute__((noinline))
#define __shared__ static

extern uint3 emu_tid, emu_bid;
extern dim3 emu_bdim, emu_gdim;
#define threadIdx emu_tid
#define blockIdx emu_bid
#define blockDim emu_bdim
#define gridDim emu_gdim

namespace emu {
void syncthreads();
void syncwarp();
double shfl_xor_d(double v, int lanemask);   // values travel as double (exact for float and 32-bit ints)
double shfl_up_d(double v, int delta);       // lanes below delta keep their own value
void *dyn_smem();
struct cfg {
    dim3 g, b;
    size_t shm;
    cudaStream_t s;
};
inline cfg make_cfg(dim3 g, dim3 b, size_t shm = 0, cudaStream_t s = 0) { return cfg{g, b, shm, s}; }
void launch(const char *name, const void *fn, const cfg &c, std::function<void()> body);

template <class F> struct launcher {
    const char *name;
    F fn;
    cfg c;
    template <class... A> void operator()(A... a) const {
        F f = fn;
        launch(name, (const void *)fn, c, [=]() { f(a...); });
    }
};
template <class F> launcher<F> make_launcher(const char *name, F fn, cfg c) { return launcher<F>{name, fn, c}; }

template <class T> inline T shfl_xor(unsigned mask, T v, int o) {
    (void)mask;
    static_assert(sizeof(T) <= 4 || std::is_same<T, double>::value, "shuffle 64-bit integers as two 32-bit halves");
    return (T)shfl_xor_d((double)v, o);
}
template <class T> inline T shfl_up(unsigned mask, T v, int d) {
    (void)mask;
    static_assert(sizeof(T) <= 4 || std::is_same<T, double>::value, "shuffle 64-bit integers as two 32-bit halves");
    return (T)shfl_up_d((double)v, d);
}
inline float atomic_add(float *p, float v) { float o = *p; *p = o + v; return o; }
inline double atomic_add(double *p, double v) { double o = *p; *p = o + v; return o; }
inline int atomic_add(int *p, int v) { int o = *p; *p = o + v; return o; }
inline unsigned atomic_add(unsigned *p, unsigned v) { unsigned o = *p; *p = o + v; return o; }
inline unsigned long long atomic_add(unsigned long long *p, unsigned long long v) {
    unsigned long long o = *p;
    *p = o + v;
    return o;
}
inline int atomic_min(int *p, int v) { int o = *p; if (v < o) *p = v; return o; }
}  // namespace emu

#define EMU_LAUNCH(k, ...) emu::make_launcher(#k, &k, emu::make_cfg(__VA_ARGS__))
#define __syncthreads() emu::syncthreads()
#define __syncwarp(...) emu::syncwarp()
#define __shfl_xor_sync(m, v, o) emu::shfl_xor((m), (v), (o))
#define __shfl_up_sync(m, v, d) emu::shfl_up((m), (v), (d))
#define atomicAdd emu::atomic_add
#define atomicMin emu::atomic_min
#define rsqrtf(x) (1.0f / sqrtf(x))
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
template <class T> inline cudaError_t cudaFuncSetAttribute(T *f, cudaFuncAttribute a, int v) {
    return cudaFuncSetAttribute((const void *)f, a, v);
}
#undef __launch_bounds__
#define __launch_bounds__(...)
