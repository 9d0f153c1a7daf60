// test_update.c - the training step (core/train/update.c) on an exact bigram policy:
// micro-batch accumulation, finite differences of the whole objective,
// mini-batch grouping, resume, non-finite guard, recompute-old, token counting.
#include "harness.h"
#include "update_bigram.h"

#include <unistd.h>

static skpo_comm *local_comm(void) {
    skpo_comm *c = NULL;
    skpo_err e = {0};
    SKPO_ASSERT(skpo_comm_init(SKPO_COMM_LOCAL, &c, &e) == SKPO_OK);
    return c;
}

// Gradient of mini-batch 0 for given options into g (2 param arrays).
static double grad_of(bigram *m, skpo_rec *r, size_t n, const skpo_update_opts *o, float *gW, float *gb) {
    skpo_comm *c = local_comm();
    skpo_policy pol = bg_policy(m);
    skpo_batch *b = NULL;
    skpo_err e = {0};
    SKPO_ASSERT(skpo_batch_new(r, n, o, 0, 1, &b, &e) == SKPO_OK);
    skpo_update_metrics met;
    skpo_status st = skpo_update_grad(&pol, c, b, 0, o, &met, &e);
    CHECK_MSG(st == SKPO_OK, "%s", e.msg);
    if (gW) memcpy(gW, m->gW, sizeof m->gW);
    if (gb) memcpy(gb, m->gb, sizeof m->gb);
    skpo_batch_free(b);
    skpo_comm_free(c);
    return met.loss;
}

static void micro_batches_accumulate_to_the_whole_minibatch_gradient(void) {
    bigram m;
    bg_init(&m, 1);
    size_t n;
    skpo_rec *r = bg_records(&m, 8, 4, 0.3, 11, &n);
    skpo_update_opts o;
    skpo_update_opts_default(&o);
    float a[BG_V * BG_V], ab[BG_V], b[BG_V * BG_V], bb[BG_V];
    for (int agg = 0; agg < 3; agg++) {
        for (int p = 0; p < SKPO_NPHASE; p++) o.loss.agg[p] = agg;
        if (agg == 0) o.loss.agg[SKPO_PHASE_UP] = SKPO_AGG_SEQ_MEAN_TOKEN_MEAN;   // mixed per phase too
        o.micro_tokens = 1 << 20;
        double la = grad_of(&m, r, n, &o, a, ab);
        o.micro_tokens = 7;   // about one record per micro-batch
        double lb = grad_of(&m, r, n, &o, b, bb);
        CHECK_NEAR(la, lb, 1e-9);
        double worst = 0, scale = 0;
        for (int i = 0; i < BG_V * BG_V; i++) {
            worst = fmax(worst, fabs(a[i] - b[i]));
            scale = fmax(scale, fabs(a[i]));
        }
        CHECK_MSG(worst <= 1e-6 * scale && scale > 0, "agg %d: max diff %g of %g", agg, worst, scale);
    }
    bg_records_free(r, n);
}

