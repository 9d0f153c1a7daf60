/*
 * skpo-advantage - turn a step's rewarded rollouts into advantages and move the
 * per-prompt tracker state forward one step (core/rl/advantage.h, core/rl/tracker.h).
 * It is a barrier: the whole step is read before anything is written. The new
 * state is saved only after stdout (and --metrics) were written and closed
 * successfully, so a failed step leaves the previous state in force.
 */
#include "base/cli.h"
#include "base/common.h"
#include "model/model.h"
#include "record/record.h"
#include "rl/advantage.h"
#include "rl/tracker.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char synopsis[] =
    "--init-state --state DIR [--step N] [--tau T] [--rho-min R] [--rho-max R] [--prio-eps E] [--lq-init L]\n"
    "       --mode MODE --state DIR [--rescored] [--step N] [--group G]\n"
    "       [--w-up W] [--w-down W] [--norm-down] [--reward-up mc|self] [--layout skip|continual] [--max-tokens N]\n"
    "       [--up-warmup K] [--tau T] [--rho-min R] [--rho-max R] [--prio-eps E] [--lq-init L]\n"
    "       [--prime-beta X] [--prime-coef-process X] [--prime-coef-outcome X] [--prime-norm batch|none]\n"
    "       [--max-reward-failures F] [--metrics FILE] [--summary] [FILE]";
static const char about[] =
    "Reads one step of rewarded records (FILE or stdin), writes them back in the same order with `adv` and\n"
    "`weight` added (and `reward` = mean downstream reward on `up` records), then a `metrics` record, and\n"
    "saves the per-prompt tracker state of the next step in DIR (state-NNNNNN.msgpack.zst + CURRENT).\n"
    "Without --rescored, rho = rho_max (SPO's constant-rho variant); with --rescored, rho = clamp(2^(-D/tau))\n"
    "where D (mean |dlogp| of each revisited prompt's stored segment under the weights that sampled this\n"
    "step) is the `seg_div` field skpo-sample --rescore wrote on the prompt's records. Loads no model.\n"
    "Tracker options given on the command line replace those stored in the state.\n"
    "L_q observes each prompt's mean response length: mean |o_i| of the downstream responses under the skip\n"
    "layout (each one solves q whole), |s| + mean |o_i| under --layout continual (o_i continues s), capped\n"
    "at --max-tokens (the completion limit).\n"
    "Rewards the verifier could not judge (reward_status timeout or error, skpo-reward) count as wrong and\n"
    "are counted in the metrics (reward_timeouts, reward_errors); above --max-reward-failures of the step's\n"
    "rewarded records the step fails and the state stays.\n"
    "--init-state writes an empty tracker state of step N (default 1) in DIR with the tracker options given\n"
    "(the rest at their defaults) and exits: what a run starts from, so that the first visit of a prompt\n"
    "already uses --lq-init. It reads no records and writes nothing on stdout.";

typedef struct args {
    int mode;   // skpo_adv_modes; -1 = not given
    const char *state, *metrics, *input, *model, *reward_up, *prime_norm, *layout;
    skpo_prime_opts prime;
    long step, group, max_tokens, up_warmup;
    double w_up, w_down, tau, rho_min, rho_max, eps, len_init, max_fail;
    int norm_down, summary, rescored, init_state;
} args;

