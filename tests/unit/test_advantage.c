// test_advantage.c - advantage formulas against docs/algorithm.md's hand-computed values
// (section 4.4 GRPO sanity values, section 4.3 tracker trace) and a whole step
// over records: groups spread over the input in any order, the up reward and
// its batch normalisation, dapo's filter, spo, the divergence hook, and the
// errors (missing downstream records, NaN and missing rewards, orphans).
#include "rl/advantage.h"
#include "harness.h"
#include "model/model.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void grpo_one_correct_of_eight_matches_spec(void) {
    double r[8] = {1, -1, -1, -1, -1, -1, -1, -1}, a[8];
    CHECK(skpo_adv_group(r, 8, 1, 1e-6, a) == 0);
    CHECK_NEAR(a[0], 2.474870, 5e-6);
    CHECK_NEAR(a[1], -0.353553, 5e-7);
    for (int i = 0; i < 8; i++) r[i] = -r[i]; // seven correct mirrors one correct
    skpo_adv_group(r, 8, 1, 1e-6, a);
    CHECK_NEAR(a[0], -2.474870, 5e-6);
    CHECK_NEAR(a[7], 0.353553, 5e-7);
}

static void grpo_four_correct_of_eight_matches_spec(void) {
    double r[8] = {1, -1, 1, -1, 1, -1, 1, -1}, a[8];
    skpo_adv_group(r, 8, 1, 1e-6, a);
    CHECK_NEAR(a[0], 0.935413, 5e-7);
    CHECK_NEAR(a[1], -0.935413, 5e-7);
    CHECK_NEAR(skpo_adv_std(r, 8), 1.069045, 5e-7);
}

static void degenerate_group_gets_zero_advantage(void) {
    double r[4] = {-1, -1, -1, -1}, a[4] = {9, 9, 9, 9};
    CHECK(skpo_adv_group(r, 4, 1, 1e-6, a) == 1);
    CHECK(a[0] == 0 && a[3] == 0);
}

static void drgrpo_subtracts_the_mean_only(void) {
    double r[4] = {1, -1, -1, -1}, a[4];
    skpo_adv_group(r, 4, 0, 1e-6, a);
    CHECK(a[0] == 1.5 && a[1] == -0.5);
}

static void batch_norm_uses_unbiased_std_and_zeros_a_single_sample(void) {
    double a[2] = {0.5, -0.75};
    skpo_adv_batch_norm(a, 2, 1e-8);
    CHECK_NEAR(a[0], 1 / sqrt(2.0), 1e-7);
    CHECK_NEAR(a[1], -1 / sqrt(2.0), 1e-7);
    double b[1] = {0.3};
    skpo_adv_batch_norm(b, 1, 1e-8);
    CHECK(b[0] == 0);
}

// --- whole steps --------------------------------------------------------------------

static void mk(skpo_rec *r, const char *kind, const char *uid, const char *pid, const char *gid, double reward,
               int ntok) {
    skpo_rec_init(r);
    skpo_rec_set_str(r, F_KIND, kind);
    skpo_rec_set_str(r, F_UID, uid);
    skpo_rec_set_str(r, F_PID, pid);
    if (gid) skpo_rec_set_str(r, F_GID, gid);
    if (!isnan(reward)) {
        skpo_rec_set_float(r, F_REWARD, reward);
        skpo_rec_set_bool(r, F_CORRECT, reward > 0);
    }
    int32_t tok[64] = {0};
    float lp[64];
    for (int i = 0; i < ntok; i++) { tok[i] = 10 + i; lp[i] = -0.5f; }
    skpo_rec_set_i32s(r, F_TOKENS, tok, (size_t)ntok);
    skpo_rec_set_f32s(r, F_LOGP, lp, (size_t)ntok);
    int32_t prompt[3] = {1, 2, 3};
    skpo_rec_set_i32s(r, F_PROMPT, prompt, 3);
}

// Two up records u1 (prompt p1, 6 of 8 correct) and u2 (p2, 3 of 8), their downs
// interleaved and reversed, plus a pass-through record in the middle. 19 records.
static size_t skpo_batch(skpo_rec *recs) {
    size_t n = 0;
    char uid[16];
    for (int i = 7; i >= 0; i--) {
        snprintf(uid, sizeof uid, "d2-%d", i);
        mk(&recs[n++], SKPO_KIND_DOWN, uid, "p2", "u2", i < 3 ? 1 : -1, 20);
        snprintf(uid, sizeof uid, "d1-%d", i);
        mk(&recs[n++], SKPO_KIND_DOWN, uid, "p1", "u1", i < 6 ? 1 : -1, 10);
        if (i == 4) { skpo_rec_init(&recs[n]); skpo_rec_set_str(&recs[n++], F_KIND, "note"); }
    }
    mk(&recs[n++], SKPO_KIND_UP, "u2", "p2", NULL, NAN, 4);
    mk(&recs[n++], SKPO_KIND_UP, "u1", "p1", NULL, NAN, 6);
    return n;
}

static double fget(const skpo_rec *r, const char *k) {
    double v = NAN;
    skpo_rec_float(r, k, &v);
    return v;
}

