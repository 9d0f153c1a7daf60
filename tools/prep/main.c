/*
 * skpo-prep - dataset rows (JSON lines) to `prompt` records: the problem is put
 * in a prompt wording, rendered with a chat template and tokenized.
 *
 * Fields are found by name unless given (docs/tokenizer.md; flags take dotted
 * paths):
 *   problem  --problem-field, else "problem", else "question", else a verl /
 *            DAPO-Math-17k "prompt" message list, rendered as stored
 *   answer   --answer-field, else "answer", else "final_answer", else
 *            "reward_model.ground_truth", else the last \boxed{...} of
 *            "solution" (Minerva). Numbers become canonical text
 *            (27.0 -> "27"), lists are joined with ", ", and a GSM8K answer
 *            "... #### 1,600" becomes "1600".
 *   pid      --id-field, else "id", "idx", "unique_id" or "extra_info.index",
 *            else "<source>/<row>"
 *            (row counted from 0 over non-blank lines of the file).
 * Prompts longer than --max-prompt-tokens are skipped and reported on stderr,
 * never truncated. Other scalar fields of a row are copied unless --no-extra.
 * --dedup drops rows whose rendered prompt was already written (DAPO-Math-17k's
 * ~1.79M rows hold ~17.4k distinct prompts).
 * A row without a problem or an answer is an error. When the
 * tokenizer's post-processor adds a BOS (Llama 3) and the rendered prompt does
 * not start with it (the plain template), it is put in front, as HF's
 * tokenizer(text) would.
 */
#include "base/cli.h"
#include "base/common.h"
#include "base/strmap.h"
#include "prep_ood.h"
#include "record/record.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <libgen.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char SYNOPSIS[] =
    "--tokenizer DIR --template NAME [--wording dapo|boxed|raw] [--problem-field F] [--answer-field F]\n"
    "       [--id-field F] [--source NAME] [--max-prompt-tokens N] [--dedup] [--no-extra] [--after DATE] [--before DATE]\n"
    "       [--out FILE] FILE.jsonl...";
static const char ABOUT[] =
    "Turns dataset rows into prompt records (pid, source, problem, answer, text, prompt ids)\n"
    "written to stdout or --out FILE (atomically). The problem is worded (dapo: the\n"
    "DAPO-Math-17k instruction, the default; boxed: asks for \\boxed{}; raw: as is) and\n"
    "rendered as one user turn with the chat template (qwen2.5, qwen2, qwen2.5-math, llama3,\n"
    "plain) plus the assistant opener. Prompts over --max-prompt-tokens are skipped\n"
    "and reported on stderr. The row's other scalar fields (level, subject, ...) are\n"
    "kept unless --no-extra. Field detection is described in docs/tokenizer.md.\n"
    "MMLU-Pro rows (question + options) get MMLU-Pro's CoT prompt and task choice; LiveCodeBench rows\n"
    "(question_content + test cases) get LiveCodeBench's prompt, task code and their tests; --after/--before\n"
    "keep LiveCodeBench problems with after <= contest_date < before (docs/eval.md).";

typedef struct prep {
    const char *dir, *tmpl, *wording, *pfield, *afield, *ifield, *source, *out;
    long max_tokens;
    int no_extra, dedup;
    ood_opts ood;
    size_t out_of_window;
    const skpo_tok *tok;
    skpo_writer *w;
    size_t written, overlong, dups;
    char *overlong_pids, *dup_pids; // first few, for the reports
    skpo_strmap seen;               // pids written (the set is the keys; SKPO_STRMAP_COPY)
    uint64_t *texts;                // --dedup: set of 64-bit hashes of prompt texts (0 = empty)
    size_t texts_cap, texts_n, repeats;
} prep;