static void parse(int argc, char **argv, args *a) {
    *a = (args){.mode = -1, .step = -1, .group = 8, .max_fail = 0.05, .w_up = 0.5, .w_down = 0.5, .input = "-", .reward_up = "mc",
                .tau = NAN, .rho_min = NAN, .rho_max = NAN, .eps = NAN, .len_init = NAN, .prime_norm = "batch",
                .layout = "skip"};
    skpo_prime_opts_default(&a->prime);
    const skpo_opt opts[] = {
        SKPO_OPT_ENUM("mode", 0, &a->mode, &skpo_adv_modes, "the advantage estimator (docs/advantage.md)"),
        SKPO_OPT_STR("state", 0, &a->state, "DIR", "tracker state folder (created on first use)"),
        SKPO_OPT_FLAG("init-state", 0, &a->init_state, "write an empty state of step --step (1) in --state and exit"),
        SKPO_OPT_FLAG("rescored", 0, &a->rescored, "rho from the records' `seg_div` (skpo-sample --rescore)"),
        SKPO_OPT_STR("model", 0, &a->model, "DIR", "removed: the sampler measures D (skpo-sample --rescore)"),
        SKPO_OPT_LONG("step", 0, &a->step, 0, 1e15, "N", "re-run step N from its kept input state (default: CURRENT)"),
        SKPO_OPT_LONG("group", 0, &a->group, 1, 65536, "G", "records per group (default 8)"),
        SKPO_OPT_DOUBLE("w-up", 0, &a->w_up, 0, 1e6, "W", "upstream loss weight in skpo mode (default 0.5)"),
        SKPO_OPT_DOUBLE("w-down", 0, &a->w_down, 0, 1e6, "W", "downstream loss weight in skpo mode (default 0.5)"),
        SKPO_OPT_FLAG("norm-down", 0, &a->norm_down, "batch-normalise downstream advantages too (docs/algorithm.md Q4)"),
        SKPO_OPT_DOUBLE("tau", 0, &a->tau, 1e-12, 1e12, "T", "rho half-life: rho = 2^(-D/T) (default 8.0; SPO code: 0.06)"),
        SKPO_OPT_DOUBLE("rho-min", 0, &a->rho_min, 1e-6, 1, "R", "lower clamp of rho (default 0.875)"),
        SKPO_OPT_DOUBLE("rho-max", 0, &a->rho_max, 1e-6, 1, "R", "upper clamp of rho (default 0.96)"),
        SKPO_OPT_DOUBLE("prio-eps", 0, &a->eps, 0, 1e6, "E", "prioritized-sampling weight floor (default 0.05)"),
        SKPO_OPT_DOUBLE("lq-init", 0, &a->len_init, 1, 1e9, "L", "initial tracked length L_q (default 1024)"),
        SKPO_OPT_FLAG("summary", 0, &a->summary, "print the metrics as one key=value line on stderr"),
        SKPO_OPT_STR("metrics", 0, &a->metrics, "FILE", "also append the metrics record to FILE"),
        SKPO_OPT_DOUBLE("max-reward-failures", 0, &a->max_fail, 0, 1, "F",
                        "fail the step when more than this fraction of its rewards timed out or failed (default 0.05)"),
        SKPO_OPT_STR("reward-up", 0, &a->reward_up, "mc|self", "skpo: upstream reward = mean downstream outcome (mc), or its `self` record's (self: \"w/o MC\")"),
        SKPO_OPT_STR("layout", 0, &a->layout, "skip|continual", "skpo: the downstream prefix skpo-splice used; continual: L_q counts |s| too"),
        SKPO_OPT_LONG("up-warmup", 0, &a->up_warmup, 0, 1L << 30, "K", "skpo: upstream A = 0 until a prompt was seen K times (default 0)"),
        SKPO_OPT_LONG("max-tokens", 0, &a->max_tokens, 1, 1L << 30, "N", "cap of the L_q observation (the completion limit; default none)"),
        SKPO_OPT_DOUBLE("prime-beta", 0, &a->prime.beta, 1e-12, 1e12, "X", "prime: implicit reward beta log(pi_prm/pi_ref) (0.05)"),
        SKPO_OPT_DOUBLE("prime-coef-process", 0, &a->prime.coef_process, 0, 1e12, "X", "prime: weight of the process rewards' RLOO (5)"),
        SKPO_OPT_DOUBLE("prime-coef-outcome", 0, &a->prime.coef_outcome, 0, 1e12, "X", "prime: weight of the outcomes' RLOO (5)"),
        SKPO_OPT_STR("prime-norm", 0, &a->prime_norm, "batch|none", "prime: process rewards over the batch's largest |return| (batch)"),
        {0},
    };
    const char **pos = skpo_xcalloc((size_t)argc, sizeof *pos);
    int npos = skpo_cli_parse(synopsis, about, opts, argc, argv, pos);
    if (npos == 1) a->input = pos[0];
    free(pos);
    if (npos > 1) skpo_cli_usage_error(synopsis, "at most one input file");
    if (a->init_state) {
        if (!a->state) skpo_cli_usage_error(synopsis, "--init-state needs --state");
        if (a->mode >= 0 || npos) skpo_cli_usage_error(synopsis, "--init-state takes no --mode and no input");
        return;
    }
    if (a->mode < 0 || !a->state) skpo_cli_usage_error(synopsis, "--mode and --state are required");
    if (a->model)
        skpo_cli_usage_error(synopsis, "--model is gone: skpo-sample --rescore measures rho's divergence where the "
                                       "model is loaded; pass --rescored here");
}