static const skpo_rec *by_uid(const skpo_rec *recs, size_t n, const char *uid) {
    for (size_t i = 0; i < n; i++)
        if (skpo_rec_str(&recs[i], F_UID) && strcmp(skpo_rec_str(&recs[i], F_UID), uid) == 0) return &recs[i];
    return NULL;
}

// One skpo_adv_step of recs[0..n) under o with a new tracker (returned), the
// metrics in *m; the step must succeed.
static skpo_tracker *adv_run(skpo_rec *recs, size_t n, const skpo_adv_opts *o, unsigned char *keep, skpo_rec *m) {
    skpo_err err = {{0}};
    skpo_tracker *t = skpo_tracker_new(NULL);
    skpo_rec_init(m);
    CHECK_MSG(skpo_adv_step(recs, n, o, t, keep, m, &err) == SKPO_OK, "%s", err.msg);
    return t;
}

// What a test of skpo_adv_step frees: its batch, the metrics record, the tracker.
static void adv_done(skpo_rec *recs, size_t n, skpo_rec *m, skpo_tracker *t) {
    skpo_rec_free(m);
    for (size_t i = 0; i < n; i++) skpo_rec_free(&recs[i]);
    skpo_tracker_free(t);
}
static void skpo_step_groups_records_in_any_order(void) {
    skpo_rec recs[32], m;
    unsigned char keep[32];
    skpo_err err = {{0}};
    size_t n = skpo_batch(recs);
    skpo_adv_opts o;
    skpo_adv_opts_default(&o);
    skpo_tracker *t = skpo_tracker_new(NULL);
    skpo_rec_init(&m);
    CHECK_MSG(skpo_adv_step(recs, n, &o, t, keep, &m, &err) == SKPO_OK, "%s", err.msg);
    const skpo_rec *u1 = by_uid(recs, n, "u1"), *u2 = by_uid(recs, n, "u2");
    CHECK(fget(u1, F_REWARD) == 0.5 && fget(u2, F_REWARD) == -0.25);
    CHECK_NEAR(fget(u1, F_ADV), 1 / sqrt(2.0), 1e-7); // R - 0 batch-normalised over 2
    CHECK_NEAR(fget(u2, F_ADV), -1 / sqrt(2.0), 1e-7);
    CHECK(fget(u1, F_WEIGHT) == 0.5 && fget(by_uid(recs, n, "d1-0"), F_WEIGHT) == 0.5);
    // 6 of 8 correct: mirror of 2 of 8; mean 0.5, std sqrt(8/7*0.75)
    double sd = sqrt(6.0 / 7.0) + 1e-6;
    CHECK_NEAR(fget(by_uid(recs, n, "d1-0"), F_ADV), 0.5 / sd, 1e-9);
    CHECK_NEAR(fget(by_uid(recs, n, "d1-7"), F_ADV), -1.5 / sd, 1e-9);
    CHECK(skpo_rec_is_kind(&recs[8], "note") && skpo_rec_get(&recs[8], F_ADV) == NULL); // passed through
    for (size_t i = 0; i < n; i++) CHECK(keep[i]);
    // tracker: first visits overwrite V; L_q from the mean response length, which
    // under the skip layout is the downstream responses' alone (10, 20): each one
    // solves q whole, so |s| is not counted again
    CHECK(skpo_tracker_value(t, "p1") == 0.5 && skpo_tracker_value(t, "p2") == -0.25);
    CHECK_MSG(skpo_tracker_len(t, "p1") == 10 && skpo_tracker_len(t, "p2") == 20, "L %g %g", skpo_tracker_len(t, "p1"),
              skpo_tracker_len(t, "p2"));
    skpo_tracker_seg seg;
    CHECK(skpo_tracker_last_seg(t, "p1", &seg) && seg.ntokens == 6 && seg.nprompt == 3);
    CHECK(fget(&m, "accuracy") == 9.0 / 16.0);
    CHECK(fget(&m, "reward_mean") == 0.125);
    CHECK(fget(&m, "len_up_mean") == 5 && fget(&m, "len_down_mean") == 15);
    CHECK(fget(&m, "degenerate_frac") == 0);
    adv_done(recs, n, &m, t);
}