// Canonical text of a JSON scalar or list: numbers as the shortest round-trip
// decimal with no ".0", lists joined by ", ". NULL for other types.
static char *value_text(const json_t *v) {
    char buf[512];
    if (json_is_string(v)) return skpo_xstrndup(json_string_value(v), json_string_length(v));
    if (json_is_integer(v)) {
        snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
        return skpo_xstrdup(buf);
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d == 0) d = 0; // no "-0"
        if (isfinite(d) && d == floor(d)) snprintf(buf, sizeof buf, "%.0f", d);
        else
            for (int p = 15; p <= 17; p++) {
                snprintf(buf, sizeof buf, "%.*g", p, d);
                if (strtod(buf, NULL) == d) break;
            }
        return skpo_xstrdup(buf);
    }
    if (!json_is_array(v) || json_array_size(v) == 0) return NULL;
    char *out = NULL;
    size_t len = 0, cap = 0, i;
    json_t *x;
    json_array_foreach(v, i, x) {
        char *s = value_text(x);
        if (!s) { free(out); return NULL; }
        size_t n = strlen(s);
        skpo_xgrow((void **)&out, &cap, len + n + 3, 1);
        len += (size_t)sprintf(out + len, "%s%s", i ? ", " : "", s);
        free(s);
    }
    return out;
}

// Content of the last \boxed{...} in s (braces balanced), or NULL.
static char *last_boxed(const char *s) {
    const char *p = NULL, *q = s;
    while ((q = strstr(q, "\\boxed")) != NULL) p = q, q += 6;
    if (!p) return NULL;
    p += 6;
    while (*p == ' ') p++;
    if (*p != '{') return NULL;
    int depth = 0;
    for (const char *c = p; *c; c++) {
        if (*c == '{') depth++;
        else if (*c == '}' && --depth == 0) return skpo_xstrndup(p + 1, (size_t)(c - p - 1));
    }
    return NULL;
}

// GSM8K: the text after the last "####", trimmed, without thousands commas.
static char *gsm8k_answer(const char *s) {
    const char *p = s, *q;
    while ((q = strstr(p, "####")) != NULL) p = q + 4;
    while (*p == ' ' || *p == '\t' || *p == '\n') p++;
    char *a = skpo_xmalloc(strlen(p) + 1);
    size_t n = 0;
    for (; *p; p++)
        if (*p != ',') a[n++] = *p;
    while (n > 0 && strchr(" \t\r\n", a[n - 1])) n--;
    a[n] = 0;
    return a;
}

// A field by dotted path ("reward_model.ground_truth"; a number indexes an array).
static const json_t *field_path(const json_t *row, const char *path) {
    char *dup = skpo_xstrdup(path), *save = NULL;
    const json_t *v = row;
    for (char *k = strtok_r(dup, ".", &save); k && v; k = strtok_r(NULL, ".", &save)) {
        long i;
        if (json_is_array(v) && skpo_parse_long(k, 0, 1L << 30, &i) == 0) v = json_array_get(v, (size_t)i);
        else v = json_object_get(v, k);
    }
    free(dup);
    return v;
}

static const json_t *first_field(const json_t *row, const char *given, const char *const *names, const char **used) {
    if (given) return *used = given, field_path(row, given);
    for (; *names; names++) {
        const json_t *v = field_path(row, *names);
        if (v && !json_is_null(v)) return *used = *names, v;
    }
    return NULL;
}

static char *row_answer(const prep *p, const json_t *row) {
    static const char *const names[] = {"answer", "final_answer", "reward_model.ground_truth", NULL};
    const char *used = NULL;
    const json_t *v = first_field(row, p->afield, names, &used);
    if (!v) {
        const char *sol = json_string_value(json_object_get(row, "solution"));
        return p->afield || !sol ? NULL : last_boxed(sol);
    }
    if (json_is_string(v) && strstr(json_string_value(v), "####")) return gsm8k_answer(json_string_value(v));
    return value_text(v);
}

static char *row_pid(const prep *p, const json_t *row, const char *source, size_t index) {
    static const char *const names[] = {"id", "idx", "unique_id", "extra_info.index", NULL};
    const char *used = NULL;
    const json_t *v = first_field(row, p->ifield, names, &used);
    char *s = v ? value_text(v) : NULL;
    if (s || p->ifield) return s;
    s = skpo_xmalloc(strlen(source) + 32);
    sprintf(s, "%s/%zu", source, index);
    return s;
}