// Every loss form (per phase, ppo/cispo, also on `full` records), aggregation,
// mismatch correction and pi_old source: the mini-batch loss and gradient do not
// depend on how its records are cut into micro-batches.
static void every_loss_form_and_aggregation_is_invariant_to_the_micro_batch_split(void) {
    bigram m, ref;
    bg_init(&m, 31);
    bg_init(&ref, 32);   // rollout log-probs from another policy: ratios far from 1, clipping and masking happen
    size_t n;
    skpo_rec *r = bg_records(&ref, 6, 3, 0.3, 33, &n);
    const long micro[] = {1, 5, 7, 13, 1 << 20};
    int combos = 0, masked_seen = 0, clipped_seen = 0;
    for (int full = 0; full < 2; full++) {
        if (full)
            for (size_t i = 0; i < n; i++) skpo_rec_set_str(&r[i], F_KIND, SKPO_KIND_FULL);
        for (int form = 0; form < 4; form++)
            for (int agg = 0; agg < 3; agg++)
                for (int mm = 0; mm < 5; mm++)
                    for (int src = 0; src < 2; src++) {
                        skpo_update_opts o;
                        bg_combo_opts(&o, form, agg, mm);
                        o.minibatch = 4;
                        o.old_logp = src ? SKPO_OLD_ROLLOUT : SKPO_OLD_RECOMPUTE;
                        float g0[BG_V * BG_V], b0[BG_V], g[BG_V * BG_V], gb[BG_V];
                        skpo_update_metrics m0, m1;
                        double l0 = 0;
                        for (int k = 0; k < 5; k++) {
                            o.micro_tokens = micro[k];
                            skpo_comm *c = local_comm();
                            skpo_policy pol = bg_policy(&m);
                            skpo_batch *b = NULL;
                            skpo_err e = {0};
                            SKPO_ASSERT(skpo_batch_new(r, n, &o, 0, 1, &b, &e) == SKPO_OK);
                            CHECK_MSG(skpo_update_grad(&pol, c, b, 0, &o, k ? &m1 : &m0, &e) == SKPO_OK, "%s", e.msg);
                            skpo_batch_free(b);
                            skpo_comm_free(c);
                            if (k == 0) {
                                memcpy(g0, m.gW, sizeof g0), memcpy(b0, m.gb, sizeof b0);
                                l0 = m0.loss;
                                continue;
                            }
                            memcpy(g, m.gW, sizeof g), memcpy(gb, m.gb, sizeof gb);
                            double dw = bg_rel_diff(g0, g, BG_V * BG_V), db = bg_rel_diff(b0, gb, BG_V);
                            CHECK_MSG(dw <= 1e-6 && db <= 1e-6 && fabs(m1.loss - l0) <= 1e-6 * (fabs(l0) + 1e-12),
                                      "full %d form %d agg %d mismatch %d src %d micro %ld: grad %g bias %g loss %.9g vs %.9g",
                                      full, form, agg, mm, src, micro[k], dw, db, m1.loss, l0);
                            CHECK(m1.mismatch.masked == m0.mismatch.masked && m1.tokens == m0.tokens);
                        }
                        masked_seen += m0.mismatch.masked > 0;
                        for (int p = 0; p < SKPO_NPHASE; p++) clipped_seen += m0.phase[p].clip_high + m0.phase[p].clip_low > 0;
                        combos++;
                    }
    }
    CHECK(combos == 2 * 4 * 3 * 5 * 2);
    CHECK(masked_seen > 0 && clipped_seen > 0);   // the cases do exercise masking and clipping
    bg_records_free(r, n);
}

static void masked_tokens_leave_the_token_mean_normaliser(void) {
    bigram m, ref;
    bg_init(&m, 41);
    bg_init(&ref, 42);
    size_t n;
    skpo_rec *r = bg_records(&ref, 4, 3, 0.3, 43, &n);
    skpo_update_opts o;
    skpo_update_opts_default(&o);
    o.old_logp = SKPO_OLD_RECOMPUTE;
    skpo_mismatch_cfg_default(&o.mismatch, SKPO_MISMATCH_MASK_TOKEN);
    o.mismatch.high = 1.1;
    skpo_comm *c = local_comm();
    skpo_policy pol = bg_policy(&m);
    skpo_batch *b = NULL;
    skpo_err e = {0};
    CHECK(skpo_batch_new(r, n, &o, 0, 1, &b, &e) == SKPO_OK);
    skpo_update_metrics met;
    CHECK(skpo_update_grad(&pol, c, b, 0, &o, &met, &e) == SKPO_OK);
    double all = 0;
    for (size_t i = 0; i < n; i++) {
        size_t nt;
        skpo_rec_i32s(&r[i], F_TOKENS, &nt);
        all += (double)nt;
    }
    CHECK(met.mismatch.tokens == all && met.mismatch.masked > 0);
    CHECK_NEAR(met.tokens, all - met.mismatch.masked, 1e-9);   // trained tokens = kept tokens
    CHECK(met.mismatch.max_abs_dlogp > 0 && met.mismatch.k3 > 0);
    skpo_batch_free(b);
    skpo_comm_free(c);
    bg_records_free(r, n);
}

