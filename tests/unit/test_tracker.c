// test_tracker.c - the per-prompt tracker: docs/algorithm.md section 4.3's hand-computed
// two-visit trace, rho clamping, the length tracker, and the state folder
// (round trip, CURRENT, keeping the last two states, re-reading a kept step).
#include "harness.h"
#include "record/record.h"
#include "rl/tracker.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *tmpdir(void) {
    char tmpl[] = "/tmp/skpo-test-tracker-XXXXXX";
    char *d = mkdtemp(tmpl);
    SKPO_ASSERT(d != NULL);
    return skpo_xstrdup(d);
}

static void rmdir_all(char *d) {
    skpo_err err = {{0}};
    skpo_rm_rf(d, &err);
    free(d);
}

static void unseen_prompt_reads_init_values(void) {
    skpo_tracker *t = skpo_tracker_new(NULL);
    CHECK(skpo_tracker_step(t) == 0);
    CHECK(skpo_tracker_len(t, "q") == 1024.0);
    CHECK(skpo_tracker_value(t, "q") == 0.0);
    CHECK(skpo_tracker_count(t, "q") == 0.0);
    CHECK(!skpo_tracker_seen(t, "q"));
    CHECK_NEAR(skpo_tracker_weight(t, "q"), 0.55, 1e-15);
    skpo_tracker_free(t);
}

static void priority_weight_is_clamped_outside_the_reward_range(void) {
    // DAPO's overlong shaping puts V outside [-1, 1]: p is clamped, never NaN.
    CHECK(skpo_prio_weight(1.7, 0.05) == 0.05);
    CHECK(skpo_prio_weight(-2.5, 0.05) == 0.05);
    CHECK(skpo_prio_weight(NAN, 0.05) == 0.05);
    CHECK_NEAR(skpo_prio_weight(0.0, 0.05), 0.55, 1e-15);
    CHECK_NEAR(skpo_prio_weight(0.5, 0.1), sqrt(0.75 * 0.25) + 0.1, 1e-15);
}

static void two_visit_trace_matches_spec(void) {
    skpo_err err = {{0}};
    skpo_tracker *t = skpo_tracker_new(NULL);
    CHECK(skpo_tracker_update(t, "q", 0.5, NAN, 0.96, NULL, &err) == SKPO_OK);
    CHECK(skpo_tracker_value(t, "q") == 0.5);   // first observation overwrites
    CHECK(skpo_tracker_count(t, "q") == 1.0);
    CHECK(skpo_tracker_update(t, "q", -0.25, NAN, 0.96, NULL, &err) == SKPO_OK);
    CHECK_NEAR(skpo_tracker_value(t, "q"), 0.117347, 5e-7);
    CHECK_NEAR(skpo_tracker_count(t, "q"), 1.96, 1e-12);
    CHECK_NEAR(skpo_tracker_weight(t, "q"), 0.546545, 5e-7);
    CHECK(skpo_tracker_len(t, "q") == 1024.0); // NAN length leaves L alone
    skpo_tracker_free(t);
}

static void length_tracker_first_observation_overwrites_then_averages(void) {
    skpo_err err = {{0}};
    skpo_tracker *t = skpo_tracker_new(NULL);
    CHECK(skpo_tracker_update(t, "q", 1, 300, 0.875, NULL, &err) == SKPO_OK);
    CHECK(skpo_tracker_len(t, "q") == 300.0);
    CHECK(skpo_tracker_update(t, "q", 1, 600, 0.875, NULL, &err) == SKPO_OK);
    CHECK_NEAR(skpo_tracker_len(t, "q"), 300 + (600 - 300) / 1.875, 1e-12);
    skpo_tracker_free(t);
}

static void rho_is_clamped_and_reports_clipping(void) {
    skpo_tracker *t = skpo_tracker_new(NULL);
    int c;
    CHECK(skpo_tracker_rho(t, 0.0, &c) == 0.96 && c);     // first visit: 2^0 = 1 -> 0.96
    CHECK(skpo_tracker_rho(t, 100.0, &c) == 0.875 && c);
    CHECK_NEAR(skpo_tracker_rho(t, 0.8, &c), pow(2, -0.1), 1e-15);
    CHECK(!c);
    skpo_tracker_free(t);
}

