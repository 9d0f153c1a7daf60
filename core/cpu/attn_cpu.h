/*
 * attn_cpu.h - one query row's causal attention for one head (private to
 * core/cpu/), the single place where the CPU computes softmax(q k^T) v in a
 * forward pass: prefill and decode over the paged KV cache and the
 * whole-sequence pass of scoring and training all compute skpo_attn_row's
 * arithmetic (the last through skpo_attn_rows, several rows at once), so a
 * row's output is the same bits in all of them.
 *
 * The keys a row sees are given as spans: runs of consecutive key rows (a
 * block of the paged cache, a whole sequence, or a shared prompt followed by
 * one continuation). The result depends only on the sequence of keys and
 * values, in position order, never on how it is cut into spans, on the other
 * rows of the batch or on the thread count: scores go into p[] at their
 * global index, the exponentials are taken 16 at a time from index 0, and
 * the output accumulates values in index order.
 *
 * AVX-512 for head sizes that are multiples of 16 up to 256 (query and
 * output in zmm registers, two dot-product accumulators, Cephes exp 16 at a
 * time); a portable loop otherwise. The two round differently, so one machine
 * always takes the same one (skpo_attn_fast_ok) for every caller.
 *
 * Also here: the AVX-512 backward of one sequence and kv head group (the
 * training's; it needs no invariance), where skpo_attn_fast_ok says yes.
 */
#ifndef SKPO_ATTN_CPU_H
#define SKPO_ATTN_CPU_H

#include <stddef.h>

// n consecutive key rows k, k + stride, ... and their values likewise.
typedef struct skpo_kv_span {
    const float *k, *v;
    size_t stride;   // floats between consecutive rows
    int n;
} skpo_kv_span;

// Whether this CPU takes the AVX-512 path for head size HS.
int skpo_attn_fast_ok(int HS);
// o (HS) = softmax(q . k_j * scale) v over the keys of sp[0..nsp) in order;
// returns log(sum_j exp(q . k_j * scale)), the normaliser backward needs.
// p: as many floats as there are keys, scratch.
float skpo_attn_row(float *o, const float *q, const skpo_kv_span *sp, int nsp, int HS, float scale, float *p);

// R consecutive query rows at once, the same bits as R calls of
// skpo_attn_row: row u (q + u qs, o + u os) sees the keys of sp[0..nsp) and
// then the u key rows that follow the last span (the causal rows of one
// segment of a whole-sequence pass). Each key and value is read once for the
// R rows and the scores' horizontal sums are done 16 at a time. R at most
// skpo_attn_rows_max(HS) (1 where the portable path runs), nsp at most
// SKPO_ATTN_ROWS_SPANS; p: R rows of ps floats (ps at least the keys of row
// R-1), scratch; lse[u]: row u's log-normaliser.
enum { SKPO_ATTN_ROWS_SPANS = 4 };
int skpo_attn_rows_max(int HS);
void skpo_attn_rows(float *o, size_t os, const float *q, size_t qs, const skpo_kv_span *sp, int nsp, int R, int HS,
                    float scale, float *p, size_t ps, float *lse);

// The visible keys of a packed row's queries (base/attn_mask.h
// skpo_mask_runs): query i of the row sees keys [row start, pre_end[i]) and
// [own0[i], i]. The arrays point at the row's first token; their values are
// batch-global token indices, s0 the row's first.
typedef struct skpo_attn_runs {
    const int *pre_end, *own0;
    int s0;
} skpo_attn_runs;

// Backward of attention over one row of n tokens for kv head g and its query
// heads: q, dout, dq (rows of NH * HS floats), k, v, dk, dv (rows of NKV *
// HS), lse and D = rowsum(dout * out) (rows of NH), all pointing at the row's
// first token. runs NULL: causal over the whole row; else a packed row's
// mask (query tiles stay within one segment; key blocks start afresh at
// every segment, so the work follows the visible pairs). dq of heads
// g*NH/NKV .. and dk, dv of head g are OVERWRITTEN. scratch:
// skpo_attn_bwd_scratch(n, runs, HS) floats.
size_t skpo_attn_bwd_scratch(int n, const skpo_attn_runs *runs, int HS);
void skpo_attn_bwd_group(float *dq, float *dk, float *dv, const float *dout, const float *lse, const float *D,
                         const float *q, const float *k, const float *v, int n, const skpo_attn_runs *runs, int NH,
                         int NKV, int g, int HS, float scale, float *scratch);

#endif
