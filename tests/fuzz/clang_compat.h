// clang_compat.h - forced into every file of the fuzz build (clang 14): glibc's
// <complex.h> defines CMPLX only for GCC >= 4.7, which clang does not claim to be.
#ifndef CMPLX
#define CMPLX(x, y) __builtin_complex((double)(x), (double)(y))
#endif
