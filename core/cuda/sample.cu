// sample.cu - sampling on the device (cuda.h, skpo_cuda_sample): the contract
// of core/gen/sampler.h, one block per row. p = softmax(z / T). top-k keeps
// the k largest logits (all tokens tied with the k-th), top-p then keeps the
// smallest set of the largest that holds top_p of the kept mass (all tokens
// tied at its edge), i.e. top-p over the renormalised top-k; the token is
// drawn by inverse CDF in index order over the kept set with the host's coin,
// so a draw is replayable. Differences from the CPU sampler that do not
// change the distribution: tokens tied at a threshold are all kept (the CPU
// keeps the lowest ids), and the CPU walks a truncated set most likely first,
// so the same coin can pick another token of that set.
//
// At most three passes over the row (issue #30; the bisection it replaces
// made about 44, each with an exp and a division per element):
//   1. max, argmax, sum of e^(z/T - max) (online), and when truncating a
//      histogram of counts over the top 12 bits of an order-preserving key of
//      z (4096 bins);
//   2. the top-k bin is known from the counts: its tokens (at most SP_CAP) are
//      gathered into shared memory, where 8-bit sub-histograms find the exact
//      k-th key; with top-p the same pass makes the mass histogram;
//   3. the top-p bin is known from the masses: gathered and resolved the same
//      way, while every warp sums the kept mass of its contiguous chunk.
// Without top-p the second pass already sums the chunks; without truncation
// two passes, greedy one. The draw then finds the chunk, a sub-chunk and the
// token (a partial pass over 1/32 of the row). A boundary bin holding more
// than SP_CAP tokens costs one more pass per 8 bits of key (at most three).
//
// Masses are fixed-point integers, e^(z/T - max) in units of 2^-44: sums are
// exact and independent of the order of the (atomic) additions, so a draw
// is deterministic and the histogram, the chunk sums and the final walk agree
// to the last unit. Tokens below e^-30.5 of the maximum have mass 0 and are
// never drawn (together under 1e-8 of the probability at any vocabulary
// size in use). logp = log_softmax(z / T)[token] over the whole vocabulary
// (T = 1 when greedy); a row holding NaN or +Inf, or only -Inf, gives token
// -1, logp NaN.
#include "common.cuh"

#include <string.h>

#define SP_THREADS 1024
#define SP_WARPS (SP_THREADS / 32)
#define SP_NB0 4096   // level-0 bins: the top 12 bits of the key
#define SP_NBS 256    // one refinement step: 8 more bits
#define SP_CAP 4096   // tokens of one bin resolved in shared memory
#define SP_FULL 0xffffffffu

typedef unsigned long long u64;

// The range of keys k with k >> shift == prefix that holds the threshold;
// need: the count (top-k) or mass (top-p) still to reach inside it; above_*:
// what the problem's tokens above the range hold; last_*: the range's own.
struct sp_range {
    unsigned prefix;
    int shift;
    u64 need, above_cnt, above_mass, last_cnt, last_mass;
};

struct sp_smem {
    unsigned cnt0[SP_NB0];
    u64 mass0[SP_NB0];
    unsigned subc[SP_NBS];
    u64 subm[SP_NBS];
    unsigned ckey[SP_CAP];
    int cidx[SP_CAP];
    u64 wpart[SP_WARPS];   // kept mass of each warp's chunk of the row
    u64 scan[SP_WARPS];
    u64 total, res_before;
    int res_bin, ncand;
    sp_range rng;
    float fred[SP_WARPS], fred2[SP_WARPS];
    int ired[SP_WARPS];
};