// Append pid to a ", "-separated list of at most 5 (count counts them all).
static void note_pid(size_t *count, char **list, const char *pid) {
    if ((*count)++ >= 5) return;
    size_t n = *list ? strlen(*list) : 0;
    *list = skpo_xrealloc(*list, n + strlen(pid) + 3);
    sprintf(*list + n, "%s%s", n ? ", " : "", pid);
}

// --dedup: adds the hash of text to the set; returns 0 if it was there. 64-bit
// hashes (FNV-1a, then mixed) make a false "repeat" in a few million prompts
// vanishingly unlikely and keep memory at 16 bytes a prompt.
static int text_insert(prep *p, const char *text) {
    if ((p->texts_n + 1) * 2 > p->texts_cap) {
        uint64_t *old = p->texts;
        size_t oc = p->texts_cap;
        p->texts_cap = oc ? oc * 2 : 4096;
        p->texts = skpo_xcalloc(p->texts_cap, sizeof *p->texts);
        for (size_t i = 0; i < oc; i++)
            if (old[i])
                for (size_t j = old[i] & (p->texts_cap - 1);; j = (j + 1) & (p->texts_cap - 1))
                    if (!p->texts[j]) { p->texts[j] = old[i]; break; }
        free(old);
    }
    uint64_t h = skpo_hash_str(text);
    h ^= h >> 29, h *= 0xbf58476d1ce4e5b9ull, h ^= h >> 32;
    h |= 1;
    for (size_t i = h & (p->texts_cap - 1);; i = (i + 1) & (p->texts_cap - 1)) {
        if (!p->texts[i]) { p->texts[i] = h, p->texts_n++; return 1; }
        if (p->texts[i] == h) return 0;
    }
}

// HF's add_special_tokens for tokenizers whose post-processor starts with a
// BOS (Llama 3 with the plain template): put it in front of ids and text.
static void add_bos(const skpo_tok *tok, int bos, char **text, int32_t **ids, size_t *n) {
    const char *s = skpo_tok_str(tok, bos);
    size_t ls = strlen(s), lt = strlen(*text);
    char *t = skpo_xmalloc(ls + lt + 1);
    memcpy(t, s, ls);
    memcpy(t + ls, *text, lt + 1);
    free(*text);
    *text = t;
    *ids = skpo_xrealloc(*ids, (*n + 1) * sizeof **ids);
    memmove(*ids + 1, *ids, *n * sizeof **ids);
    (*ids)[0] = bos;
    (*n)++;
}

// Other scalar fields of the row (level, subject, type, url, solution, ...) are
// kept in the record, except the field-name candidates read above and names
// the record schema defines (their types are fixed there).
static void add_extra(const prep *p, skpo_rec *r, const json_t *row) {
    static const char *const skip[] = {"problem", "question", "answer", "final_answer", "id", "idx", "unique_id",
                                       // MMLU-Pro / LiveCodeBench: in problem, text or tests already
                                       "question_content", "public_test_cases", "private_test_cases", "metadata",
                                       "cot_content", "question_id", NULL};
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)row, k, v) {
        int drop = skpo_schema_find(k) != NULL || (p->pfield && !strcmp(k, p->pfield)) ||
                   (p->afield && !strcmp(k, p->afield)) || (p->ifield && !strcmp(k, p->ifield));
        for (int i = 0; skip[i] && !drop; i++) drop = !strcmp(k, skip[i]);
        if (drop) continue;
        if (json_is_string(v)) skpo_rec_set_strn(r, k, json_string_value(v), json_string_length(v));
        else if (json_is_integer(v)) skpo_rec_set_int(r, k, json_integer_value(v));
        else if (json_is_real(v)) skpo_rec_set_float(r, k, json_real_value(v));
        else if (json_is_boolean(v)) skpo_rec_set_bool(r, k, json_is_true(v));
    }
}