// "w/o MC Estimation": the same batch plus a self record per up (u1's own
// completion wrong, u2's right): R_I is the self outcome, not the downstream mean
// (0.5 / -0.25); the downstream advantages and the tracker's L are unchanged.
static void reward_up_self_takes_the_outcome_of_the_own_completion(void) {
    skpo_rec recs[32], m;
    unsigned char keep[32];
    skpo_err err = {{0}};
    size_t n = skpo_batch(recs);
    mk(&recs[n++], SKPO_KIND_SELF, "s2", "p2", "u2", 1, 30);
    mk(&recs[n++], SKPO_KIND_SELF, "s1", "p1", "u1", -1, 30);
    skpo_adv_opts o;
    skpo_adv_opts_default(&o);
    o.reward_up_self = 1;
    skpo_tracker *t = skpo_tracker_new(NULL);
    skpo_rec_init(&m);
    CHECK_MSG(skpo_adv_step(recs, n, &o, t, keep, &m, &err) == SKPO_OK, "%s", err.msg);
    const skpo_rec *u1 = by_uid(recs, n, "u1"), *u2 = by_uid(recs, n, "u2");
    CHECK(fget(u1, F_REWARD) == -1 && fget(u2, F_REWARD) == 1);
    CHECK_NEAR(fget(u1, F_ADV), -1 / sqrt(2.0), 1e-7); // the order flipped against mc
    CHECK(skpo_tracker_value(t, "p1") == -1 && skpo_tracker_value(t, "p2") == 1);
    CHECK(skpo_tracker_len(t, "p1") == 10); // L unchanged: the mean downstream length, as with mc
    double sd = sqrt(6.0 / 7.0) + 1e-6;
    CHECK_NEAR(fget(by_uid(recs, n, "d1-0"), F_ADV), 0.5 / sd, 1e-9);
    CHECK(skpo_rec_get(by_uid(recs, n, "s1"), F_ADV) == NULL); // never trained
    skpo_rec_free(&m);
    for (size_t i = 0; i < n; i++) skpo_rec_free(&recs[i]);
    // without the self records it is an error naming the up record
    n = skpo_batch(recs);
    skpo_tracker *t2 = skpo_tracker_new(NULL);
    skpo_rec_init(&m);
    CHECK(skpo_adv_step(recs, n, &o, t2, keep, &m, &err) == SKPO_ENOTFOUND);
    CHECK(strstr(err.msg, "has no self record") != NULL);
    adv_done(recs, n, &m, t);
    skpo_tracker_free(t2);
}

// L_q's observation by layout: skip = mean |o_i| (10, 20), continual [q, s] =
// |s| + mean |o_i| (6 + 10, 4 + 20), each capped at len_cap (MAX_TOKENS).
static double lq_after_one_step(int continual, double cap, const char *pid) {
    skpo_rec recs[32], m;
    unsigned char keep[32];
    size_t n = skpo_batch(recs);
    skpo_adv_opts o;
    skpo_adv_opts_default(&o);
    o.len_with_segment = continual;
    o.len_cap = cap;
    skpo_tracker *t = adv_run(recs, n, &o, keep, &m);
    double L = skpo_tracker_len(t, pid);
    adv_done(recs, n, &m, t);
    return L;
}

static void lq_observes_the_mean_response_length_of_the_layout_capped_at_max_tokens(void) {
    CHECK(lq_after_one_step(0, 0, "p1") == 10 && lq_after_one_step(0, 0, "p2") == 20);
    CHECK(lq_after_one_step(1, 0, "p1") == 16 && lq_after_one_step(1, 0, "p2") == 24);
    CHECK(lq_after_one_step(0, 15, "p1") == 10 && lq_after_one_step(0, 15, "p2") == 15);
    CHECK(lq_after_one_step(1, 12, "p1") == 12 && lq_after_one_step(1, 12, "p2") == 12);
}

// Baseline warm-up (up_warmup = 1): a prompt never seen before has no baseline
// and gets upstream A = 0, outside the batch statistics; once both prompts were
// seen the advantages are those of the plain step.
static void up_warmup_zeroes_first_visits_and_keeps_them_out_of_the_batch_norm(void) {
    skpo_err err = {{0}};
    skpo_tracker *t = skpo_tracker_new(NULL);
    skpo_tracker_update(t, "p1", 0.5, 10, 0.96, NULL, &err);
    skpo_rec recs[32], m;
    unsigned char keep[32];
    size_t n = skpo_batch(recs);
    skpo_adv_opts o;
    skpo_adv_opts_default(&o);
    o.up_warmup = 1;
    skpo_rec_init(&m);
    CHECK(skpo_adv_step(recs, n, &o, t, keep, &m, &err) == SKPO_OK);
    CHECK(fget(by_uid(recs, n, "u2"), F_ADV) == 0 && fget(by_uid(recs, n, "u1"), F_ADV) == 0); // u1 alone: no std
    double sd = sqrt(6.0 / 7.0) + 1e-6;
    CHECK_NEAR(fget(by_uid(recs, n, "d1-0"), F_ADV), 0.5 / sd, 1e-9); // downstream untouched
    skpo_rec_free(&m);
    for (size_t i = 0; i < n; i++) skpo_rec_free(&recs[i]);
    skpo_tracker_free(t);
    t = skpo_tracker_new(NULL); // both seen before: raw 0.5 - 0.5 and -0.25 - 0.25, normalised +-0.7071
    skpo_tracker_update(t, "p1", 0.5, 10, 0.96, NULL, &err);
    skpo_tracker_update(t, "p2", 0.25, 10, 0.96, NULL, &err);
    n = skpo_batch(recs);
    skpo_rec_init(&m);
    CHECK(skpo_adv_step(recs, n, &o, t, keep, &m, &err) == SKPO_OK);
    CHECK_NEAR(fget(by_uid(recs, n, "u1"), F_ADV), 1 / sqrt(2.0), 1e-7);
    CHECK_NEAR(fget(by_uid(recs, n, "u2"), F_ADV), -1 / sqrt(2.0), 1e-7);
    adv_done(recs, n, &m, t);
}

