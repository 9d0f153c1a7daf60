// mma.h - the emulator's WMMA (tests/emu/README.md): 16x16x16 fragments for
// bf16 inputs and fp32 accumulators. Every lane keeps the whole tile; each
// operation is warp-collective (a warp barrier before and after), as on the
// hardware, so lanes cannot overtake each other through shared memory.
#pragma once
#include <cuda_bf16.h>

namespace nvcuda {
namespace wmma {
struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    float x[16 * 16];   // every lane keeps the whole tile: element e is row e / 16
    static const int num_elements = 256;
};

inline float emu_ld(const __nv_bfloat16 *p, size_t i) { return __bfloat162float(p[i]); }
inline float emu_ld(const float *p, size_t i) { return p[i]; }

template <class T, class L>
inline void load_matrix_sync(fragment<matrix_a, 16, 16, 16, T, L> &f, const T *p, unsigned ldm) {
    emu::syncwarp();
    for (int m = 0; m < 16; m++)
        for (int k = 0; k < 16; k++)
            f.x[m * 16 + k] = emu_ld(p, std::is_same<L, row_major>::value ? (size_t)m * ldm + k : (size_t)k * ldm + m);
    emu::syncwarp();
}
template <class T, class L>
inline void load_matrix_sync(fragment<matrix_b, 16, 16, 16, T, L> &f, const T *p, unsigned ldm) {
    emu::syncwarp();
    for (int k = 0; k < 16; k++)
        for (int n = 0; n < 16; n++)
            f.x[k * 16 + n] = emu_ld(p, std::is_same<L, row_major>::value ? (size_t)k * ldm + n : (size_t)n * ldm + k);
    emu::syncwarp();
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p, unsigned ldm, layout_t l) {
    emu::syncwarp();
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) f.x[m * 16 + n] = p[l == mem_row_major ? (size_t)m * ldm + n : (size_t)n * ldm + m];
    emu::syncwarp();
}
inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f, unsigned ldm, layout_t l) {
    emu::syncwarp();
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) p[l == mem_row_major ? (size_t)m * ldm + n : (size_t)n * ldm + m] = f.x[m * 16 + n];
    emu::syncwarp();
}
inline void fill_fragment(fragment<accumulator, 16, 16, 16, float> &f, float x) {
    for (int i = 0; i < 256; i++) f.x[i] = x;
}
template <class A, class B, class LA, class LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d, const fragment<matrix_a, 16, 16, 16, A, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, B, LB> &b, const fragment<accumulator, 16, 16, 16, float> &c) {
    float r[256];
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            float s = c.x[m * 16 + n];
            for (int k = 0; k < 16; k++) s += a.x[m * 16 + k] * b.x[k * 16 + n];
            r[m * 16 + n] = s;
        }
    for (int i = 0; i < 256; i++) d.x[i] = r[i];
}
}  // namespace wmma
}  // namespace nvcuda
