/*
 * skpo-critique - the record filter between the two generation batches of
 * Critique-GRPO's self-critique step (Zhang et al. 2025, arXiv 2506.03106;
 * pipelines/critique.sh, docs/baselines.md):
 *
 *   skpo-sample --n 7 | skpo-reward > direct            the direct responses
 *   skpo-critique critique < direct                     one critique prompt per group
 *     | skpo-sample --n 1                               the policy writes the critique
 *     | skpo-critique refine --direct direct            one refinement prompt per critique
 *     | skpo-sample --n 1                               the policy refines
 *     | skpo-critique attach --direct direct            refinement -> 8th member of the group
 *     | skpo-reward
 *
 * critique: reads rewarded `full` records and, for each pid, picks the direct
 *   response with the highest reward (the first one on a tie) and writes a
 *   `prompt` record built from it: the problem and that response in the critique
 *   wording, rendered with --template and tokenized. Its pid is "<pid>#critique"
 *   (the sampler derives seeds and uids from the pid, so the critique never
 *   reuses a direct response's random stream or uid), critique_of = the
 *   response's uid; the response's own fields (tokens, logp, reward, ...) are
 *   dropped, every other field (problem, answer, source, unknown ones) is kept.
 * refine: reads the critiques (full records of those prompts) and writes one
 *   refinement `prompt` record each: problem, the critiqued response (looked up
 *   in --direct by critique_of) and the critique, pid "<pid>#refine", the
 *   critique text in `critique`.
 * attach: reads the refinements and makes each the 8th member of its direct
 *   group: pid, gid and `prompt` become those of the critiqued response (the
 *   refinement is trained as a response to the problem alone, as the authors'
 *   code puts it back in place of a direct response), uid "<gid>:refine",
 *   refine = true (skpo-update's shaped loss). tokens, logp (the sampler's,
 *   under the refinement prompt; skpo-update ignores it for refine records),
 *   text and the rest are kept.
 * In every mode meta records pass through (the provenance chain) and records
 * of other kinds are consumed: they are what the mode reads.
 */
#include "base/cli.h"
#include "base/common.h"
#include "record/record.h"
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char synopsis[] =
    "critique --tokenizer DIR [--template NAME] [--with-answer] [--max-prompt-tokens N] [FILE...]\n"
    "       skpo-critique refine --direct FILE --tokenizer DIR [--template NAME] [--max-prompt-tokens N] [FILE...]\n"
    "       skpo-critique attach --direct FILE [FILE...]";
static const char about[] =
    "Builds the second generation batch of Critique-GRPO's self-critique step from records:\n"
    "  critique  rewarded full records -> per pid, a critique prompt for its best response\n"
    "            (highest reward, first on ties), pid <pid>#critique, critique_of = its uid\n"
    "  refine    critiques (skpo-sample output) -> refinement prompts (problem, the critiqued\n"
    "            response from --direct, the critique), pid <pid>#refine\n"
    "  attach    refinements -> full records of the critiqued response's group (its pid, gid\n"
    "            and prompt), uid <gid>:refine, refine = true\n"
    "Unknown fields are kept, meta records pass through. Reads FILEs or stdin, writes stdout.";

// The wordings (our choice: the paper does not print its self-critique prompt;
// refine follows the authors' refinement prompt, shortened for small contexts).
static const char critique_fmt[] =
    "Question: %s\nSolution: %s\n%s"
    "Check the solution step by step. Point out any error, then end with 'Conclusion: right' or 'Conclusion: wrong'.";
static const char refine_fmt[] =
    "Question: %s\nPrevious solution: %s\nCritique: %s\n"
    "Answer the question again, correcting the errors the critique names, if any, step by step.";

typedef struct crit_cfg {
    const char *mode, *tok_dir, *tmpl, *direct;
    long max_prompt;
    int with_answer;
    skpo_tok *tok;
    skpo_rec *dir;     // --direct records (full kind only)
    size_t ndir, capdir;
    skpo_rec *best;    // critique: the chosen response per pid, in first-seen order
    size_t nbest, capbest;
} crit_cfg;

// Response fields of a direct record that describe that response, not the problem.
static const char *const response_fields[] = {F_TOKENS, F_LOGP, F_OLD_LOGP, F_REF_LOGP, F_REWARD, F_CORRECT, F_PRED,
                                              F_ADV, F_WEIGHT, F_FINISH, F_SEED, F_UID, F_GID, F_STEP, F_POLICY,
                                              F_DRAW, F_SEG_DIV, F_REASON, F_TESTS_PASSED, F_REFINE, NULL};

