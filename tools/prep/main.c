/*
 * skpo-prep - dataset rows (JSON lines) to `prompt` records: the problem is put
 * in a prompt wording, rendered with a chat template and tokenized.
 *
 * Fields are found by name unless given (docs/tokenizer.md):
 *   problem  --problem-field, else "problem", else "question"
 *   answer   --answer-field, else "answer", else "final_answer", else the last
 *            \boxed{...} of "solution" (Minerva). Numbers become canonical text
 *            (27.0 -> "27"), lists are joined with ", ", and a GSM8K answer
 *            "... #### 1,600" becomes "1600".
 *   pid      --id-field, else "id", "idx" or "unique_id", else "<source>/<row>"
 *            (row counted from 0 over non-blank lines of the file).
 * Prompts longer than --max-prompt-tokens are skipped and reported on stderr,
 * never truncated. A row without a problem or an answer is an error.
 */
#include "cli.h"
#include "common.h"
#include "record.h"
#include "tokenizer.h"

#include <jansson.h>
#include <libgen.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char SYNOPSIS[] =
    "--tokenizer DIR --template NAME [--wording dapo|boxed|raw] [--problem-field F] [--answer-field F]\n"
    "       [--id-field F] [--source NAME] [--max-prompt-tokens N] [--out FILE] FILE.jsonl...";
static const char ABOUT[] =
    "Turns dataset rows into prompt records (pid, source, problem, answer, text, prompt ids)\n"
    "written to stdout or --out FILE (atomically). The problem is worded (dapo: the\n"
    "DAPO-Math-17k instruction, the default; boxed: asks for \\boxed{}; raw: as is) and\n"
    "rendered as one user turn with the chat template (qwen2.5, qwen2.5-math, llama3,\n"
    "plain) plus the assistant opener. Prompts over --max-prompt-tokens are skipped\n"
    "and reported on stderr. Field detection is described in docs/tokenizer.md.";

typedef struct prep {
    const char *dir, *tmpl, *wording, *pfield, *afield, *ifield, *source, *out;
    long max_tokens;
    const skpo_tok *tok;
    skpo_writer *w;
    size_t written, overlong;
    char *overlong_pids; // first few, for the report
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

static const json_t *first_field(const json_t *row, const char *given, const char *const *names, const char **used) {
    if (given) return *used = given, json_object_get(row, given);
    for (; *names; names++) {
        const json_t *v = json_object_get(row, *names);
        if (v && !json_is_null(v)) return *used = *names, v;
    }
    return NULL;
}

static char *row_answer(const prep *p, const json_t *row) {
    static const char *const names[] = {"answer", "final_answer", NULL};
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
    static const char *const names[] = {"id", "idx", "unique_id", NULL};
    const char *used = NULL;
    const json_t *v = first_field(row, p->ifield, names, &used);
    char *s = v ? value_text(v) : NULL;
    if (s || p->ifield) return s;
    s = skpo_xmalloc(strlen(source) + 32);
    sprintf(s, "%s/%zu", source, index);
    return s;
}

static void note_overlong(prep *p, const char *pid) {
    if (p->overlong++ >= 5) return;
    size_t n = p->overlong_pids ? strlen(p->overlong_pids) : 0;
    p->overlong_pids = skpo_xrealloc(p->overlong_pids, n + strlen(pid) + 3);
    sprintf(p->overlong_pids + n, "%s%s", n ? ", " : "", pid);
}

// Wording -> template -> ids; writes the record unless the prompt is too long.
static void prep_row(prep *p, const json_t *row, const char *source, size_t index, const char *where) {
    static const char *const pnames[] = {"problem", "question", NULL};
    const char *used = NULL;
    const char *problem = json_string_value(first_field(row, p->pfield, pnames, &used));
    if (!problem) skpo_die("%s: no problem text (field %s; see --problem-field)", where, used ? used : "problem/question");
    char *answer = row_answer(p, row), *pid = row_pid(p, row, source, index);
    if (!answer) skpo_die("%s: no answer (answer, final_answer or \\boxed{} in solution; see --answer-field)", where);
    if (!pid) skpo_die("%s: field '%s' is missing or not a string or number", where, p->ifield);
    skpo_err err = {0};
    char *user = skpo_prompt_wording(p->wording, problem, &err);
    skpo_chat_msg msg = {"user", user};
    char *text = user ? skpo_chat_render(p->tmpl, &msg, 1, 1, &err) : NULL;
    int32_t *ids;
    size_t n;
    if (!text || skpo_tok_encode(p->tok, text, strlen(text), 1, &ids, &n, &err) != SKPO_OK) skpo_die("%s: %s", where, err.msg);
    if ((long)n > p->max_tokens) note_overlong(p, pid);
    else {
        skpo_rec r;
        skpo_rec_init(&r);
        skpo_rec_set_str(&r, F_KIND, SKPO_KIND_PROMPT);
        skpo_rec_set_str(&r, F_PID, pid);
        skpo_rec_set_str(&r, F_SOURCE, source);
        skpo_rec_set_str(&r, F_PROBLEM, problem);
        skpo_rec_set_str(&r, F_ANSWER, answer);
        skpo_rec_set_str(&r, F_TEXT, text);
        skpo_rec_set_i32s(&r, F_PROMPT, ids, n);
        if (skpo_writer_put(p->w, &r, &err) != SKPO_OK) skpo_die("%s", err.msg);
        skpo_rec_free(&r);
        p->written++;
    }
    free(ids), free(text), free(user), free(answer), free(pid);
}

static void prep_file(prep *p, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) skpo_die("cannot open '%s'", path);
    char *base = skpo_xstrdup(path), *source = skpo_xstrdup(p->source ? p->source : basename(base));
    char *dot = p->source ? NULL : strstr(source, ".jsonl");
    if (dot) *dot = 0;
    char *line = NULL, where[512];
    size_t cap = 0, lineno = 0, index = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        lineno++;
        if (strspn(line, " \t\r\n") == (size_t)n) continue;
        snprintf(where, sizeof where, "%s:%zu", path, lineno);
        json_error_t je;
        json_t *row = json_loadb(line, (size_t)n, 0, &je);
        if (!json_is_object(row)) skpo_die("%s: not a JSON object%s%s", where, row ? "" : ": ", row ? "" : je.text);
        prep_row(p, row, source, index++, where);
        json_decref(row);
    }
    if (ferror(f)) skpo_die("cannot read '%s'", path);
    fclose(f);
    free(line), free(base), free(source);
}