static void non_finite_reward_is_rejected_naming_the_prompt(void) {
    skpo_err err = {{0}};
    skpo_tracker *t = skpo_tracker_new(NULL);
    CHECK(skpo_tracker_update(t, "p17", NAN, 10, 0.96, NULL, &err) == SKPO_ENUMERIC);
    CHECK(strstr(err.msg, "p17") != NULL);
    CHECK(!skpo_tracker_seen(t, "p17"));
    skpo_tracker_free(t);
}

static void many_prompts_are_found_after_rehashing(void) {
    skpo_err err = {{0}};
    skpo_tracker *t = skpo_tracker_new(NULL);
    char pid[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(pid, sizeof pid, "p%d", i);
        CHECK(skpo_tracker_update(t, pid, (i % 3) - 1.0, i, 0.96, NULL, &err) == SKPO_OK);
    }
    CHECK(skpo_tracker_size(t) == 5000);
    CHECK(skpo_tracker_value(t, "p4997") == 1.0 && skpo_tracker_len(t, "p4997") == 4997.0);
    skpo_tracker_free(t);
}

static void empty_folder_loads_as_step_zero(void) {
    char *d = tmpdir();
    skpo_err err = {{0}};
    skpo_tracker *t = NULL;
    CHECK(skpo_tracker_load(d, &t, &err) == SKPO_OK);
    CHECK(t && skpo_tracker_step(t) == 0 && skpo_tracker_size(t) == 0);
    skpo_tracker_free(t);
    char *missing = skpo_path_join(d, "not-yet");
    CHECK(skpo_tracker_load(missing, &t, &err) == SKPO_OK);
    skpo_tracker_free(t);
    free(missing);
    rmdir_all(d);
}

static void state_round_trips_values_segments_and_params(void) {
    char *d = tmpdir();
    skpo_err err = {{0}};
    skpo_tracker_params p;
    skpo_tracker_params_default(&p);
    p.tau = 0.06;
    skpo_tracker *t = skpo_tracker_new(&p);
    int32_t tok[] = {5, 6, 7}, pr[] = {1, 2};
    float lp[] = {-0.5f, -1.25f, -2.0f};
    skpo_tracker_seg seg = {tok, 3, lp, pr, 2};
    skpo_tracker_update(t, "a", 0.5, 100, 0.96, &seg, &err);
    skpo_tracker_update(t, "a", -0.25, 200, 0.96, NULL, &err);
    skpo_tracker_update(t, "b", -1, 50, 0.96, NULL, &err);
    skpo_tracker_set_step(t, 3);
    CHECK_MSG(skpo_tracker_save(t, d, &err) == SKPO_OK, "%s", err.msg);
    skpo_tracker *u = NULL;
    CHECK_MSG(skpo_tracker_load(d, &u, &err) == SKPO_OK, "%s", err.msg);
    if (u) {
        CHECK(skpo_tracker_step(u) == 3 && skpo_tracker_size(u) == 2);
        CHECK(skpo_tracker_value(u, "a") == skpo_tracker_value(t, "a"));
        CHECK(skpo_tracker_count(u, "a") == skpo_tracker_count(t, "a"));
        CHECK(skpo_tracker_len(u, "a") == skpo_tracker_len(t, "a"));
        CHECK(skpo_tracker_value(u, "b") == -1.0);
        CHECK(skpo_tracker_get_params(u)->tau == 0.06);
        skpo_tracker_seg s2;
        CHECK(skpo_tracker_last_seg(u, "a", &s2));
        CHECK(s2.ntokens == 3 && s2.nprompt == 2 && s2.tokens[2] == 7 && s2.prompt[1] == 2 && s2.logp[1] == -1.25f);
        CHECK(!skpo_tracker_last_seg(u, "b", &s2));
    }
    skpo_tracker_free(u);
    skpo_tracker_free(t);
    rmdir_all(d);
}

