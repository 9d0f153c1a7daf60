/*
 * skpo-splice - the SKPO downstream stage (docs/algorithm.md sections 3 step 3, 3.1, Q2,
 * Q3): for each `up` record, prefill the skip-connected input [s, q] once and
 * fork G rollouts that share its KV; write the `up` record, then its G `down`
 * records. Work starts on the first `up` record read (a reader thread feeds
 * the engine), so `skpo-sample | skpo-splice` overlap. Other records pass
 * through in order (splice.c).
 */
#include "splice.h"

#include <float.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

static const char SYNOPSIS[] =
    "--model DIR [--group G] [--layout skip|continual] [--tokenizer DIR] [--batch N] [--temperature T]\n"
    "       [--top-p P] [--top-k K] [--max-tokens N] [--seed S] [--stop STR]... [--no-share] [--no-text] [--stats]\n"
    "       [--device cpu|cuda] [--import-weights FILE] < in > out";
static const char ABOUT[] =
    "For each up record on stdin, generate G downstream rollouts from [s, q] (segment, then prompt)\n"
    "and write the up record followed by its G down records; other records pass through in order.";

int main(int argc, char **argv) {
    splice_cfg c;
    splice_cfg_default(&c);
    const skpo_opt opts[] = {
        SKPO_ROLLOUT_OPT_ROWS(c.ro),
        SKPO_ROLLOUT_IMPORT_ROW(c.ro),
        SKPO_OPT_LONG("group", 0, &c.group, 1, 4096, "G", "downstream rollouts per up record (default 8)"),
        SKPO_OPT_STR("layout", 0, &c.layout_s, "L", "skip = [s,q] (default); continual = [q,s]"),
        SKPO_OPT_LONG("seed", 0, &c.seed, 0, 9007199254740992.0, "S", "run seed (default 0)"),
        SKPO_OPT_LIST("stop", 0, &c.stops, "STR", "stop string (repeatable)"),
        SKPO_OPT_FLAG("no-share", 0, &c.no_share, "prefill each rollout alone (benchmarks, tests)"),
        SKPO_OPT_STR("policy", 0, &c.policy, "NAME", "`policy` field (default: --model)"),
        SKPO_OPT_FLAG("stats", 0, &c.stats, "print generated tokens/s and KV use on stderr at the end"),
        {0},
    };
    skpo_cli_parse(SYNOPSIS, ABOUT, opts, argc, argv, NULL);
    splice_cfg_check(&c, SYNOPSIS);

    skpo_err err = {0};
    skpo_rollout ro;
    c.ro.wait_fd = 0;  // the sampler writes its output only after the handle
    if (skpo_rollout_open(&c.ro, &ro, &err) != SKPO_OK) skpo_die("%s", err.msg);
    skpo_reader *rd;
    skpo_writer *w;
    if (skpo_reader_open_fd(0, "stdin", &rd, &err) != SKPO_OK) skpo_die("%s", err.msg);
    if (skpo_writer_open_fd(1, 0, &w, &err) != SKPO_OK) skpo_die("%s", err.msg);
    if (skpo_writer_meta(w, argc, argv, NULL, &err) != SKPO_OK) skpo_die("%s", err.msg);
    if (skpo_writer_flush(w, &err) != SKPO_OK) skpo_die("%s", err.msg);
    double t0 = skpo_now(), c0 = skpo_cpu_seconds();
    if (splice_run(&c, &ro, rd, w, &err) != SKPO_OK) skpo_die("%s", err.msg);
    if (c.stats) skpo_rollout_print_stats(&ro, skpo_now() - t0, skpo_cpu_seconds() - c0);
    if (skpo_writer_close(w, &err) != SKPO_OK) skpo_die("%s", err.msg);
    skpo_rollout_close(&ro);  // unmaps lent weights and marks the loan done: the sampler waits for that
    skpo_reader_close(rd);
    skpo_close_stdout_or_die();
    return SKPO_EXIT_OK;
}
