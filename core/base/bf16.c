/*
 * bf16.c - the array forms of bf16.h's conversions (out of line: callers pass
 * whole tensors, and one copy of the loop is enough).
 */
#include "base/bf16.h"

void skpo_f32_to_bf16_host(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = skpo_f32_to_bf16(src[i]);
}

void skpo_bf16_to_f32_host(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = skpo_bf16_to_f32(src[i]);
}
