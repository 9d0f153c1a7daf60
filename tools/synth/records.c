/*
 * records.c - skpo-synth's record output (--tokenizer): prompt records exactly
 * as `skpo-prep --wording raw` makes them, or with --sft `full` records whose
 * `tokens` are the worked solution plus EOS (what `skpo-update --loss sft` trains on).
 */
#include "synth_out.h"
#include "base/common.h"

#include <stdlib.h>
#include <string.h>

void synth_out_open(synth_out *o, const char *tokdir, const char *tmpl, int sft, long seed, int argc, char **argv) {
    skpo_err err = {0};
    memset(o, 0, sizeof *o);
    o->tmpl = tmpl;
    o->sft = sft;
    o->seed = seed;
    o->skip_rng = (uint64_t)seed * 0x9e3779b97f4a7c15ULL ^ 0x243f6a8885a308d3ULL;
    if (skpo_tok_load(tokdir, &o->tok, &err) != SKPO_OK) skpo_die("%s", err.msg);
    if (skpo_tok_eos_ids(o->tok, &o->eos, 1) < 1) skpo_die("tokenizer '%s' has no eos_token", tokdir);
    if (skpo_writer_open_fd(1, 0, &o->w, &err) != SKPO_OK || skpo_writer_meta(o->w, argc, argv, NULL, &err) != SKPO_OK)
        skpo_die("%s", err.msg);
}

static int32_t *encode(const synth_out *o, const char *text, size_t *n) {
    skpo_err err = {0};
    int32_t *ids;
    if (skpo_tok_encode(o->tok, text, strlen(text), 0, &ids, n, &err) != SKPO_OK) skpo_die("%s", err.msg);
    return ids;
}

// Turn the prompt into SKPO's skip-connected layout [s, q]: s = the first t
// solution tokens, t uniform in [ceil(n/6), floor(n/2)] as SKPO draws t_q (with
// the tracked length n = this solution's length). The target stays the whole
// solution: downstream rollouts start afresh after q.
static void skip_connect(synth_out *o, const int32_t *sol, size_t n, int32_t **prompt, size_t *np, skpo_rec *r) {
    size_t lo = (n + 5) / 6, hi = n / 2;
    if (lo < 1) lo = 1;
    if (hi < lo) hi = lo;
    size_t t = lo + (size_t)(skpo_splitmix64(&o->skip_rng) % (hi - lo + 1));
    int32_t *p = skpo_xmalloc((t + *np) * sizeof *p);
    memcpy(p, sol, t * sizeof *p);
    memcpy(p + t, *prompt, *np * sizeof *p);
    free(*prompt);
    *prompt = p;
    *np += t;
    skpo_rec_set_int(r, F_CUT, (int64_t)t);
}

void synth_out_put(synth_out *o, const char *id, const synth_problem *p, const char *solution) {
    skpo_err err = {0};
    skpo_chat_msg msg = {"user", p->problem};
    char *text = skpo_chat_render(o->tmpl, &msg, 1, 1, &err);
    if (!text) skpo_die("%s", err.msg);
    char answer[32];
    snprintf(answer, sizeof answer, "%ld", p->answer);
    size_t np, ns;
    int32_t *prompt = encode(o, text, &np);
    skpo_rec r;
    skpo_rec_init(&r);
    skpo_rec_set_str(&r, F_KIND, o->sft ? SKPO_KIND_FULL : SKPO_KIND_PROMPT);
    if (o->sft) {
        // skpo-update batches by pid: each SFT example is its own "prompt", and
        // the seed in the name keeps epochs drawn with other seeds apart.
        char uid[96];
        snprintf(uid, sizeof uid, "%s-sft%ld", id, o->seed);
        skpo_rec_set_str(&r, F_PID, uid);
        skpo_rec_set_str(&r, F_UID, uid);
        skpo_rec_set_str(&r, F_GID, uid);
    } else {
        skpo_rec_set_str(&r, F_PID, id);
    }
    skpo_rec_set_str(&r, F_SOURCE, "synth");
    skpo_rec_set_str(&r, F_PROBLEM, p->problem);
    skpo_rec_set_str(&r, F_ANSWER, answer);
    skpo_rec_set_str(&r, F_TEXT, text);
    if (!o->sft) skpo_rec_set_i32s(&r, F_PROMPT, prompt, np);
    if (o->sft) {
        int32_t *sol = encode(o, solution, &ns);
        sol = skpo_xrealloc(sol, (ns + 1) * sizeof *sol);
        if (o->skip > 0 && (double)(skpo_splitmix64(&o->skip_rng) >> 11) * 0x1p-53 < o->skip && ns >= 2)
            skip_connect(o, sol, ns, &prompt, &np, &r);
        sol[ns++] = o->eos;
        skpo_rec_set_i32s(&r, F_PROMPT, prompt, np);
        skpo_rec_set_i32s(&r, F_TOKENS, sol, ns);
        skpo_rec_set_str(&r, "solution", solution);
        free(sol);
    }
    if (skpo_writer_put(o->w, &r, &err) != SKPO_OK) skpo_die("%s", err.msg);
    skpo_rec_free(&r);
    free(prompt);
    free(text);
}

void synth_out_close(synth_out *o) {
    skpo_err err = {0};
    if (skpo_writer_close(o->w, &err) != SKPO_OK) skpo_die("%s", err.msg);
    skpo_tok_free(o->tok);
}
