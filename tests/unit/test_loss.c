// test_loss.c - per-token losses, gradients and aggregation against PyTorch
// (tests/fixtures/update/loss.json from tests/ref/make_update_fixtures.py),
// plus hand-checked corner cases.
#include "harness.h"
#include "train/loss.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define FIX "tests/fixtures/update/"

static float *farr(json_t *a, int *n) {
    *n = (int)json_array_size(a);
    float *v = malloc((size_t)(*n ? *n : 1) * sizeof *v);
    for (int i = 0; i < *n; i++) v[i] = (float)json_number_value(json_array_get(a, (size_t)i));
    return v;
}

static double num(json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

// Evaluate one fixture case with the C code and compare everything.
static void check_case(json_t *c) {
    const char *name = json_string_value(json_object_get(c, "name"));
    skpo_loss_cfg cfg;
    skpo_loss_cfg_default(&cfg);
    for (int p = 0; p < SKPO_NPHASE; p++)
        cfg.agg[p] = skpo_loss_agg_parse(json_string_value(json_object_get(c, "agg")));
    cfg.agg_norm = num(c, "agg_norm");
    cfg.kl_coef = num(c, "kl_coef");
    cfg.entropy_coef = num(c, "entropy_coef");
    if (json_object_get(c, "prm_beta")) cfg.prm_beta = num(c, "prm_beta");
    int sft = (int)json_integer_value(json_object_get(c, "sft"));
    if (json_object_get(c, "shape_gamma")) cfg.shape_gamma = num(c, "shape_gamma");
    json_t *tau = json_object_get(c, "sapo_tau");
    if (tau) {
        cfg.sapo_tau_pos = json_number_value(json_array_get(tau, 0));
        cfg.sapo_tau_neg = json_number_value(json_array_get(tau, 1));
    }
    for (int p = 0; p < SKPO_NPHASE; p++) {
        json_t *ph = json_array_get(json_object_get(c, "phases"), (size_t)p);
        cfg.phase[p].kind = skpo_loss_kind_parse(json_string_value(json_object_get(ph, "kind")));
        cfg.phase[p].eps_low = num(ph, "eps_low");
        cfg.phase[p].eps_high = num(ph, "eps_high");
        cfg.phase[p].dual_clip = num(ph, "dual");
    }
    skpo_err e = {0};
    CHECK(skpo_loss_cfg_check(&cfg, &e) == SKPO_OK);
    json_t *seqs = json_object_get(c, "seqs");
    // Mismatch weights (cases with "mismatch"): computed by the C code from
    // rollout and old, compared with PyTorch's, then used by the loss.
    json_t *mm = json_object_get(c, "mismatch");
    skpo_mismatch_cfg mc;
    skpo_mismatch_cfg_default(&mc, SKPO_MISMATCH_OFF);
    if (mm) {
        mc.mode = skpo_mismatch_parse(json_string_value(json_object_get(mm, "mode")));
        mc.cap = num(mm, "cap"), mc.low = num(mm, "low"), mc.high = num(mm, "high");
        CHECK(skpo_mismatch_cfg_check(&mc, &e) == SKPO_OK);
    }
    size_t ns = json_array_size(seqs);
    float **isw = calloc(ns + 1, sizeof *isw);
    int *kept = calloc(ns + 1, sizeof *kept);
    skpo_mismatch_stats ms = {0};
    skpo_loss_count cnt[SKPO_NPHASE] = {{0, 0}};
    for (size_t i = 0; i < ns; i++) {
        json_t *s = json_array_get(seqs, i);
        int p = (int)json_integer_value(json_object_get(s, "phase")), n;
        kept[i] = (int)json_array_size(json_object_get(s, "logp"));
        if (mm && !json_object_get(s, "refine")) {   // a refinement gets no mismatch weight (skpo-update)
            float *ro = farr(json_object_get(s, "rollout"), &n), *old = farr(json_object_get(s, "old"), &n);
            float *want = farr(json_object_get(s, "isw"), &n);
            isw[i] = calloc((size_t)n + 1, sizeof **isw);
            kept[i] = skpo_mismatch_weights(&mc, ro, old, n, isw[i], &ms, &e);
            for (int t = 0; t < n; t++)
                CHECK_MSG(fabs(isw[i][t] - want[t]) <= 1e-6 * fabs(want[t]), "%s seq %zu token %d: weight %.9g want %.9g",
                          name, i, t, isw[i][t], want[t]);
            free(ro), free(old), free(want);
        }
        cnt[p].tokens += kept[i];
        cnt[p].seqs += kept[i] > 0;
    }
    if (mm) {
        static const char *mk[] = {"tokens", "k3", "abs_dlogp", "max_abs_dlogp", "truncated", "masked"};
        double got[] = {ms.tokens, ms.k3, ms.abs_dlogp, ms.max_abs_dlogp, ms.truncated, ms.masked};
        for (int k = 0; k < 6; k++)
            CHECK_MSG(fabs(got[k] - num(mm, mk[k])) <= 1e-5 * (1 + fabs(num(mm, mk[k]))), "%s mismatch %s: %.9g want %.9g",
                      name, mk[k], got[k], num(mm, mk[k]));
    }
    skpo_loss_stats st[SKPO_NPHASE] = {{0}};
    double objective = 0;
    skpo_phase_loss sftl = {SKPO_LOSS_SFT, 0, 0, 0}, shape = {SKPO_LOSS_SHAPE, 0, 0, 0};
    for (size_t i = 0; i < json_array_size(seqs); i++) {
        json_t *s = json_array_get(seqs, i);
        int p = (int)json_integer_value(json_object_get(s, "phase")), n;
        float *lp = farr(json_object_get(s, "logp"), &n), *old = farr(json_object_get(s, "old"), &n);
        float *ref = farr(json_object_get(s, "ref"), &n), *ent = farr(json_object_get(s, "ent"), &n);
        float *want = farr(json_object_get(s, "dlogp"), &n), *wantd = farr(json_object_get(s, "dent"), &n);
        float *g = calloc((size_t)n + 1, sizeof *g), *gd = calloc((size_t)n + 1, sizeof *gd);
        int na = 0;
        float *atok = json_object_get(s, "adv_tok") ? farr(json_object_get(s, "adv_tok"), &na) : NULL;
        CHECK(!atok || na == n);
        skpo_loss_seq ls = {.n = n, .logp = lp, .old = old, .ref = ref, .entropy = ent, .adv = num(s, "adv"),
                            .adv_tok = atok, .label = num(s, "label"),
                            .scale = skpo_loss_agg_scale(&cfg, p, &cnt[p], kept[i]), .weight = sft ? 1.0 : num(s, "weight"),
                            .is_weight = isw[i]};
        double before = st[p].loss;
        const skpo_phase_loss *pl = sft ? &sftl : json_object_get(s, "refine") ? &shape : &cfg.phase[p];
        CHECK(skpo_loss_seq_eval(&cfg, pl, &ls, g, gd, &st[p], &e) == SKPO_OK);
        objective += ls.weight * (st[p].loss - before);
        for (int t = 0; t < n; t++) {
            CHECK_MSG(fabs(g[t] - want[t]) <= 1e-6 * (1 + fabs(want[t])), "%s seq %zu token %d: dlogp %.9g want %.9g",
                      name, i, t, g[t], want[t]);
            CHECK_MSG(fabs(gd[t] - wantd[t]) <= 1e-7, "%s seq %zu token %d: dent %.9g want %.9g", name, i, t, gd[t],
                      wantd[t]);
        }
        free(lp), free(old), free(ref), free(ent), free(want), free(wantd), free(g), free(gd), free(isw[i]), free(atok);
    }
    free(isw), free(kept);
    CHECK_MSG(fabs(objective - num(c, "objective")) <= 1e-6 * (1 + fabs(num(c, "objective"))),
              "%s: objective %.9g want %.9g", name, objective, num(c, "objective"));
    static const char *keys[] = {"phase_loss", "clip_low", "clip_high", "clip_dual", "approx_kl", "kl_ref", "entropy"};
    for (int p = 0; p < SKPO_NPHASE; p++) {
        double got[] = {st[p].loss, st[p].clip_low, st[p].clip_high, st[p].clip_dual, st[p].approx_kl, st[p].kl_ref,
                        st[p].entropy};
        for (int k = 0; k < 7; k++) {
            double w = json_number_value(json_array_get(json_object_get(c, keys[k]), (size_t)p));
            CHECK_MSG(fabs(got[k] - w) <= 1e-5 * (1 + fabs(w)), "%s phase %d %s: %.9g want %.9g", name, p, keys[k],
                      got[k], w);
        }
    }
}

// Every case of a fixture file; at least `min` cases, two of them named a*, two b*
// and, unless c is NULL, two c*.
static void check_file(const char *file, size_t min, const char *a, const char *b, const char *c) {
    json_error_t je;
    json_t *root = json_load_file(file, 0, &je);
    CHECK_MSG(root != NULL, "%s", je.text);
    if (!root) return;
    json_t *cases = json_object_get(root, "cases");
    CHECK(json_array_size(cases) >= min);
    int na = 0, nb = 0, nc = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        const char *nm = json_string_value(json_object_get(json_array_get(cases, i), "name"));
        na += strncmp(nm, a, strlen(a)) == 0;
        nb += strncmp(nm, b, strlen(b)) == 0;
        nc += c && strncmp(nm, c, strlen(c)) == 0;
        check_case(json_array_get(cases, i));
    }
    CHECK_MSG(na >= 2 && nb >= 2 && (!c || nc >= 2), "%s: %d %s, %d %s and %d %s cases", file, na, a, nb, b, nc,
              c ? c : "-");
    json_decref(root);
}