static const char *need_str(const skpo_rec *r, const char *key, const char *where, uint64_t k, const char *why) {
    const char *s = skpo_rec_str(r, key);
    if (!s) {
        const char *uid = skpo_rec_str(r, F_UID);
        skpo_die("record %llu (uid %s) of %s: no '%s' string%s", (unsigned long long)k, uid ? uid : "?", where, key, why);
    }
    return s;
}

static char *xsprintf3(const char *fmt, const char *a, const char *b, const char *c) {
    size_t n = strlen(fmt) + strlen(a) + strlen(b) + strlen(c) + 1;
    char *s = skpo_xmalloc(n);
    snprintf(s, n, fmt, a, b, c);
    return s;
}

// Turn r (a copy of a direct or critique record) into a prompt record whose
// user turn is `user`, with pid "<pid>#<suffix>".
static void make_prompt(const crit_cfg *c, skpo_rec *r, const char *pid, const char *suffix, const char *user,
                        const char *of) {
    skpo_err err = {{0}};
    skpo_chat_msg msg = {"user", user};
    char *text = skpo_chat_render(c->tmpl, &msg, 1, 1, &err);
    if (!text) skpo_die("--template: %s", err.msg);
    int32_t *ids = NULL;
    size_t n = 0;
    if (skpo_tok_encode(c->tok, text, strlen(text), 1, &ids, &n, &err) != SKPO_OK)
        skpo_die("%s prompt of '%s': %s", suffix, of, err.msg);
    int bos = skpo_tok_bos_to_add(c->tok);
    if (bos >= 0 && (n == 0 || ids[0] != bos)) {
        ids = skpo_xrealloc(ids, (n + 1) * sizeof *ids);
        memmove(ids + 1, ids, n * sizeof *ids);
        ids[0] = bos, n++;
    }
    if (c->max_prompt > 0 && (long)n > c->max_prompt)
        skpo_die("%s prompt of '%s' has %zu tokens, over --max-prompt-tokens %ld", suffix, of, n, c->max_prompt);
    for (int i = 0; response_fields[i]; i++) skpo_rec_del(r, response_fields[i]);
    char *npid = skpo_xmalloc(strlen(pid) + strlen(suffix) + 2);
    sprintf(npid, "%s#%s", pid, suffix);
    skpo_rec_set_str(r, F_KIND, SKPO_KIND_PROMPT);
    skpo_rec_set_str(r, F_PID, npid);
    skpo_rec_set_str(r, F_CRITIQUE_OF, of);
    skpo_rec_set_str(r, F_TEXT, text);
    skpo_rec_set_i32s(r, F_PROMPT, ids, n);
    free(npid);
    free(ids);
    free(text);
}

static void put(skpo_writer *w, const skpo_rec *r) {
    skpo_err err = {{0}};
    if (skpo_writer_put(w, r, &err)) skpo_die("%s", err.msg);
}

// The --direct record whose uid is `uid`, or die.
static const skpo_rec *direct_of(const crit_cfg *c, const char *uid, const char *who) {
    for (size_t i = 0; i < c->ndir; i++) {
        const char *u = skpo_rec_str(&c->dir[i], F_UID);
        if (u && !strcmp(u, uid)) return &c->dir[i];
    }
    skpo_die("%s names critique_of '%s', which is not a full record of --direct %s", who, uid, c->direct);
}

static void push(skpo_rec **a, size_t *n, size_t *cap, const skpo_rec *r) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        *a = skpo_xrealloc(*a, *cap * sizeof **a);
    }
    skpo_rec_init(&(*a)[*n]);
    skpo_rec_copy(&(*a)[*n], r);
    (*n)++;
}

// critique: keep, per pid, the first record of highest reward.
static void take_direct(crit_cfg *c, const skpo_rec *r, const char *where, uint64_t k) {
    const char *pid = need_str(r, F_PID, where, k, "");
    need_str(r, F_UID, where, k, "");
    double rew, cur;
    if (!skpo_rec_float(r, F_REWARD, &rew)) skpo_die("record %llu of %s: no 'reward' (run skpo-reward first)", (unsigned long long)k, where);
    if (!isfinite(rew)) skpo_die("record %llu of %s: reward is %g, not a finite number", (unsigned long long)k, where, rew);
    for (size_t i = 0; i < c->nbest; i++) {
        if (strcmp(skpo_rec_str(&c->best[i], F_PID), pid)) continue;
        skpo_rec_float(&c->best[i], F_REWARD, &cur);
        if (rew > cur) {
            skpo_rec_free(&c->best[i]);
            skpo_rec_init(&c->best[i]);
            skpo_rec_copy(&c->best[i], r);
        }
        return;
    }
    push(&c->best, &c->nbest, &c->capbest, r);
}