// Larger logit, larger key; -0 and +0 are one key.
__device__ __forceinline__ unsigned sp_key(float z) {
    unsigned u;
    float zz = z == 0.f ? 0.f : z;
    memcpy(&u, &zz, sizeof u);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// e^d in units of 2^-44 (d <= 0): exact scaling, one rounding.
__device__ __forceinline__ u64 sp_fx(float d) { return (u64)(expf(d) * 17592186044416.0f + 0.5f); }

__device__ __forceinline__ u64 sp_shfl_xor64(u64 v, int o) {
    unsigned lo = __shfl_xor_sync(SP_FULL, (unsigned)v, o), hi = __shfl_xor_sync(SP_FULL, (unsigned)(v >> 32), o);
    return ((u64)hi << 32) | lo;
}
__device__ __forceinline__ u64 sp_shfl_up64(u64 v, int d) {
    unsigned lo = __shfl_up_sync(SP_FULL, (unsigned)v, d), hi = __shfl_up_sync(SP_FULL, (unsigned)(v >> 32), d);
    return ((u64)hi << 32) | lo;
}
__device__ __forceinline__ u64 sp_warp_sum64(u64 v) {
    for (int o = 16; o > 0; o >>= 1) v += sp_shfl_xor64(v, o);
    return v;
}
__device__ __forceinline__ u64 sp_warp_incl64(u64 v, int lane) {
    for (int d = 1; d < 32; d <<= 1) {
        u64 t = sp_shfl_up64(v, d);
        if (lane >= d) v += t;
    }
    return v;
}

// Exclusive prefix of v in thread order; S.total = the block's sum.
__device__ u64 sp_block_excl(u64 v, sp_smem &S) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    u64 incl = sp_warp_incl64(v, lane);
    __syncthreads();   // S.scan and S.total are free
    if (lane == 31) S.scan[w] = incl;
    __syncthreads();
    if (w == 0) {
        u64 x = S.scan[lane], xi = sp_warp_incl64(x, lane);
        S.scan[lane] = xi - x;
        if (lane == 31) S.total = xi;
    }
    __syncthreads();
    return S.scan[w] + incl - v;
}

// Bins v[0..nb) from the highest index down (largest keys first): the first
// bin where the running sum reaches target (clamped to [1, total]); the sum
// above it in S.res_before. -1 when every bin is empty.
template <class T> __device__ int sp_cross(const T *v, int nb, u64 target, sp_smem &S) {
    int per = (nb + SP_THREADS - 1) / SP_THREADS, b0 = threadIdx.x * per;
    u64 mine = 0;
    for (int j = 0; j < per && b0 + j < nb; j++) mine += v[nb - 1 - (b0 + j)];
    __syncthreads();   // every thread has read the previous S.res_*
    if (threadIdx.x == 0) S.res_bin = -1;
    u64 ex = sp_block_excl(mine, S), tot = S.total;
    if (target > tot) target = tot;
    if (target < 1) target = 1;
    if (tot && ex < target && ex + mine >= target) {   // exactly one thread
        u64 acc = ex;
        for (int j = 0; j < per && b0 + j < nb; j++) {
            u64 x = v[nb - 1 - (b0 + j)];
            if (acc + x >= target) {
                S.res_bin = nb - 1 - (b0 + j);
                S.res_before = acc;
                break;
            }
            acc += x;
        }
    }
    __syncthreads();
    return S.res_bin;
}

// S.rng from a level-0 bin found by sp_cross.
__device__ void sp_range_at(sp_smem &S, int bin, u64 need, u64 above_cnt, u64 above_mass, u64 cnt, u64 mass) {
    __syncthreads();   // everyone has read the previous range
    if (threadIdx.x == 0) S.rng = sp_range{(unsigned)bin, 20, need, above_cnt, above_mass, cnt, mass};
    __syncthreads();
}

__device__ __forceinline__ int sp_in(unsigned key, const sp_range &r, unsigned lb) {
    return (key >> r.shift) == r.prefix && key >= lb;
}
__device__ __forceinline__ int sp_sub_shift(int shift) { return shift > 8 ? shift - 8 : 0; }

