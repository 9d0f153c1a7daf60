// test_groups.c - the group filters of rl/groups.h (DAPO's dynamic sampling,
// PRIME's accuracy filter) on hand-built steps.
#include "harness.h"
#include "rl/groups.h"

#include <string.h>

// A step: per record "kind pid outcome", outcome c1 / c0 (correct), r<x> (reward only), - (none).
static size_t build(skpo_rec *r, const char *const *spec, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char kind[16], pid[16], out[16];
        skpo_rec_init(&r[i]);
        sscanf(spec[i], "%15s %15s %15s", kind, pid, out);
        skpo_rec_set_str(&r[i], F_KIND, kind);
        skpo_rec_set_str(&r[i], F_PID, pid);
        if (out[0] == 'c') skpo_rec_set_bool(&r[i], F_CORRECT, out[1] == '1');
        if (out[0] == 'r') skpo_rec_set_float(&r[i], F_REWARD, atof(out + 1));
        if (out[0] == 'c') skpo_rec_set_float(&r[i], F_REWARD, out[1] == '1' ? 1.0 : -1.5);   // shaped: not looked at
    }
    return n;
}

static const char *const STEP[] = {
    "meta x -",    "full a c1", "full b c1", "full a c0",   // a mixed
    "full b c1",                                           // b all correct
    "full c r1",   "full c r-1",                           // c mixed by reward (no `correct`)
    "full d c0",   "prompt d -", "full d c0",              // d all wrong
    "full e c1",   "full e c0",                            // e mixed
    "up a -",
};
enum { NS = sizeof STEP / sizeof *STEP };

static void informative_groups_are_the_mixed_outcomes_by_correct_else_by_reward(void) {
    skpo_rec r[NS];
    build(r, STEP, NS);
    CHECK(skpo_groups_count_informative(r, NS) == 3);   // a, c, e
    unsigned char keep[NS];
    skpo_groups_keep_informative(r, NS, 2, keep);       // a and c kept, e dropped (third informative)
    for (size_t i = 0; i < NS; i++) {
        int is_e = strstr(STEP[i], "full e") == STEP[i];
        CHECK_MSG(keep[i] == !is_e, "record %zu '%s' keep %d", i, STEP[i], keep[i]);
    }
    skpo_groups_keep_informative(r, NS, 0, keep);       // every mixed group dropped, all-equal ones stay
    CHECK(keep[1] == 0 && keep[2] == 1 && keep[5] == 0 && keep[7] == 1 && keep[0] == 1 && keep[8] == 1 && keep[12] == 1);
    for (size_t i = 0; i < NS; i++) skpo_rec_free(&r[i]);
}

static void accuracy_filter_prefers_groups_in_range_then_fills_in_draw_order(void) {
    skpo_rec r[NS];
    build(r, STEP, NS);
    unsigned char keep[NS];
    // accuracies: a 0.5, b 1, c 0, d 0, e 0.5; range [0.2, 0.8]: a, e first; then b (draw order)
    skpo_groups_keep_accuracy(r, NS, 3, 0.2, 0.8, keep);
    const char *kept = "abe";
    for (size_t i = 0; i < NS; i++) {
        if (strncmp(STEP[i], "full ", 5)) { CHECK(keep[i] == 1); continue; }
        CHECK_MSG(keep[i] == (strchr(kept, STEP[i][5]) != NULL), "record %zu '%s' keep %d", i, STEP[i], keep[i]);
    }
    skpo_groups_keep_accuracy(r, NS, 1, 1.0, 1.0, keep);   // only b is exactly 1
    CHECK(keep[2] == 1 && keep[4] == 1 && keep[1] == 0 && keep[10] == 0);
    for (size_t i = 0; i < NS; i++) skpo_rec_free(&r[i]);
}

int main(void) {
    RUN(informative_groups_are_the_mixed_outcomes_by_correct_else_by_reward);
    RUN(accuracy_filter_prefers_groups_in_range_then_fills_in_draw_order);
    return TEST_SUMMARY();
}
