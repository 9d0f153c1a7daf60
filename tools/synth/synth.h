/*
 * synth.h - the built-in synthetic task: short arithmetic word problems with
 * integer answers and worked solutions, small enough for a CPU-bound demo model.
 *
 *   problem   "Tom has 7 pens, gets 5, loses 3. How many pens?"
 *   solution  "7+5=12\n12-3=9\nAnswer: 9"
 *   answer    "9"
 *
 * A problem's arithmetic skeleton (start value, operations, operands) decides
 * its split through a hash, so train and test never share a skeleton whatever
 * the seeds; the name and item words are decoration drawn independently.
 * Every draw comes from base/rng.h's splitmix64 stream (skpo_splitmix64), the
 * state passed by pointer; the skeleton hash is base/strmap.h's FNV-1a.
 * This is not a math benchmark: it exists so that learning is visible in minutes.
 */
#ifndef SKPO_SYNTH_H
#define SKPO_SYNTH_H

#include "base/rng.h"

#include <stdint.h>

#define SYNTH_MAX_OPS 6
#define SYNTH_TEXT_MAX 512

typedef enum synth_split { SYNTH_TRAIN = 0, SYNTH_TEST = 1 } synth_split;

typedef struct synth_opts {
    int min_ops, max_ops;   // operations per problem, 1..SYNTH_MAX_OPS
    int max_operand;        // start value and operands drawn from 1..max_operand
    int add, sub, mul;      // operation kinds allowed (mul: doubles / triples)
    synth_split split;
} synth_opts;

typedef struct synth_problem {
    char problem[SYNTH_TEXT_MAX];
    char solution[SYNTH_TEXT_MAX];
    long answer;
    uint64_t key;           // hash of the arithmetic skeleton (the problem's identity)
} synth_problem;

// One held-out skeleton in SYNTH_TEST_EVERY falls into the test split.
#define SYNTH_TEST_EVERY 8

// Draw problems from *rng until one falls in o->split; fills *p. Pure given *rng.
void synth_draw(const synth_opts *o, uint64_t *rng, synth_problem *p);
// Which split a skeleton key belongs to.
synth_split synth_split_of(uint64_t key);

#endif