// One refinement of S.rng from the sub-histogram subc / subm (by count or by
// mass), on thread 0 (at most 256 bins).
__device__ void sp_narrow(int by_mass, sp_smem &S) {
    __syncthreads();   // the sub-histogram is complete
    if (threadIdx.x == 0) {
        sp_range &R = S.rng;
        int ns = sp_sub_shift(R.shift), nb = 1 << (R.shift - ns), b = nb - 1;
        u64 run = 0;
        for (; b > 0; b--) {
            u64 x = by_mass ? S.subm[b] : S.subc[b];
            if (run + x >= R.need) break;
            run += x;
            R.above_cnt += S.subc[b];
            R.above_mass += S.subm[b];
        }
        R.need -= run;
        R.prefix = (R.prefix << (R.shift - ns)) | (unsigned)b;
        R.shift = ns;
        R.last_cnt = S.subc[b];
        R.last_mass = S.subm[b];
    }
    __syncthreads();
}

__device__ void sp_sub_clear(sp_smem &S) {
    for (int i = threadIdx.x; i < SP_NBS; i += SP_THREADS) S.subc[i] = 0, S.subm[i] = 0;
}

// Sub-histogram of the gathered tokens inside S.rng (keys >= lb).
__device__ void sp_cand_hist(unsigned lb, const float *z, float inv_t, float m, sp_smem &S) {
    __syncthreads();
    sp_sub_clear(S);
    __syncthreads();
    sp_range R = S.rng;
    int ns = sp_sub_shift(R.shift), mask = (1 << (R.shift - ns)) - 1;
    for (int c = threadIdx.x; c < S.ncand; c += SP_THREADS) {
        unsigned key = S.ckey[c];
        if (!sp_in(key, R, lb)) continue;
        int sb = (int)(key >> ns) & mask;
        atomicAdd(&S.subc[sb], 1u);
        u64 e = sp_fx(z[S.cidx[c]] * inv_t - m);
        if (e) atomicAdd(&S.subm[sb], e);
    }
}

// Narrow S.rng to one key from the gathered tokens: the threshold.
__device__ unsigned sp_resolve(int by_mass, unsigned lb, const float *z, float inv_t, float m, sp_smem &S) {
    while (S.rng.shift > 0) {
        sp_cand_hist(lb, z, inv_t, m, S);
        sp_narrow(by_mass, S);
    }
    return S.rng.prefix;
}

// fn(i, z[i]) for the tokens [c0, c1) of this warp, each once. vec (the row
// 16-byte aligned, c0 % 4 == 0): four consecutive tokens per lane and two
// 16-byte loads in flight per thread, so one block per row keeps enough
// bytes moving; else one token per lane, 32 apart.
template <class Fn> __device__ __forceinline__ void sp_each(const float *z, int c0, int c1, int vec, Fn fn) {
    int lane = threadIdx.x & 31;
    if (!vec) {
        for (int i = c0 + lane; i < c1; i += 32) fn(i, z[i]);
        return;
    }
    int i = c0 + 4 * lane;
    for (; i + 128 + 3 < c1; i += 256) {
        float4 a = *(const float4 *)(z + i), b = *(const float4 *)(z + i + 128);
        fn(i, a.x), fn(i + 1, a.y), fn(i + 2, a.z), fn(i + 3, a.w);
        fn(i + 128, b.x), fn(i + 129, b.y), fn(i + 130, b.z), fn(i + 131, b.w);
    }
    for (; i < c1; i += 128)
        for (int e = 0; e < 4 && i + e < c1; e++) fn(i + e, z[i + e]);
}

// What one pass over the row does besides reading it.
enum { SP_MASS0 = 1, SP_SUB = 2, SP_GATHER = 4, SP_PARTS = 8 };

