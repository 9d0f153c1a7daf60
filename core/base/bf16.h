/*
 * bf16.h - the one float32 <-> bfloat16 conversion on the host.
 *
 * bfloat16 is the top half of a float32, stored as uint16_t. Narrowing
 * rounds to nearest, ties to even, the rule of __float2bfloat16 in
 * cuda_bf16.h, so a tensor rounded on the host (checkpoints, uploads, the
 * fake kernels of the tests) equals one rounded on the device. A NaN stays a
 * NaN: its top mantissa bit is set before the low half is dropped, so a NaN
 * whose payload sits in the low half cannot become an infinity.
 *
 * Device code does not call this: kernels convert with the intrinsics
 * (__float2bfloat16, __bfloat162float), which are the same rule in one
 * instruction and are what tests/emu emulates.
 */
#ifndef SKPO_BF16_H
#define SKPO_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

static inline uint16_t skpo_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); // NaN: kept, quiet
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float skpo_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// x as bf16 would hold it: what saving to bf16 and reading back gives.
static inline float skpo_bf16_round(float x) { return skpo_bf16_to_f32(skpo_f32_to_bf16(x)); }

// The same over n elements (host buffers: staging for uploads and downloads).
void skpo_f32_to_bf16_host(uint16_t *dst, const float *src, size_t n);
void skpo_bf16_to_f32_host(float *dst, const uint16_t *src, size_t n);

#ifdef __cplusplus
}
#endif

#endif