static void gradient_matches_finite_differences_of_the_objective(void) {
    bigram m;
    bg_init(&m, 2);
    size_t n;
    skpo_rec *r = bg_records(&m, 6, 3, 0.04, 5, &n);   // ratios inside every clip range
    skpo_rec_set_float(&r[1], F_WEIGHT, 0.25);          // uneven weights on purpose
    skpo_update_opts o;
    skpo_update_opts_default(&o);
    // CISPO's stop-gradient weight makes its gradient differ from the derivative
    // of its loss value on purpose, so the down phase uses PPO here.
    o.loss.phase[SKPO_PHASE_DOWN] = (skpo_phase_loss){SKPO_LOSS_PPO, 0.2, 0.28, 3.0};
    o.old_logp = SKPO_OLD_ROLLOUT;   // pi_old fixed: a recomputed one would move with the perturbed weights
    o.loss.kl_coef = 0.05;
    o.loss.entropy_coef = 0.02;
    for (size_t i = 0; i < n; i++) {   // ref_logp for the KL term: the behaviour logp shifted
        size_t nl;
        const float *lp = skpo_rec_f32s(&r[i], F_LOGP, &nl);
        float ref[16];
        for (size_t t = 0; t < nl; t++) ref[t] = lp[t] - 0.1f * (float)(t % 3);
        skpo_rec_set_f32s(&r[i], F_REF_LOGP, ref, nl);
    }
    o.micro_tokens = 10;
    float gW[BG_V * BG_V], gb[BG_V];
    grad_of(&m, r, n, &o, gW, gb);
    int checked = 0;
    for (int i = 0; i < BG_V * BG_V; i += 7) {
        float keep = m.W[i];
        const float h = 1e-2f;
        m.W[i] = keep + h;
        double lp = grad_of(&m, r, n, &o, NULL, NULL);
        m.W[i] = keep - h;
        double lm = grad_of(&m, r, n, &o, NULL, NULL);
        m.W[i] = keep;
        double fd = (lp - lm) / (2.0 * h);
        CHECK_MSG(fabs(fd - gW[i]) <= 2e-3 * fabs(gW[i]) + 2e-5, "W[%d]: fd %.7g analytic %.7g", i, fd, gW[i]);
        checked += gW[i] != 0;
    }
    CHECK(checked > 10);
    bg_records_free(r, n);
}

static void each_minibatch_holds_whole_prompts(void) {
    bigram m;
    bg_init(&m, 3);
    size_t n;
    skpo_rec *r = bg_records(&m, 128, 8, 0.1, 3, &n);
    skpo_update_opts o;
    skpo_update_opts_default(&o);
    skpo_batch *b = NULL;
    skpo_err e = {0};
    CHECK(skpo_batch_new(r, n, &o, 0, 1, &b, &e) == SKPO_OK);
    CHECK(skpo_batch_minibatches(b) == 4 && skpo_batch_prompts(b) == 128 && skpo_batch_records(b) == 128 * 9);
    skpo_adamw_cfg ac;
    skpo_adamw_cfg_default(&ac);
    skpo_policy pol = bg_policy(&m);
    skpo_optim *opt = skpo_optim_new(&ac, m.p, 2);
    skpo_comm *c = local_comm();
    skpo_update_metrics met[4];
    CHECK(skpo_update_step(&pol, opt, c, b, &o, met, &e) == SKPO_OK);
    for (int k = 0; k < 4; k++) {
        CHECK(met[k].prompts == 32);
        CHECK(met[k].seqs[SKPO_PHASE_UP] == 32 && met[k].seqs[SKPO_PHASE_DOWN] == 256);
        CHECK_NEAR(met[k].lr, 1e-7, 1e-20);   // step 1 of a 10-step warmup, same for all 4
    }
    CHECK(opt->t == 4);
    // The metrics record obeys the record schema (readers validate it).
    skpo_rec mr;
    skpo_rec_init(&mr);
    skpo_update_metrics_rec(&met[0], 1, &mr);
    CHECK_MSG(skpo_rec_validate(&mr, &e) == SKPO_OK, "%s", e.msg);
    double v;
    CHECK(skpo_rec_float(&mr, "n_tokens", &v) && v == met[0].tokens && skpo_rec_float(&mr, "clip_high_down", &v));
    skpo_rec_free(&mr);
    skpo_optim_free(opt);
    skpo_comm_free(c);
    skpo_batch_free(b);
    bg_records_free(r, n);
}