static void losses_and_gradients_match_pytorch(void) { check_file(FIX "loss.json", 12, "gspo", "sapo", "critique"); }

// PRIME's cases (prime_loss.json): the implicit PRM's prm-ce loss and per-token advantages.
static void prm_ce_and_token_advantages_match_pytorch(void) { check_file(FIX "prime_loss.json", 4, "prm_ce", "adv_tok", NULL); }

// prm-ce by hand: logp - ref = +0.5 on both tokens, beta 0.05: z = 0.05, sigma(z) =
// 0.5124973964842103; label 1: l = -log sigma(z) = 0.6684596480132863 and each token's
// gradient (scale 1/2 = seq-mean-token-mean of one sequence of 2) is
// 2 * 0.5 * 0.05 * (sigma - 1) = -0.0243751301757895; label 0: l = 0.7184596480132863,
// gradient +0.0256248698242105. No old log-probs are read.
static void prm_ce_is_the_sequence_bce_of_the_implicit_reward(void) {
    skpo_loss_cfg c;
    skpo_loss_cfg_default(&c);
    CHECK_NEAR(c.prm_beta, 0.05, 0);
    float lp[2] = {-1.0f, -2.0f}, ref[2] = {-1.5f, -2.5f}, g[2];
    skpo_phase_loss pl = {SKPO_LOSS_PRM_CE, 0.2, 0.2, 0};
    skpo_err e = {0};
    skpo_loss_stats st = {0};
    skpo_loss_seq q = {.n = 2, .logp = lp, .ref = ref, .label = 1, .scale = 0.5, .weight = 1.0};
    CHECK(skpo_loss_seq_eval(&c, &pl, &q, g, NULL, &st, &e) == SKPO_OK);
    CHECK_NEAR(st.loss, 0.6684596480132863, 1e-12);
    CHECK_NEAR(g[0], -0.0243751301757895, 1e-9);
    CHECK_NEAR(g[1], g[0], 0);
    CHECK(st.clip_low == 0 && st.clip_high == 0 && st.approx_kl == 0);
    skpo_loss_stats st0 = {0};
    q.label = 0;
    CHECK(skpo_loss_seq_eval(&c, &pl, &q, g, NULL, &st0, &e) == SKPO_OK);
    CHECK_NEAR(st0.loss, 0.7184596480132863, 1e-12);
    CHECK_NEAR(g[0], 0.0256248698242105, 1e-9);
    // a saturated PRM stays finite: z = 0.05 * 4000 = 200, label 0: l = 200, gradient n beta scale
    float far[2] = {1000.0f, 1000.0f}, zero[2] = {-1000.0f, -1000.0f};
    skpo_loss_seq sat = {.n = 2, .logp = far, .ref = zero, .label = 0, .scale = 0.5, .weight = 1.0};
    skpo_loss_stats st2 = {0};
    CHECK(skpo_loss_seq_eval(&c, &pl, &sat, g, NULL, &st2, &e) == SKPO_OK);
    CHECK_NEAR(st2.loss, 200.0, 1e-9);
    CHECK_NEAR(g[0], 0.05, 1e-9);
    q.label = 0.5;   // the label is an outcome, 0 or 1
    CHECK(skpo_loss_seq_eval(&c, &pl, &q, g, NULL, &st0, &e) == SKPO_ERANGE);
    c.prm_beta = 0;
    CHECK(skpo_loss_cfg_check(&c, &e) == SKPO_ERANGE);
    CHECK(skpo_loss_kind_parse("prm-ce") == SKPO_LOSS_PRM_CE);
}