int main(int argc, char **argv) {
    prep p = {.wording = "dapo", .max_tokens = 1024};
    const skpo_opt table[] = {
        {"tokenizer", 0, SKPO_OPT_STR, &p.dir, 0, 0, "DIR", "folder with tokenizer.json"},
        {"template", 0, SKPO_OPT_STR, &p.tmpl, 0, 0, "NAME", "chat template: qwen2.5, qwen2.5-math, llama3, plain"},
        {"wording", 0, SKPO_OPT_STR, &p.wording, 0, 0, "W", "prompt wording: dapo (default), boxed, raw"},
        {"problem-field", 0, SKPO_OPT_STR, &p.pfield, 0, 0, "F", "field with the problem text"},
        {"answer-field", 0, SKPO_OPT_STR, &p.afield, 0, 0, "F", "field with the gold answer"},
        {"id-field", 0, SKPO_OPT_STR, &p.ifield, 0, 0, "F", "field with the problem id (pid)"},
        {"source", 0, SKPO_OPT_STR, &p.source, 0, 0, "NAME", "source name (default: file name without .jsonl)"},
        {"max-prompt-tokens", 0, SKPO_OPT_INT, &p.max_tokens, 1, 1 << 24, "N", "skip longer prompts (default 1024)"},
        {"out", 'o', SKPO_OPT_STR, &p.out, 0, 0, "FILE", "write records to FILE atomically instead of stdout"},
        {0},
    };
    char **argv0 = skpo_xcalloc((size_t)argc + 1, sizeof *argv0); // the parser reorders argv
    memcpy(argv0, argv, (size_t)argc * sizeof *argv);
    int npos = skpo_cli_parse(SYNOPSIS, ABOUT, table, argc, argv);
    if (!p.dir || !p.tmpl) skpo_cli_usage_error(SYNOPSIS, "--tokenizer and --template are required");
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
        skpo_writer_meta(p.w, argc, argv0, NULL, &err) != SKPO_OK)
        skpo_die("%s", err.msg);
    for (int i = 0; i < npos; i++) prep_file(&p, argv[1 + i]);
    if (skpo_writer_close(p.w, &err) != SKPO_OK) skpo_die("%s", err.msg);
    if (p.overlong)
        skpo_warn("skipped %zu prompts longer than %ld tokens (%s%s)", p.overlong, p.max_tokens, p.overlong_pids,
                  p.overlong > 5 ? ", ..." : "");
    fprintf(stderr, "%s: wrote %zu prompt records\n", skpo_progname(), p.written);
    free(p.overlong_pids);
    free(argv0);
    skpo_tok_free(tok);
    if (!p.out) skpo_close_stdout_or_die();
    return SKPO_EXIT_OK;
}