// The tracker options given on the command line replace t's.
static void override_params(const args *a, skpo_tracker *t) {
    skpo_tracker_params q = *skpo_tracker_get_params(t), *p = &q;
    if (!isnan(a->tau)) p->tau = a->tau;
    if (!isnan(a->rho_min)) p->rho_min = a->rho_min;
    if (!isnan(a->rho_max)) p->rho_max = a->rho_max;
    if (!isnan(a->eps)) p->eps = a->eps;
    if (!isnan(a->len_init)) p->len_init = a->len_init;
    if (p->rho_min > p->rho_max) skpo_die_code(SKPO_EXIT_USAGE, "rho-min %g exceeds rho-max %g", p->rho_min, p->rho_max);
    skpo_tracker_set_params(t, p);
}

static skpo_tracker *load_tracker(const args *a) {
    skpo_err err = {{0}};
    skpo_tracker *t;
    skpo_status st = a->step >= 0 ? skpo_tracker_load_step(a->state, a->step, &t, &err)
                                  : skpo_tracker_load(a->state, &t, &err);
    if (st) skpo_die("%s", err.msg);
    override_params(a, t);
    return t;
}

// --init-state: an empty tracker of step --step (default 1) in --state.
static int init_state(const args *a) {
    skpo_err err = {{0}};
    skpo_tracker *t = skpo_tracker_new(NULL);
    override_params(a, t);
    skpo_tracker_set_step(t, a->step >= 0 ? a->step : 1);
    skpo_status st = skpo_tracker_save(t, a->state, &err);
    skpo_tracker_free(t);
    if (st) skpo_die("state '%s': %s", a->state, err.msg);
    skpo_close_stdout_or_die();
    return 0;
}

static void write_out(int argc, char **argv, const skpo_rec *recs, size_t n, const unsigned char *keep,
                      const skpo_rec *metrics) {
    skpo_err err = {{0}};
    skpo_writer *w;
    if (skpo_writer_open_fd(1, 0, &w, &err) || skpo_writer_meta(w, argc, argv, NULL, &err)) skpo_die("%s", err.msg);
    for (size_t i = 0; i < n; i++)
        if (keep[i] && skpo_writer_put(w, &recs[i], &err)) skpo_die("%s", err.msg);
    if (skpo_writer_put(w, metrics, &err) || skpo_writer_close(w, &err)) skpo_die("%s", err.msg);
}

static void print_summary(const skpo_rec *m) {
    fprintf(stderr, "%s:", skpo_progname());
    for (size_t i = 0; i < m->n; i++) {
        const skpo_value *v = &m->v[i];
        if (v->type == SKPO_V_STR) fprintf(stderr, " %s=%s", v->key, v->data);
        else if (v->type == SKPO_V_INT) fprintf(stderr, " %s=%lld", v->key, (long long)v->i);
        else if (v->type == SKPO_V_F64 || v->type == SKPO_V_F32) fprintf(stderr, " %s=%.6g", v->key, v->f);
    }
    fputc('\n', stderr);
}