// Per-token advantages replace the record's one A token by token: at ratio 1 the
// PPO gradient of token t is -A_t * scale; `adv` is ignored then.
static void token_advantages_replace_the_sequence_advantage(void) {
    skpo_loss_cfg c;
    skpo_loss_cfg_default(&c);
    float lp[3] = {-1, -2, -3}, at[3] = {1.5f, -0.5f, 0}, g[3];
    skpo_err e = {0};
    skpo_loss_stats st = {0};
    skpo_loss_seq q = {.n = 3, .logp = lp, .old = lp, .adv = 100, .adv_tok = at, .scale = 0.5, .weight = 1};
    CHECK(skpo_loss_seq_eval(&c, &c.phase[SKPO_PHASE_FULL], &q, g, NULL, &st, &e) == SKPO_OK);
    CHECK_NEAR(g[0], -0.75, 1e-7);
    CHECK_NEAR(g[1], 0.25, 1e-7);
    CHECK_NEAR(g[2], 0, 0);
    CHECK_NEAR(st.loss, 0.5 * (-1.5 + 0.5 + 0), 1e-7);
    at[1] = NAN;
    CHECK(skpo_loss_seq_eval(&c, &c.phase[SKPO_PHASE_FULL], &q, g, NULL, &st, &e) == SKPO_ENUMERIC);
    CHECK(strstr(e.msg, "token 1") != NULL);
}

