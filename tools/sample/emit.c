/*
 * emit.c - skpo-sample's generation loop and output records.
 *   full: K records per prompt, uid "<pid>:<step>:<k>", gid "<pid>:<step>".
 *   up:   one record per prompt, uid "<pid>:<step>:up", gid "<pid>:<step>":
 *         the median-NLL candidate cut to its segment (SKPO.md section 3 step
 *         2, Q9, Q13, Q14), with `cut` = t_q and `nll` = its mean NLL.
 * Every field of the prompt record is kept (problem, answer, source and any
 * field we do not know); `text` becomes the response's.
 */
#include "sample.h"

#include "sampler.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void base_record(const sample_cfg *c, const sample_job *job, const sample_item *it, skpo_rec *r, const char *kind) {
    skpo_rec_copy(r, it->rec);
    skpo_rec_set_str(r, F_KIND, kind);
    char gid[1024];
    snprintf(gid, sizeof gid, "%s:%lld", it->pid, (long long)job->step);
    skpo_rec_set_str(r, F_GID, gid);
    skpo_rec_set_int(r, F_STEP, job->step);
    skpo_rec_set_str(r, F_POLICY, c->policy ? c->policy : c->ro.model_dir);
    skpo_rec_set_i32s(r, F_PROMPT, it->prompt, (size_t)it->n_prompt);
}

static skpo_status put_full(const sample_cfg *c, const skpo_rollout *ro, const sample_job *job, const sample_item *it,
                            const skpo_gen_group *gr, skpo_writer *w, skpo_err *err) {
    for (int k = 0; k < gr->n; k++) {
        skpo_rec r;
        skpo_rec_init(&r);
        base_record(c, job, it, &r, SKPO_KIND_FULL);
        char uid[1100];
        snprintf(uid, sizeof uid, "%s:%lld:%d", it->pid, (long long)job->step, k);
        skpo_rec_set_str(&r, F_UID, uid);
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
        len[i] = skpo_seg_len(gr->s[i].n, it->t_q, gr->s[i].stopped);
        d[i] = skpo_mean_nll(gr->s[i].logp, len[i]);
    }
    int k = skpo_median_pick(d, gr->n);
    const skpo_gen_sample *s = &gr->s[k];
    skpo_rec r;
    skpo_rec_init(&r);
    base_record(c, job, it, &r, SKPO_KIND_UP);
    char uid[1100];
    snprintf(uid, sizeof uid, "%s:%lld:up", it->pid, (long long)job->step);
    skpo_rec_set_str(&r, F_UID, uid);
    // finish says how the candidate ended: "stop" = before t_q, cut at half.
    skpo_rollout_fill(ro, &r, s->tokens, s->logp, len[k], s->stopped, s->seed);
    skpo_rec_set_int(&r, F_CUT, it->t_q);
    skpo_rec_set_float(&r, F_NLL, d[k]);
    skpo_status st = skpo_writer_put(w, &r, err);
    skpo_rec_free(&r);
    free(d);
    free(len);
    return st;
}

// CPU time of the whole process (all threads): a load-independent measure for
// the benchmark on a shared machine.
static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void submit_all(const sample_cfg *c, skpo_rollout *ro, const sample_job *job) {
    int G = c->segment ? (int)c->group : (int)c->n;
    uint64_t *seeds = skpo_xmalloc((size_t)G * sizeof *seeds);
    for (size_t i = 0; i < job->n; i++) {
        const sample_item *it = &job->items[i];
        for (int k = 0; k < G; k++)
            seeds[k] = skpo_rollout_seed((uint64_t)c->seed, job->seed_step, c->segment ? "up" : "full", it->pid, (uint64_t)k);
        skpo_gen_req q = {.prompt = it->prompt, .n_prompt = it->n_prompt, .n = G, .seeds = seeds,
                          .max_new = c->segment ? it->t_q : (int)(c->ro.max_tokens < 1 << 30 ? c->ro.max_tokens : 1 << 30),
                          .user = (void *)it};
        skpo_err err = {0};
        if (skpo_gen_submit(ro->gen, &q, &err) != SKPO_OK) skpo_die("%s (pid %s)", err.msg, it->pid);
    }
    free(seeds);
}

skpo_status sample_run(const sample_cfg *c, skpo_rollout *ro, const sample_job *job, skpo_writer *w, skpo_err *err) {
    double t0 = skpo_now(), c0 = cpu_seconds();
    submit_all(c, ro, job);
    skpo_progress prog;
    skpo_progress_init(&prog);
    size_t done = 0;
    while (done < job->n) {
        skpo_status st = skpo_gen_step(ro->gen, err);
        if (st != SKPO_OK) return st;
        skpo_gen_group *gr;
        while ((gr = skpo_gen_pop(ro->gen))) {
            const sample_item *it = gr->user;
            st = c->segment ? put_up(c, ro, job, it, gr, w, err) : put_full(c, ro, job, it, gr, w, err);
            skpo_gen_group_free(gr);
            if (st == SKPO_OK) st = skpo_writer_flush(w, err);
            if (st != SKPO_OK) return st;
            done++;
        }
        const skpo_gen_stats *gs = skpo_gen_get_stats(ro->gen);
        double dt = skpo_now() - prog.start;
        skpo_progress_update(&prog, "%zu/%zu prompts, %llu tokens, %.0f tok/s", done, job->n,
                             (unsigned long long)gs->gen_tokens, dt > 0 ? gs->gen_tokens / dt : 0.0);
    }
    skpo_progress_done(&prog);
    if (c->stats) {
        const skpo_gen_stats *gs = skpo_gen_get_stats(ro->gen);
        double dt = skpo_now() - t0, dc = cpu_seconds() - c0;
        fprintf(stderr, "%s: generated %llu tokens in %.3f s (%.1f tok/s; %.3f s CPU, %.1f tok/CPU-s); prefill %llu "
                "tokens; %llu model calls; peak KV %zu blocks (%.1f MiB)\n", skpo_progname(),
                (unsigned long long)gs->gen_tokens, dt, dt > 0 ? gs->gen_tokens / dt : 0.0, dc,
                dc > 0 ? gs->gen_tokens / dc : 0.0, (unsigned long long)gs->prefill_tokens,
                (unsigned long long)gs->steps, gs->peak_blocks,
                gs->peak_blocks * (double)skpo_kv_bytes_per_block(ro->kv) / (1 << 20));
    }
    return SKPO_OK;
}