// Append the step's metrics record to FILE. The state is committed only after
// this, so a run killed in between re-runs the same step: when FILE already
// holds this tool's record of the step, it is not appended again. (A log is
// only ever appended to: skpo-update appends to the same file.)
// Does FILE already hold this tool's metrics record of `step`? Reads up to the
// first damage: a torn last frame (a writer killed mid-append) is cut off by
// the append that follows.
static int have_metrics(const char *path, int64_t step) {
    skpo_err err = {{0}};
    skpo_reader *rd;
    if (access(path, F_OK) != 0 || skpo_reader_open(path, &rd, &err)) return 0;
    skpo_rec r;
    skpo_rec_init(&r);
    int have = 0;
    int64_t s;
    while (!have && skpo_reader_next(rd, &r, &err) == SKPO_OK) {
        const char *tool = skpo_rec_str(&r, "tool"), *kind = skpo_rec_str(&r, "kind");
        have = kind && !strcmp(kind, "metrics") && tool && !strcmp(tool, "skpo-advantage") &&
               skpo_rec_int(&r, "step", &s) && s == step;
    }
    skpo_rec_free(&r);
    skpo_reader_close(rd);
    return have;
}

// Append the step's metrics record to FILE. The state is committed only after
// this, so a run killed in between re-runs the same step: when FILE already
// holds this tool's record of the step, it is not appended again. (A log is
// only ever appended to: skpo-update appends to the same file.)
static void append_metrics(const char *path, const skpo_rec *metrics) {
    skpo_err err = {{0}};
    int64_t step = -1;
    skpo_rec_int(metrics, "step", &step);
    if (have_metrics(path, step)) return;
    skpo_writer *w;
    if (skpo_writer_open_append(path, 0, &w, &err)) skpo_die("%s", err.msg);
    if (skpo_writer_put(w, metrics, &err) || skpo_writer_close(w, &err)) skpo_die("metrics file '%s': %s", path, err.msg);
}

// Rewards without a verdict (skpo-reward's reward_status): counted; the step
// fails when there are more than max_fail of the rewarded records, before
// anything is written, so the state stays and the step can be redone.
typedef struct unjudged { int64_t rewarded, timeouts, errors; } unjudged;

static unjudged count_unjudged(const skpo_rec *recs, size_t n) {
    unjudged u = {0};
    for (size_t i = 0; i < n; i++) {
        if (!skpo_rec_get(&recs[i], F_REWARD) || skpo_rec_is_kind(&recs[i], SKPO_KIND_UP)) continue;
        u.rewarded++;
        const char *s = skpo_rec_str(&recs[i], F_REWARD_STATUS);
        if (s && !strcmp(s, "timeout")) u.timeouts++;
        else if (s) u.errors++;
    }
    return u;
}

