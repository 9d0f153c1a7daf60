/*
 * lora_impl.h - private to lora.c / lora_cuda.c: what the device copy needs
 * to see of an adapter. Tools and other modules use lora.h only.
 */
#ifndef SKPO_LORA_IMPL_H
#define SKPO_LORA_IMPL_H

#include "lora.h"

// Module (l, t): A (r, K), B (O, r) host float32, grads (NULL when not trainable); A NULL when not adapted.
void lora_mod_get(const skpo_lora *lo, int l, int t, const float **A, const float **B, float **dA, float **dB, int *K,
                  int *O);
int lora_layers(const skpo_lora *lo);
float lora_scale_f(const skpo_lora *lo);
// Where lora_cuda.c keeps its device state (freed by lora_cuda_free with the adapter).
void **lora_dev_slot(skpo_lora *lo);
void lora_cuda_free(void *dev);

#endif
