/*
 * job.c - skpo-sample settings and work list: read the prompt records, check
 * them, choose the prompts (all, or a prioritized draw from the tracker),
 * keep this shard's slice and plan each prompt's split position t_q.
 */
#include "sample.h"

#include "base/cli.h"
#include "gen/sampler.h"
#include "rl/segment.h"
#include "rl/tracker.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void sample_cfg_default(sample_cfg *c) {
    memset(c, 0, sizeof *c);
    skpo_rollout_opts_default(&c->ro);
    c->group = 8;
    c->per_step = 0; // not given: --segment draws 128, --n takes every prompt
    c->lq_init = -1;
    c->prio_eps = -1;
    c->step = -1;
    c->seed_step = -1;
    c->shard_n = 1;
    c->cut_s = "adaptive";
    c->select_s = "median";
}

// "F" or "A/B" with 0 < F <= 1 into *f; -1 when it is neither.
static int parse_frac(const char *s, double *f) {
    char *e;
    double a = strtod(s, &e), b = 1;
    if (e == s) return -1;
    if (*e == '/') {
        const char *d = e + 1;
        b = strtod(d, &e);
        if (e == d) return -1;
    }
    if (*e || !(b > 0) || !(a / b > 0 && a / b <= 1)) return -1;
    *f = a / b;
    return 0;
}

void sample_cfg_check(sample_cfg *c, const char *syn) {
    if (!c->ro.model_dir) skpo_cli_usage_error(syn, "--model is required");
    if (!c->prompts) skpo_cli_usage_error(syn, "--prompts is required");
    if ((c->n > 0) == (c->segment != 0)) skpo_cli_usage_error(syn, "give exactly one of --n K and --segment");
    if (c->all && c->per_step > 0) skpo_cli_usage_error(syn, "--all and --prompts-per-step exclude each other");
    if (c->rescore && !c->state) skpo_cli_usage_error(syn, "--rescore needs --state (the stored segments)");
    if (!c->segment && c->lq_init >= 0) skpo_cli_usage_error(syn, "--lq-init goes with --segment");
    if (c->segment && !c->all && c->per_step == 0) c->per_step = 128;
    if (!strcmp(c->cut_s, "fixed")) c->cut_fixed = 1;
    else if (strcmp(c->cut_s, "adaptive") && parse_frac(c->cut_s, &c->cut_frac))
        skpo_cli_usage_error(syn, "--cut: '%s' is not adaptive, fixed or a fraction F of L_q (0 < F <= 1, e.g. 0.25 or 1/3)",
                             c->cut_s);
    if (!strcmp(c->select_s, "extreme")) c->select_extreme = 1;
    else if (strcmp(c->select_s, "median")) skpo_cli_usage_error(syn, "--select: '%s' is not median or extreme", c->select_s);
    if (!c->segment && (c->cut_fixed || c->cut_frac > 0 || c->select_extreme || c->self))
        skpo_cli_usage_error(syn, "--cut, --select and --self go with --segment");
    if (c->shard) {
        char *e1, *e2;
        long i = strtol(c->shard, &e1, 10), n = *e1 == '/' ? strtol(e1 + 1, &e2, 10) : 0;
        if (*e1 != '/' || *e2 || n < 1 || i < 0 || i >= n || n > 1 << 20)
            skpo_cli_usage_error(syn, "--shard: '%s' is not I/N with 0 <= I < N", c->shard);
        c->shard_i = (int)i;
        c->shard_n = (int)n;
    }
    c->ro.share_prefix = !c->no_share;
    c->ro.stops = c->stops.v;
    c->ro.n_stops = c->stops.n;
}

// Check one prompt record (record idx of file `name`); dies naming the record and pid.
static void check_prompt(const skpo_rec *r, size_t idx, const char *name, const skpo_rollout *ro, sample_item *it) {
    skpo_err err = {0};
    if (skpo_rec_check_needs(r, "skpo-sample", NULL, name, idx + 1, &err)) skpo_die("%s", err.msg);
    const char *pid = skpo_rec_str(r, F_PID);
    size_t n = 0;
    const int32_t *ids = skpo_rec_i32s(r, F_PROMPT, &n);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= ro->vocab)
            skpo_die("prompt record '%s': token %zu is id %d, outside the vocabulary [0, %d) (in '%s' at record %zu)", pid,
                     i, (int)ids[i], ro->vocab, name, idx + 1);
    if ((long)n >= ro->ctx)
        skpo_die("prompt record '%s': %zu tokens leave no room in the context of %d (in '%s' at record %zu)", pid, n,
                 ro->ctx, name, idx + 1);
    *it = (sample_item){.rec = r, .pid = pid, .prompt = ids, .n_prompt = (int)n};
}