// Warp w owns the contiguous chunk [w wc, (w + 1) wc) of the row; its lanes
// read it 32 apart (coalesced). SP_SUB / SP_GATHER act on the tokens inside
// S.rng with key >= lb; SP_PARTS sums the mass of keys >= plo per warp.
__device__ void sp_pass(int flags, const float *z, int V, int wc, int vec, float inv_t, float m, unsigned lb, u64 plo,
                        sp_smem &S) {
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31, c0 = w * wc, c1 = min(V, c0 + wc);
    __syncthreads();   // S.rng settled, the previous users of the arrays done
    if (flags & SP_SUB) sp_sub_clear(S);
    if ((flags & SP_GATHER) && threadIdx.x == 0) S.ncand = 0;
    if (flags & SP_MASS0)
        for (int i = threadIdx.x; i < SP_NB0; i += SP_THREADS) S.mass0[i] = 0;
    __syncthreads();
    sp_range R = S.rng;
    int ns = sp_sub_shift(R.shift), mask = (1 << (R.shift - ns)) - 1;
    u64 part = 0;
    sp_each(z, c0, c1, vec, [&](int i, float zi) {
        unsigned key = sp_key(zi);
        u64 e = (flags & (SP_MASS0 | SP_SUB | SP_PARTS)) ? sp_fx(zi * inv_t - m) : 0;
        if ((flags & SP_MASS0) && e) atomicAdd(&S.mass0[key >> 20], e);
        if ((flags & (SP_SUB | SP_GATHER)) && sp_in(key, R, lb)) {
            if (flags & SP_SUB) {
                int sb = (int)(key >> ns) & mask;
                atomicAdd(&S.subc[sb], 1u);
                if (e) atomicAdd(&S.subm[sb], e);
            } else {
                int c = atomicAdd(&S.ncand, 1);
                S.ckey[c] = key;
                S.cidx[c] = i;
            }
        }
        if ((flags & SP_PARTS) && (u64)key >= plo) part += e;
    });
    if (flags & SP_PARTS) {
        part = sp_warp_sum64(part);
        if (lane == 0) S.wpart[w] = part;
    }
    __syncthreads();
}

// The gathered tokens with key >= t join their warps' chunk sums.
__device__ void sp_parts_add_cands(unsigned t, const float *z, int wc, float inv_t, float m, sp_smem &S) {
    __syncthreads();
    for (int c = threadIdx.x; c < S.ncand; c += SP_THREADS)
        if (S.ckey[c] >= t) {
            u64 e = sp_fx(z[S.cidx[c]] * inv_t - m);
            if (e) atomicAdd(&S.wpart[S.cidx[c] / wc], e);
        }
    __syncthreads();
}

// Pass 1: max and its lowest index, NaN / +Inf, the online sum of
// e^(z inv_t - m) (per thread against its own running max, merged at the
// end), and with hist the level-0 counts.
__device__ void sp_stats(const float *z, int V, int wc, int vec, float inv_t, int hist, float *zmax, int *imax,
                         int *bad, float *sum, sp_smem &S) {
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31, c0 = w * wc, c1 = min(V, c0 + wc);
    if (hist)
        for (int i = threadIdx.x; i < SP_NB0; i += SP_THREADS) S.cnt0[i] = 0;
    __syncthreads();
    float bz = -INFINITY, ml = -INFINITY, sl = 0.f;
    int bi = 0x7fffffff, b = 0;
    sp_each(z, c0, c1, vec, [&](int i, float zi) {   // a thread sees its tokens in increasing order
        if (isnan(zi) || zi == INFINITY) {
            b = 1;
            return;
        }
        if (zi > bz) bz = zi, bi = i;
        float x = zi * inv_t;
        if (x > ml) {
            sl = sl * expf(ml - x) + 1.f;
            ml = x;
        } else if (x > -INFINITY) {
            sl += expf(x - ml);
        }
        if (hist) atomicAdd(&S.cnt0[sp_key(zi) >> 20], 1u);
    });
    for (int o = 16; o > 0; o >>= 1) {   // max, lowest index on ties
        float oz = __shfl_xor_sync(SP_FULL, bz, o);
        int oi = __shfl_xor_sync(SP_FULL, bi, o), ob = __shfl_xor_sync(SP_FULL, b, o);
        if (oz > bz || (oz == bz && oi < bi)) bz = oz, bi = oi;
        b |= ob;
    }
    if (lane == 0) S.fred[w] = bz, S.ired[w] = bi, S.fred2[w] = (float)b;
    __syncthreads();
    if (threadIdx.x == 0) {
        float z0 = S.fred[0], b0 = S.fred2[0];
        int i0 = S.ired[0];
        for (int k = 1; k < SP_WARPS; k++) {
            if (S.fred[k] > z0 || (S.fred[k] == z0 && S.ired[k] < i0)) z0 = S.fred[k], i0 = S.ired[k];
            b0 = fmaxf(b0, S.fred2[k]);
        }
        S.fred[0] = z0, S.ired[0] = i0, S.fred2[0] = b0;
    }
    __syncthreads();
    *zmax = S.fred[0];
    *imax = S.ired[0];
    *bad = S.fred2[0] > 0.f;
    float m = *zmax * inv_t;
    __syncthreads();
    *sum = block_sum(ml == -INFINITY ? 0.f : sl * expf(ml - m), S.fred);
}

