/*
 * sample.h - the parts of skpo-sample (private to tools/sample).
 */
#ifndef SKPO_TOOL_SAMPLE_H
#define SKPO_TOOL_SAMPLE_H

#include "cli.h"
#include "record.h"
#include "rollout.h"

typedef struct sample_cfg {
    skpo_rollout_opts ro;
    const char *prompts, *state, *shard, *policy;
    long n, group, per_step, batch, top_k, seed, step, threads;
    long seed_step;            // --seed-step: the step the seeds hash (-1: --step)
    double lq_init, prio_eps;  // < 0: the tracker's own values
    int segment, all, no_share, stats;
    skpo_strlist stops;
    int shard_i, shard_n;   // parsed from --shard
} sample_cfg;

void sample_cfg_default(sample_cfg *c);
// Cross-flag checks; usage error (exit 2) on a bad combination.
void sample_cfg_check(sample_cfg *c, const char *synopsis);

// One prompt to work on.
typedef struct sample_item {
    const skpo_rec *rec;     // the prompt record
    const char *pid;
    const int32_t *prompt;   // (n_prompt)
    int n_prompt;
    int t_q;                 // --segment: planned split position
} sample_item;

typedef struct sample_job {
    skpo_rec *recs;          // every record of --prompts
    size_t nrecs;
    sample_item *items;      // this shard's work, in output order
    size_t n;
    int64_t step;
    int64_t seed_step;       // the step hashed into every seed (draw, cut, sequences)
    size_t drawn;            // prompts drawn before sharding
} sample_job;

// Read and check --prompts, draw/shard the work, plan t_q. Dies (exit 1) with
// "prompt record N: what (pid X)" on a bad prompt record.
void sample_job_load(const sample_cfg *c, const skpo_rollout *ro, sample_job *job);
void sample_job_free(sample_job *job);

void sample_write_meta(const sample_cfg *c, const sample_job *job, skpo_writer *w, int argc, char **argv);
// Generate everything and write the records, flushing after each prompt.
skpo_status sample_run(const sample_cfg *c, skpo_rollout *ro, const sample_job *job, skpo_writer *w, skpo_err *err);

#endif