static void ppo_clips_low_for_negative_and_high_for_positive_advantage(void) {
    skpo_loss_cfg c;
    skpo_loss_cfg_default(&c);
    skpo_phase_loss pl = {SKPO_LOSS_PPO, 0.2, 0.28, 0};
    // ratios 0.5, 1.0, 1.5 (logp - old = log r)
    float old[3] = {-1, -1, -1}, lp[3] = {(float)(-1 + log(0.5)), -1, (float)(-1 + log(1.5))}, g[3];
    skpo_loss_stats st = {0};
    skpo_err e = {0};
    skpo_loss_seq pos = {.n = 3, .logp = lp, .old = old, .adv = 1.0, .scale = 1.0, .weight = 1.0};
    CHECK(skpo_loss_seq_eval(&c, &pl, &pos, g, NULL, &st, &e) == SKPO_OK);
    // A > 0: r = 1.5 > 1.28 is clipped (no gradient); r = 0.5 keeps -A r.
    CHECK_NEAR(g[0], -0.5, 1e-6);
    CHECK_NEAR(g[1], -1.0, 1e-6);
    CHECK(g[2] == 0);
    CHECK(st.clip_high == 1 && st.clip_low == 0);
    skpo_loss_stats st2 = {0};
    skpo_loss_seq neg = {.n = 3, .logp = lp, .old = old, .adv = -1.0, .scale = 1.0, .weight = 1.0};
    CHECK(skpo_loss_seq_eval(&c, &pl, &neg, g, NULL, &st2, &e) == SKPO_OK);
    CHECK(g[0] == 0);                 // r = 0.5 < 0.8 with A < 0: clipped
    CHECK_NEAR(g[2], 1.5, 1e-6);      // r = 1.5 with A < 0: not clipped
    CHECK(st2.clip_low == 1 && st2.clip_high == 0);
}

static void dual_clip_caps_negative_advantage_loss(void) {
    skpo_loss_cfg c;
    skpo_loss_cfg_default(&c);
    skpo_phase_loss pl = {SKPO_LOSS_PPO, 0.2, 0.2, 3.0};
    float old[1] = {-2}, lp[1] = {(float)(-2 + log(5.0))}, g[1];
    skpo_loss_stats st = {0};
    skpo_err e = {0};
    skpo_loss_seq s = {.n = 1, .logp = lp, .old = old, .adv = -2.0, .scale = 1.0, .weight = 1.0};
    CHECK(skpo_loss_seq_eval(&c, &pl, &s, g, NULL, &st, &e) == SKPO_OK);
    CHECK_NEAR(st.loss, 6.0, 1e-9);   // min(2 * 5, 2 * 3)
    CHECK(g[0] == 0 && st.clip_dual == 1);
}

static void cispo_keeps_capped_gradient_for_clipped_tokens(void) {
    skpo_loss_cfg c;
    skpo_loss_cfg_default(&c);
    float old[1] = {-1}, lp[1] = {(float)(-1 + log(2.0))}, g[1];
    skpo_loss_stats st = {0};
    skpo_err e = {0};
    skpo_loss_seq s = {.n = 1, .logp = lp, .old = old, .adv = 1.0, .scale = 0.5, .weight = 1.0};
    CHECK(skpo_loss_seq_eval(&c, &c.phase[SKPO_PHASE_DOWN], &s, g, NULL, &st, &e) == SKPO_OK);
    CHECK_NEAR(g[0], -1.28 * 0.5, 1e-6);
    CHECK(st.clip_high == 1);
}