// The inverse-CDF draw over the kept tokens (key >= t) in index order: the
// warp chunk, then one of 32 sub-chunks of it, then the token.
__device__ __noinline__ int sp_draw(const float *z, int V, int wc, int vec, float inv_t, float m, unsigned t, float u,
                                    int fallback, sp_smem &S) {
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads();
    if (threadIdx.x == 0) {
        u64 tot = 0, run = 0;
        for (int k = 0; k < SP_WARPS; k++) tot += S.wpart[k];
        u64 target = (u64)((double)u * (double)tot);
        if (tot && target >= tot) target = tot - 1;
        S.res_bin = -1;
        for (int k = 0; k < SP_WARPS; k++) {
            if (run + S.wpart[k] > target) {
                S.res_bin = k;
                S.res_before = target - run;   // what is left to pass inside chunk k
                break;
            }
            run += S.wpart[k];
        }
    }
    __syncthreads();
    int owner = S.res_bin;
    if (owner < 0) return fallback;
    u64 left = S.res_before;
    int c0 = owner * wc, c1 = min(V, c0 + wc), sl = ((c1 - c0 + SP_WARPS - 1) / SP_WARPS + 31) / 32 * 32;
    int s0 = min(c1, c0 + w * sl), s1 = min(c1, s0 + sl);
    u64 mine = 0;
    sp_each(z, s0, s1, vec, [&](int i, float zi) {
        if (sp_key(zi) >= t) mine += sp_fx(zi * inv_t - m);
    });
    mine = sp_warp_sum64(mine);
    __syncthreads();
    if (lane == 0) S.scan[w] = mine;
    __syncthreads();
    if (threadIdx.x == 0) {
        u64 run = 0;
        S.res_bin = -1;
        for (int k = 0; k < SP_WARPS; k++) {
            if (run + S.scan[k] > left) {
                S.res_bin = k;
                S.res_before = left - run;
                break;
            }
            run += S.scan[k];
        }
    }
    __syncthreads();
    int sub = S.res_bin;
    if (sub < 0) return fallback;
    left = S.res_before;
    int pick = -1;
    if (w == sub) {   // one warp walks 32 tokens at a time
        for (int base = s0; base < s1 && pick < 0; base += 32) {
            int i = base + lane;
            float zi = i < s1 ? z[i] : -INFINITY;
            u64 e = i < s1 && sp_key(zi) >= t ? sp_fx(zi * inv_t - m) : 0;
            u64 incl = sp_warp_incl64(e, lane);
            int hit = e && incl > left ? lane : 32;   // first lane whose interval holds the coin
            for (int o = 16; o > 0; o >>= 1) hit = min(hit, __shfl_xor_sync(SP_FULL, hit, o));
            if (hit < 32) pick = base + hit;
            left -= sp_shfl_xor64(incl, 31 ^ lane);   // the 32 tokens' mass: lane 31's inclusive sum
        }
        if (lane == 0) S.res_bin = pick;
    }
    __syncthreads();
    pick = S.res_bin;
    return pick < 0 ? fallback : pick;
}

