/*
 * emit.c - skpo-sample's generation loop and output records.
 *   full: K records per prompt, uid "<pid>:<step>:<k>", gid "<pid>:<step>".
 *   up:   one record per prompt, uid "<pid>:<step>:up", gid "<pid>:<step>":
 *         the median-NLL candidate cut to its segment (docs/algorithm.md section 3 step
 *         2, Q9, Q13, Q14), with `cut` = t_q and `nll` = its mean NLL.
 * Every field of the prompt record is kept (problem, answer, source and any
 * field we do not know); `text` becomes the response's.
 */
#include "sample.h"

#include "gen/sampler.h"
#include "rl/segment.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

// The prompt's fields plus kind, gid "<pid>:<step>", uid "<pid>:<step>:<suffix>".
static void base_record(const sample_cfg *c, const sample_job *job, const sample_item *it, skpo_rec *r, const char *kind,
                        const char *suffix) {
    skpo_rec_copy(r, it->rec);
    skpo_rec_set_str(r, F_KIND, kind);
    char gid[1024];
    snprintf(gid, sizeof gid, "%s:%lld", it->pid, (long long)job->step);
    skpo_rec_set_str(r, F_GID, gid);
    skpo_rec_set_int(r, F_STEP, job->step);
    skpo_rec_set_str(r, F_POLICY, c->policy ? c->policy : c->ro.model_dir);
    skpo_rec_set_i32s(r, F_PROMPT, it->prompt, (size_t)it->n_prompt);
    char uid[1100];
    snprintf(uid, sizeof uid, "%s:%lld:%s", it->pid, (long long)job->step, suffix);
    skpo_rec_set_str(r, F_UID, uid);
    skpo_rec_set_int(r, F_DRAW, it->draw);
    if (it->has_div) skpo_rec_set_float(r, F_SEG_DIV, it->div);
}

static skpo_status put_full(const sample_cfg *c, const skpo_rollout *ro, const sample_job *job, const sample_item *it,
                            const skpo_gen_group *gr, skpo_writer *w, skpo_err *err) {
    for (int k = 0; k < gr->n; k++) {
        skpo_rec r;
        skpo_rec_init(&r);
        char num[16];
        snprintf(num, sizeof num, "%d", k);
        base_record(c, job, it, &r, SKPO_KIND_FULL, num);
        const skpo_gen_sample *s = &gr->s[k];
        skpo_rollout_fill(ro, &r, s->tokens, s->logp, s->n, s->stopped, s->seed);
        skpo_status st = skpo_writer_put(w, &r, err);
        skpo_rec_free(&r);
        if (st != SKPO_OK) return st;
    }
    return SKPO_OK;
}

static skpo_status put_up(const sample_cfg *c, const skpo_rollout *ro, const sample_job *job, const sample_item *it,
                          const skpo_gen_group *gr, skpo_writer *w, skpo_err *err) {
    double *d = skpo_xmalloc((size_t)gr->n * sizeof *d);
    int *len = skpo_xmalloc((size_t)gr->n * sizeof *len);
    for (int i = 0; i < gr->n; i++) {
        // with --self the candidates ran past t_q: the segment is still cut from
        // their first t_q tokens (same seeds, same tokens as without --self)
        int n = gr->s[i].n < it->t_q ? gr->s[i].n : it->t_q;
        len[i] = skpo_seg_len(n, it->t_q, gr->s[i].stopped && gr->s[i].n <= it->t_q);
        d[i] = skpo_mean_nll(gr->s[i].logp, len[i]);
    }
    int k = c->select_extreme ? skpo_extreme_pick(d, gr->n, job->step % 2 == 0) : skpo_median_pick(d, gr->n);
    const skpo_gen_sample *s = &gr->s[k];
    skpo_rec r;
    skpo_rec_init(&r);
    base_record(c, job, it, &r, SKPO_KIND_UP, "up");
    // finish says how the candidate ended: "stop" = before t_q, cut at half.
    skpo_rollout_fill(ro, &r, s->tokens, s->logp, len[k], s->stopped && s->n <= it->t_q, s->seed);
    skpo_rec_set_int(&r, F_CUT, it->t_q);
    skpo_rec_set_float(&r, F_NLL, d[k]);
    skpo_status st = skpo_writer_put(w, &r, err);
    if (st == SKPO_OK && c->self) { // the kept candidate's own complete generation
        skpo_rec f;
        skpo_rec_init(&f);
        base_record(c, job, it, &f, SKPO_KIND_SELF, "self");
        skpo_rec_set_str(&f, F_GID, skpo_rec_str(&r, F_UID));
        skpo_rollout_fill(ro, &f, s->tokens, s->logp, s->n, s->stopped, s->seed);
        st = skpo_writer_put(w, &f, err);
        skpo_rec_free(&f);
    }
    skpo_rec_free(&r);
    free(d);
    free(len);
    return st;
}