// One training step of the records of `seed` (2 mini-batches) at `step`.
static void one_step(bigram *m, skpo_optim *opt, int64_t step, unsigned seed) {
    bigram ref;
    bg_init(&ref, 77);   // records from a fixed other policy: ratios != 1
    size_t n;
    skpo_rec *r = bg_records(&ref, 6, 3, 0.2, seed, &n);
    skpo_update_opts o;
    skpo_update_opts_default(&o);
    o.minibatch = 3;
    o.step = step;
    skpo_batch *b = NULL;
    skpo_err e = {0};
    SKPO_ASSERT(skpo_batch_new(r, n, &o, 0, 1, &b, &e) == SKPO_OK);
    skpo_policy pol = bg_policy(m);
    skpo_comm *c = local_comm();
    CHECK_MSG(skpo_update_step(&pol, opt, c, b, &o, NULL, &e) == SKPO_OK, "%s", e.msg);
    skpo_comm_free(c);
    skpo_batch_free(b);
    bg_records_free(r, n);
}

static void resumed_run_is_bit_identical_to_uninterrupted_run(void) {
    skpo_adamw_cfg ac;
    skpo_adamw_cfg_default(&ac);
    ac.lr = 1e-2;
    ac.warmup_steps = 3;
    bigram a, b;
    bg_init(&a, 9);
    bg_init(&b, 9);
    skpo_optim *oa = skpo_optim_new(&ac, a.p, 2), *ob = skpo_optim_new(&ac, b.p, 2);
    one_step(&a, oa, 1, 100);
    one_step(&a, oa, 2, 200);
    one_step(&b, ob, 1, 100);
    // "Checkpoint": optimizer state file + float32 weights; resume into fresh objects.
    char dir[] = "/tmp/skpo-resume-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char *path = skpo_path_join(dir, "optim.safetensors");
    skpo_err e = {0};
    CHECK(skpo_optim_save(ob, b.p, 0, path, &e) == SKPO_OK);
    bigram c;
    bg_init(&c, 1234);
    memcpy(c.W, b.W, sizeof c.W);
    memcpy(c.b, b.b, sizeof c.b);
    skpo_optim *oc = skpo_optim_new(&ac, c.p, 2);
    int used;
    CHECK(skpo_optim_load(oc, c.p, SKPO_DT_F32, path, &used, &e) == SKPO_OK);
    one_step(&c, oc, 2, 200);
    CHECK(memcmp(a.W, c.W, sizeof a.W) == 0 && memcmp(a.b, c.b, sizeof a.b) == 0);
    CHECK(memcmp(a.W, b.W, sizeof a.W) != 0);   // the second step did change something
    skpo_optim_free(oa), skpo_optim_free(ob), skpo_optim_free(oc);
    skpo_rm_rf(dir, &e);
    free(path);
}

