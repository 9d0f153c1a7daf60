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
    int sft = (int)json_integer_value(json_object_get(c, "sft"));
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
    skpo_loss_count cnt[SKPO_NPHASE] = {{0, 0}};
    for (size_t i = 0; i < json_array_size(seqs); i++) {
        json_t *s = json_array_get(seqs, i);
        int p = (int)json_integer_value(json_object_get(s, "phase"));
        cnt[p].tokens += (double)json_array_size(json_object_get(s, "logp"));
        cnt[p].seqs += 1;
    }
    skpo_loss_stats st[SKPO_NPHASE] = {{0}};
    double objective = 0;
    skpo_phase_loss sftl = {SKPO_LOSS_SFT, 0, 0, 0};
    for (size_t i = 0; i < json_array_size(seqs); i++) {
        json_t *s = json_array_get(seqs, i);
        int p = (int)json_integer_value(json_object_get(s, "phase")), n;
        float *lp = farr(json_object_get(s, "logp"), &n), *old = farr(json_object_get(s, "old"), &n);
        float *ref = farr(json_object_get(s, "ref"), &n), *ent = farr(json_object_get(s, "ent"), &n);
        float *want = farr(json_object_get(s, "dlogp"), &n), *wantd = farr(json_object_get(s, "dent"), &n);
        float *g = calloc((size_t)n + 1, sizeof *g), *gd = calloc((size_t)n + 1, sizeof *gd);
        skpo_loss_seq ls = {n, lp, old, ref, ent, num(s, "adv"), skpo_loss_agg_scale(&cfg, p, &cnt[p], n),
                            sft ? 1.0 : num(s, "weight")};
        double before = st[p].loss;
        CHECK(skpo_loss_seq_eval(&cfg, sft ? &sftl : &cfg.phase[p], &ls, g, gd, &st[p], &e) == SKPO_OK);
        objective += ls.weight * (st[p].loss - before);
        for (int t = 0; t < n; t++) {
            CHECK_MSG(fabs(g[t] - want[t]) <= 1e-6 * (1 + fabs(want[t])), "%s seq %zu token %d: dlogp %.9g want %.9g",
                      name, i, t, g[t], want[t]);
            CHECK_MSG(fabs(gd[t] - wantd[t]) <= 1e-7, "%s seq %zu token %d: dent %.9g want %.9g", name, i, t, gd[t],
                      wantd[t]);
        }
        free(lp), free(old), free(ref), free(ent), free(want), free(wantd), free(g), free(gd);
    }
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

static void losses_and_gradients_match_pytorch(void) {
    json_error_t je;
    json_t *root = json_load_file(FIX "loss.json", 0, &je);
    CHECK_MSG(root != NULL, "%s", je.text);
    if (!root) return;
    json_t *cases = json_object_get(root, "cases");
    CHECK(json_array_size(cases) >= 12);
    int gspo = 0, sapo = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        const char *nm = json_string_value(json_object_get(json_array_get(cases, i), "name"));
        gspo += strncmp(nm, "gspo", 4) == 0;
        sapo += strncmp(nm, "sapo", 4) == 0;
    }
    CHECK(gspo >= 2 && sapo >= 2);
    for (size_t i = 0; i < json_array_size(cases); i++) check_case(json_array_get(cases, i));
    json_decref(root);
}