static void skpo_second_visit_uses_the_pre_update_baseline(void) {
    skpo_err err = {{0}};
    skpo_tracker *t = skpo_tracker_new(NULL);
    skpo_tracker_update(t, "p1", 0.5, 10, 0.96, NULL, &err); // visit 1 of p1
    skpo_rec recs[32], m;
    unsigned char keep[32];
    size_t n = skpo_batch(recs);
    skpo_adv_opts o;
    skpo_adv_opts_default(&o);
    skpo_rec_init(&m);
    CHECK(skpo_adv_step(recs, n, &o, t, keep, &m, &err) == SKPO_OK);
    // raw: p1 0.5 - 0.5 = 0, p2 -0.25 - 0 = -0.25 -> normalised +-0.7071
    CHECK_NEAR(fget(by_uid(recs, n, "u1"), F_ADV), 1 / sqrt(2.0), 1e-7);
    CHECK_NEAR(skpo_tracker_count(t, "p1"), 1.96, 1e-12);
    CHECK(fget(&m, "revisits") == 1 && fget(&m, "rho_mean") == 0.96);
    adv_done(recs, n, &m, t);
}

typedef struct div_ctx { int calls; size_t n; double D; } div_ctx;
static skpo_status fake_divergence(void *ctx, const skpo_tracker_seg *segs, size_t n, double *D, skpo_err *err) {
    div_ctx *c = ctx;
    c->calls++;
    c->n = n;
    for (size_t i = 0; i < n; i++) D[i] = segs[i].ntokens == 6 ? c->D : 0;
    return SKPO_OK;
}

static void divergence_sets_rho_on_revisits_only(void) {
    skpo_err err = {{0}};
    skpo_tracker *t = skpo_tracker_new(NULL);
    int32_t tok[6] = {0}, pr[1] = {1};
    float lp[6] = {0};
    skpo_tracker_seg seg = {tok, 6, lp, pr, 1};
    skpo_tracker_update(t, "p1", 0.5, 10, 0.96, &seg, &err);
    skpo_rec recs[32], m;
    unsigned char keep[32];
    size_t n = skpo_batch(recs);
    skpo_adv_opts o;
    skpo_adv_opts_default(&o);
    div_ctx c = {0, 0, 0.8}; // rho = 2^(-0.1) = 0.933033, inside the clamp
    o.divergence = fake_divergence;
    o.div_ctx = &c;
    skpo_rec_init(&m);
    CHECK(skpo_adv_step(recs, n, &o, t, keep, &m, &err) == SKPO_OK);
    CHECK(c.calls == 1 && c.n == 1);
    CHECK_NEAR(skpo_tracker_count(t, "p1"), pow(2, -0.1) + 1, 1e-12);
    CHECK(fget(&m, "rho_clip_frac") == 0);
    CHECK_NEAR(fget(&m, "kl_d_mean"), 0.8, 1e-12);
    adv_done(recs, n, &m, t);
}

static void norm_down_and_phase_weights_follow_the_options(void) {
    skpo_rec recs[32], m;
    unsigned char keep[32];
    skpo_err err = {{0}};
    size_t n = skpo_batch(recs);
    skpo_adv_opts o;
    skpo_adv_opts_default(&o);
    o.norm_down = 1;
    o.w_up = 0.3;
    o.w_down = 0.7;
    skpo_tracker *t = skpo_tracker_new(NULL);
    skpo_rec_init(&m);
    CHECK(skpo_adv_step(recs, n, &o, t, keep, &m, &err) == SKPO_OK);
    double a[16];
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (skpo_rec_is_kind(&recs[i], SKPO_KIND_DOWN)) {
            a[k++] = fget(&recs[i], F_ADV);
            CHECK(fget(&recs[i], F_WEIGHT) == 0.7);
        }
    double mean = 0;
    for (size_t i = 0; i < k; i++) mean += a[i] / (double)k;
    CHECK(k == 16);
    CHECK_NEAR(mean, 0.0, 1e-12);
    CHECK_NEAR(skpo_adv_std(a, k), 1.0, 1e-7);
    CHECK(fget(by_uid(recs, n, "u1"), F_WEIGHT) == 0.3);
    adv_done(recs, n, &m, t);
}

static skpo_status run_skpo(skpo_rec *recs, size_t n, skpo_err *err) {
    skpo_rec m;
    unsigned char keep[32];
    skpo_adv_opts o;
    skpo_adv_opts_default(&o);
    skpo_tracker *t = skpo_tracker_new(NULL);
    skpo_rec_init(&m);
    skpo_status st = skpo_adv_step(recs, n, &o, t, keep, &m, err);
    skpo_rec_free(&m);
    skpo_tracker_free(t);
    for (size_t i = 0; i < n; i++) skpo_rec_free(&recs[i]);
    return st;
}