static void nonfinite_logprob_stops_naming_step_minibatch_and_record(void) {
    bigram m;
    bg_init(&m, 4);
    size_t n;
    skpo_rec *r = bg_records(&m, 4, 2, 0.1, 8, &n);
    size_t nl;
    float lp[16];
    const float *src = skpo_rec_f32s(&r[4], F_LOGP, &nl);
    memcpy(lp, src, nl * sizeof *lp);
    lp[nl - 1] = NAN;
    skpo_rec_set_f32s(&r[4], F_LOGP, lp, nl);
    skpo_update_opts o;
    skpo_update_opts_default(&o);
    o.old_logp = SKPO_OLD_ROLLOUT;   // the NaN reaches the loss (under recompute it stops the prepare pass: below)
    o.minibatch = 1;
    o.step = 7;
    skpo_batch *b = NULL;
    skpo_err e = {0};
    CHECK(skpo_batch_new(r, n, &o, 0, 1, &b, &e) == SKPO_OK);
    skpo_adamw_cfg ac;
    skpo_adamw_cfg_default(&ac);
    skpo_policy pol = bg_policy(&m);
    skpo_optim *opt = skpo_optim_new(&ac, m.p, 2);
    skpo_comm *c = local_comm();
    CHECK(skpo_update_step(&pol, opt, c, b, &o, NULL, &e) == SKPO_ENUMERIC);
    CHECK_MSG(strstr(e.msg, "step 7") && strstr(e.msg, "mini-batch 2 of 4") && strstr(e.msg, "'p1-d1'"), "%s", e.msg);
    CHECK(opt->t == 1);   // the first mini-batch was applied, the bad one was not
    bg_release(&m);       // the failed micro-batch's saved forward state
    skpo_batch_free(b);
    // Recomputed pi_old (the default): the NaN rollout log-prob is found by the
    // mismatch pass before any update.
    o.old_logp = SKPO_OLD_RECOMPUTE;
    CHECK(skpo_batch_new(r, n, &o, 0, 1, &b, &e) == SKPO_OK);
    CHECK(skpo_update_step(&pol, opt, c, b, &o, NULL, &e) == SKPO_ENUMERIC);
    CHECK_MSG(strstr(e.msg, "step 7") && strstr(e.msg, "'p1-d1'") && strstr(e.msg, "rollout log-prob"), "%s", e.msg);
    CHECK(opt->t == 1);
    skpo_optim_free(opt);
    skpo_comm_free(c);
    skpo_batch_free(b);
    bg_records_free(r, n);
}

static void recompute_old_puts_the_first_minibatch_on_policy(void) {
    bigram m;
    bg_init(&m, 5);
    size_t n;
    skpo_rec *r = bg_records(&m, 4, 2, 0.9, 9, &n);   // behaviour logp far off
    skpo_update_opts o;
    skpo_update_opts_default(&o);
    o.old_logp = SKPO_OLD_RECOMPUTE;   // the default, said here on purpose
    o.minibatch = 2;
    skpo_batch *b = NULL;
    skpo_err e = {0};
    CHECK(skpo_batch_new(r, n, &o, 0, 1, &b, &e) == SKPO_OK);
    skpo_adamw_cfg ac;
    skpo_adamw_cfg_default(&ac);
    ac.lr = 0.05;
    ac.warmup_steps = 0;
    skpo_policy pol = bg_policy(&m);
    skpo_optim *opt = skpo_optim_new(&ac, m.p, 2);
    skpo_comm *c = local_comm();
    skpo_update_metrics met[2];
    CHECK(skpo_update_step(&pol, opt, c, b, &o, met, &e) == SKPO_OK);
    for (int p = 0; p < 2; p++) {
        CHECK(fabs(met[0].phase[p].approx_kl) < 1e-5);
        CHECK(met[0].phase[p].clip_low == 0 && met[0].phase[p].clip_high == 0);
    }
    // The second mini-batch sees weights moved by the first: ratios != 1.
    CHECK(fabs(met[1].phase[0].approx_kl) + fabs(met[1].phase[1].approx_kl) > 1e-6);
    skpo_optim_free(opt);
    skpo_comm_free(c);
    skpo_batch_free(b);
    bg_records_free(r, n);
}

