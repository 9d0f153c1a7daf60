/*
 * synth.c - problem generation for skpo-synth (see synth.h).
 */
#include "synth.h"
#include "base/common.h"
#include "base/strmap.h"

#include <stdio.h>
#include <string.h>

static const char *const names[] = {"Tom", "Ann", "Sam", "Mia", "Bob", "Eva", "Max", "Zoe"};
static const char *const items[] = {"pens", "apples", "cards", "coins", "books", "cups", "eggs", "keys"};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))


// Uniform in [lo, hi] (the modulo bias is below 2^-50 for our ranges).
static long uniform(uint64_t *rng, long lo, long hi) {
    return lo + (long)(skpo_splitmix64(rng) % (uint64_t)(hi - lo + 1));
}

// The skeleton's hash grows by the 8 little-endian bytes of v (common.h
// refuses big-endian hosts, so the bytes in memory are those).
static uint64_t fnv_mix(uint64_t h, uint64_t v) { return skpo_hash_bytes(h, &v, sizeof v); }

synth_split synth_split_of(uint64_t key) {
    uint64_t s = key;
    return skpo_splitmix64(&s) % SYNTH_TEST_EVERY == 0 ? SYNTH_TEST : SYNTH_TRAIN;
}

// Pick an operation kind applicable to the current value; 0 if none is.
static char pick_op(const synth_opts *o, uint64_t *rng, long cur) {
    char ok[3];
    int n = 0;
    if (o->add) ok[n++] = '+';
    if (o->sub && cur >= 1) ok[n++] = '-';
    if (o->mul) ok[n++] = '*';
    return n ? ok[uniform(rng, 0, n - 1)] : 0;
}

static void append(char *buf, const char *fmt, long a, long b) {
    size_t len = strlen(buf);
    int w = snprintf(buf + len, SYNTH_TEXT_MAX - len, fmt, a, b);
    SKPO_ASSERT(w >= 0 && (size_t)w < SYNTH_TEXT_MAX - len);
}

// One attempt: a random skeleton rendered as text. Returns 0 if no operation applies.
static int draw_once(const synth_opts *o, uint64_t *rng, synth_problem *p) {
    int nops = (int)uniform(rng, o->min_ops, o->max_ops);
    const char *name = names[uniform(rng, 0, COUNT(names) - 1)];
    const char *item = items[uniform(rng, 0, COUNT(items) - 1)];
    long cur = uniform(rng, 1, o->max_operand);
    uint64_t key = fnv_mix(SKPO_HASH_INIT, (uint64_t)cur);
    snprintf(p->problem, SYNTH_TEXT_MAX, "%s has %ld %s", name, cur, item);
    p->solution[0] = 0;
    for (int i = 0; i < nops; i++) {
        char op = pick_op(o, rng, cur);
        if (!op) return 0;
        long v, next;
        if (op == '+') { v = uniform(rng, 1, o->max_operand); next = cur + v; append(p->problem, ", gets %ld", v, 0); }
        else if (op == '-') { v = uniform(rng, 1, cur < o->max_operand ? cur : o->max_operand); next = cur - v; append(p->problem, ", loses %ld", v, 0); }
        else { v = uniform(rng, 2, 3); next = cur * v; append(p->problem, v == 2 ? ", doubles them" : ", triples them", 0, 0); }
        append(p->solution, "%ld", cur, 0);
        append(p->solution, op == '+' ? "+%ld=%ld\n" : op == '-' ? "-%ld=%ld\n" : "*%ld=%ld\n", v, next);
        key = fnv_mix(fnv_mix(key, (uint64_t)op), (uint64_t)v);
        cur = next;
    }
    size_t len = strlen(p->problem);
    snprintf(p->problem + len, SYNTH_TEXT_MAX - len, ". How many %s?", item);
    append(p->solution, "Answer: %ld", cur, 0);
    p->answer = cur;
    p->key = key;
    return 1;
}

void synth_draw(const synth_opts *o, uint64_t *rng, synth_problem *p) {
    SKPO_ASSERT(o->min_ops >= 1 && o->min_ops <= o->max_ops && o->max_ops <= SYNTH_MAX_OPS);
    SKPO_ASSERT(o->max_operand >= 1 && (o->add || o->mul));
    for (;;)
        if (draw_once(o, rng, p) && synth_split_of(p->key) == o->split) return;
}