static void missing_downstream_record_is_an_error_naming_the_group(void) {
    skpo_rec recs[32];
    skpo_err err = {{0}};
    size_t n = skpo_batch(recs);
    skpo_rec_free(&recs[0]); // d2-7
    memmove(&recs[0], &recs[1], (n - 1) * sizeof *recs);
    CHECK(run_skpo(recs, n - 1, &err) == SKPO_EFORMAT);
    CHECK_MSG(strstr(err.msg, "'u2'") && strstr(err.msg, "7 downstream") && strstr(err.msg, "expected 8"), "%s", err.msg);
}

static void nan_reward_is_an_error_naming_the_record(void) {
    skpo_rec recs[32];
    skpo_err err = {{0}};
    size_t n = skpo_batch(recs);
    skpo_rec_set_float(&recs[3], F_REWARD, NAN); // d1-6
    CHECK(run_skpo(recs, n, &err) == SKPO_ENUMERIC);
    CHECK_MSG(strstr(err.msg, "d1-6") != NULL, "%s", err.msg);
}

static void missing_reward_is_an_error(void) {
    skpo_rec recs[32];
    skpo_err err = {{0}};
    size_t n = skpo_batch(recs);
    skpo_rec_del(&recs[2], F_REWARD); // d2-6
    CHECK(run_skpo(recs, n, &err) == SKPO_ENOTFOUND);
    CHECK_MSG(strstr(err.msg, "d2-6") && strstr(err.msg, "no reward"), "%s", err.msg);
}

static void down_record_without_its_up_record_is_an_error(void) {
    skpo_rec recs[32];
    skpo_err err = {{0}};
    size_t n = skpo_batch(recs);
    skpo_rec_set_str(&recs[0], F_GID, "u9");
    CHECK(run_skpo(recs, n, &err) == SKPO_EFORMAT);
    CHECK_MSG(strstr(err.msg, "u9") != NULL, "%s", err.msg);
}

// Full records: prompt a has 2 correct of 4, prompt b all wrong.
static size_t full_batch(skpo_rec *recs) {
    size_t n = 0;
    char uid[16];
    for (int i = 0; i < 4; i++) {
        snprintf(uid, sizeof uid, "a%d", i);
        mk(&recs[n++], SKPO_KIND_FULL, uid, "a", NULL, i < 2 ? 1 : -1, 8);
        snprintf(uid, sizeof uid, "b%d", i);
        mk(&recs[n++], SKPO_KIND_FULL, uid, "b", NULL, -1, 4);
    }
    return n;
}

static void dapo_drops_groups_whose_rewards_are_all_equal(void) {
    skpo_rec recs[32], m;
    unsigned char keep[32];
    skpo_err err = {{0}};
    size_t n = full_batch(recs);
    skpo_adv_opts o;
    skpo_adv_opts_default(&o);
    o.mode = SKPO_ADV_DAPO;
    o.group = 4;
    skpo_tracker *t = skpo_tracker_new(NULL);
    skpo_rec_init(&m);
    CHECK_MSG(skpo_adv_step(recs, n, &o, t, keep, &m, &err) == SKPO_OK, "%s", err.msg);
    for (size_t i = 0; i < n; i++) CHECK(keep[i] == (i % 2 == 0));
    double sd = sqrt(4.0 / 3.0) + 1e-6;
    CHECK_NEAR(fget(&recs[0], F_ADV), 1 / sd, 1e-9);
    CHECK(fget(&recs[0], F_WEIGHT) == 1.0);
    CHECK(fget(&m, "dropped_groups") == 1 && fget(&m, "degenerate_frac") == 0.5);
    adv_done(recs, n, &m, t);
}

// DAPO keeps a group on accuracy (some but not all correct), not on the shaped
// reward: a with 4 correct of which two carry an overlong penalty (rewards differ)
// is dropped; b (mixed) is kept; c, whose records lack `correct`, falls back to
// its rewards (all equal: dropped).
static void dapo_decides_on_accuracy_not_on_the_overlong_shaped_reward(void) {
    skpo_rec recs[32], m;
    unsigned char keep[32];
    size_t n = 0;
    char uid[16];
    for (int i = 0; i < 4; i++) {
        snprintf(uid, sizeof uid, "a%d", i);
        mk(&recs[n], SKPO_KIND_FULL, uid, "a", NULL, i < 2 ? 1 : 0.5, 8);
        skpo_rec_set_bool(&recs[n++], F_CORRECT, true);
        snprintf(uid, sizeof uid, "b%d", i);
        mk(&recs[n++], SKPO_KIND_FULL, uid, "b", NULL, i < 1 ? 0.75 : -1, 4);
        snprintf(uid, sizeof uid, "c%d", i);
        mk(&recs[n], SKPO_KIND_FULL, uid, "c", NULL, -1, 4);
        skpo_rec_del(&recs[n++], F_CORRECT);
    }
    skpo_adv_opts o;
    skpo_adv_opts_default(&o);
    o.mode = SKPO_ADV_DAPO;
    o.group = 4;
    skpo_tracker *t = adv_run(recs, n, &o, keep, &m);
    for (size_t i = 0; i < n; i++) CHECK_MSG(keep[i] == (i % 3 == 1), "record %zu keep %d", i, keep[i]);
    CHECK(fget(&m, "dropped_groups") == 2);
    adv_done(recs, n, &m, t);
}