// verl / DAPO-Math-17k rows carry the conversation, already worded, in
// "prompt": [{"role", "content"}...]. Returns the message count (0 if not).
static int row_messages(const json_t *row, skpo_chat_msg *msgs, int max) {
    const json_t *a = json_object_get(row, "prompt"), *m;
    size_t i;
    if (!json_is_array(a) || json_array_size(a) == 0 || json_array_size(a) > (size_t)max) return 0;
    json_array_foreach(a, i, m) {
        msgs[i].role = json_string_value(json_object_get(m, "role"));
        msgs[i].content = json_string_value(json_object_get(m, "content"));
        if (!msgs[i].role || !msgs[i].content) return 0;
    }
    return (int)i;
}

// The problem inside a user message worded with `wording` (DAPO-Math-17k's
// rows hold the DAPO-worded message only), or NULL when it is not so worded.
static char *unword(const char *wording, const char *content) {
    char *w = skpo_prompt_wording(wording, "\001", NULL), *mark = w ? strchr(w, '\001') : NULL;
    char *out = NULL;
    if (mark) {
        size_t head = (size_t)(mark - w), tail = strlen(mark + 1), n = strlen(content);
        if (n >= head + tail && !strncmp(content, w, head) && !strcmp(content + n - tail, mark + 1))
            out = skpo_xstrndup(content + head, n - head - tail);
    }
    free(w);
    return out;
}

// Wording -> template -> ids; writes the record unless the prompt is too long.
static skpo_status prep_row(prep *p, const json_t *row, const char *source, size_t index, const char *where, skpo_err *err) {
    static const char *const pnames[] = {"problem", "question", NULL};
    const char *used = NULL;
    skpo_chat_msg msgs[16];
    int nmsg = 0;
    ood_row od = {0};
    int orc = p->pfield || p->afield ? 0 : ood_parse(row, &p->ood, &od, where, err);
    if (orc < 0) return SKPO_EFORMAT;
    if (orc == 2) return p->out_of_window++, SKPO_OK;
    const char *problem = orc ? od.problem : json_string_value(first_field(row, p->pfield, pnames, &used));
    char *bare = NULL; // the problem without the row's own wording
    if (orc) {
        if (od.system) msgs[nmsg++] = (skpo_chat_msg){"system", od.system};
        msgs[nmsg++] = (skpo_chat_msg){"user", od.user};
    }
    if (!problem && !p->pfield && (nmsg = row_messages(row, msgs, 16)) > 0) {
        for (int i = 0; i < nmsg; i++)
            if (!strcmp(msgs[i].role, "user")) problem = msgs[i].content;
        if (!problem) nmsg = 0;
        else if ((bare = unword("dapo", problem)) != NULL) problem = bare;
    }
    if (!problem)
        return skpo_err_set(err, SKPO_ENOTFOUND, "%s: no problem text (field %s; see --problem-field)", where,
                            used ? used : "problem/question/prompt");
    char *answer = orc ? (od.answer ? skpo_xstrdup(od.answer) : NULL) : row_answer(p, row);
    char *pid = orc && od.pid && !p->ifield ? skpo_xstrdup(od.pid) : row_pid(p, row, source, index), *user = NULL, *text = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    skpo_status st = SKPO_OK;
    skpo_err e = {0};
    if (!nmsg && (user = skpo_prompt_wording(p->wording, problem, &e)) != NULL) msgs[0] = (skpo_chat_msg){"user", user}, nmsg = 1;
    if (!answer && !(orc && od.tests)) st = skpo_err_set(err, SKPO_ENOTFOUND, "%s: no answer (answer, final_answer or \\boxed{} in solution; see --answer-field)", where);
    else if (!pid) st = skpo_err_set(err, SKPO_ENOTFOUND, "%s: field '%s' is missing or not a string or number", where, p->ifield);
    else if (!nmsg || !(text = skpo_chat_render(p->tmpl, msgs, nmsg, 1, &e)) ||
             skpo_tok_encode(p->tok, text, strlen(text), 1, &ids, &n, &e) != SKPO_OK)
        st = skpo_err_set(err, SKPO_EFORMAT, "%s: %s", where, e.msg);
    int bos = skpo_tok_bos_to_add(p->tok);
    if (st == SKPO_OK && bos >= 0 && (n == 0 || ids[0] != bos)) add_bos(p->tok, bos, &text, &ids, &n);
    if (st == SKPO_OK && (long)n > p->max_tokens) note_pid(&p->overlong, &p->overlong_pids, pid);
    else if (st == SKPO_OK && p->dedup && !text_insert(p, text)) p->repeats++;
    else if (st == SKPO_OK) {
        int added;
        skpo_strmap_add(&p->seen, pid, 0, &added);
        if (!added) note_pid(&p->dups, &p->dup_pids, pid);
        skpo_rec r;
        skpo_rec_init(&r);
        skpo_rec_set_str(&r, F_KIND, SKPO_KIND_PROMPT);
        skpo_rec_set_str(&r, F_PID, pid);
        skpo_rec_set_str(&r, F_SOURCE, source);
        skpo_rec_set_str(&r, F_PROBLEM, problem);
        if (answer) skpo_rec_set_str(&r, F_ANSWER, answer);
        skpo_rec_set_str(&r, F_TEXT, text);
        skpo_rec_set_i32s(&r, F_PROMPT, ids, n);
        if (!p->no_extra) add_extra(p, &r, row);
        if (orc) {
            skpo_rec_set_str(&r, F_TASK, od.task);
            if (od.tests) skpo_rec_set_str(&r, F_TESTS, od.tests);
            if (od.category) skpo_rec_set_str(&r, F_CATEGORY, od.category);
            if (od.difficulty) skpo_rec_set_str(&r, F_DIFFICULTY, od.difficulty);
        }
        st = skpo_writer_put(p->w, &r, err);
        skpo_rec_free(&r);
        p->written += st == SKPO_OK;
    }
    free(ids), free(text), free(user), free(answer), free(pid), free(bare);
    ood_row_free(&od);
    return st;
}