// GSPO by hand: d = (0.02, 0.04) -> s = exp(0.03) = 1.030455 for both tokens.
// Band [0.8, 1.2]: inside, every token's gradient is -A s (times the scale).
// Band [1 - 3e-4, 1 + 4e-4] (the paper's): s is above it, so with A > 0 the whole
// sequence is clipped (no gradient, both tokens counted), with A < 0 it is not.
static void gspo_uses_one_length_normalised_ratio_for_the_whole_sequence(void) {
    skpo_loss_cfg c;
    skpo_loss_cfg_default(&c);
    float old[2] = {-1.0f, -2.0f}, lp[2] = {-0.98f, -1.96f}, g[2];
    double s = exp(((double)lp[0] - old[0] + (double)lp[1] - old[1]) / 2);
    CHECK_NEAR(s, exp(0.03), 1e-6);
    skpo_err e = {0};
    skpo_phase_loss wide = {SKPO_LOSS_GSPO, 0.2, 0.2, 3.0};
    skpo_loss_stats st = {0};
    skpo_loss_seq q = {.n = 2, .logp = lp, .old = old, .adv = 2.0, .scale = 0.5, .weight = 1.0};
    CHECK(skpo_loss_seq_eval(&c, &wide, &q, g, NULL, &st, &e) == SKPO_OK);
    CHECK_NEAR(g[0], -2.0 * s * 0.5, 1e-6);
    CHECK_NEAR(g[1], g[0], 1e-9);          // not the token ratios exp(0.02), exp(0.04)
    CHECK_NEAR(st.loss, 0.5 * 2 * (-2.0 * s), 1e-6);
    skpo_phase_loss paper = {SKPO_LOSS_GSPO, 3e-4, 4e-4, 0};
    skpo_loss_stats st2 = {0};
    CHECK(skpo_loss_seq_eval(&c, &paper, &q, g, NULL, &st2, &e) == SKPO_OK);
    CHECK(g[0] == 0 && g[1] == 0);
    CHECK(st2.clip_high == 2 && st2.clip_low == 0);
    CHECK_NEAR(st2.loss, 0.5 * 2 * (-2.0 * 1.0004), 1e-6);
    skpo_loss_stats st3 = {0};
    skpo_loss_seq neg = {.n = 2, .logp = lp, .old = old, .adv = -1.0, .scale = 1.0, .weight = 1.0};
    CHECK(skpo_loss_seq_eval(&c, &paper, &neg, g, NULL, &st3, &e) == SKPO_OK);
    CHECK_NEAR(g[0], s, 1e-6);
    CHECK(st3.clip_high == 0);
    // a dual clip in the phase settings is ignored: GSPO has none
    skpo_phase_loss dual = {SKPO_LOSS_GSPO, 0.2, 0.2, 1.01};
    skpo_loss_stats st4 = {0};
    CHECK(skpo_loss_seq_eval(&c, &dual, &neg, g, NULL, &st4, &e) == SKPO_OK);
    CHECK_NEAR(g[0], s, 1e-6);
    CHECK(st4.clip_dual == 0);
}

// SAPO by hand: r = 1 gives loss -A (4/tau) / 2 and gradient -A (the policy
// gradient); r = 2 with A = +1, tau_pos = 1: sigma(1) = 0.731059, weight
// 4 sigma (1 - sigma) r = 1.572895; with A = -1, tau_neg = 1.05: sigma(1.05) =
// 0.740775, weight 4 * 0.740775 * 0.259225 * 2 = 1.536219 (it decays faster).
static void sapo_gate_is_soft_and_asymmetric_in_the_advantage_sign(void) {
    skpo_loss_cfg c;
    skpo_loss_cfg_default(&c);
    CHECK(c.sapo_tau_pos == 1.0 && c.sapo_tau_neg == 1.05);
    skpo_phase_loss pl = {SKPO_LOSS_SAPO, 0, 0, 0};
    float old[2] = {-1, -1}, lp[2] = {-1, (float)(-1 + log(2.0))}, g[2];
    skpo_err e = {0};
    skpo_loss_stats st = {0};
    skpo_loss_seq pos = {.n = 2, .logp = lp, .old = old, .adv = 1.0, .scale = 1.0, .weight = 1.0};
    CHECK(skpo_loss_seq_eval(&c, &pl, &pos, g, NULL, &st, &e) == SKPO_OK);
    CHECK_NEAR(g[0], -1.0, 1e-6);
    CHECK_NEAR(g[1], -1.572895, 1e-5);
    CHECK_NEAR(st.loss, -4 * 0.5 - 4 * 0.7310586, 1e-5);
    skpo_loss_stats st2 = {0};
    skpo_loss_seq neg = {.n = 2, .logp = lp, .old = old, .adv = -1.0, .scale = 1.0, .weight = 1.0};
    CHECK(skpo_loss_seq_eval(&c, &pl, &neg, g, NULL, &st2, &e) == SKPO_OK);
    CHECK_NEAR(g[0], 1.0, 1e-6);
    CHECK_NEAR(g[1], 1.536219, 1e-5);
    CHECK_NEAR(st2.loss, (4 / 1.05) * (0.5 + 0.7407749), 1e-5);
    // far off-policy (r = e^3): the gate shuts the gradient smoothly, no hard edge
    float far[1] = {(float)(-1 + 3.0)}, gf[1];
    skpo_loss_stats st3 = {0};
    skpo_loss_seq f = {.n = 1, .logp = far, .old = old, .adv = 1.0, .scale = 1.0, .weight = 1.0};
    CHECK(skpo_loss_seq_eval(&c, &pl, &f, gf, NULL, &st3, &e) == SKPO_OK);
    CHECK(gf[0] < 0 && gf[0] > -0.1);
    CHECK(st3.clip_high == 1);
    c.sapo_tau_neg = 0;
    CHECK(skpo_loss_cfg_check(&c, &e) == SKPO_OK); // no phase uses SAPO
    c.phase[SKPO_PHASE_FULL].kind = SKPO_LOSS_SAPO;
    CHECK(skpo_loss_cfg_check(&c, &e) == SKPO_ERANGE);
}