// PRIME by hand (beta 1, both coefficients 1, no batch norm, k = 2):
//   response a (correct): prm - ref = 0.2, 0.4, 0.6 -> r = 0.2, 0.4, 0 (the last token's is 0)
//   response b (wrong):   prm - ref = -0.3, 0.5    -> r = -0.3, 0
//   means 0.2 and -0.15, group sum 0.05: p = 2 r - 0.05 = a 0.35, 0.75, -0.05; b -0.65, -0.05
//   outcomes 2 acc - 1 = +1 / -1 on the last token: x = a 0.35, 0.75, 0.95; b -0.65, -1.05
//   returns a 2.05, 1.70, 0.95; b -1.70, -1.05; mean 0.39, unbiased var 2.80675
//   whitened: a 0.990846, 0.781933, 0.334261; b -1.247511, -0.859529
static void prime_combines_leave_one_out_process_and_outcome_returns(void) {
    float pa[3] = {-1.0f, -1.0f, -1.0f}, ra[3] = {-1.2f, -1.4f, -1.6f}, pb[2] = {-2.0f, -1.0f}, rb[2] = {-1.7f, -1.5f};
    const float *prm[2] = {pa, pb}, *ref[2] = {ra, rb};
    size_t len[2] = {3, 2};
    double acc[2] = {1, 0};
    float aa[3], ab[2], *adv[2] = {aa, ab};
    skpo_prime_opts o = {.beta = 1, .coef_process = 1, .coef_outcome = 1, .batch_norm = 0};
    skpo_err e = {{0}};
    CHECK_MSG(skpo_adv_prime(prm, ref, len, acc, 2, 2, &o, adv, &e) == SKPO_OK, "%s", e.msg);
    static const double want[5] = {0.990846139, 0.781932797, 0.334261348, -1.247511103, -0.859529181};
    for (int t = 0; t < 3; t++) CHECK_NEAR(aa[t], want[t], 2e-6);
    for (int t = 0; t < 2; t++) CHECK_NEAR(ab[t], want[3 + t], 2e-6);
    // batch norm divides the process rewards by the largest |return| (0.6 here, response
    // a's first token): with the outcome term off the whitened result cannot tell
    float na[3], nb[2], *adv2[2] = {na, nb};
    o.coef_outcome = 0;
    CHECK(skpo_adv_prime(prm, ref, len, acc, 2, 2, &o, adv, &e) == SKPO_OK);
    o.batch_norm = 1;
    CHECK(skpo_adv_prime(prm, ref, len, acc, 2, 2, &o, adv2, &e) == SKPO_OK);
    for (int t = 0; t < 3; t++) CHECK_NEAR(na[t], aa[t], 1e-5);
    // ... but it weighs them against the outcomes: r / 0.6 = 0.333, 0.667 makes a's
    // first return 1/0.6 + 1 - ... ; checked against PyTorch in prime_matches_pytorch
    o.coef_outcome = 1;
    CHECK(skpo_adv_prime(prm, ref, len, acc, 2, 2, &o, adv2, &e) == SKPO_OK);
    CHECK(fabs(na[0] - want[0]) > 1e-3);
    acc[1] = 0.5;
    CHECK(skpo_adv_prime(prm, ref, len, acc, 2, 2, &o, adv, &e) == SKPO_ERANGE);
    acc[1] = 0;
    CHECK(skpo_adv_prime(prm, ref, len, acc, 2, 1, &o, adv, &e) == SKPO_EFORMAT);
}

