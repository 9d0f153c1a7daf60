/*
 * rng.c - xoshiro256** (Blackman & Vigna) with splitmix64 seeding; see rng.h.
 */
#include "base/rng.h"

#include "base/common.h"
#include "base/strmap.h"

#include <math.h>

uint64_t skpo_mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

uint64_t skpo_splitmix64(uint64_t *state) {
    uint64_t x = *state;
    *state += 0x9e3779b97f4a7c15ULL;
    return skpo_mix64(x); // mix64 adds the increment itself: the output is mix of the new state
}

void skpo_rng_seed(skpo_rng *r, uint64_t seed) {
    SKPO_ASSERT(r);
    // Four successive splitmix64 outputs (mix64 adds the increment itself);
    // they are distinct, so the state is never all zero.
    for (int i = 0; i < 4; i++) {
        r->s[i] = skpo_mix64(seed);
        seed += 0x9e3779b97f4a7c15ULL;
    }
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t skpo_rng_u64(skpo_rng *r) {
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double skpo_rng_uniform(skpo_rng *r) {
    return (double)(skpo_rng_u64(r) >> 11) * 0x1.0p-53;
}

double skpo_rng_normal(skpo_rng *r) {
    double u = 1.0 - skpo_rng_uniform(r); // (0, 1]: log never sees 0
    double v = skpo_rng_uniform(r);
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

int64_t skpo_rng_int(skpo_rng *r, int64_t lo, int64_t hi) {
    SKPO_ASSERT(lo <= hi);
    uint64_t range = (uint64_t)hi - (uint64_t)lo + 1; // 0 means the full 2^64 range
    if (range == 0) return (int64_t)skpo_rng_u64(r);
    // Rejection on the top of the 64-bit range keeps every value equally likely.
    uint64_t limit = UINT64_MAX - UINT64_MAX % range;
    uint64_t x;
    do x = skpo_rng_u64(r);
    while (x >= limit);
    return (int64_t)((uint64_t)lo + x % range);
}

uint64_t skpo_seed_derive(uint64_t run_seed, const char *label, uint64_t index) {
    // FNV-1a over the label, then mixed with the seed and index; each input
    // passes through mix64 so nearby seeds/indices give unrelated streams.
    uint64_t h = skpo_hash_str(label ? label : "");
    return skpo_mix64(skpo_mix64(run_seed) ^ skpo_mix64(h + 0x632be59bd9b4e019ULL) ^ skpo_mix64(~index));
}
