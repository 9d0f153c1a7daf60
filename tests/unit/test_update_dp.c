// test_update_dp.c - data parallel training over core/train/comm: run under
// `mpirun -np N` (tests/sh/t_update.sh does, N = 2), every rank also computes
// the single-process step locally and compares. Run alone it skips.
// Only rank 0 prints PASS/FAIL lines; every rank's exit status counts.
#include "harness.h"
#include "update_bigram.h"

static skpo_comm *world, *self;

static int step_with(skpo_comm *c, bigram *m, skpo_rec *r, size_t n, skpo_update_opts *o, skpo_update_metrics *met,
                     skpo_err *e) {
    skpo_batch *b = NULL;
    SKPO_ASSERT(skpo_batch_new(r, n, o, c->rank, c->size, &b, e) == SKPO_OK);
    skpo_adamw_cfg ac;
    skpo_adamw_cfg_default(&ac);
    ac.lr = 1e-2;
    ac.warmup_steps = 0;
    skpo_policy pol = bg_policy(m);
    skpo_optim *opt = skpo_optim_new(&ac, m->p, 2);
    skpo_status st = skpo_update_step(&pol, opt, c, b, o, met, e);
    skpo_optim_free(opt);
    skpo_batch_free(b);
    return st;
}

static void data_parallel_step_equals_single_process_step(void) {
    bigram ref, a, b;
    bg_init(&ref, 21);
    bg_init(&a, 22);
    bg_init(&b, 22);
    size_t n;
    skpo_rec *r = bg_records(&ref, 7, 4, 0.2, 31, &n);   // 7 prompts: uneven over ranks
    skpo_update_opts o;
    skpo_update_opts_default(&o);
    o.minibatch = 3;        // 3 mini-batches; the last one has 1 prompt, so a rank has none
    o.micro_tokens = 12;
    o.old_logp = SKPO_OLD_RECOMPUTE;
    skpo_err e = {0};
    skpo_update_metrics ma[3], mb[3];
    CHECK_MSG(step_with(self, &a, r, n, &o, ma, &e) == SKPO_OK, "%s", e.msg);
    CHECK_MSG(step_with(world, &b, r, n, &o, mb, &e) == SKPO_OK, "%s", e.msg);
    double worst = 0;
    for (int i = 0; i < BG_V * BG_V; i++) worst = fmax(worst, fabs(a.W[i] - b.W[i]));
    for (int i = 0; i < BG_V; i++) worst = fmax(worst, fabs(a.b[i] - b.b[i]));
    CHECK_MSG(worst <= 1e-6, "max weight difference %g", worst);
    for (int k = 0; k < 3; k++) {
        CHECK_NEAR(ma[k].loss, mb[k].loss, 1e-6);
        CHECK_NEAR(ma[k].grad_norm, mb[k].grad_norm, 1e-6 * ma[k].grad_norm);
        CHECK(ma[k].tokens == mb[k].tokens && ma[k].seqs[1] == mb[k].seqs[1]);
    }
    // All ranks hold the same bits.
    float w0[BG_V * BG_V];
    memcpy(w0, b.W, sizeof w0);
    SKPO_ASSERT(skpo_comm_bcast(world, w0, sizeof w0, 0, &e) == SKPO_OK);
    CHECK(memcmp(w0, b.W, sizeof w0) == 0);
    bg_records_free(r, n);
}

// Gradient of mini-batch k over comm c into gW/gb; returns the loss.
static double grad_over(skpo_comm *c, bigram *m, skpo_rec *r, size_t n, const skpo_update_opts *o, int k, float *gW,
                        float *gb, skpo_update_metrics *met) {
    skpo_batch *b = NULL;
    skpo_err e = {0};
    SKPO_ASSERT(skpo_batch_new(r, n, o, c->rank, c->size, &b, &e) == SKPO_OK);
    skpo_policy pol = bg_policy(m);
    CHECK_MSG(skpo_update_grad(&pol, c, b, k, o, met, &e) == SKPO_OK, "%s", e.msg);
    memcpy(gW, m->gW, sizeof m->gW);
    memcpy(gb, m->gb, sizeof m->gb);
    skpo_batch_free(b);
    return met->loss;
}