// PyTorch reference (tests/fixtures/adv/prime.json from tests/ref/make_prime_fixtures.py:
// verl recipe/prime compute_rloo_advantage_return and the PRM's token scores, written out).
static void prime_matches_pytorch(void) {
    json_error_t je;
    json_t *root = json_load_file("tests/fixtures/adv/prime.json", 0, &je);
    CHECK_MSG(root != NULL, "%s", je.text);
    if (!root) return;
    json_t *cases = json_object_get(root, "cases");
    CHECK(json_array_size(cases) >= 3);
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *cs = json_array_get(cases, c), *seqs = json_object_get(cs, "seqs");
        size_t n = json_array_size(seqs), k = (size_t)json_integer_value(json_object_get(cs, "k"));
        skpo_prime_opts o = {.beta = json_number_value(json_object_get(cs, "beta")),
                             .coef_process = json_number_value(json_object_get(cs, "coef_process")),
                             .coef_outcome = json_number_value(json_object_get(cs, "coef_outcome")),
                             .batch_norm = (int)json_integer_value(json_object_get(cs, "batch_norm"))};
        float **prm = calloc(n, sizeof *prm), **ref = calloc(n, sizeof *ref), **adv = calloc(n, sizeof *adv);
        size_t *len = calloc(n, sizeof *len);
        double *acc = calloc(n, sizeof *acc);
        for (size_t i = 0; i < n; i++) {
            json_t *s = json_array_get(seqs, i), *jp = json_object_get(s, "prm"), *jr = json_object_get(s, "ref");
            len[i] = json_array_size(jp);
            prm[i] = calloc(len[i], sizeof **prm), ref[i] = calloc(len[i], sizeof **ref), adv[i] = calloc(len[i], sizeof **adv);
            for (size_t t = 0; t < len[i]; t++) {
                prm[i][t] = (float)json_number_value(json_array_get(jp, t));
                ref[i][t] = (float)json_number_value(json_array_get(jr, t));
            }
            acc[i] = json_number_value(json_object_get(s, "acc"));
        }
        skpo_err e = {{0}};
        CHECK_MSG(skpo_adv_prime((const float *const *)prm, (const float *const *)ref, len, acc, n, k, &o, adv, &e) ==
                      SKPO_OK, "%s", e.msg);
        for (size_t i = 0; i < n; i++) {
            json_t *w = json_object_get(json_array_get(seqs, i), "adv");
            for (size_t t = 0; t < len[i]; t++) {
                double want = json_number_value(json_array_get(w, t));
                CHECK_MSG(fabs(adv[i][t] - want) <= 1e-5 * (1 + fabs(want)), "%s seq %zu token %zu: %.9g want %.9g",
                          json_string_value(json_object_get(cs, "name")), i, t, adv[i][t], want);
            }
            free(prm[i]), free(ref[i]), free(adv[i]);
        }
        free(prm), free(ref), free(adv), free(len), free(acc);
    }
    json_decref(root);
}

// A whole prime step: two prompts of 2 responses, records interleaved; adv_tok is written
// on every full record (one per token), adv is its mean, and the outcome drives the sign.
static void prime_step_writes_token_advantages_on_every_response(void) {
    skpo_rec recs[4], m;
    unsigned char keep[4];
    skpo_err err = {{0}};
    static const char *pid[4] = {"p1", "p2", "p1", "p2"};
    for (int i = 0; i < 4; i++) {
        char uid[16];
        snprintf(uid, sizeof uid, "f%d", i);
        mk(&recs[i], SKPO_KIND_FULL, uid, pid[i], NULL, i < 2 ? 1 : -1, 3 + i);
        float lp[8], rf[8];
        for (int t = 0; t < 8; t++) lp[t] = -1.0f - 0.1f * (float)(t + i), rf[t] = -1.2f;
        skpo_rec_set_f32s(&recs[i], F_PRM_LOGP, lp, (size_t)(3 + i));
        skpo_rec_set_f32s(&recs[i], F_REF_LOGP, rf, (size_t)(3 + i));
    }
    skpo_adv_opts o;
    skpo_adv_opts_default(&o);
    CHECK(skpo_adv_mode_parse("prime", &o.mode) == 0 && o.mode == SKPO_ADV_PRIME);
    o.group = 2;
    skpo_tracker *t = skpo_tracker_new(NULL);
    skpo_rec_init(&m);
    CHECK_MSG(skpo_adv_step(recs, 4, &o, t, keep, &m, &err) == SKPO_OK, "%s", err.msg);
    for (int i = 0; i < 4; i++) {
        size_t na = 0;
        const float *a = skpo_rec_f32s(&recs[i], F_ADV_TOK, &na);
        CHECK(a && na == (size_t)(3 + i) && keep[i]);
        double mean = 0;
        for (size_t j = 0; a && j < na; j++) mean += a[j];
        CHECK_NEAR(fget(&recs[i], F_ADV), mean / (double)na, 1e-6);
        CHECK(i < 2 ? a[0] > 0 : a[0] < 0);   // correct responses lead, wrong ones trail
    }
    skpo_rec_free(&m);
    // without the PRM's log-probs the step names the record
    skpo_rec_del(&recs[3], F_PRM_LOGP);
    skpo_rec_init(&m);
    CHECK(skpo_adv_step(recs, 4, &o, t, keep, &m, &err) == SKPO_EFORMAT);
    CHECK(strstr(err.msg, "'f3'") != NULL);
    skpo_rec_free(&m);
    for (int i = 0; i < 4; i++) skpo_rec_free(&recs[i]);
    skpo_tracker_free(t);
}

