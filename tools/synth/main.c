/*
 * skpo-synth - generate the built-in synthetic task: arithmetic word problems
 * with integer answers and worked solutions, as JSON lines (id, problem,
 * answer, solution, source, split) that skpo-prep turns into prompt records.
 * Output is deterministic in the flags; train and test never share a problem.
 */
#include "base/cli.h"
#include "base/common.h"
#include "synth.h"
#include "synth_out.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char synopsis[] =
    "[--count N] [--seed S] [--split train|test] [--ops N] [--min-ops N] [--max-operand N] [--kinds OPS]\n"
    "       [--direct P] [--tokenizer DIR [--template NAME] [--sft [--skip P]]]";
static const char about[] =
    "Write COUNT distinct arithmetic word problems as JSON lines on stdout: fields id, problem,\n"
    "answer (an integer as a string), solution (worked steps ending 'Answer: N'), source, split.\n"
    "Difficulty: operations per problem (--min-ops..--ops), operand range 1..--max-operand and the\n"
    "operation kinds (--kinds: any of '+' gets, '-' loses, '*' doubles/triples). A problem's\n"
    "arithmetic decides its split, so test problems never occur in train whatever the seeds.\n"
    "--direct P: a share P of solutions state only 'Answer: N' without the worked steps, so a\n"
    "model warm-started on them mixes two strategies and RL has a choice to learn from reward.\n"
    "--tokenizer DIR: write prompt records (as skpo-prep --wording raw would) instead of JSON;\n"
    "with --sft, `full` records whose tokens are the solution plus EOS, for skpo-update --loss sft;\n"
    "--skip P gives a share P of them SKPO's skip-connected prompt [s, q] (s: a solution prefix).";

// Open-addressing set of skeleton keys (dedupe within one output).
typedef struct keyset {
    uint64_t *k;
    size_t cap, n;
} keyset;

static int keyset_add(keyset *s, uint64_t key) {
    key |= 1; // 0 marks an empty slot
    for (size_t i = key & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        if (s->k[i] == key) return 0;
        if (!s->k[i]) { s->k[i] = key; s->n++; return 1; }
    }
}

static void emit(const synth_problem *p, synth_split split, int direct, synth_out *out) {
    char id[64], ans[32];
    snprintf(id, sizeof id, "synth-%s-%016llx", split == SYNTH_TEST ? "test" : "train", (unsigned long long)p->key);
    if (out) {
        synth_out_put(out, id, p, direct ? strstr(p->solution, "Answer: ") : p->solution);
        return;
    }
    snprintf(ans, sizeof ans, "%ld", p->answer);
    json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "id", id, "problem", p->problem, "answer", ans,
                          "solution", direct ? strstr(p->solution, "Answer: ") : p->solution, "source", "synth", "split",
                          split == SYNTH_TEST ? "test" : "train");
    SKPO_ASSERT(o);
    char *line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    SKPO_ASSERT(line);
    fputs(line, stdout);
    fputc('\n', stdout);
    free(line);
    json_decref(o);
}

static void parse_kinds(const char *kinds, synth_opts *o) {
    for (const char *c = kinds; *c; c++) {
        if (*c == '+') o->add = 1;
        else if (*c == '-') o->sub = 1;
        else if (*c == '*' || *c == 'x') o->mul = 1;
        else skpo_cli_usage_error(synopsis, "--kinds: unknown operation '%c' (use + - *)", *c);
    }
    if (!o->add && !o->mul) skpo_cli_usage_error(synopsis, "--kinds: needs '+' or '*' (subtraction alone runs out)");
}

int main(int argc, char **argv) {
    long count = 100, seed = 1, ops = 2, min_ops = 0, max_operand = 20;
    const char *split = "train", *kinds = "+-", *tokdir = NULL, *tmpl = "plain";
    int sft = 0;
    double direct = 0, skip = 0;
    const skpo_opt opts[] = {
        SKPO_OPT_LONG("count", 'n', &count, 1, 10000000, "N", "number of problems (default 100)"),
        SKPO_OPT_LONG("seed", 's', &seed, 0, 9e15, "S", "random seed (default 1)"),
        SKPO_OPT_STR("split", 0, &split, "NAME", "train or test (default train)"),
        SKPO_OPT_LONG("ops", 0, &ops, 1, SYNTH_MAX_OPS, "N", "most operations per problem (default 2)"),
        SKPO_OPT_LONG("min-ops", 0, &min_ops, 1, SYNTH_MAX_OPS, "N", "fewest operations (default: --ops)"),
        SKPO_OPT_LONG("max-operand", 0, &max_operand, 1, 1000000, "N", "operands in 1..N (default 20)"),
        SKPO_OPT_STR("kinds", 0, &kinds, "OPS", "operation kinds, e.g. '+-' or '+-*' (default +-)"),
        SKPO_OPT_DOUBLE("direct", 0, &direct, 0, 1, "P", "share of solutions without worked steps (default 0)"),
        SKPO_OPT_STR("tokenizer", 0, &tokdir, "DIR", "write prompt records tokenized with DIR"),
        SKPO_OPT_STR("template", 0, &tmpl, "NAME", "chat template for --tokenizer (default plain)"),
        SKPO_OPT_FLAG("sft", 0, &sft, "--tokenizer: full records with the solution as tokens"),
        SKPO_OPT_DOUBLE("skip", 0, &skip, 0, 1, "P", "--sft: share with the skip-connected prompt [s, q] (0)"),
        {0},
    };
    skpo_cli_parse(synopsis, about, opts, argc, argv, NULL);
    synth_opts o = {.min_ops = (int)(min_ops ? min_ops : ops), .max_ops = (int)ops, .max_operand = (int)max_operand};
    if (o.min_ops > o.max_ops) skpo_cli_usage_error(synopsis, "--min-ops %ld exceeds --ops %ld", min_ops, ops);
    if (!strcmp(split, "train")) o.split = SYNTH_TRAIN;
    else if (!strcmp(split, "test")) o.split = SYNTH_TEST;
    else skpo_cli_usage_error(synopsis, "--split: '%s' is not train or test", split);
    parse_kinds(kinds, &o);
    if (sft && !tokdir) skpo_cli_usage_error(synopsis, "--sft needs --tokenizer");
    synth_out out, *outp = NULL;
    if (skip > 0 && !sft) skpo_cli_usage_error(synopsis, "--skip needs --sft");
    if (tokdir) synth_out_open(outp = &out, tokdir, tmpl, sft, seed, argc, argv);
    out.skip = skip;

    keyset seen = {.cap = 1024};
    while (seen.cap < 2 * (size_t)count) seen.cap *= 2;
    seen.k = skpo_xcalloc(seen.cap, sizeof *seen.k);
    uint64_t rng = (uint64_t)seed * 0x2545f4914f6cdd1dULL + 1;
    uint64_t style_rng = rng ^ 0x5bd1e995u; // own stream: --direct never changes which problems come out
    long misses = 0;
    synth_problem p;
    while ((long)seen.n < count) {
        synth_draw(&o, &rng, &p);
        if (!keyset_add(&seen, p.key)) {
            if (++misses > 1000 + 100 * count)
                skpo_die("only about %zu distinct %s problems exist for these flags, %ld asked", seen.n, split, count);
            continue;
        }
        emit(&p, o.split, (double)(skpo_splitmix64(&style_rng) >> 11) * 0x1p-53 < direct, outp);
    }
    free(seen.k);
    if (outp) synth_out_close(outp);
    skpo_close_stdout_or_die();
    return SKPO_EXIT_OK;
}