static void zero_weight_records_still_count_in_the_token_mean(void) {
    bigram m;
    bg_init(&m, 6);
    size_t n;
    skpo_rec *r = bg_records(&m, 3, 2, 0.1, 10, &n);
    skpo_update_opts o;
    skpo_update_opts_default(&o);
    float a[BG_V * BG_V], b[BG_V * BG_V];
    // Remove down record 2 of prompt 0 (index 2) vs keep it with weight 0:
    // the normaliser grows by its tokens, so gradients shrink by N/(N+n).
    size_t nt;
    skpo_rec_i32s(&r[2], F_TOKENS, &nt);
    double N = 0;
    for (size_t i = 0; i < n; i++)
        if (skpo_rec_is_kind(&r[i], SKPO_KIND_DOWN)) {
            size_t k;
            skpo_rec_i32s(&r[i], F_TOKENS, &k);
            N += (double)k;
        }
    // Only the down phase: make up records carry no weight and no advantage.
    for (size_t i = 0; i < n; i++)
        if (skpo_rec_is_kind(&r[i], SKPO_KIND_UP)) skpo_rec_set_float(&r[i], F_WEIGHT, 0), skpo_rec_set_float(&r[i], F_ADV, 0);
    skpo_rec_set_float(&r[2], F_WEIGHT, 0);
    grad_of(&m, r, n, &o, a, NULL);
    skpo_rec_set_str(&r[2], F_KIND, "prompt");   // not trained any more
    grad_of(&m, r, n, &o, b, NULL);
    double ratio = (N - (double)nt) / N;
    int nz = 0;
    for (int i = 0; i < BG_V * BG_V; i++) {
        CHECK_NEAR(a[i], b[i] * ratio, 1e-6 * fabs(b[i]) + 1e-9);
        nz += b[i] != 0;
    }
    CHECK(nz > 0 && nt > 0);
    bg_records_free(r, n);
}

static void old_logp_field_is_the_ratio_denominator_with_old_logp_field(void) {
    bigram m;
    bg_init(&m, 14);
    size_t n;
    skpo_rec *r = bg_records(&m, 3, 2, 0.3, 15, &n);
    skpo_update_opts o;
    skpo_update_opts_default(&o);
    o.old_logp = SKPO_OLD_ROLLOUT;
    float a[BG_V * BG_V], b[BG_V * BG_V];
    double la = grad_of(&m, r, n, &o, a, NULL);
    o.old_logp = SKPO_OLD_FIELD;
    o.mismatch.mode = SKPO_MISMATCH_OFF;   // the junk rollout below must not matter
    for (size_t i = 0; i < n; i++) {   // move logp to old_logp, put garbage in logp
        size_t nl;
        const float *lp = skpo_rec_f32s(&r[i], F_LOGP, &nl);
        float keep[16], junk[16];
        memcpy(keep, lp, nl * sizeof *lp);
        for (size_t t = 0; t < nl; t++) junk[t] = -50.0f;
        skpo_rec_set_f32s(&r[i], F_OLD_LOGP, keep, nl);
        skpo_rec_set_f32s(&r[i], F_LOGP, junk, nl);
    }
    double lb = grad_of(&m, r, n, &o, b, NULL);
    CHECK(la == lb && memcmp(a, b, sizeof a) == 0);
    bg_records_free(r, n);
}

