/*
 * attn_cpu.h - AVX-512 paged attention for one query row and head (private
 * to core/cpu/; ops_cpu.c falls back to its portable loop where this says no).
 * The result depends only on the row's query, its position and the cached
 * K/V, never on the other rows of the batch, like the portable version; the
 * two differ in rounding (vectorised exp and dot products).
 */
#ifndef SKPO_ATTN_CPU_H
#define SKPO_ATTN_CPU_H

#include "cpu/ops.h"

#include <stddef.h>

// Whether skpo_attn_row_paged handles head size HS on this CPU.
int skpo_attn_fast_ok(int HS);
// o (HS) = softmax(qr . k_j * scale) v over positions j = 0..pos of the
// sequence with block table `blocks`, kv head at float offset goff in a row.
// p: pos + 1 floats of scratch.
void skpo_attn_row_paged(float *o, const float *qr, const skpo_paged_kv *kv, const int *blocks, int layer, int pos,
                         size_t goff, int HS, float scale, float *p);

#endif
