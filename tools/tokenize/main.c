/*
 * skpo-tokenize - JSON lines through a Hugging Face tokenizer: {"text"} gets
 * "ids", --decode gives {"ids"} a "text", --chat renders {"messages"} with a
 * chat template and adds "text" and "ids". Every other key is kept, in order.
 * This tool speaks JSON lines (for people and scripts), not record streams.
 */
#include "base/cli.h"
#include "base/common.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char SYNOPSIS[] =
    "--tokenizer DIR [--decode | --chat [--template NAME]] [--no-special] [--skip-special] [--stats] [FILE...]";
static const char ABOUT[] =
    "Reads JSON lines (FILE or stdin) and writes them back with tokenizer output added:\n"
    "  default   {\"text\": ...} -> adds \"ids\" (special-token strings in the text are\n"
    "            matched unless --no-special)\n"
    "  --decode  {\"ids\": [...]} -> adds \"text\" (--skip-special drops special tokens)\n"
    "  --chat    {\"messages\": [{\"role\", \"content\"}...]} -> renders them with --template\n"
    "            (qwen2.5, qwen2, qwen2.5-math, llama3, plain; with the assistant opener unless\n"
    "            --no-generation-prompt) and adds \"text\" and \"ids\"\n"
    "--stats prints the encode throughput on stderr.";

typedef struct opts {
    const char *dir, *tmpl;
    int decode, chat, no_special, skip_special, stats, no_gen;
} opts;

typedef struct counters {
    double secs;
    size_t bytes, tokens;
    skpo_err err; // the message a failing line returns points here
} counters;

static json_t *ids_json(const int32_t *ids, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

static const char *add_ids(const skpo_tok *t, json_t *o, const char *text, size_t len, const opts *op, counters *c) {
    int32_t *ids;
    size_t n;
    double t0 = skpo_now();
    if (skpo_tok_encode(t, text, len, !op->no_special, &ids, &n, &c->err) != SKPO_OK) return c->err.msg;
    c->secs += skpo_now() - t0;
    c->bytes += len, c->tokens += n;
    json_object_set_new(o, "ids", ids_json(ids, n));
    free(ids);
    return NULL;
}

static const char *do_decode(const skpo_tok *t, json_t *o, const opts *op) {
    json_t *a = json_object_get(o, "ids"), *v;
    if (!json_is_array(a)) return "no \"ids\" array";
    size_t i, n = json_array_size(a), len;
    int32_t *ids = skpo_xmalloc((n + 1) * sizeof *ids);
    json_array_foreach(a, i, v) {
        json_int_t x = json_integer_value(v);
        if (!json_is_integer(v) || x < 0 || x >= skpo_tok_vocab_size(t)) {
            free(ids);
            return "\"ids\" holds a value that is not a token id of this tokenizer";
        }
        ids[i] = (int32_t)x;
    }
    char *text = skpo_tok_decode(t, ids, n, op->skip_special, &len);
    json_object_set_new(o, "text", json_stringn(text, len));
    free(text);
    free(ids);
    return NULL;
}

static const char *do_chat(const skpo_tok *t, json_t *o, const opts *op, counters *c) {
    json_t *a = json_object_get(o, "messages"), *m;
    if (!json_is_array(a)) return "no \"messages\" array";
    size_t i, n = json_array_size(a);
    skpo_chat_msg *msgs = skpo_xcalloc(n + 1, sizeof *msgs);
    json_array_foreach(a, i, m) {
        msgs[i].role = json_string_value(json_object_get(m, "role"));
        msgs[i].content = json_string_value(json_object_get(m, "content"));
    }
    char *text = skpo_chat_render(op->tmpl, msgs, (int)n, !op->no_gen, &c->err);
    free(msgs);
    if (!text) return c->err.msg;
    json_object_set_new(o, "text", json_string(text));
    const char *bad = add_ids(t, o, text, strlen(text), op, c);
    free(text);
    return bad;
}

static const char *do_line(const skpo_tok *t, json_t *o, const opts *op, counters *c) {
    if (!json_is_object(o)) return "not a JSON object";
    if (op->decode) return do_decode(t, o, op);
    if (op->chat) return do_chat(t, o, op, c);
    json_t *s = json_object_get(o, "text");
    if (!json_is_string(s)) return "no \"text\" string";
    return add_ids(t, o, json_string_value(s), json_string_length(s), op, c);
}

static void run_file(const skpo_tok *t, const char *path, const opts *op, counters *c) {
    FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
    const char *name = strcmp(path, "-") ? path : "stdin";
    if (!f) skpo_die("cannot open '%s'", path);
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        lineno++;
        if (strspn(line, " \t\r\n") == (size_t)n) continue;
        json_error_t je;
        json_t *o = json_loadb(line, (size_t)n, JSON_ALLOW_NUL, &je);
        if (!o) skpo_die("%s:%zu: not JSON: %s", name, lineno, je.text);
        const char *bad = do_line(t, o, op, c);
        if (bad) skpo_die("%s:%zu: %s", name, lineno, bad);
        char *out = json_dumps(o, JSON_COMPACT | JSON_ENCODE_ANY);
        fputs(out, stdout);
        fputc('\n', stdout);
        free(out);
        json_decref(o);
    }
    if (ferror(f)) skpo_die("cannot read '%s'", name);
    free(line);
    if (f != stdin) fclose(f);
    fflush(stdout);
}

int main(int argc, char **argv) {
    opts op = {.tmpl = "qwen2.5"};
    const skpo_opt table[] = {
        SKPO_OPT_STR("tokenizer", 0, &op.dir, "DIR", "folder with tokenizer.json (+ tokenizer_config.json)"),
        SKPO_OPT_FLAG("decode", 0, &op.decode, "ids -> text"),
        SKPO_OPT_FLAG("chat", 0, &op.chat, "render \"messages\" with --template, then encode"),
        SKPO_OPT_STR("template", 0, &op.tmpl, "NAME", "chat template for --chat (default qwen2.5)"),
        SKPO_OPT_FLAG("no-generation-prompt", 0, &op.no_gen, "--chat: no assistant opener at the end"),
        SKPO_OPT_FLAG("no-special", 0, &op.no_special, "encode special-token strings as plain text"),
        SKPO_OPT_FLAG("skip-special", 0, &op.skip_special, "--decode: leave special tokens out"),
        SKPO_OPT_FLAG("stats", 0, &op.stats, "print bytes, tokens and encode MB/s on stderr"),
        {0},
    };
    const char **pos = skpo_xcalloc((size_t)argc, sizeof *pos);
    int npos = skpo_cli_parse(SYNOPSIS, ABOUT, table, argc, argv, pos);
    if (!op.dir) skpo_cli_usage_error(SYNOPSIS, "--tokenizer is required");
    if (op.decode && op.chat) skpo_cli_usage_error(SYNOPSIS, "--decode and --chat exclude each other");
    skpo_tok *t;
    skpo_err err = {0};
    if (skpo_tok_load(op.dir, &t, &err) != SKPO_OK) skpo_die("%s", err.msg);
    counters c = {0};
    for (int i = 0; i < (npos ? npos : 1); i++) run_file(t, npos ? pos[i] : "-", &op, &c);
    free(pos);
    if (op.stats)
        fprintf(stderr, "%s: encoded %zu bytes into %zu tokens in %.3f s (%.2f MB/s)\n", skpo_progname(), c.bytes, c.tokens,
                c.secs, c.secs > 0 ? c.bytes / 1e6 / c.secs : 0.0);
    skpo_tok_free(t);
    skpo_close_stdout_or_die();
    return SKPO_EXIT_OK;
}