static void epochs_repeat_the_minibatches_and_phase_weights_override_records(void) {
    bigram m, m2;
    bg_init(&m, 16);
    bg_init(&m2, 16);
    size_t n;
    skpo_rec *r = bg_records(&m, 4, 2, 0.2, 17, &n);
    skpo_update_opts o;
    skpo_update_opts_default(&o);
    o.minibatch = 2;
    o.epochs = 3;
    skpo_batch *b = NULL;
    skpo_err e = {0};
    CHECK(skpo_batch_new(r, n, &o, 0, 1, &b, &e) == SKPO_OK);
    skpo_adamw_cfg ac;
    skpo_adamw_cfg_default(&ac);
    skpo_policy pol = bg_policy(&m);
    skpo_optim *opt = skpo_optim_new(&ac, m.p, 2);
    skpo_comm *c = local_comm();
    skpo_update_metrics met[6];
    CHECK(skpo_update_step(&pol, opt, c, b, &o, met, &e) == SKPO_OK);
    CHECK(opt->t == 6 && met[5].epoch == 2 && met[5].minibatch == 1 && met[2].epoch == 1 && met[2].minibatch == 0);
    skpo_optim_free(opt);
    skpo_batch_free(b);
    // --w-up 0 --w-down 1 == records whose weights say so.
    float a[BG_V * BG_V], g[BG_V * BG_V];
    skpo_update_opts_default(&o);
    o.phase_weight[SKPO_PHASE_UP] = 0;
    o.phase_weight[SKPO_PHASE_DOWN] = 1;
    double la = grad_of(&m2, r, n, &o, a, NULL);
    for (size_t i = 0; i < n; i++) skpo_rec_set_float(&r[i], F_WEIGHT, skpo_rec_is_kind(&r[i], SKPO_KIND_UP) ? 0 : 1);
    skpo_update_opts_default(&o);
    double lb = grad_of(&m2, r, n, &o, g, NULL);
    CHECK(la == lb && memcmp(a, g, sizeof a) == 0);
    skpo_comm_free(c);
    bg_records_free(r, n);
}

static void data_parallel_plan_covers_every_record_once_and_balances_tokens(void) {
    bigram m;
    bg_init(&m, 18);
    size_t n;
    skpo_rec *r = bg_records(&m, 40, 5, 0.1, 19, &n);
    skpo_update_opts o;
    skpo_update_opts_default(&o);
    o.minibatch = 16;   // 3 mini-batches: 16, 16, 8 prompts
    skpo_err e = {0};
    for (int size = 2; size <= 3; size++) {
        skpo_batch *b[3] = {NULL, NULL, NULL};
        for (int rk = 0; rk < size; rk++) CHECK(skpo_batch_new(r, n, &o, rk, size, &b[rk], &e) == SKPO_OK);
        int total = 0;
        for (int k = 0; k < skpo_batch_minibatches(b[0]); k++) {
            double lo = 1e300, hi = 0, max_prompt = 0;
            int recs = 0;
            for (int rk = 0; rk < size; rk++) {
                int nr;
                double t;
                skpo_batch_local(b[rk], k, &nr, &t);
                recs += nr;
                lo = fmin(lo, t), hi = fmax(hi, t);
            }
            // The heaviest prompt of the mini-batch bounds the imbalance of a greedy plan.
            for (size_t i = 0; i < n; i += 6) {
                double t = 0;
                for (size_t d = 0; d < 6; d++) {
                    size_t np, nt;
                    skpo_rec_i32s(&r[i + d], F_PROMPT, &np);
                    skpo_rec_i32s(&r[i + d], F_TOKENS, &nt);
                    t += (double)(np + nt);
                }
                if ((int)(i / 6) / 16 == k) max_prompt = fmax(max_prompt, t);
            }
            CHECK_MSG(hi - lo <= max_prompt, "size %d mb %d: loads %g..%g, heaviest prompt %g", size, k, lo, hi, max_prompt);
            total += recs;
        }
        CHECK(total == (int)n);
        for (int rk = 0; rk < size; rk++) skpo_batch_free(b[rk]);
    }
    bg_records_free(r, n);
}