static void refinement_shaping_weights_unlikely_tokens_more_and_ignores_old(void) {
    // Critique-GRPO: loss_t = -A p/(p + 0.1), dloss/dlogp = -A 0.1 p/(p + 0.1)^2, p = exp(logp).
    // p = 0.9: loss -0.9 A, grad -0.09 A;  p = 0.1: loss -0.5 A, grad -0.25 A.
    skpo_loss_cfg c;
    skpo_loss_cfg_default(&c);
    CHECK(c.shape_gamma == 0.1);
    skpo_phase_loss pl = {SKPO_LOSS_SHAPE, 0.2, 0.2, 3.0};   // clip and dual clip have no part in it
    float lp[2] = {(float)log(0.9), (float)log(0.1)}, g[2];
    float old_far[2] = {-30, 5};   // no ratio to pi_old: any old gives the same loss
    skpo_err e = {0};
    skpo_loss_stats st = {0};
    skpo_loss_seq s = {.n = 2, .logp = lp, .old = old_far, .adv = 1.0, .scale = 1.0, .weight = 1.0};
    CHECK(skpo_loss_seq_eval(&c, &pl, &s, g, NULL, &st, &e) == SKPO_OK);
    CHECK_NEAR(g[0], -0.09, 1e-6);
    CHECK_NEAR(g[1], -0.25, 1e-6);
    CHECK_NEAR(st.loss, -1.4, 1e-6);
    CHECK(st.tokens == 2 && st.clip_low == 0 && st.clip_high == 0 && st.clip_dual == 0 && st.approx_kl == 0);
    skpo_loss_stats st2 = {0};
    skpo_loss_seq n = {.n = 2, .logp = lp, .old = NULL, .adv = -2.0, .scale = 0.5, .weight = 1.0};
    CHECK(skpo_loss_seq_eval(&c, &pl, &n, g, NULL, &st2, &e) == SKPO_OK);
    CHECK_NEAR(g[0], 0.5 * 0.18, 1e-6);
    CHECK_NEAR(g[1], 0.5 * 0.5, 1e-6);
    CHECK_NEAR(st2.loss, 0.5 * 2.8, 1e-6);
    c.shape_gamma = 1.0;   // p = 0.9: grad -A 0.9/1.9^2
    CHECK(skpo_loss_seq_eval(&c, &pl, &s, g, NULL, &st, &e) == SKPO_OK);
    CHECK_NEAR(g[0], -0.9 / (1.9 * 1.9), 1e-6);
    c.shape_gamma = 0;
    CHECK(skpo_loss_cfg_check(&c, &e) == SKPO_ERANGE);
    c.shape_gamma = 0.1;
    c.phase[SKPO_PHASE_FULL].kind = SKPO_LOSS_SHAPE;   // per record only, never a phase's form
    CHECK(skpo_loss_cfg_check(&c, &e) == SKPO_ERANGE);
}

static void nonfinite_logprob_is_reported_with_token_index(void) {
    skpo_loss_cfg c;
    skpo_loss_cfg_default(&c);
    float old[3] = {-1, -1, -1}, lp[3] = {-1, NAN, -1}, g[3];
    skpo_loss_stats st = {0};
    skpo_err e = {0};
    skpo_loss_seq s = {.n = 3, .logp = lp, .old = old, .adv = 1.0, .scale = 1.0, .weight = 1.0};
    CHECK(skpo_loss_seq_eval(&c, &c.phase[0], &s, g, NULL, &st, &e) == SKPO_ENUMERIC);
    CHECK(strstr(e.msg, "token 1") != NULL);
    CHECK(st.tokens == 0 && st.loss == 0);
}

static void upstream_default_is_eq6_without_dual_clip(void) {
    // eq. 6: -min(r A, clip(r) A); A = -2, r = 5: loss 10 (a dual clip 3 would cap it at 6).
    skpo_loss_cfg c;
    skpo_loss_cfg_default(&c);
    CHECK(c.phase[SKPO_PHASE_UP].dual_clip == 0 && c.phase[SKPO_PHASE_FULL].dual_clip == 3);
    float old[1] = {-2}, lp[1] = {(float)(-2 + log(5.0))}, g[1];
    skpo_loss_stats st = {0};
    skpo_err e = {0};
    skpo_loss_seq s = {.n = 1, .logp = lp, .old = old, .adv = -2.0, .scale = 1.0, .weight = 1.0};
    CHECK(skpo_loss_seq_eval(&c, &c.phase[SKPO_PHASE_UP], &s, g, NULL, &st, &e) == SKPO_OK);
    CHECK_NEAR(st.loss, 10.0, 1e-6);
    CHECK_NEAR(g[0], 10.0, 1e-5);   // -A r: not clipped for A < 0 above the range
    CHECK(st.clip_dual == 0);
}

