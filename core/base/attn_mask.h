/*
 * attn_mask.h - the one definition of which keys a query sees in a training
 * or scoring pass, shared by the CPU kernels (cpu/ops_cpu.c, attn_cpu.c) and
 * the CUDA ones (cuda/attention.cu, flash.cu, attention_det.cu). Header-only
 * and safe in device code.
 *
 * A batch is a list of rows (token offsets off[0..nrows]). A row is either
 * one sequence (plain causal) or a packed group (model/pack.h): a shared
 * prefix once, then G continuations one after the other. Each token has a
 * segment id: 0 for the prefix (and for every token of a plain row), i > 0 for
 * continuation i. Segments are contiguous, the prefix first, ids increasing.
 * Within a row, query i sees key j iff
 *
 *     j <= i  and  (seg[j] == 0  or  seg[j] == seg[i])
 *
 * so a continuation sees the prefix and its own earlier tokens, never another
 * continuation: the keys of a packed continuation token are exactly the keys
 * it has in its own unpacked sequence, in the same order.
 *
 * Because segments are contiguous, the visible keys of query i are two runs:
 * [row start, pre_end) and [own_start, i]; and the queries that see key j
 * are one run: [j, q_end). skpo_mask_runs() computes those bounds once per
 * pass for the kernels that walk runs instead of testing every pair.
 */
#ifndef SKPO_ATTN_MASK_H
#define SKPO_ATTN_MASK_H

#if defined(__CUDACC__)
#define SKPO_HD __host__ __device__
#else
#define SKPO_HD
#endif

// i, j: indices of the query and key within their row (or any numbering
// that increases along the row).
SKPO_HD static inline int skpo_may_attend(int seg_q, int i, int seg_k, int j) {
    return j <= i && (seg_k == 0 || seg_k == seg_q);
}

// For each token r of the rows off[0..nrows] (seg NULL: every row causal):
//   pre_end[r]  keys [row start, pre_end[r]) are r's prefix run (empty for
//               prefix and plain tokens: pre_end = row start),
//   own0[r]     keys [own0[r], r] are r's own run,
//   q_end[r]    queries [r, q_end[r]) see key r (nullable).
// In row-relative terms, pre_end - row start is the prefix length for a
// continuation token.
SKPO_HD static inline void skpo_mask_runs(const int *off, int nrows, const int *seg, int *pre_end, int *own0,
                                          int *q_end) {
    for (int s = 0; s < nrows; s++) {
        int a = off[s], b = off[s + 1], pe = a;
        if (seg)
            while (pe < b && seg[pe] == 0) pe++;
        for (int r = a; r < b;) {
            int e = r;
            int sg = seg ? seg[r] : 0;
            while (e < b && (seg ? seg[e] : 0) == sg) e++;   // [r, e): one segment
            for (int t = r; t < e; t++) {
                pre_end[t] = sg ? pe : a;
                own0[t] = sg ? r : a;
                if (q_end) q_end[t] = sg ? e : b;
            }
            r = e;
        }
    }
}

#endif