static void records_missing_fields_are_named(void) {
    bigram m;
    bg_init(&m, 7);
    size_t n;
    skpo_rec *r = bg_records(&m, 2, 1, 0.1, 12, &n);
    skpo_rec_del(&r[3], F_ADV);
    skpo_update_opts o;
    skpo_update_opts_default(&o);
    skpo_batch *b = NULL;
    skpo_err e = {0};
    CHECK(skpo_batch_new(r, n, &o, 0, 1, &b, &e) == SKPO_EFORMAT && b == NULL);
    CHECK_MSG(strstr(e.msg, "'p1-d1'") && strstr(e.msg, "'adv'"), "%s", e.msg);
    skpo_rec_set_float(&r[3], F_ADV, 1.0);
    float lp[2] = {-1, -1};
    skpo_rec_set_f32s(&r[0], F_LOGP, lp, 2);
    size_t nt;
    skpo_rec_i32s(&r[0], F_TOKENS, &nt);
    if (nt != 2) {
        CHECK(skpo_batch_new(r, n, &o, 0, 1, &b, &e) == SKPO_EFORMAT);
        CHECK_MSG(strstr(e.msg, "'p0-u0'") && strstr(e.msg, "length"), "%s", e.msg);
    }
    o.sft = 1;   // SFT needs neither logp nor adv
    skpo_rec_del(&r[3], F_ADV);
    CHECK(skpo_batch_new(r, n, &o, 0, 1, &b, &e) == SKPO_OK);
    skpo_batch_free(b);
    bg_records_free(r, n);
}

static void sft_lowers_the_negative_log_likelihood(void) {
    bigram m;
    bg_init(&m, 8);
    size_t n;
    skpo_rec *r = bg_records(&m, 4, 1, 0, 13, &n);
    skpo_update_opts o;
    skpo_update_opts_default(&o);
    o.sft = 1;
    o.loss.kl_coef = 0.5;   // ignored by SFT (records carry no ref_logp)
    skpo_adamw_cfg ac;
    skpo_adamw_cfg_default(&ac);
    ac.lr = 0.05;
    ac.warmup_steps = 0;
    skpo_optim *opt = skpo_optim_new(&ac, m.p, 2);
    skpo_policy pol = bg_policy(&m);
    skpo_comm *c = local_comm();
    skpo_err e = {0};
    double first = 0, last = 0;
    for (int it = 0; it < 5; it++) {
        skpo_batch *b = NULL;
        CHECK(skpo_batch_new(r, n, &o, 0, 1, &b, &e) == SKPO_OK);
        skpo_update_metrics met;
        CHECK(skpo_update_step(&pol, opt, c, b, &o, &met, &e) == SKPO_OK);
        if (it == 0) first = met.phase[SKPO_PHASE_FULL].loss;
        last = met.phase[SKPO_PHASE_FULL].loss;
        CHECK(met.seqs[SKPO_PHASE_FULL] == (double)n);
        skpo_batch_free(b);
    }
    CHECK_MSG(last < first && first > 0, "nll %g -> %g", first, last);
    skpo_optim_free(opt);
    skpo_comm_free(c);
    bg_records_free(r, n);
}

int main(void) {
    RUN(micro_batches_accumulate_to_the_whole_minibatch_gradient);
    RUN(every_loss_form_and_aggregation_is_invariant_to_the_micro_batch_split);
    RUN(masked_tokens_leave_the_token_mean_normaliser);
    RUN(gradient_matches_finite_differences_of_the_objective);
    RUN(each_minibatch_holds_whole_prompts);
    RUN(resumed_run_is_bit_identical_to_uninterrupted_run);
    RUN(nonfinite_logprob_stops_naming_step_minibatch_and_record);
    RUN(recompute_old_puts_the_first_minibatch_on_policy);
    RUN(zero_weight_records_still_count_in_the_token_mean);
    RUN(old_logp_field_is_the_ratio_denominator_with_old_logp_field);
    RUN(epochs_repeat_the_minibatches_and_phase_weights_override_records);
    RUN(data_parallel_plan_covers_every_record_once_and_balances_tokens);
    RUN(records_missing_fields_are_named);
    RUN(sft_lowers_the_negative_log_likelihood);
    return TEST_SUMMARY();
}