static void config_rejects_bad_clip_and_dual_values(void) {
    skpo_loss_cfg c;
    skpo_err e = {0};
    skpo_loss_cfg_default(&c);
    CHECK(skpo_loss_cfg_check(&c, &e) == SKPO_OK);
    c.phase[0].dual_clip = 0.5;
    CHECK(skpo_loss_cfg_check(&c, &e) == SKPO_ERANGE);
    skpo_loss_cfg_default(&c);
    c.phase[1].eps_low = 1.0;
    CHECK(skpo_loss_cfg_check(&c, &e) == SKPO_ERANGE);
    CHECK(skpo_loss_agg_parse("token-mean") == SKPO_AGG_TOKEN_MEAN);
    CHECK(skpo_loss_agg_parse("token_mean") == -1);
    CHECK(skpo_loss_kind_parse("gspo") == SKPO_LOSS_GSPO && skpo_loss_kind_parse("sapo") == SKPO_LOSS_SAPO);
    CHECK(skpo_loss_kind_parse("gpso") == -1);
    CHECK(skpo_phase_of_kind("down") == SKPO_PHASE_DOWN && skpo_phase_of_kind("prompt") == -1);
}

// Hand-computed mismatch weights: rollout -1 everywhere, old = rollout + d with
// d = ln 3, ln 1.5, 0, ln 0.4 (rho = 3, 1.5, 1, 0.4).
static const float mm_ro[4] = {-1, -1, -1, -1};
static float mm_old[4];
static void mm_inputs(void) {
    const double rho[4] = {3, 1.5, 1, 0.4};
    for (int t = 0; t < 4; t++) mm_old[t] = (float)(-1 + log(rho[t]));
}

static void truncated_is_caps_each_token_weight_at_c(void) {
    mm_inputs();
    skpo_mismatch_cfg c;
    skpo_mismatch_cfg_default(&c, SKPO_MISMATCH_TIS);
    CHECK(c.cap == 2.0);
    float w[4];
    skpo_mismatch_stats st = {0};
    skpo_err e = {0};
    CHECK(skpo_mismatch_weights(&c, mm_ro, mm_old, 4, w, &st, &e) == 4);
    CHECK_NEAR(w[0], 2.0, 1e-6);   // min(3, 2)
    CHECK_NEAR(w[1], 1.5, 1e-6);
    CHECK_NEAR(w[2], 1.0, 1e-6);
    CHECK_NEAR(w[3], 0.4, 1e-6);
    CHECK(st.tokens == 4 && st.truncated == 1 && st.masked == 0);
    // k3 = rho - 1 - ln rho summed; |d| mean and max.
    double k3 = (3 - 1 - log(3)) + (1.5 - 1 - log(1.5)) + 0 + (0.4 - 1 - log(0.4));
    CHECK_NEAR(st.k3, k3, 1e-6);
    CHECK_NEAR(st.abs_dlogp, log(3) + log(1.5) + fabs(log(0.4)), 1e-6);
    CHECK_NEAR(st.max_abs_dlogp, log(3), 1e-6);
}

static void masked_is_drops_tokens_outside_the_band_and_keeps_rho_inside(void) {
    mm_inputs();
    skpo_mismatch_cfg c;
    skpo_mismatch_cfg_default(&c, SKPO_MISMATCH_MASK_TOKEN);
    c.high = 2.0;   // TRL's cap 3 keeps all four; a flag moves it
    float w[4];
    skpo_mismatch_stats st = {0};
    skpo_err e = {0};
    CHECK(skpo_mismatch_weights(&c, mm_ro, mm_old, 4, w, &st, &e) == 3);
    CHECK(w[0] == 0);
    CHECK_NEAR(w[1], 1.5, 1e-6);
    CHECK_NEAR(w[3], 0.4, 1e-6);   // no floor by default
    CHECK(st.masked == 1 && st.truncated == 0);
    c.low = 0.5;   // a floor drops rho 0.4 too
    CHECK(skpo_mismatch_weights(&c, mm_ro, mm_old, 4, w, NULL, &e) == 2 && w[3] == 0);
}

static void icepop_masks_both_sides_of_its_band(void) {
    mm_inputs();
    skpo_mismatch_cfg c;
    skpo_mismatch_cfg_default(&c, SKPO_MISMATCH_ICEPOP);
    CHECK(c.low == 0.5 && c.high == 5.0);
    float w[4];
    skpo_err e = {0};
    CHECK(skpo_mismatch_weights(&c, mm_ro, mm_old, 4, w, NULL, &e) == 3);
    CHECK_NEAR(w[0], 3.0, 1e-6);   // inside [0.5, 5]: weighted by rho
    CHECK(w[3] == 0);              // 0.4 < 0.5: masked
}

