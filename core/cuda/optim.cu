// optim.cu - AdamW over every tensor of the flat parameter buffers in one
// launch (cuda_train.h, skpo_cuda_adamw_multi): a plan uploads the segment
// table once (each tensor's range, moment offset and weight decay) with the
// first block of each segment; a block finds its segment by binary search
// over those, then updates ADAMW_PER_BLOCK elements of it with adamw_elem
// (common.cuh), the element update of skpo_cuda_adamw.
#include "common.cuh"
#include "cuda/cuda_train.h"

#include <stdlib.h>

#define ADAMW_THREADS 256
#define ADAMW_PER_THREAD 8
#define ADAMW_PER_BLOCK (ADAMW_THREADS * ADAMW_PER_THREAD)

struct skpo_cuda_adamw_plan {
    skpo_adamw_seg *segs;   // device (nseg)
    uint64_t *first;        // device (nseg + 1): first block of each segment, then the total
    int nseg;
    uint64_t blocks;
};

__global__ void __launch_bounds__(ADAMW_THREADS) k_adamw_multi(float *w, bf16 *wb, float *m, float *v, const float *g,
                                                                const skpo_adamw_seg *segs, const uint64_t *first,
                                                                int nseg, float lr, float b1, float b2, float eps,
                                                                float bc1, float bc2, float gscale) {
    uint64_t b = blockIdx.x;
    int lo = 0, hi = nseg - 1;   // the last segment whose first block is <= b
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (first[mid] <= b) lo = mid;
        else hi = mid - 1;
    }
    skpo_adamw_seg s = segs[lo];
    uint64_t base = (b - first[lo]) * ADAMW_PER_BLOCK;
#pragma unroll
    for (int k = 0; k < ADAMW_PER_THREAD; k++) {
        uint64_t j = base + (uint64_t)k * ADAMW_THREADS + threadIdx.x;
        if (j >= s.n) break;
        adamw_elem(w, wb, m, v, g, (size_t)(s.x + j), (size_t)(s.mo + j), lr, b1, b2, eps, s.wd, bc1, bc2, gscale);
    }
}

extern "C" skpo_status skpo_cuda_adamw_plan_new(skpo_cuda *c, const skpo_adamw_seg *segs, int nseg,
                                                skpo_cuda_adamw_plan **out, skpo_err *err) {
    *out = NULL;
    skpo_cuda_adamw_plan *p = (skpo_cuda_adamw_plan *)skpo_xcalloc(1, sizeof *p);
    uint64_t *first = (uint64_t *)skpo_xmalloc(((size_t)nseg + 1) * sizeof *first);
    int k = 0;
    skpo_adamw_seg *kept = (skpo_adamw_seg *)skpo_xmalloc(((size_t)nseg + 1) * sizeof *kept);
    for (int i = 0; i < nseg; i++) {   // empty segments get no block
        if (!segs[i].n) continue;
        kept[k] = segs[i];
        first[k] = p->blocks;
        p->blocks += (segs[i].n + ADAMW_PER_BLOCK - 1) / ADAMW_PER_BLOCK;
        k++;
    }
    first[k] = p->blocks;
    p->nseg = k;
    skpo_status st = SKPO_OK;
    if (p->blocks > 0x7fffffffull)
        st = skpo_err_set(err, SKPO_ERANGE, "AdamW: %llu blocks exceed one launch", (unsigned long long)p->blocks);
    if (!st) st = skpo_cuda_malloc(c, (void **)&p->segs, (size_t)(k ? k : 1) * sizeof *kept, "AdamW segments", err);
    if (!st) st = skpo_cuda_malloc(c, (void **)&p->first, ((size_t)k + 1) * sizeof *first, "AdamW segments", err);
    if (!st && k) st = skpo_cuda_h2d(c, p->segs, kept, (size_t)k * sizeof *kept, err);
    if (!st) st = skpo_cuda_h2d(c, p->first, first, ((size_t)k + 1) * sizeof *first, err);
    free(first);
    free(kept);
    if (st) {
        skpo_cuda_adamw_plan_free(p);
        return st;
    }
    *out = p;
    return SKPO_OK;
}

extern "C" void skpo_cuda_adamw_plan_free(skpo_cuda_adamw_plan *p) {
    if (!p) return;
    skpo_cuda_dfree(p->segs);
    skpo_cuda_dfree(p->first);
    free(p);
}

extern "C" skpo_status skpo_cuda_adamw_multi(skpo_cuda *c, const skpo_cuda_adamw_plan *p, float *w, skpo_bf16 *wb,
                                             float *m, float *v, const float *g, float lr, float b1, float b2, float eps,
                                             int step, float gscale, skpo_err *err) {
    if (!p->blocks) return SKPO_OK;
    float bc1 = 1.f - powf(b1, (float)step), bc2 = 1.f - powf(b2, (float)step);
    k_adamw_multi<<<(unsigned)p->blocks, ADAMW_THREADS, 0, c->stream>>>(w, (bf16 *)wb, m, v, g, p->segs, p->first,
                                                                        p->nseg, lr, b1, b2, eps, bc1, bc2, gscale);
    LAUNCHED(err);
    return SKPO_OK;
}