static void spo_takes_one_response_per_prompt_with_the_tracker_baseline(void) {
    skpo_rec recs[2], m;
    unsigned char keep[2];
    skpo_err err = {{0}};
    mk(&recs[0], SKPO_KIND_FULL, "x", "a", NULL, -1, 8);
    mk(&recs[1], SKPO_KIND_FULL, "y", "b", NULL, 1, 8);
    skpo_adv_opts o;
    skpo_adv_opts_default(&o);
    o.mode = SKPO_ADV_SPO;
    skpo_tracker *t = skpo_tracker_new(NULL);
    skpo_tracker_update(t, "a", -0.5, 8, 0.96, NULL, &err);
    skpo_rec_init(&m);
    CHECK(skpo_adv_step(recs, 2, &o, t, keep, &m, &err) == SKPO_OK);
    // raw: a -1 - (-0.5) = -0.5, b 1 - 0 = 1 -> normalised -+0.7071
    CHECK_NEAR(fget(&recs[0], F_ADV), -1 / sqrt(2.0), 1e-7);
    CHECK_NEAR(fget(&recs[1], F_ADV), 1 / sqrt(2.0), 1e-7);
    CHECK(skpo_tracker_value(t, "b") == 1);
    CHECK_NEAR(skpo_tracker_value(t, "a"), -0.5 + (-0.5) / 1.96, 1e-12);
    skpo_rec_free(&m);
    for (int i = 0; i < 2; i++) skpo_rec_free(&recs[i]);
    mk(&recs[0], SKPO_KIND_FULL, "x", "a", NULL, -1, 8);
    mk(&recs[1], SKPO_KIND_FULL, "y", "a", NULL, 1, 8);
    skpo_rec_init(&m);
    CHECK(skpo_adv_step(recs, 2, &o, t, keep, &m, &err) == SKPO_EFORMAT); // two responses of one prompt
    skpo_rec_free(&m);
    for (int i = 0; i < 2; i++) skpo_rec_free(&recs[i]);
    skpo_tracker_free(t);
}

// D with a real (tiny, random) checkpoint: stored log-probs offset from the
// model's own by known amounts give exactly the mean absolute offset, whatever
// the batching; unscorable segments give 0.
static void model_divergence_is_mean_abs_logprob_gap(void) {
    const char *top = getenv("SKPO_TOP");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/model/qwen2_untied", top ? top : ".");
    skpo_err err = {{0}};
    skpo_model *m = NULL;
    skpo_model_opts mo = {SKPO_DEV_CPU, 0, 0};
    CHECK_MSG(skpo_model_load(dir, &mo, &m, &err) == SKPO_OK, "%s", err.msg);
    if (!m) return;
    int32_t ids1[] = {1, 2, 3, 10, 11, 12, 13}, ids2[] = {5, 6, 40, 41, 42};
    skpo_seq seqs[2] = {{ids1, 7, 3}, {ids2, 5, 2}};
    float lp[7];
    CHECK(skpo_model_logprobs(m, seqs, 2, 1.0f, lp, NULL, &err) == SKPO_OK);
    float s1[4], s2[3];
    for (int t = 0; t < 4; t++) s1[t] = lp[t] + (t % 2 ? -0.3f : 0.1f);
    for (int t = 0; t < 3; t++) s2[t] = lp[4 + t] + 0.5f;
    skpo_tracker_seg segs[3] = {{ids1 + 3, 4, s1, ids1, 3}, {ids2 + 2, 3, s2, ids2, 2}, {ids2 + 2, 3, s2, NULL, 0}};
    double D[3] = {9, 9, 9}, D1[3] = {9, 9, 9};
    skpo_adv_model_ctx c = {m, 1.0f, 0};
    CHECK(skpo_adv_model_divergence(&c, segs, 3, D, &err) == SKPO_OK);
    c.max_tokens = 1; // one sequence per batch
    CHECK(skpo_adv_model_divergence(&c, segs, 3, D1, &err) == SKPO_OK);
    CHECK_NEAR(D[0], 0.2, 1e-6);
    CHECK_NEAR(D[1], 0.5, 1e-6);
    CHECK(D[2] == 0.0);
    for (int i = 0; i < 3; i++) CHECK_NEAR(D1[i], D[i], 1e-6);
    skpo_model_free(m);
}

int main(void) {
    RUN(grpo_one_correct_of_eight_matches_spec);
    RUN(grpo_four_correct_of_eight_matches_spec);
    RUN(degenerate_group_gets_zero_advantage);
    RUN(drgrpo_subtracts_the_mean_only);
    RUN(batch_norm_uses_unbiased_std_and_zeros_a_single_sample);
    RUN(skpo_step_groups_records_in_any_order);
    RUN(skpo_second_visit_uses_the_pre_update_baseline);
    RUN(up_warmup_zeroes_first_visits_and_keeps_them_out_of_the_batch_norm);
    RUN(reward_up_self_takes_the_outcome_of_the_own_completion);
    RUN(divergence_sets_rho_on_revisits_only);
    RUN(norm_down_and_phase_weights_follow_the_options);
    RUN(missing_downstream_record_is_an_error_naming_the_group);
    RUN(nan_reward_is_an_error_naming_the_record);
    RUN(missing_reward_is_an_error);
    RUN(down_record_without_its_up_record_is_an_error);
    RUN(dapo_drops_groups_whose_rewards_are_all_equal);
    RUN(dapo_decides_on_accuracy_not_on_the_overlong_shaped_reward);
    RUN(lq_observes_the_mean_response_length_of_the_layout_capped_at_max_tokens);
    RUN(spo_takes_one_response_per_prompt_with_the_tracker_baseline);
    RUN(prime_combines_leave_one_out_process_and_outcome_returns);
    RUN(prime_matches_pytorch);
    RUN(prime_step_writes_token_advantages_on_every_response);
    RUN(model_divergence_is_mean_abs_logprob_gap);
    return TEST_SUMMARY();
}