static void saving_keeps_the_last_two_states_and_a_kept_step_reloads(void) {
    char *d = tmpdir();
    skpo_err err = {{0}};
    skpo_tracker *t = skpo_tracker_new(NULL);
    for (int s = 1; s <= 4; s++) {
        skpo_tracker_update(t, "q", s % 2 ? 1.0 : -1.0, NAN, 0.96, NULL, &err);
        skpo_tracker_set_step(t, s);
        CHECK(skpo_tracker_save(t, d, &err) == SKPO_OK);
    }
    char *p2 = skpo_path_join(d, "state-000002.msgpack.zst"), *p3 = skpo_path_join(d, "state-000003.msgpack.zst");
    char *p4 = skpo_path_join(d, "state-000004.msgpack.zst");
    CHECK(!skpo_path_exists(p2) && skpo_path_exists(p3) && skpo_path_exists(p4));
    skpo_tracker *u = NULL;
    CHECK(skpo_tracker_load_step(d, 3, &u, &err) == SKPO_OK);
    if (u) CHECK(skpo_tracker_step(u) == 3 && skpo_tracker_count(u, "q") > 2.0);
    skpo_tracker_free(u);
    u = NULL;
    CHECK(skpo_tracker_load_step(d, 2, &u, &err) == SKPO_ENOTFOUND);
    CHECK(strstr(err.msg, "latest is step 4") != NULL);
    free(p2); free(p3); free(p4);
    skpo_tracker_free(t);
    rmdir_all(d);
}

static void corrupt_or_missing_current_and_version_mismatch_are_errors(void) {
    char *d = tmpdir();
    skpo_err err = {{0}};
    char *cur = skpo_path_join(d, "CURRENT");
    skpo_write_file_atomic(cur, "../../etc/passwd\n", 17, &err);
    skpo_tracker *u = NULL;
    CHECK(skpo_tracker_load(d, &u, &err) == SKPO_EFORMAT);
    CHECK(strstr(err.msg, "CURRENT") != NULL);
    // a state written by a future tracker version
    skpo_rec r;
    skpo_rec_init(&r);
    skpo_rec_set_str(&r, F_KIND, SKPO_KIND_META);
    skpo_rec_set_int(&r, F_SCHEMA, SKPO_SCHEMA_VERSION);
    skpo_rec_set_int(&r, "tracker_version", SKPO_TRACKER_VERSION + 1);
    skpo_rec_set_int(&r, F_STEP, 0);
    char *st = skpo_path_join(d, "state-000000.msgpack.zst");
    CHECK(skpo_write_all(st, &r, 1, &err) == SKPO_OK);
    skpo_write_file_atomic(cur, "state-000000.msgpack.zst\n", 25, &err);
    CHECK(skpo_tracker_load(d, &u, &err) == SKPO_EFORMAT);
    CHECK(strstr(err.msg, "state-000000") != NULL && strstr(err.msg, "version") != NULL);
    skpo_rec_free(&r);
    unlink(cur); // state files without CURRENT: not a fresh start
    CHECK(skpo_tracker_load(d, &u, &err) == SKPO_EFORMAT);
    CHECK(strstr(err.msg, "no CURRENT") != NULL);
    free(st);
    free(cur);
    rmdir_all(d);
}

// The weight skpo-sample draws with (also with its own --prio-eps): p is
// clamped to [0, 1], so a value outside [-1, 1] (overlong penalties) gives
// the floor, not NaN.
static void prio_weight_clamps_values_outside_the_reward_range(void) {
    CHECK_NEAR(skpo_prio_weight(0.0, 0.05), 0.55, 1e-12);
    CHECK_NEAR(skpo_prio_weight(1.0, 0.05), 0.05, 1e-12);
    CHECK_NEAR(skpo_prio_weight(1.5, 0.05), 0.05, 1e-12);
    CHECK_NEAR(skpo_prio_weight(-3.0, 0.2), 0.2, 1e-12);
    CHECK_NEAR(skpo_prio_weight(0.117347, 0.05), 0.546545, 1e-6); // docs/algorithm.md 4.3 trace
}

int main(void) {
    RUN(priority_weight_is_clamped_outside_the_reward_range);
    RUN(unseen_prompt_reads_init_values);
    RUN(two_visit_trace_matches_spec);
    RUN(length_tracker_first_observation_overwrites_then_averages);
    RUN(rho_is_clamped_and_reports_clipping);
    RUN(non_finite_reward_is_rejected_naming_the_prompt);
    RUN(many_prompts_are_found_after_rehashing);
    RUN(empty_folder_loads_as_step_zero);
    RUN(state_round_trips_values_segments_and_params);
    RUN(saving_keeps_the_last_two_states_and_a_kept_step_reloads);
    RUN(corrupt_or_missing_current_and_version_mismatch_are_errors);
    RUN(prio_weight_clamps_values_outside_the_reward_range);
    return TEST_SUMMARY();
}