static void ppo_clips_low_for_negative_and_high_for_positive_advantage(void) {
    skpo_loss_cfg c;
    skpo_loss_cfg_default(&c);
    skpo_phase_loss pl = {SKPO_LOSS_PPO, 0.2, 0.28, 0};
    // ratios 0.5, 1.0, 1.5 (logp - old = log r)
    float old[3] = {-1, -1, -1}, lp[3] = {(float)(-1 + log(0.5)), -1, (float)(-1 + log(1.5))}, g[3];
    skpo_loss_stats st = {0};
    skpo_err e = {0};
    skpo_loss_seq pos = {3, lp, old, NULL, NULL, 1.0, 1.0, 1.0};
    CHECK(skpo_loss_seq_eval(&c, &pl, &pos, g, NULL, &st, &e) == SKPO_OK);
    // A > 0: r = 1.5 > 1.28 is clipped (no gradient); r = 0.5 keeps -A r.
    CHECK_NEAR(g[0], -0.5, 1e-6);
    CHECK_NEAR(g[1], -1.0, 1e-6);
    CHECK(g[2] == 0);
    CHECK(st.clip_high == 1 && st.clip_low == 0);
    skpo_loss_stats st2 = {0};
    skpo_loss_seq neg = {3, lp, old, NULL, NULL, -1.0, 1.0, 1.0};
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
    skpo_loss_seq s = {1, lp, old, NULL, NULL, -2.0, 1.0, 1.0};
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
    skpo_loss_seq s = {1, lp, old, NULL, NULL, 1.0, 0.5, 1.0};
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
    skpo_loss_seq q = {2, lp, old, NULL, NULL, 2.0, 0.5, 1.0};
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
    skpo_loss_seq neg = {2, lp, old, NULL, NULL, -1.0, 1.0, 1.0};
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
    skpo_loss_seq pos = {2, lp, old, NULL, NULL, 1.0, 1.0, 1.0};
    CHECK(skpo_loss_seq_eval(&c, &pl, &pos, g, NULL, &st, &e) == SKPO_OK);
    CHECK_NEAR(g[0], -1.0, 1e-6);
    CHECK_NEAR(g[1], -1.572895, 1e-5);
    CHECK_NEAR(st.loss, -4 * 0.5 - 4 * 0.7310586, 1e-5);
    skpo_loss_stats st2 = {0};
    skpo_loss_seq neg = {2, lp, old, NULL, NULL, -1.0, 1.0, 1.0};
    CHECK(skpo_loss_seq_eval(&c, &pl, &neg, g, NULL, &st2, &e) == SKPO_OK);
    CHECK_NEAR(g[0], 1.0, 1e-6);
    CHECK_NEAR(g[1], 1.536219, 1e-5);
    CHECK_NEAR(st2.loss, (4 / 1.05) * (0.5 + 0.7407749), 1e-5);
    // far off-policy (r = e^3): the gate shuts the gradient smoothly, no hard edge
    float far[1] = {(float)(-1 + 3.0)}, gf[1];
    skpo_loss_stats st3 = {0};
    skpo_loss_seq f = {1, far, old, NULL, NULL, 1.0, 1.0, 1.0};
    CHECK(skpo_loss_seq_eval(&c, &pl, &f, gf, NULL, &st3, &e) == SKPO_OK);
    CHECK(gf[0] < 0 && gf[0] > -0.1);
    CHECK(st3.clip_high == 1);
    c.sapo_tau_neg = 0;
    CHECK(skpo_loss_cfg_check(&c, &e) == SKPO_OK); // no phase uses SAPO
    c.phase[SKPO_PHASE_FULL].kind = SKPO_LOSS_SAPO;
    CHECK(skpo_loss_cfg_check(&c, &e) == SKPO_ERANGE);
}

static void nonfinite_logprob_is_reported_with_token_index(void) {
    skpo_loss_cfg c;
    skpo_loss_cfg_default(&c);
    float old[3] = {-1, -1, -1}, lp[3] = {-1, NAN, -1}, g[3];
    skpo_loss_stats st = {0};
    skpo_err e = {0};
    skpo_loss_seq s = {3, lp, old, NULL, NULL, 1.0, 1.0, 1.0};
    CHECK(skpo_loss_seq_eval(&c, &c.phase[0], &s, g, NULL, &st, &e) == SKPO_ENUMERIC);
    CHECK(strstr(e.msg, "token 1") != NULL);
    CHECK(st.tokens == 0 && st.loss == 0);
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

int main(void) {
    RUN(losses_and_gradients_match_pytorch);
    RUN(ppo_clips_low_for_negative_and_high_for_positive_advantage);
    RUN(dual_clip_caps_negative_advantage_loss);
    RUN(cispo_keeps_capped_gradient_for_clipped_tokens);
    RUN(gspo_uses_one_length_normalised_ratio_for_the_whole_sequence);
    RUN(sapo_gate_is_soft_and_asymmetric_in_the_advantage_sign);
    RUN(nonfinite_logprob_is_reported_with_token_index);
    RUN(config_rejects_bad_clip_and_dual_values);
    return TEST_SUMMARY();
}