// Prioritized draw of per_step prompts (docs/algorithm.md Q10): same on every shard.
static void draw(const sample_cfg *c, const skpo_tracker *t, sample_job *job, sample_item *all, size_t nall) {
    if ((size_t)c->per_step > nall)
        skpo_die("--prompts-per-step %ld is more than the %zu prompts in '%s'", c->per_step, nall, c->prompts);
    double *w = skpo_xmalloc(nall * sizeof *w);
    for (size_t i = 0; i < nall; i++) {
        if (c->prio_eps < 0) w[i] = skpo_tracker_weight(t, all[i].pid);
        else w[i] = skpo_prio_weight(skpo_tracker_value(t, all[i].pid), c->prio_eps);
    }
    size_t *pick = skpo_xmalloc((size_t)c->per_step * sizeof *pick);
    skpo_rng r;
    skpo_rng_seed(&r, skpo_rollout_seed((uint64_t)c->seed, job->seed_step, "draw", "", 0));
    skpo_err err = {0};
    if (skpo_prio_draw(w, nall, (size_t)c->per_step, &r, pick, &err) != SKPO_OK) skpo_die("%s", err.msg);
    job->drawn = (size_t)c->per_step;
    job->items = skpo_xmalloc(job->drawn * sizeof *job->items);
    for (size_t i = 0; i < job->drawn; i++) job->items[i] = all[pick[i]];
    free(w);
    free(pick);
}

void sample_job_load(const sample_cfg *c, const skpo_rollout *ro, sample_job *job) {
    memset(job, 0, sizeof *job);
    skpo_err err = {0};
    if (skpo_read_all(c->prompts, &job->recs, &job->nrecs, &err) != SKPO_OK) skpo_die("%s", err.msg);
    sample_item *all = skpo_xmalloc((job->nrecs ? job->nrecs : 1) * sizeof *all);
    size_t nall = 0;
    for (size_t i = 0; i < job->nrecs; i++)
        if (skpo_rec_is_kind(&job->recs[i], SKPO_KIND_PROMPT)) check_prompt(&job->recs[i], i, c->prompts, ro, &all[nall++]);
    if (nall == 0) skpo_die("no prompt records in '%s'", c->prompts);
    skpo_tracker *t = NULL;
    if (c->state) {
        if (skpo_tracker_load(c->state, &t, &err) != SKPO_OK) skpo_die("%s", err.msg);
    } else {
        t = skpo_tracker_new(NULL); // every prompt unseen: equal weights, L_q = 1024
    }
    job->step = c->step >= 0 ? c->step : c->state ? skpo_tracker_step(t) : 0;
    job->seed_step = c->seed_step >= 0 ? c->seed_step : job->step;
    if (c->per_step > 0) {
        draw(c, t, job, all, nall);
        free(all);
    } else {
        job->items = all;
        job->drawn = nall;
    }
    // This shard's contiguous slice of the (identical) work list.
    size_t lo = job->drawn * (size_t)c->shard_i / (size_t)c->shard_n;
    size_t hi = job->drawn * (size_t)(c->shard_i + 1) / (size_t)c->shard_n;
    memmove(job->items, job->items + lo, (hi - lo) * sizeof *job->items);
    job->n = hi - lo;
    for (size_t i = 0; i < job->n; i++) job->items[i].draw = (long)(lo + i);
    for (size_t i = 0; c->segment && i < job->n; i++) {
        skpo_rng r;
        skpo_rng_seed(&r, skpo_rollout_seed((uint64_t)c->seed, job->seed_step, "cut", job->items[i].pid, 0));
        const char *pid = job->items[i].pid;
        double L = c->lq_init >= 0 && !skpo_tracker_seen(t, pid) ? c->lq_init : skpo_tracker_len(t, pid);
        if (!(L > 0 && L < 1e9)) skpo_die("tracked length L_q = %g is not usable (pid %s)", L, job->items[i].pid);
        job->items[i].t_q = c->cut_fixed ? skpo_seg_cut_fixed(L, job->step)
                            : c->cut_frac > 0 ? skpo_seg_cut_frac(L, c->cut_frac) : skpo_seg_cut(L, &r);
    }
    skpo_tracker_free(t);
}

void sample_job_free(sample_job *job) {
    skpo_recs_free(job->recs, job->nrecs);
    free(job->items);
    memset(job, 0, sizeof *job);
}

void sample_write_meta(const sample_cfg *c, const sample_job *job, skpo_writer *w, int argc, char **argv) {
    skpo_rec m;
    skpo_rec_init(&m);
    skpo_rec_set_str(&m, "model", c->ro.model_dir);
    skpo_rec_set_int(&m, F_STEP, job->step);
    skpo_rec_set_int(&m, F_SEED, c->seed);
    skpo_rec_set_str(&m, "mode", c->segment ? "segment" : "full");
    skpo_rec_set_int(&m, "prompts", (int64_t)job->n);
    skpo_rec_set_str(&m, "shard", c->shard ? c->shard : "0/1");
    skpo_err err = {0};
    if (skpo_writer_meta(w, argc, argv, &m, &err) != SKPO_OK) skpo_die("%s", err.msg);
    skpo_rec_free(&m);
}
