/*
 * skpo-sample - prompt records in, rollout records out.
 *
 *   --n K        K whole responses per prompt, `full` records (GRPO/SPO/DAPO
 *                baselines, evaluation).
 *   --segment    SKPO upstream (docs/algorithm.md section 3 steps 1-2): B prompts drawn
 *                by prioritized sampling from the tracker weights (or all, in
 *                file order, with --all); G candidates per prompt cut at
 *                t_q ~ U[ceil(L_q/6), floor(L_q/2)]; the median-NLL candidate
 *                is written as one `up` record. Ablations: --cut fixed (L_q/6
 *                on odd steps, L_q/2 on even ones), --cut F (t_q = round(F L_q),
 *                the split-point sensitivity runs), --select extreme (min
 *                mean NLL on odd steps, max on even ones), --self (candidates
 *                run to the end; the kept one's whole generation is also
 *                written, kind=self, for REWARD_UP=self).
 * Prompts come from --prompts FILE (job.c); records go to stdout, flushed after
 * each prompt (in work-list order: shards concatenate to the unsharded
 * stream) so `skpo-sample | skpo-splice` overlap (emit.c).
 */
#include "base/cli.h"
#include "sample.h"

#include <float.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

static const char SYNOPSIS[] =
    "--model DIR --prompts FILE (--n K | --segment [--group G] [--lq-init L] [--cut C] [--select S] [--self])\n"
    "       [--state DIR] [--all | --prompts-per-step B] [--prio-eps E] [--tokenizer DIR] [--batch N] [--shard I/N]\n"
    "       [--temperature T] [--top-p P] [--top-k K] [--max-tokens N] [--seed S] [--step N] [--stop STR]...\n"
    "       [--no-share] [--no-text] [--stats] [--rescore] [--device cpu|cuda] [--export-weights FILE]";
static const char ABOUT[] =
    "Generate rollouts for prompt records: --n K whole responses per prompt (kind=full), or with\n"
    "--segment one SKPO upstream segment per drawn prompt (kind=up). Records go to stdout.";

int main(int argc, char **argv) {
    sample_cfg c;
    sample_cfg_default(&c);
    const skpo_opt opts[] = {
        SKPO_ROLLOUT_OPT_ROWS(c.ro),
        SKPO_ROLLOUT_EXPORT_ROW(c.ro),
        SKPO_OPT_STR("prompts", 0, &c.prompts, "FILE", "prompt records"),
        SKPO_OPT_LONG("n", 0, &c.n, 1, 4096, "K", "K whole responses per prompt (kind=full)"),
        SKPO_OPT_FLAG("segment", 0, &c.segment, "SKPO upstream segments (kind=up)"),
        SKPO_OPT_STR("state", 0, &c.state, "DIR", "tracker state folder (L_q, sampling weights, step)"),
        SKPO_OPT_FLAG("all", 0, &c.all, "every prompt in file order, no draw (default with --n)"),
        SKPO_OPT_LONG("group", 0, &c.group, 1, 4096, "G", "--segment: candidates per prompt (default 8)"),
        SKPO_OPT_LONG("prompts-per-step", 0, &c.per_step, 1, INT_MAX, "B", "draw B prompts by prioritized sampling (default 128 with --segment)"),
        SKPO_OPT_DOUBLE("lq-init", 0, &c.lq_init, 1, 1e9, "L", "--segment: L_q of unseen prompts (default: tracker's)"),
        SKPO_OPT_DOUBLE("prio-eps", 0, &c.prio_eps, 0, 1e9, "E", "weight floor eps (default: tracker's, 0.05)"),
        SKPO_OPT_STR("shard", 0, &c.shard, "I/N", "keep slice I of N of the work (same draws on every shard)"),
        SKPO_OPT_LONG("seed", 0, &c.seed, 0, 9007199254740992.0, "S", "run seed (default 0)"),
        SKPO_OPT_LONG("step", 0, &c.step, 0, 1e12, "N", "training step (default: the tracker's, else 0)"),
        SKPO_OPT_LIST("stop", 0, &c.stops, "STR", "stop string (repeatable)"),
        SKPO_OPT_FLAG("no-share", 0, &c.no_share, "prefill each sample alone (benchmarks, tests)"),
        SKPO_OPT_FLAG("rescore", 0, &c.rescore, "with --state: `seg_div` = D of each revisited prompt's stored segment (rho)"),
        SKPO_OPT_STR("policy", 0, &c.policy, "NAME", "`policy` field (default: --model)"),
        SKPO_OPT_FLAG("stats", 0, &c.stats, "print generated tokens/s and KV use on stderr at the end"),
        SKPO_OPT_STR("cut", 0, &c.cut_s, "adaptive|fixed|F", "--segment split: U[L/6, L/2], L/6 (odd steps) / L/2 (even), or F L (e.g. 1/3)"),
        SKPO_OPT_STR("select", 0, &c.select_s, "median|extreme", "--segment: median NLL, or min (odd steps) / max (even)"),
        SKPO_OPT_FLAG("self", 0, &c.self, "--segment: finish the candidates; write the kept one whole (kind=self)"),
        SKPO_OPT_LONG("seed-step", 0, &c.seed_step, 0, 1e12, "N", "step the seeds hash (default: --step); a fixed value repeats the same draw at every step (held-out evals)"),
        {0},
    };
    skpo_cli_parse(SYNOPSIS, ABOUT, opts, argc, argv, NULL);
    sample_cfg_check(&c, SYNOPSIS);

    skpo_err err = {0};
    skpo_rollout ro;
    c.ro.hold_fd = 1;  // lent weights stay allocated after the output until the importer is done
    if (skpo_rollout_open(&c.ro, &ro, &err) != SKPO_OK) skpo_die("%s", err.msg);
    sample_job job;
    sample_job_load(&c, &ro, &job); // dies naming the pid of a bad prompt record
    if (c.rescore) sample_job_rescore(&c, &ro, &job);
    skpo_writer *w;
    if (skpo_writer_open_fd(1, 0, &w, &err) != SKPO_OK) skpo_die("%s", err.msg);
    sample_write_meta(&c, &job, w, argc, argv);
    if (sample_run(&c, &ro, &job, w, &err) != SKPO_OK) skpo_die("%s", err.msg);
    if (skpo_writer_close(w, &err) != SKPO_OK) skpo_die("%s", err.msg);
    sample_job_free(&job);
    skpo_rollout_hold(&ro);
    skpo_rollout_close(&ro);
    skpo_close_stdout_or_die();
    return SKPO_EXIT_OK;
}