// Tokens a candidate may generate: max_tokens, and for --segment --self at least t_q.
static int self_max(const sample_cfg *c, const sample_item *it) {
    int m = (int)(c->ro.max_tokens < 1 << 30 ? c->ro.max_tokens : 1 << 30);
    return c->segment && it->t_q > m ? it->t_q : m;
}

static void submit_all(const sample_cfg *c, skpo_rollout *ro, const sample_job *job) {
    int G = c->segment ? (int)c->group : (int)c->n;
    uint64_t *seeds = skpo_xmalloc((size_t)G * sizeof *seeds);
    for (size_t i = 0; i < job->n; i++) {
        const sample_item *it = &job->items[i];
        for (int k = 0; k < G; k++)
            seeds[k] = skpo_rollout_seed((uint64_t)c->seed, job->seed_step, c->segment ? "up" : "full", it->pid, (uint64_t)k);
        skpo_gen_req q = {.prompt = it->prompt, .n_prompt = it->n_prompt, .n = G, .seeds = seeds,
                          .max_new = c->segment && !c->self ? it->t_q : self_max(c, it),
                          .user = (void *)it};
        skpo_err err = {0};
        if (skpo_gen_submit(ro->gen, &q, &err) != SKPO_OK) skpo_die("%s (pid %s)", err.msg, it->pid);
    }
    free(seeds);
}

skpo_status sample_run(const sample_cfg *c, skpo_rollout *ro, const sample_job *job, skpo_writer *w, skpo_err *err) {
    double t0 = skpo_now(), c0 = skpo_cpu_seconds();
    submit_all(c, ro, job);
    skpo_progress prog;
    skpo_progress_init(&prog);
    size_t done = 0, next = 0;
    // Output in work-list (draw) order whatever the completion order, so the
    // stream does not depend on timing and shards concatenate to the unsharded
    // stream; a finished group waits here for the ones before it.
    skpo_gen_group **held = skpo_xcalloc(job->n + 1, sizeof *held);
    skpo_status st = SKPO_OK;
    while (done < job->n && st == SKPO_OK) {
        st = skpo_gen_step(ro->gen, err);
        if (st != SKPO_OK) break;
        skpo_gen_group *gr;
        while ((gr = skpo_gen_pop(ro->gen))) {
            held[(const sample_item *)gr->user - job->items] = gr;
            done++;
        }
        for (; st == SKPO_OK && next < job->n && held[next]; next++) {
            const sample_item *it = held[next]->user;
            st = c->segment ? put_up(c, ro, job, it, held[next], w, err) : put_full(c, ro, job, it, held[next], w, err);
            skpo_gen_group_free(held[next]);
            held[next] = NULL;
            if (st == SKPO_OK) st = skpo_writer_flush(w, err);
        }
        const skpo_gen_stats *gs = skpo_gen_get_stats(ro->gen);
        double dt = skpo_now() - prog.start;
        skpo_progress_update(&prog, "%zu/%zu prompts, %llu tokens, %.0f tok/s", done, job->n,
                             (unsigned long long)gs->gen_tokens, dt > 0 ? gs->gen_tokens / dt : 0.0);
    }
    for (size_t i = 0; i < job->n; i++) skpo_gen_group_free(held[i]);
    free(held);
    if (st != SKPO_OK) return st;
    skpo_progress_done(&prog);
    skpo_timing_report(skpo_now() - t0, c0);
    if (c->stats) skpo_rollout_print_stats(ro, skpo_now() - t0, skpo_cpu_seconds() - c0);
    return SKPO_OK;
}