static skpo_status prep_file(prep *p, const char *path, skpo_err *err) {
    FILE *f = fopen(path, "r");
    if (!f) return skpo_err_set(err, SKPO_ENOTFOUND, "cannot open '%s'", path);
    char *base = skpo_xstrdup(path), *source = skpo_xstrdup(p->source ? p->source : basename(base));
    char *dot = p->source ? NULL : strstr(source, ".jsonl");
    if (dot) *dot = 0;
    char *line = NULL, where[512];
    size_t cap = 0, lineno = 0, index = 0;
    ssize_t n;
    skpo_status st = SKPO_OK;
    while (st == SKPO_OK && (n = getline(&line, &cap, f)) > 0) {
        lineno++;
        if (strspn(line, " \t\r\n") == (size_t)n) continue;
        snprintf(where, sizeof where, "%s:%zu", path, lineno);
        json_error_t je;
        json_t *row = json_loadb(line, (size_t)n, 0, &je);
        if (!json_is_object(row)) st = skpo_err_set(err, SKPO_EFORMAT, "%s: not a JSON object%s%s", where, row ? "" : ": ", row ? "" : je.text);
        else st = prep_row(p, row, source, index++, where, err);
        json_decref(row);
    }
    if (st == SKPO_OK && ferror(f)) st = skpo_err_set(err, SKPO_EIO, "cannot read '%s'", path);
    fclose(f);
    free(line), free(base), free(source);
    return st;
}