// The row and where the selection stands (block-uniform).
struct sp_row {
    const float *z;
    int V, wc, vec;
    float inv_t, m;
};
struct sp_sel {
    unsigned t;     // the kept set: keys >= t
    int bk;         // top-k's level-0 bin (SP_NB0 without top-k: above every bin)
    int cand_bin;   // the level-0 bin whose tokens are gathered whole (-1: none)
    int mass0;      // the level-0 mass histogram is made
    int done;       // the warps' chunk sums are complete
    u64 kmass;      // top-k: the kept mass inside bk
};

// Gather the tokens of S.rng (keys >= lb) with `also` in the same pass and
// resolve the threshold from them (by count or by mass); with parts, keys
// above the range and the kept gathered ones make the chunk sums.
__device__ unsigned sp_gather_resolve(const sp_row &w, int also, int by_mass, unsigned lb, int parts, sp_smem &S) {
    u64 plo = ((u64)S.rng.prefix << S.rng.shift) + ((u64)1 << S.rng.shift);
    sp_pass(SP_GATHER | also | (parts ? SP_PARTS : 0), w.z, w.V, w.wc, w.vec, w.inv_t, w.m, lb, plo, S);
    unsigned t = sp_resolve(by_mass, lb, w.z, w.inv_t, w.m, S);
    if (parts) sp_parts_add_cands(t, w.z, w.wc, w.inv_t, w.m, S);
    return t;
}

// top-k from the level-0 counts: the bin of the k-th key, 8 more bits per
// pass while it holds more than SP_CAP tokens, then gathered (with top-p, the
// same pass makes the mass histogram; without, the chunk sums).
__device__ void sp_topk(const sp_row &w, int top_k, int P, sp_sel &q, sp_smem &S) {
    q.bk = sp_cross(S.cnt0, SP_NB0, (u64)top_k, S);
    if (q.bk < 0) q.bk = 0;   // cannot happen: V >= 1 tokens are counted
    sp_range_at(S, q.bk, (u64)top_k - S.res_before, S.res_before, 0, S.cnt0[q.bk], 0);
    while (S.rng.shift > 0 && S.rng.last_cnt > SP_CAP) {   // a crowded bin
        sp_pass(SP_SUB | (P && !q.mass0 ? SP_MASS0 : 0), w.z, w.V, w.wc, w.vec, w.inv_t, w.m, 0, 0, S);
        q.mass0 |= P;
        sp_narrow(0, S);
    }
    if (S.rng.shift > 0) {
        q.cand_bin = S.rng.shift == 20 ? q.bk : -1;
        q.t = sp_gather_resolve(w, P && !q.mass0 ? SP_MASS0 : 0, 0, 0, !P, S);
        q.mass0 |= P;
        q.done = !P;
    } else {
        q.t = S.rng.prefix;
    }
    q.kmass = S.rng.above_mass + S.rng.last_mass;
}