static void write_critique_prompts(crit_cfg *c, skpo_writer *w) {
    for (size_t i = 0; i < c->nbest; i++) {
        skpo_rec *r = &c->best[i];
        const char *problem = skpo_rec_str(r, F_PROBLEM), *resp = skpo_rec_str(r, F_TEXT);
        const char *answer = skpo_rec_str(r, F_ANSWER);
        char *uid = skpo_xstrdup(skpo_rec_str(r, F_UID)), *pid = skpo_xstrdup(skpo_rec_str(r, F_PID));
        if (!problem || !resp) skpo_die("response '%s': no 'problem' or 'text' string to critique", uid);
        if (c->with_answer && !answer) skpo_die("response '%s': --with-answer but no 'answer' string", uid);
        char *ref = NULL;
        if (c->with_answer) {
            ref = skpo_xmalloc(strlen(answer) + 32);
            sprintf(ref, "Reference answer: %s\n", answer);
        }
        char *user = xsprintf3(critique_fmt, problem, resp, ref ? ref : "");
        make_prompt(c, r, pid, "critique", user, uid);
        put(w, r);
        free(user);
        free(ref);
        free(uid);
        free(pid);
    }
}

static void refine_one(const crit_cfg *c, const skpo_rec *r, const char *where, uint64_t k, skpo_writer *w) {
    const char *of = need_str(r, F_CRITIQUE_OF, where, k, " (not a critique from skpo-critique critique)");
    const char *crit = need_str(r, F_TEXT, where, k, " (the critique)");
    const skpo_rec *d = direct_of(c, of, "critique");
    const char *problem = skpo_rec_str(d, F_PROBLEM), *resp = skpo_rec_str(d, F_TEXT), *pid = skpo_rec_str(d, F_PID);
    if (!problem || !resp || !pid) skpo_die("direct response '%s': no 'problem', 'text' or 'pid' string", of);
    skpo_rec o;
    skpo_rec_init(&o);
    skpo_rec_copy(&o, d);
    skpo_rec_set_str(&o, F_CRITIQUE, crit);
    char *user = xsprintf3(refine_fmt, problem, resp, crit);
    make_prompt(c, &o, pid, "refine", user, of);
    put(w, &o);
    free(user);
    skpo_rec_free(&o);
}

static void attach_one(const crit_cfg *c, const skpo_rec *r, const char *where, uint64_t k, skpo_writer *w) {
    const char *of = need_str(r, F_CRITIQUE_OF, where, k, " (not a refinement from skpo-critique refine)");
    const skpo_rec *d = direct_of(c, of, "refinement");
    const char *pid = skpo_rec_str(d, F_PID), *gid = skpo_rec_str(d, F_GID);
    size_t np = 0;
    const int32_t *prompt = skpo_rec_i32s(d, F_PROMPT, &np);
    if (!pid || !gid || !prompt) skpo_die("direct response '%s': no 'pid', 'gid' or 'prompt'", of);
    if (!skpo_rec_i32s(r, F_TOKENS, &(size_t){0})) skpo_die("record %llu of %s: no 'tokens'", (unsigned long long)k, where);
    skpo_rec o;
    skpo_rec_init(&o);
    skpo_rec_copy(&o, r);
    char *uid = skpo_xmalloc(strlen(gid) + 8);
    sprintf(uid, "%s:refine", gid);
    skpo_rec_set_str(&o, F_PID, pid);
    skpo_rec_set_str(&o, F_GID, gid);
    skpo_rec_set_str(&o, F_UID, uid);
    skpo_rec_set_i32s(&o, F_PROMPT, prompt, np);
    skpo_rec_set_bool(&o, F_REFINE, true);
    put(w, &o);
    free(uid);
    skpo_rec_free(&o);
}

static void run(crit_cfg *c, const char *path, skpo_writer *w) {
    skpo_err err = {{0}};
    skpo_reader *rd;
    if (skpo_reader_open(path, &rd, &err)) skpo_die("%s", err.msg);
    skpo_rec r;
    skpo_rec_init(&r);
    skpo_status st;
    const char *on[] = {c->mode, c->with_answer ? "with-answer" : NULL, NULL};
    while ((st = skpo_reader_next_needed(rd, &r, "skpo-critique", on, &err)) == SKPO_OK) {
        const char *where = skpo_reader_name(rd);
        uint64_t k = skpo_reader_count(rd);
        if (skpo_rec_is_kind(&r, SKPO_KIND_META)) put(w, &r);
        else if (!skpo_rec_is_kind(&r, SKPO_KIND_FULL)) continue;
        else if (!strcmp(c->mode, "critique")) take_direct(c, &r, where, k);
        else if (!strcmp(c->mode, "refine")) refine_one(c, &r, where, k, w);
        else attach_one(c, &r, where, k, w);
        if (k % SKPO_FLUSH_RECORDS == 0 && skpo_writer_flush(w, &err)) skpo_die("%s", err.msg);
    }
    if (st != SKPO_EOF) skpo_die("%s", err.msg);
    skpo_rec_free(&r);
    skpo_reader_close(rd);
}

