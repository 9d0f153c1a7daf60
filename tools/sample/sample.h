/*
 * sample.h - the parts of skpo-sample (private to tools/sample).
 */
#ifndef SKPO_TOOL_SAMPLE_H
#define SKPO_TOOL_SAMPLE_H

#include "base/cli.h"
#include "record/record.h"
#include "gen/rollout.h"

typedef struct sample_cfg {
    skpo_rollout_opts ro;
    const char *prompts, *state, *shard, *policy;
    long n, group, per_step, seed, step;
    long seed_step;            // --seed-step: the step the seeds hash (-1: --step)
    double lq_init, prio_eps;  // < 0: the tracker's own values
    int segment, all, no_share, stats;
    const char *cut_s, *select_s;  // --cut adaptive|fixed|F, --select median|extreme (the paper's ablations)
    int cut_fixed, select_extreme, self; // parsed; self: also write the kept candidate's whole generation
    double cut_frac;        // --cut F (0 < F <= 1): t_q = round(F L_q); 0: adaptive or fixed
    int rescore;            // --rescore: D of each drawn prompt's stored segment (seg_div)
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
    long draw;               // position in the step's (unsharded) work list
    int has_div;             // --rescore: the prompt's stored segment was scored
    double div;              // its D (field seg_div)
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
// --rescore: score each item's stored last segment (tracker of --state)
// under ro's model and set has_div / div. Dies on a scoring error.
void sample_job_rescore(const sample_cfg *c, const skpo_rollout *ro, sample_job *job);
void sample_job_free(sample_job *job);

void sample_write_meta(const sample_cfg *c, const sample_job *job, skpo_writer *w, int argc, char **argv);
// Generate everything and write the records, flushing after each prompt.
skpo_status sample_run(const sample_cfg *c, skpo_rollout *ro, const sample_job *job, skpo_writer *w, skpo_err *err);

#endif