int main(int argc, char **argv) {
    args a;
    parse(argc, argv, &a);
    if (a.init_state) return init_state(&a);
    skpo_adv_opts o;
    skpo_adv_opts_default(&o);
    o.mode = (skpo_adv_mode)a.mode;
    o.group = a.group; o.w_up = a.w_up; o.w_down = a.w_down; o.norm_down = a.norm_down;
    if (!strcmp(a.reward_up, "self")) o.reward_up_self = 1;
    else if (strcmp(a.reward_up, "mc")) skpo_cli_usage_error(synopsis, "--reward-up: '%s' is not mc or self", a.reward_up);
    if (o.reward_up_self && o.mode != SKPO_ADV_SKPO) skpo_cli_usage_error(synopsis, "--reward-up self goes with --mode skpo");
    if (!strcmp(a.layout, "continual")) o.len_with_segment = 1;
    else if (strcmp(a.layout, "skip")) skpo_cli_usage_error(synopsis, "--layout: '%s' is not skip or continual", a.layout);
    if (o.len_with_segment && o.mode != SKPO_ADV_SKPO) skpo_cli_usage_error(synopsis, "--layout continual goes with --mode skpo");
    o.len_cap = (double)a.max_tokens;
    o.up_warmup = a.up_warmup;
    if (o.up_warmup && o.mode != SKPO_ADV_SKPO) skpo_cli_usage_error(synopsis, "--up-warmup goes with --mode skpo");
    o.prime = a.prime;
    if (!strcmp(a.prime_norm, "none")) o.prime.batch_norm = 0;
    else if (strcmp(a.prime_norm, "batch")) skpo_cli_usage_error(synopsis, "--prime-norm: '%s' is not batch or none", a.prime_norm);
    if (o.mode == SKPO_ADV_PRIME && o.group < 2) skpo_cli_usage_error(synopsis, "--mode prime needs --group >= 2 (leave-one-out)");
    skpo_tracker *t = load_tracker(&a);
    skpo_err err = {{0}};
    o.div_from_records = a.rescored;
    skpo_rec *recs, metrics;
    size_t n;
    if (skpo_read_all(a.input, &recs, &n, &err)) skpo_die("%s", err.msg);
    const char *on[4] = {o.mode == SKPO_ADV_SKPO ? "skpo" : "full", NULL, NULL, NULL};
    if (o.reward_up_self) on[1] = "self";
    if (o.mode == SKPO_ADV_PRIME) on[1] = "prime";
    for (size_t i = 0; i < n; i++)
        if (skpo_rec_check_needs(&recs[i], "skpo-advantage", on, strcmp(a.input, "-") ? a.input : "stdin", i + 1, &err))
            skpo_die("%s", err.msg);
    unjudged u = count_unjudged(recs, n);
    if (u.timeouts + u.errors > 0 && (double)(u.timeouts + u.errors) > a.max_fail * (double)u.rewarded)
        skpo_die("step %lld: %lld of %lld rewards have no verdict (%lld timed out, %lld failed), over "
                 "--max-reward-failures %g: the reward stage cannot judge this step (their records say why in "
                 "reward_status and reason)",
                 (long long)skpo_tracker_step(t), (long long)(u.timeouts + u.errors), (long long)u.rewarded,
                 (long long)u.timeouts, (long long)u.errors, a.max_fail);
    unsigned char *keep = skpo_xmalloc(n + 1);
    skpo_rec_init(&metrics);
    if (skpo_adv_step(recs, n, &o, t, keep, &metrics, &err)) {
        free(keep);   // LeakSanitizer checks the error exits too
        skpo_die("step %lld: %s", (long long)skpo_tracker_step(t), err.msg);
    }
    skpo_rec_set_int(&metrics, "reward_timeouts", u.timeouts);
    skpo_rec_set_int(&metrics, "reward_errors", u.errors);
    int64_t dropped;
    if (skpo_rec_int(&metrics, "dropped_groups", &dropped) && dropped)
        skpo_warn("dropped %lld groups whose rewards are all equal (dynamic sampling)", (long long)dropped);
    write_out(argc, argv, recs, n, keep, &metrics);
    // before stdout's EOF, so a consumer appending to the same file (skpo-update
    // writes its metrics after reading everything) never races this append
    if (a.metrics) append_metrics(a.metrics, &metrics);
    skpo_close_stdout_or_die();
    if (a.summary) print_summary(&metrics);
    skpo_tracker_set_step(t, skpo_tracker_step(t) + 1);
    if (skpo_tracker_save(t, a.state, &err)) skpo_die("saving state: %s", err.msg);
    skpo_tracker_free(t);
    skpo_rec_free(&metrics);
    skpo_recs_free(recs, n);
    free(keep);
    return 0;
}