static void load_direct(crit_cfg *c) {
    skpo_err err = {{0}};
    skpo_reader *rd;
    if (skpo_reader_open(c->direct, &rd, &err)) skpo_die("--direct: %s", err.msg);
    skpo_rec r;
    skpo_rec_init(&r);
    skpo_status st;
    while ((st = skpo_reader_next(rd, &r, &err)) == SKPO_OK)
        if (skpo_rec_is_kind(&r, SKPO_KIND_FULL)) push(&c->dir, &c->ndir, &c->capdir, &r);
    if (st != SKPO_EOF) skpo_die("--direct: %s", err.msg);
    skpo_rec_free(&r);
    skpo_reader_close(rd);
    if (c->ndir == 0) skpo_die("--direct %s holds no full records", c->direct);
}

int main(int argc, char **argv) {
    crit_cfg c = {.tmpl = "plain"};
    const skpo_opt opts[] = {
        SKPO_OPT_STR("tokenizer", 0, &c.tok_dir, "DIR", "critique, refine: tokenizer folder (the policy checkpoint)"),
        SKPO_OPT_STR("template", 0, &c.tmpl, "NAME", "critique, refine: chat template of the prompts (plain)"),
        SKPO_OPT_STR("direct", 0, &c.direct, "FILE", "refine, attach: the step's rewarded direct responses"),
        SKPO_OPT_FLAG("with-answer", 0, &c.with_answer, "critique: show the gold answer to the critic (off: pure self-critique)"),
        SKPO_OPT_LONG("max-prompt-tokens", 0, &c.max_prompt, 0, 1L << 30, "N", "refuse a built prompt over N tokens (0: no limit)"),
        {0},
    };
    const char **pos = skpo_xcalloc((size_t)argc + 1, sizeof *pos);
    int npos = skpo_cli_parse(synopsis, about, opts, argc, argv, pos);
    if (npos < 1) skpo_cli_usage_error(synopsis, "no mode (critique, refine or attach)");
    c.mode = pos[0];
    int crit = !strcmp(c.mode, "critique"), ref = !strcmp(c.mode, "refine"), att = !strcmp(c.mode, "attach");
    if (!crit && !ref && !att) skpo_cli_usage_error(synopsis, "mode '%s' is not critique, refine or attach", c.mode);
    if ((crit || ref) && !c.tok_dir) skpo_cli_usage_error(synopsis, "%s needs --tokenizer DIR", c.mode);
    if ((ref || att) && !c.direct) skpo_cli_usage_error(synopsis, "%s needs --direct FILE", c.mode);
    if (crit && c.direct) skpo_cli_usage_error(synopsis, "critique reads the direct responses on stdin, not --direct");
    if (!crit && c.with_answer) skpo_cli_usage_error(synopsis, "--with-answer is for critique");
    skpo_err err = {{0}};
    if (!att) {
        skpo_chat_msg probe = {"user", ""};
        char *t = skpo_chat_render(c.tmpl, &probe, 1, 1, &err);
        if (!t) skpo_cli_usage_error(synopsis, "--template: %s", err.msg);
        free(t);
        if (skpo_tok_load(c.tok_dir, &c.tok, &err)) skpo_die("--tokenizer: %s", err.msg);
    }
    if (c.direct) load_direct(&c);
    skpo_writer *w;
    if (skpo_writer_open_fd(1, 0, &w, &err) || skpo_writer_meta(w, argc, argv, NULL, &err)) skpo_die("%s", err.msg);
    if (npos == 1) run(&c, "-", w);
    for (int i = 1; i < npos; i++) run(&c, pos[i], w);
    if (crit) write_critique_prompts(&c, w);
    if (skpo_writer_close(w, &err)) skpo_die("%s", err.msg);
    skpo_close_stdout_or_die();
    for (size_t i = 0; i < c.ndir; i++) skpo_rec_free(&c.dir[i]);
    for (size_t i = 0; i < c.nbest; i++) skpo_rec_free(&c.best[i]);
    free(c.dir);
    free(c.best);
    if (c.tok) skpo_tok_free(c.tok);
    free(pos);
    return SKPO_EXIT_OK;
}
