/*
 * rescore.c - skpo-sample --rescore: the signal the tracker's rho needs,
 * measured here because the sampler has the step's weights loaded anyway.
 * For every drawn prompt whose tracker entry holds a stored last segment
 * (tokens, their stored log-probs, the prompt ids), D = mean_t |logp_now -
 * logp_stored| under the weights that sample this step, at the sampling
 * temperature (core/advantage.h, skpo_adv_model_divergence: the exact
 * computation skpo-advantage --model did before). The value rides on the
 * prompt's records as `seg_div`; skpo-advantage --rescored turns it into rho.
 */
#include "sample.h"

#include "rl/advantage.h"
#include "rl/tracker.h"

#include <stdlib.h>

void sample_job_rescore(const sample_cfg *c, const skpo_rollout *ro, sample_job *job) {
    skpo_err err = {0};
    skpo_tracker *t;
    if (skpo_tracker_load(c->state, &t, &err) != SKPO_OK) skpo_die("%s", err.msg);
    skpo_tracker_seg *segs = skpo_xcalloc(job->n + 1, sizeof *segs);
    size_t *which = skpo_xcalloc(job->n + 1, sizeof *which), ns = 0;
    for (size_t i = 0; i < job->n; i++) {
        sample_item *it = &job->items[i];
        it->has_div = 0;
        // the same test skpo-advantage applies to a revisit: a segment with log-probs and prompt
        if (skpo_tracker_seen(t, it->pid) && skpo_tracker_last_seg(t, it->pid, &segs[ns]) && segs[ns].logp &&
            segs[ns].prompt)
            which[ns++] = i;
    }
    double *D = skpo_xcalloc(ns + 1, sizeof *D);
    double temp = c->ro.sample.temperature > 0 ? c->ro.sample.temperature : 1.0;
    skpo_adv_model_ctx mc = {ro->model, (float)temp, 0};
    if (ns && skpo_adv_model_divergence(&mc, segs, ns, D, &err) != SKPO_OK)
        skpo_die("--rescore: scoring the stored segments: %s", err.msg);
    for (size_t k = 0; k < ns; k++) {
        job->items[which[k]].has_div = 1;
        job->items[which[k]].div = D[k];
    }
    free(D);
    free(which);
    free(segs);
    skpo_tracker_free(t);
}