static void sequence_mask_uses_the_geometric_mean_ratio_for_every_token(void) {
    mm_inputs();
    skpo_mismatch_cfg c;
    skpo_mismatch_cfg_default(&c, SKPO_MISMATCH_MASK_SEQ);
    CHECK_NEAR(c.high, 1.001, 1e-12);
    CHECK_NEAR(c.low, 1 / 1.001, 1e-12);
    double g = pow(3 * 1.5 * 1 * 0.4, 0.25);   // 1.8^(1/4) = 1.158
    float w[4];
    skpo_mismatch_stats st = {0};
    skpo_err e = {0};
    CHECK(skpo_mismatch_weights(&c, mm_ro, mm_old, 4, w, &st, &e) == 0);   // 1.158 > 1.001: all masked
    CHECK(st.masked == 4);
    c.low = 0.8, c.high = 1.2;
    CHECK(skpo_mismatch_weights(&c, mm_ro, mm_old, 4, w, NULL, &e) == 4);
    for (int t = 0; t < 4; t++) CHECK_NEAR(w[t], g, 1e-6);
    // The product (TRL's sequence ratio) would be 1.8 and grow with length; the
    // geometric mean of the same tokens repeated 4 times is unchanged.
    float ro16[16], old16[16], w16[16];
    for (int t = 0; t < 16; t++) ro16[t] = mm_ro[t % 4], old16[t] = mm_old[t % 4];
    CHECK(skpo_mismatch_weights(&c, ro16, old16, 16, w16, NULL, &e) == 16);
    CHECK_NEAR(w16[5], g, 1e-6);
}

static void off_gives_unit_weights_but_still_measures(void) {
    mm_inputs();
    skpo_mismatch_cfg c;
    skpo_mismatch_cfg_default(&c, SKPO_MISMATCH_OFF);
    float w[4];
    skpo_mismatch_stats st = {0};
    skpo_err e = {0};
    CHECK(skpo_mismatch_weights(&c, mm_ro, mm_old, 4, w, &st, &e) == 4);
    for (int t = 0; t < 4; t++) CHECK(w[t] == 1);
    CHECK(st.tokens == 4 && st.max_abs_dlogp > 1.09 && st.masked == 0);
    float bad[4] = {-1, NAN, -1, -1};
    CHECK(skpo_mismatch_weights(&c, bad, mm_old, 4, w, &st, &e) == -1 && strstr(e.msg, "rollout log-prob of token 1"));
    CHECK(skpo_mismatch_parse("icepop") == SKPO_MISMATCH_ICEPOP && skpo_mismatch_parse("tis2") == -1);
    c.mode = SKPO_MISMATCH_MASK_TOKEN, c.low = 2, c.high = 1;
    CHECK(skpo_mismatch_cfg_check(&c, &e) == SKPO_ERANGE);
}

static void weights_scale_the_policy_term_and_zero_masks_the_token(void) {
    // PPO, A = 1, ratio 1 (logp = old): dloss/dlogp = -1 per token, token-mean of 2.
    skpo_loss_cfg c;
    skpo_loss_cfg_default(&c);
    float lp2[3] = {-1, -2, -3}, w[3] = {0.5f, 0, 2.0f}, g[3];
    skpo_loss_stats st = {0};
    skpo_err e = {0};
    skpo_loss_seq s = {.n = 3, .logp = lp2, .old = lp2, .adv = 1.0, .scale = 0.5, .weight = 1.0, .is_weight = w};
    CHECK(skpo_loss_seq_eval(&c, &c.phase[0], &s, g, NULL, &st, &e) == SKPO_OK);
    CHECK_NEAR(g[0], -0.25, 1e-7);   // 0.5 (scale) * 0.5 (weight) * -1
    CHECK(g[1] == 0);
    CHECK_NEAR(g[2], -1.0, 1e-7);
    CHECK(st.tokens == 2);           // the masked token is not counted
    CHECK_NEAR(st.loss, 0.5 * (-0.5 - 2.0), 1e-9);
}

int main(void) {
    RUN(truncated_is_caps_each_token_weight_at_c);
    RUN(masked_is_drops_tokens_outside_the_band_and_keeps_rho_inside);
    RUN(icepop_masks_both_sides_of_its_band);
    RUN(sequence_mask_uses_the_geometric_mean_ratio_for_every_token);
    RUN(off_gives_unit_weights_but_still_measures);
    RUN(weights_scale_the_policy_term_and_zero_masks_the_token);
    RUN(losses_and_gradients_match_pytorch);
    RUN(prm_ce_and_token_advantages_match_pytorch);
    RUN(prm_ce_is_the_sequence_bce_of_the_implicit_reward);
    RUN(token_advantages_replace_the_sequence_advantage);
    RUN(ppo_clips_low_for_negative_and_high_for_positive_advantage);
    RUN(dual_clip_caps_negative_advantage_loss);
    RUN(cispo_keeps_capped_gradient_for_clipped_tokens);
    RUN(gspo_uses_one_length_normalised_ratio_for_the_whole_sequence);
    RUN(sapo_gate_is_soft_and_asymmetric_in_the_advantage_sign);
    RUN(refinement_shaping_weights_unlikely_tokens_more_and_ignores_old);
    RUN(nonfinite_logprob_is_reported_with_token_index);
    RUN(upstream_default_is_eq6_without_dual_clip);
    RUN(config_rejects_bad_clip_and_dual_values);
    return TEST_SUMMARY();
}
