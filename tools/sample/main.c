/*
 * skpo-sample - prompt records in, rollout records out.
 *
 *   --n K        K whole responses per prompt, `full` records (GRPO/SPO/DAPO
 *                baselines, evaluation).
 *   --segment    SKPO upstream (SKPO.md section 3 steps 1-2): B prompts drawn
 *                by prioritized sampling from the tracker weights (or all, in
 *                file order, with --all); G candidates per prompt cut at
 *                t_q ~ U[ceil(L_q/6), floor(L_q/2)]; the median-NLL candidate
 *                is written as one `up` record.
 * Prompts come from --prompts FILE (job.c); records go to stdout, flushed after
 * each finished prompt so `skpo-sample | skpo-splice` overlap (emit.c).
 */
#include "cli.h"
#include "sample.h"

#include <float.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

static const char SYNOPSIS[] =
    "--model DIR --prompts FILE (--n K | --segment [--group G] [--lq-init L]) [--state DIR]\n"
    "       [--all | --prompts-per-step B] [--prio-eps E] [--tokenizer DIR] [--batch N] [--shard I/N]\n"
    "       [--temperature T] [--top-p P] [--top-k K] [--max-tokens N] [--seed S] [--step N] [--stop STR]...\n"
    "       [--no-share] [--no-text] [--stats] [--device cuda|cpu]";
static const char ABOUT[] =
    "Generate rollouts for prompt records: --n K whole responses per prompt (kind=full), or with\n"
    "--segment one SKPO upstream segment per drawn prompt (kind=up). Records go to stdout.";

int main(int argc, char **argv) {
    sample_cfg c;
    sample_cfg_default(&c);
    const skpo_opt opts[] = {
        {"model", 0, SKPO_OPT_STR, &c.ro.model_dir, 0, 0, "DIR", "checkpoint folder (config.json, safetensors)"},
        {"prompts", 0, SKPO_OPT_STR, &c.prompts, 0, 0, "FILE", "prompt records"},
        {"tokenizer", 0, SKPO_OPT_STR, &c.ro.tok_dir, 0, 0, "DIR", "tokenizer.json folder (default: --model)"},
        {"no-text", 0, SKPO_OPT_FLAG, &c.ro.no_text, 0, 0, NULL, "no tokenizer: no `text`, EOS from config.json"},
        {"n", 0, SKPO_OPT_INT, &c.n, 1, 4096, "K", "K whole responses per prompt (kind=full)"},
        {"segment", 0, SKPO_OPT_FLAG, &c.segment, 0, 0, NULL, "SKPO upstream segments (kind=up)"},
        {"state", 0, SKPO_OPT_STR, &c.state, 0, 0, "DIR", "tracker state folder (L_q, sampling weights, step)"},
        {"all", 0, SKPO_OPT_FLAG, &c.all, 0, 0, NULL, "every prompt in file order, no draw (default with --n)"},
        {"group", 0, SKPO_OPT_INT, &c.group, 1, 4096, "G", "--segment: candidates per prompt (default 8)"},
        {"prompts-per-step", 0, SKPO_OPT_INT, &c.per_step, 1, INT_MAX, "B",
         "draw B prompts by prioritized sampling (default 128 with --segment)"},
        {"lq-init", 0, SKPO_OPT_DOUBLE, &c.lq_init, 1, 1e9, "L", "--segment: L_q of unseen prompts (default: tracker's)"},
        {"prio-eps", 0, SKPO_OPT_DOUBLE, &c.prio_eps, 0, 1e9, "E", "weight floor eps (default: tracker's, 0.05)"},
        {"batch", 0, SKPO_OPT_INT, &c.batch, 1, 65536, "N", "sequences generated at once (default 64)"},
        {"shard", 0, SKPO_OPT_STR, &c.shard, 0, 0, "I/N", "keep slice I of N of the work (same draws on every shard)"},
        {"temperature", 0, SKPO_OPT_DOUBLE, &c.ro.sample.temperature, 0, 100, "T", "0 = greedy (default 1.0)"},
        {"top-p", 0, SKPO_OPT_DOUBLE, &c.ro.sample.top_p, DBL_MIN, 1, "P", "nucleus mass (default 1.0 = off)"},
        {"top-k", 0, SKPO_OPT_INT, &c.top_k, 0, INT_MAX, "K", "keep the K most likely (default 0 = off)"},
        {"max-tokens", 0, SKPO_OPT_INT, &c.ro.max_tokens, 1, INT_MAX, "N", "new tokens per response (default 3072)"},
        {"seed", 0, SKPO_OPT_INT, &c.seed, 0, 9007199254740992.0, "S", "run seed (default 0)"},
        {"step", 0, SKPO_OPT_INT, &c.step, 0, 1e12, "N", "training step (default: the tracker's, else 0)"},
        {"seed-step", 0, SKPO_OPT_INT, &c.seed_step, 0, 1e12, "N",
         "step the seeds hash (default: --step); a fixed value repeats the same draw at every step (held-out evals)"},
        {"stop", 0, SKPO_OPT_LIST, &c.stops, 0, 0, "STR", "stop string (repeatable)"},
        {"no-share", 0, SKPO_OPT_FLAG, &c.no_share, 0, 0, NULL, "prefill each sample alone (benchmarks, tests)"},
        {"kv-tokens", 0, SKPO_OPT_INT, &c.ro.kv_tokens, 1, 1e12, "N", "KV cache positions (default: batch x context)"},
        {"threads", 0, SKPO_OPT_INT, &c.threads, 0, 1024, "N", "CPU threads (default: OpenMP's)"},
        {"device", 0, SKPO_OPT_STR, &c.ro.device, 0, 0, "cuda|cpu", "compute device (default: cuda when a GPU is visible)"},
        {"policy", 0, SKPO_OPT_STR, &c.policy, 0, 0, "NAME", "`policy` field (default: --model)"},
        {"stats", 0, SKPO_OPT_FLAG, &c.stats, 0, 0, NULL, "print generated tokens/s and KV use on stderr at the end"},
        {0},
    };
    char **args = skpo_xmalloc((size_t)(argc + 1) * sizeof *args); // parsing reorders argv; meta keeps it whole
    memcpy(args, argv, (size_t)(argc + 1) * sizeof *args);
    if (skpo_cli_parse(SYNOPSIS, ABOUT, opts, argc, argv) != 0) skpo_cli_usage_error(SYNOPSIS, "unexpected argument");
    sample_cfg_check(&c, SYNOPSIS);
    if (c.ro.device && strcmp(c.ro.device, "cuda") && strcmp(c.ro.device, "cpu"))
        skpo_cli_usage_error(SYNOPSIS, "--device: '%s' is not cuda or cpu", c.ro.device);

    skpo_err err = {0};
    skpo_rollout ro;
    if (skpo_rollout_open(&c.ro, &ro, &err) != SKPO_OK) skpo_die("%s", err.msg);
    sample_job job;
    sample_job_load(&c, &ro, &job); // dies naming the pid of a bad prompt record
    skpo_writer *w;
    if (skpo_writer_open_fd(1, 0, &w, &err) != SKPO_OK) skpo_die("%s", err.msg);
    sample_write_meta(&c, &job, w, argc, args);
    if (sample_run(&c, &ro, &job, w, &err) != SKPO_OK) skpo_die("%s", err.msg);
    if (skpo_writer_close(w, &err) != SKPO_OK) skpo_die("%s", err.msg);
    sample_job_free(&job);
    skpo_rollout_close(&ro);
    free(args);
    skpo_close_stdout_or_die();
    return SKPO_EXIT_OK;
}