int main(int argc, char **argv) {
    prep p = {.wording = "dapo", .max_tokens = 1024, .seen.copy = SKPO_STRMAP_COPY};
    const skpo_opt table[] = {
        SKPO_OPT_STR("tokenizer", 0, &p.dir, "DIR", "folder with tokenizer.json"),
        SKPO_OPT_STR("template", 0, &p.tmpl, "NAME", "chat template: qwen2.5, qwen2, qwen2.5-math, llama3, plain"),
        SKPO_OPT_STR("wording", 0, &p.wording, "W", "prompt wording: dapo (default), boxed, raw"),
        SKPO_OPT_STR("problem-field", 0, &p.pfield, "F", "field with the problem text"),
        SKPO_OPT_STR("answer-field", 0, &p.afield, "F", "field with the gold answer"),
        SKPO_OPT_STR("id-field", 0, &p.ifield, "F", "field with the problem id (pid)"),
        SKPO_OPT_STR("source", 0, &p.source, "NAME", "source name (default: file name without .jsonl)"),
        SKPO_OPT_LONG("max-prompt-tokens", 0, &p.max_tokens, 1, 1 << 24, "N", "skip longer prompts (default 1024)"),
        SKPO_OPT_STR("out", 'o', &p.out, "FILE", "write records to FILE atomically instead of stdout"),
        SKPO_OPT_FLAG("no-extra", 0, &p.no_extra, "do not copy the row's other fields into the record"),
        SKPO_OPT_FLAG("dedup", 0, &p.dedup, "skip rows whose rendered prompt repeats an earlier one"),
        SKPO_OPT_STR("after", 0, &p.ood.after, "DATE", "LiveCodeBench: keep problems with contest_date >= DATE (YYYY-MM-DD)"),
        SKPO_OPT_STR("before", 0, &p.ood.before, "DATE", "LiveCodeBench: keep problems with contest_date < DATE"),
        {0},
    };
    const char **pos = skpo_xcalloc((size_t)argc, sizeof *pos);
    int npos = skpo_cli_parse(SYNOPSIS, ABOUT, table, argc, argv, pos);
    if (!p.dir || !p.tmpl) skpo_cli_usage_error(SYNOPSIS, "--tokenizer and --template are required");
    const char *dates[2] = {p.ood.after, p.ood.before};
    for (int i = 0; i < 2; i++)
        if (dates[i] && (strlen(dates[i]) != 10 || dates[i][4] != '-' || dates[i][7] != '-' ||
                         strspn(dates[i], "0123456789-") != 10))
            skpo_cli_usage_error(SYNOPSIS, "--%s: '%s' is not YYYY-MM-DD", i ? "before" : "after", dates[i]);
    if (npos == 0) skpo_cli_usage_error(SYNOPSIS, "no input FILE");
    skpo_err err = {0};
    skpo_chat_msg probe = {"user", "x"};
    char *t = skpo_chat_render(p.tmpl, &probe, 1, 1, &err), *w = t ? skpo_prompt_wording(p.wording, "x", &err) : NULL;
    if (!t || !w) skpo_cli_usage_error(SYNOPSIS, "%s", err.msg);
    free(t), free(w);
    skpo_tok *tok;
    if (skpo_tok_load(p.dir, &tok, &err) != SKPO_OK) skpo_die("%s", err.msg);
    p.tok = tok;
    if ((p.out ? skpo_writer_open_file(p.out, 0, &p.w, &err) : skpo_writer_open_fd(1, 0, &p.w, &err)) != SKPO_OK ||
        skpo_writer_meta(p.w, argc, argv, NULL, &err) != SKPO_OK)
        skpo_die("%s", err.msg);
    for (int i = 0; i < npos; i++)
        if (prep_file(&p, pos[i], &err) != SKPO_OK) {
            skpo_writer_abort(p.w); // no half-written --out file
            skpo_die("%s", err.msg);
        }
    if (skpo_writer_close(p.w, &err) != SKPO_OK) skpo_die("%s", err.msg);
    if (p.overlong)
        skpo_warn("skipped %zu prompts longer than %ld tokens (%s%s)", p.overlong, p.max_tokens, p.overlong_pids,
                  p.overlong > 5 ? ", ..." : "");
    if (p.repeats) fprintf(stderr, "%s: --dedup skipped %zu rows whose prompt repeats an earlier one\n", skpo_progname(), p.repeats);
    if (p.dups)
        skpo_warn("%zu records repeat a pid written before (%s%s); give each file its own run or --id-field", p.dups,
                  p.dup_pids, p.dups > 5 ? ", ..." : "");
    if (p.out_of_window)
        fprintf(stderr, "%s: skipped %zu LiveCodeBench problems outside the contest-date window\n", skpo_progname(), p.out_of_window);
    fprintf(stderr, "%s: wrote %zu prompt records\n", skpo_progname(), p.written);
    skpo_strmap_free(&p.seen);
    free(p.texts), free(p.overlong_pids), free(p.dup_pids);
    free(pos);
    skpo_tok_free(tok);
    if (!p.out) skpo_close_stdout_or_die();
    return SKPO_EXIT_OK;
}
