/*
 * rng.h - explicit, replayable random numbers for sampling.
 *
 * The generator is xoshiro256** seeded through splitmix64 (the seeding its
 * authors recommend). Its state is a value the caller owns and passes by
 * pointer: there is no global generator, so every sequence of a batch draws
 * from its own stream and gives the same tokens however it is batched.
 *
 * Seeds are derived, never chained: skpo_seed_derive() hashes a run seed with
 * a label (a prompt id, "cut", "draw") and an index into a 64-bit seed. A
 * record stores the seed of the sequence that produced it (field `seed`), so
 * one sequence can be replayed alone from the record.
 *
 * Weight initialisation (model.c, lora.c) and skpo-synth draw from a plain
 * splitmix64 stream instead (skpo_splitmix64): the checkpoints of skpo-init
 * and the demo's problems are made of its numbers, so it stays as it is.
 *
 * Not here: the sampling itself (sampler.h takes the random number as an
 * argument and does not know about generators).
 */
#ifndef SKPO_RNG_H
#define SKPO_RNG_H

#include <stdint.h>

typedef struct skpo_rng {
    uint64_t s[4];
} skpo_rng;

// Seed from one 64-bit value (any value, including 0, gives a valid state).
void skpo_rng_seed(skpo_rng *r, uint64_t seed);
uint64_t skpo_rng_u64(skpo_rng *r);
// Uniform double in [0, 1) with 53 random bits.
double skpo_rng_uniform(skpo_rng *r);
// Standard normal (Box-Muller, one of the pair).
double skpo_rng_normal(skpo_rng *r);
// Uniform integer in [lo, hi] inclusive (lo <= hi), without modulo bias.
int64_t skpo_rng_int(skpo_rng *r, int64_t lo, int64_t hi);

// splitmix64 finaliser: a bijective mix of x + the golden-ratio increment.
uint64_t skpo_mix64(uint64_t x);
// The splitmix64 generator (Steele, Lea, Flood 2014): *state advances by the
// increment, the output is skpo_mix64 of the old state. Any state is valid.
uint64_t skpo_splitmix64(uint64_t *state);
// Seed of stream (run_seed, label, index): deterministic, independent of any
// generator state; label may be NULL (treated as "").
uint64_t skpo_seed_derive(uint64_t run_seed, const char *label, uint64_t index);

#endif