// 2 ranks vs 1 process: the same mini-batch loss and gradient (1e-6 relative)
// for every loss form, aggregation and mismatch correction, up/down and full records.
static void every_loss_form_and_aggregation_gives_the_same_gradient_on_two_ranks(void) {
    bigram ref, m;
    bg_init(&ref, 51);
    bg_init(&m, 52);
    size_t n;
    skpo_rec *r = bg_records(&ref, 7, 3, 0.3, 53, &n);
    int combos = 0;
    for (int full = 0; full < 2; full++) {
        if (full)
            for (size_t i = 0; i < n; i++) skpo_rec_set_str(&r[i], F_KIND, SKPO_KIND_FULL);
        for (int form = 0; form < 4; form++)
            for (int agg = 0; agg < 3; agg++)
                for (int mm = 0; mm < 5; mm++) {
                    skpo_update_opts o;
                    bg_combo_opts(&o, form, agg, mm);
                    o.minibatch = 5;   // mini-batch 1 has 2 prompts: one per rank
                    o.micro_tokens = 9;
                    for (int k = 0; k < 2; k++) {
                        float a[BG_V * BG_V], ab[BG_V], b[BG_V * BG_V], bb[BG_V];
                        skpo_update_metrics ma, mb;
                        double la = grad_over(self, &m, r, n, &o, k, a, ab, &ma);
                        double lb = grad_over(world, &m, r, n, &o, k, b, bb, &mb);
                        double dw = bg_rel_diff(a, b, BG_V * BG_V), db = bg_rel_diff(ab, bb, BG_V);
                        CHECK_MSG(dw <= 1e-6 && db <= 1e-6 && fabs(la - lb) <= 1e-6 * (fabs(la) + 1e-12),
                                  "full %d form %d agg %d mismatch %d mb %d: grad %g bias %g loss %.9g vs %.9g", full, form,
                                  agg, mm, k, dw, db, la, lb);
                        CHECK(ma.mismatch.masked == mb.mismatch.masked && ma.mismatch.max_abs_dlogp == mb.mismatch.max_abs_dlogp);
                    }
                    combos++;
                }
    }
    CHECK(combos == 2 * 4 * 3 * 5);
    bg_records_free(r, n);
}

static void a_bad_record_on_one_rank_stops_every_rank_with_its_name(void) {
    bigram ref, m;
    bg_init(&ref, 23);
    bg_init(&m, 24);
    size_t n;
    skpo_rec *r = bg_records(&ref, 4, 1, 0.1, 41, &n);
    // Make p0 the heaviest prompt and p1 the second: the plan gives p0 to rank 0
    // and p1 to rank 1, so the failure below happens on rank 1 only.
    for (int q = 0; q < 2; q++) {
        int32_t ids[60];
        float l[60];
        int len = q ? 40 : 60;
        for (int t = 0; t < len; t++) ids[t] = t % BG_V, l[t] = -2.0f;
        skpo_rec_set_i32s(&r[2 * q], F_TOKENS, ids, (size_t)len);
        skpo_rec_set_f32s(&r[2 * q], F_LOGP, l, (size_t)len);
    }
    float lp[16];
    size_t nl;
    const float *src = skpo_rec_f32s(&r[3], F_LOGP, &nl);
    memcpy(lp, src, nl * sizeof *lp);
    lp[0] = INFINITY;
    skpo_rec_set_f32s(&r[3], F_LOGP, lp, nl);
    skpo_update_opts o;
    skpo_update_opts_default(&o);
    o.step = 3;
    skpo_err e = {0};
    CHECK(step_with(world, &m, r, n, &o, NULL, &e) == SKPO_ENUMERIC);
    CHECK_MSG(strstr(e.msg, "'p1-d1'") && strstr(e.msg, "step 3"), "rank %d: %s", world->rank, e.msg);
    bg_release(&m);
    bg_records_free(r, n);
}

int main(void) {
    skpo_err e = {0};
    if (skpo_comm_init(SKPO_COMM_AUTO, &world, &e) || skpo_comm_init(SKPO_COMM_LOCAL, &self, &e)) {
        fprintf(stderr, "test_update_dp: %s\n", e.msg);
        return 1;
    }
    if (world->rank != 0 && !freopen("/dev/null", "w", stdout)) return 1;
    if (world->size == 1) {
        printf("SKIP data_parallel: not started by mpirun (tests/sh/t_update.sh runs it with -np 2)\n");
    } else {
        RUN(data_parallel_step_equals_single_process_step);
        RUN(every_loss_form_and_aggregation_gives_the_same_gradient_on_two_ranks);
        RUN(a_bad_record_on_one_rank_stops_every_rank_with_its_name);
    }
    int rc = TEST_SUMMARY();
    skpo_comm_free(self);
    skpo_comm_free(world);
    return rc;
}