// top-p over the tokens top-k keeps (bins below bk dropped, bk holding only
// its kept mass): the bin where top_p of that mass is reached, resolved from
// top-k's gathered tokens when it is their bin, else narrowed and gathered
// like top-k's, by mass.
__device__ void sp_topp(const sp_row &w, float top_p, int K, sp_sel &q, sp_smem &S) {
    if (!q.mass0) sp_pass(SP_MASS0, w.z, w.V, w.wc, w.vec, w.inv_t, w.m, 0, 0, S);
    if (K) {
        for (int i = threadIdx.x; i < SP_NB0; i += SP_THREADS)
            if (i < q.bk) S.mass0[i] = 0;
            else if (i == q.bk) S.mass0[i] = q.kmass;
        __syncthreads();
    }
    u64 mine = 0;
    for (int i = threadIdx.x; i < SP_NB0; i += SP_THREADS) mine += S.mass0[i];
    sp_block_excl(mine, S);
    u64 massk = S.total;
    double want_d = ceil((double)top_p * (double)massk);
    u64 want = want_d >= (double)massk ? massk : (u64)want_d;
    if (want < 1) want = 1;
    int bp = sp_cross(S.mass0, SP_NB0, want, S);
    u64 before = S.res_before;
    if (bp < 0) bp = SP_NB0 - 1, before = 0;   // cannot happen: the max token has mass 2^44
    unsigned lb = bp == q.bk ? q.t : 0;   // inside top-k's bin only its kept tokens count
    sp_range_at(S, bp, want - before, 0, before, S.cnt0[bp], S.mass0[bp]);
    if (bp == q.cand_bin) {   // top-k gathered this very bin
        q.t = sp_resolve(1, lb, w.z, w.inv_t, w.m, S);
        return;
    }
    while (S.rng.shift > 0 && S.rng.last_cnt > SP_CAP) {
        sp_pass(SP_SUB, w.z, w.V, w.wc, w.vec, w.inv_t, w.m, lb, 0, S);
        sp_narrow(1, S);
    }
    if (S.rng.shift > 0) {
        q.t = sp_gather_resolve(w, 0, 1, lb, 1, S);
        q.done = 1;
    } else {
        q.t = S.rng.prefix;
    }
}

__global__ void __launch_bounds__(SP_THREADS) k_sample(int32_t *out_tok, float *out_logp, const float *logits, int V,
                                                       float temp, int top_k, float top_p, const float *coin) {
    extern __shared__ __align__(16) unsigned char sp_raw[];
    sp_smem &S = *(sp_smem *)sp_raw;
    int K = top_k > 0 && top_k < V, P = top_p < 1.f, greedy = !(temp > 0.f);
    // A warp's chunk: whole rounds of 128 tokens (16-byte aligned when the row is).
    sp_row w = {logits + (size_t)blockIdx.x * V, V, ((V + SP_WARPS - 1) / SP_WARPS + 127) / 128 * 128,
                V % 4 == 0 && ((uintptr_t)logits & 15) == 0, greedy ? 1.f : 1.f / temp, 0.f};
    float zmax, s;
    int imax, bad;
    sp_stats(w.z, V, w.wc, w.vec, w.inv_t, !greedy && (K || P), &zmax, &imax, &bad, &s, S);
    if (bad || zmax == -INFINITY) {
        if (threadIdx.x == 0) out_tok[blockIdx.x] = -1, out_logp[blockIdx.x] = NAN;
        return;
    }
    w.m = zmax * w.inv_t;
    int pick = imax;
    if (!greedy) {
        sp_sel q = {0, SP_NB0, -1, 0, 0, 0};
        if (K) sp_topk(w, top_k, P, q, S);
        if (P) sp_topp(w, top_p, K, q, S);
        if (!q.done) sp_pass(SP_PARTS, w.z, V, w.wc, w.vec, w.inv_t, w.m, 0, (u64)q.t, S);
        // a float coin can round up to 1 from a double just below it
        pick = sp_draw(w.z, V, w.wc, w.vec, w.inv_t, w.m, q.t, fminf(coin[blockIdx.x], 0.99999994f), imax, S);
    }
    if (threadIdx.x == 0) {
        out_tok[blockIdx.x] = pick;
        out_logp[blockIdx.x] = w.z[pick] * w.inv_t - w.m - logf(s);
    }
}

extern "C" skpo_status skpo_cuda_sample(skpo_cuda *c, int32_t *out_tok, float *out_logp, const float *logits, int B,
                                        int V, float temp, int top_k, float top_p, const float *coin, skpo_err *err) {
    if (!B) return SKPO_OK;
    if (V < 1) return skpo_err_set(err, SKPO_ERANGE, "sample: vocabulary of %d tokens", V);
    CU(cudaFuncSetAttribute(k_sample, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sizeof(sp_smem)), err);
    k_sample<<<B, SP_THREADS, sizeof(sp_smem), STREAM(c)>>>(out_tok, out_logp, logits, V, temp, top_k, top_p, coin);
    LAUNCHED(err);
    return SKPO_OK;
}
