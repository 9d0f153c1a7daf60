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
    "       [--top-p P] [--top-k K] [--max-tokens N] [--seed S] [--stop STR]... [--no-share] [--no-text]\n"
    "       [--device cuda|cpu] < in > out";
static const char ABOUT[] =
    "For each up record on stdin, generate G downstream rollouts from [s, q] (segment, then prompt)\n"
    "and write the up record followed by its G down records; other records pass through in order.";

int main(int argc, char **argv) {
    splice_cfg c;
    splice_cfg_default(&c);
    const skpo_opt opts[] = {
        {"model", 0, SKPO_OPT_STR, &c.ro.model_dir, 0, 0, "DIR", "checkpoint folder (config.json, safetensors; or a LoRA adapter folder)"},
        {"adapter", 0, SKPO_OPT_STR, &c.ro.adapter, 0, 0, "DIR", "LoRA adapter (PEFT folder) merged into --model at load"},
        {"group", 0, SKPO_OPT_INT, &c.group, 1, 4096, "G", "downstream rollouts per up record (default 8)"},
        {"layout", 0, SKPO_OPT_STR, &c.layout_s, 0, 0, "L", "skip = [s,q] (default); continual = [q,s]"},
        {"tokenizer", 0, SKPO_OPT_STR, &c.ro.tok_dir, 0, 0, "DIR", "tokenizer.json folder (default: --model)"},
        {"no-text", 0, SKPO_OPT_FLAG, &c.ro.no_text, 0, 0, NULL, "no tokenizer: no `text`, EOS from config.json"},
        {"batch", 0, SKPO_OPT_INT, &c.batch, 1, 65536, "N", "sequences generated at once (default 64)"},
        {"temperature", 0, SKPO_OPT_DOUBLE, &c.ro.sample.temperature, 0, 100, "T", "0 = greedy (default 1.0)"},
        {"top-p", 0, SKPO_OPT_DOUBLE, &c.ro.sample.top_p, DBL_MIN, 1, "P", "nucleus mass (default 1.0 = off)"},
        {"top-k", 0, SKPO_OPT_INT, &c.top_k, 0, INT_MAX, "K", "keep the K most likely (default 0 = off)"},
        {"max-tokens", 0, SKPO_OPT_INT, &c.ro.max_tokens, 1, INT_MAX, "N", "new tokens per rollout (default 3072)"},
        {"seed", 0, SKPO_OPT_INT, &c.seed, 0, 9007199254740992.0, "S", "run seed (default 0)"},
        {"stop", 0, SKPO_OPT_LIST, &c.stops, 0, 0, "STR", "stop string (repeatable)"},
        {"no-share", 0, SKPO_OPT_FLAG, &c.no_share, 0, 0, NULL, "prefill each rollout alone (benchmarks, tests)"},
        {"kv-tokens", 0, SKPO_OPT_INT, &c.ro.kv_tokens, 1, 1e12, "N", "KV cache positions (default: batch x context)"},
        {"threads", 0, SKPO_OPT_INT, &c.threads, 0, 1024, "N", "CPU threads (default: OpenMP's)"},
        {"policy", 0, SKPO_OPT_STR, &c.policy, 0, 0, "NAME", "`policy` field (default: --model)"},
        {"device", 0, SKPO_OPT_STR, &c.ro.device, 0, 0, "cuda|cpu", "compute device (default: cuda when a GPU is visible)"},
        {0},
    };
    char **args = skpo_xmalloc((size_t)(argc + 1) * sizeof *args); // parsing reorders argv; meta keeps it whole
    memcpy(args, argv, (size_t)(argc + 1) * sizeof *args);
    if (skpo_cli_parse(SYNOPSIS, ABOUT, opts, argc, argv) != 0) skpo_cli_usage_error(SYNOPSIS, "unexpected argument");
    splice_cfg_check(&c, SYNOPSIS);
    if (c.ro.device && strcmp(c.ro.device, "cuda") && strcmp(c.ro.device, "cpu"))
        skpo_cli_usage_error(SYNOPSIS, "--device: '%s' is not cuda or cpu", c.ro.device);

    skpo_err err = {0};
    skpo_rollout ro;
    if (skpo_rollout_open(&c.ro, &ro, &err) != SKPO_OK) skpo_die("%s", err.msg);
    skpo_reader *rd;
    skpo_writer *w;
    if (skpo_reader_open_fd(0, "stdin", &rd, &err) != SKPO_OK) skpo_die("%s", err.msg);
    if (skpo_writer_open_fd(1, 0, &w, &err) != SKPO_OK) skpo_die("%s", err.msg);
    if (skpo_writer_meta(w, argc, args, NULL, &err) != SKPO_OK) skpo_die("%s", err.msg);
    if (skpo_writer_flush(w, &err) != SKPO_OK) skpo_die("%s", err.msg);
    if (splice_run(&c, &ro, rd, w, &err) != SKPO_OK) skpo_die("%s", err.msg);
    if (skpo_writer_close(w, &err) != SKPO_OK) skpo_die("%s", err.msg);
    skpo_reader_close(rd);
    skpo_rollout_close(&ro);
    free(args);
    skpo_close_stdout_or_die();
    return SKPO_EXIT_OK;
}
