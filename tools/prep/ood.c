/*
 * ood.c - skpo-prep for the out-of-domain benchmarks, from their official row
 * formats (docs/eval.md says where the files come from):
 *
 * MMLU-Pro (TIGER-Lab/MMLU-Pro): {question_id, question, options[<= 10],
 *   answer (letter), answer_index, cot_content, category, src}. Options "N/A"
 *   are dropped as MMLU-Pro's preprocess does; the user turn is MMLU-Pro's
 *   zero-shot CoT prompt: the instruction naming the category and asking for
 *   "the answer is (X)", then "Question:\n...\nOptions:\nA. ...\n" and
 *   "Answer: Let's think step by step." (format_cot_example). task = choice.
 * LiveCodeBench (livecodebench/code_generation_lite): {question_title,
 *   question_content, platform, question_id, contest_id, contest_date,
 *   starter_code, difficulty, public_test_cases, private_test_cases, metadata}.
 *   Test cases are JSON strings of [{input, output, testtype}]; the private
 *   ones of the official release are base64(zlib(pickle(json string))), which
 *   is decoded here (zlib, and the pickle opcodes a pickled str uses; anything
 *   else is an error naming the row). metadata's func_name makes the problem
 *   functional. The prompt is LiveCodeBench's chat prompt (system message and
 *   get_generic_question_template_answer). task = code, tests = the
 *   input_output JSON of core/verify_task.h (public then private tests).
 */
#include "base/common.h"
#include "prep_ood.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static const char MMLU_HEAD[] =
    "The following are multiple choice questions (with answers) about %s. Think step by step and then finish your "
    "answer with \"the answer is (X)\" where X is the correct letter choice.\n\n";
static const char LCB_SYSTEM[] =
    "You are an expert Python programmer. You will be given a question (problem specification) and will generate a "
    "correct Python program that matches the specification and passes all tests. You will NOT return anything except "
    "for the program.";
static const char LCB_WITH_STARTER[] =
    "You will use the following starter code to write the solution to the problem and enclose your code within delimiters.";
static const char LCB_WITHOUT_STARTER[] =
    "Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test on the sample "
    "inputs). Enclose your code within delimiters as follows.";

typedef struct sbuf { char *s; size_t n, cap; } sbuf;
static void put(sbuf *b, const char *s, size_t n) {
    skpo_xgrow((void **)&b->s, &b->cap, b->n + n + 1, 1);
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}
static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

void ood_row_free(ood_row *o) {
    free(o->problem), free(o->answer), free(o->system), free(o->user), free(o->tests), free(o->pid);
    free(o->category), free(o->difficulty);
    memset(o, 0, sizeof *o);
}

static char *str_of(const json_t *v) {
    if (json_is_string(v)) return skpo_xstrndup(json_string_value(v), json_string_length(v));
    if (json_is_integer(v)) {
        char b[32];
        snprintf(b, sizeof b, "%lld", (long long)json_integer_value(v));
        return skpo_xstrdup(b);
    }
    return NULL;
}

static int mmlu_pro(const json_t *row, ood_row *o, const char *where, skpo_err *err) {
    const json_t *opts = json_object_get(row, "options"), *q = json_object_get(row, "question");
    const char *cat = json_string_value(json_object_get(row, "category"));
    o->answer = str_of(json_object_get(row, "answer"));
    const json_t *ai = json_object_get(row, "answer_index");
    if (!o->answer && json_is_integer(ai) && json_integer_value(ai) >= 0 && json_integer_value(ai) < SKPO_CHOICE_LETTERS) {
        char l[2] = {(char)('A' + json_integer_value(ai)), 0};
        o->answer = skpo_xstrdup(l);
    }
    if (!o->answer || strlen(o->answer) != 1 || o->answer[0] < 'A' || o->answer[0] >= 'A' + SKPO_CHOICE_LETTERS) {
        skpo_err_set(err, SKPO_EFORMAT, "%s: MMLU-Pro row without an answer letter (answer or answer_index)", where);
        return -1;
    }
    sbuf p = {0}, u = {0};
    puts_(&p, json_string_value(q));
    puts_(&p, "\nOptions:\n");
    size_t i, k = 0;
    json_t *v;
    json_array_foreach(opts, i, v) {
        if (!json_is_string(v)) {
            free(p.s);
            skpo_err_set(err, SKPO_EFORMAT, "%s: MMLU-Pro option %zu is not a string", where, i);
            return -1;
        }
        if (!strcmp(json_string_value(v), "N/A")) continue; // MMLU-Pro's preprocess
        if (k >= SKPO_CHOICE_LETTERS) {
            free(p.s);
            skpo_err_set(err, SKPO_EFORMAT, "%s: more than %d options", where, SKPO_CHOICE_LETTERS);
            return -1;
        }
        char head[8];
        snprintf(head, sizeof head, "%c. ", (char)('A' + k++));
        puts_(&p, head);
        puts_(&p, json_string_value(v));
        puts_(&p, "\n");
    }
    char *h = skpo_xmalloc(sizeof MMLU_HEAD + (cat ? strlen(cat) : 8));
    sprintf(h, MMLU_HEAD, cat ? cat : "general knowledge");
    puts_(&u, h);
    free(h);
    puts_(&u, "Question:\n");
    puts_(&u, p.s);
    puts_(&u, "Answer: Let's think step by step.");
    o->problem = p.s;
    o->user = u.s;
    o->task = "choice";
    o->category = cat ? skpo_xstrdup(cat) : NULL;
    o->pid = str_of(json_object_get(row, "question_id"));
    return 1;
}

// --- LiveCodeBench private tests: base64 -> zlib -> pickled str ------------------------

static int b64v(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
}

static unsigned char *b64_decode(const char *s, size_t n, size_t *out) {
    unsigned char *o = skpo_xmalloc(n / 4 * 3 + 3);
    size_t k = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '=' || s[i] == '\n' || s[i] == '\r') continue;
        int v = b64v((unsigned char)s[i]);
        if (v < 0) { free(o); return NULL; }
        acc = (acc << 6) | (uint32_t)v, bits += 6;
        if (bits >= 8) bits -= 8, o[k++] = (unsigned char)(acc >> bits);
    }
    *out = k;
    return o;
}

static unsigned char *inflate_all(const unsigned char *in, size_t n, size_t *out) {
    z_stream z = {0};
    if (inflateInit(&z) != Z_OK) return NULL;
    size_t cap = n * 4 + 1024, len = 0;
    unsigned char *o = skpo_xmalloc(cap);
    z.next_in = (unsigned char *)in;
    z.avail_in = (uInt)n;
    int r;
    do {
        if (cap - len < 65536) o = skpo_xrealloc(o, cap *= 2);
        z.next_out = o + len;
        z.avail_out = (uInt)(cap - len);
        r = inflate(&z, Z_NO_FLUSH);
        len = cap - z.avail_out;
    } while (r == Z_OK);
    inflateEnd(&z);
    if (r != Z_STREAM_END) { free(o); return NULL; }
    *out = len;
    return o;
}

// The str of a pickle holding one str (protocols 2-5). NULL for anything else.
static char *unpickle_str(const unsigned char *p, size_t n) {
    size_t i = 0;
    char *s = NULL;
    while (i < n) {
        unsigned char op = p[i++];
        uint64_t len = 0;
        if (op == 0x80 && i < n) i++;                              // PROTO
        else if (op == 0x95 && i + 8 <= n) i += 8;                 // FRAME
        else if (op == 0x94) continue;                             // MEMOIZE
        else if (op == 'q' && i < n) i++;                          // BINPUT
        else if (op == '.') return s;                              // STOP
        else if (!s && (op == 0x8c || op == 'X' || op == 0x8d)) {  // SHORT_BINUNICODE, BINUNICODE, BINUNICODE8
            int w = op == 0x8c ? 1 : op == 'X' ? 4 : 8;
            if (i + (size_t)w > n) break;
            for (int b = 0; b < w; b++) len |= (uint64_t)p[i + (size_t)b] << (8 * b);
            i += (size_t)w;
            if (len > n - i) break;
            s = skpo_xstrndup((const char *)p + i, (size_t)len);
            i += (size_t)len;
        } else break;
    }
    free(s);
    return NULL;
}

// The test-case list of a LiveCodeBench field: a JSON string holding a list,
// or the compressed form. Appends inputs/outputs; returns the testtype seen.
static int add_cases(const json_t *field, json_t *ins, json_t *outs, int *functional, const char *which, const char *where,
                     skpo_err *err) {
    if (!field || json_is_null(field)) return 0;
    const char *s = json_string_value(field);
    size_t n = json_string_length(field);
    json_t *list = NULL;
    char *decoded = NULL;
    if (json_is_array(field)) list = json_incref((json_t *)field);
    else if (!s) {
        skpo_err_set(err, SKPO_EFORMAT, "%s: %s is not a string or list", where, which);
        return -1;
    } else {
        while (n && (*s == ' ' || *s == '\n')) s++, n--;
        if (n && *s != '[') { // base64(zlib(pickle(json)))
            size_t bn, zn;
            unsigned char *b = b64_decode(s, n, &bn), *z = b ? inflate_all(b, bn, &zn) : NULL;
            decoded = z ? unpickle_str(z, zn) : NULL;
            free(b), free(z);
            if (!decoded) {
                skpo_err_set(err, SKPO_EFORMAT, "%s: %s is neither JSON nor base64(zlib(pickle(str)))", where, which);
                return -1;
            }
            s = decoded, n = strlen(decoded);
        }
        json_error_t je;
        list = json_loadb(s, n, 0, &je);
        free(decoded);
        if (!json_is_array(list)) {
            json_decref(list);
            skpo_err_set(err, SKPO_EFORMAT, "%s: %s is not a JSON list (%s)", where, which, je.text);
            return -1;
        }
    }
    size_t i;
    json_t *c;
    int rc = 0;
    json_array_foreach(list, i, c) {
        const char *in = json_string_value(json_object_get(c, "input")), *out = json_string_value(json_object_get(c, "output"));
        const char *tt = json_string_value(json_object_get(c, "testtype"));
        if (!in || !out) {
            skpo_err_set(err, SKPO_EFORMAT, "%s: %s case %zu has no string input/output", where, which, i);
            rc = -1;
            break;
        }
        int f = tt && !strcmp(tt, "functional");
        if (tt && !f && strcmp(tt, "stdin")) {
            skpo_err_set(err, SKPO_EFORMAT, "%s: %s case %zu: testtype '%s' is not stdin or functional", where, which, i, tt);
            rc = -1;
            break;
        }
        if (*functional >= 0 && *functional != f) {
            skpo_err_set(err, SKPO_EFORMAT, "%s: stdin and functional test cases mixed", where);
            rc = -1;
            break;
        }
        *functional = f;
        json_array_append_new(ins, json_string(in));
        json_array_append_new(outs, json_string(out));
    }
    json_decref(list);
    return rc;
}

static int livecodebench(const json_t *row, const ood_opts *oo, ood_row *o, const char *where, skpo_err *err) {
    const char *content = json_string_value(json_object_get(row, "question_content"));
    const char *starter = json_string_value(json_object_get(row, "starter_code"));
    const char *date = json_string_value(json_object_get(row, "contest_date"));
    if ((oo->after || oo->before) && !date) {
        skpo_err_set(err, SKPO_EFORMAT, "%s: no contest_date for --after/--before", where);
        return -1;
    }
    if (oo->after && strncmp(date, oo->after, strlen(oo->after)) < 0) return 2;
    if (oo->before && strncmp(date, oo->before, strlen(oo->before)) >= 0) return 2;
    json_t *ins = json_array(), *outs = json_array();
    int functional = -1;
    if (add_cases(json_object_get(row, "public_test_cases"), ins, outs, &functional, "public_test_cases", where, err) ||
        add_cases(json_object_get(row, "private_test_cases"), ins, outs, &functional, "private_test_cases", where, err)) {
        json_decref(ins), json_decref(outs);
        return -1;
    }
    if (json_array_size(ins) == 0) {
        json_decref(ins), json_decref(outs);
        skpo_err_set(err, SKPO_EFORMAT, "%s: LiveCodeBench row without test cases", where);
        return -1;
    }
    const json_t *md = json_object_get(row, "metadata");
    json_t *mdj = json_is_string(md) ? json_loads(json_string_value(md), 0, NULL) : json_incref((json_t *)md);
    const char *fn = json_string_value(json_object_get(mdj, "func_name"));
    if (functional == 1 && !fn) {
        json_decref(ins), json_decref(outs), json_decref(mdj);
        skpo_err_set(err, SKPO_EFORMAT, "%s: functional tests but no metadata.func_name", where);
        return -1;
    }
    json_t *t = json_object();
    json_object_set_new(t, "inputs", ins);
    json_object_set_new(t, "outputs", outs);
    if (functional == 1) json_object_set_new(t, "fn_name", json_string(fn));
    json_decref(mdj);
    o->tests = json_dumps(t, JSON_COMPACT);
    json_decref(t);
    if (!o->tests) skpo_die("out of memory");
    sbuf u = {0};
    puts_(&u, "### Question:\n");
    puts_(&u, content);
    puts_(&u, "\n\n");
    if (starter && *starter) {
        puts_(&u, "### Format: ");
        puts_(&u, LCB_WITH_STARTER);
        puts_(&u, "\n```python\n");
        puts_(&u, starter);
        puts_(&u, "\n```\n\n");
    } else {
        puts_(&u, "### Format: ");
        puts_(&u, LCB_WITHOUT_STARTER);
        puts_(&u, "\n```python\n# YOUR CODE HERE\n```\n\n");
    }
    puts_(&u, "### Answer: (use the provided format with backticks)\n\n");
    o->user = u.s;
    o->system = skpo_xstrdup(LCB_SYSTEM);
    o->problem = skpo_xstrdup(content);
    o->task = "code";
    const char *d = json_string_value(json_object_get(row, "difficulty"));
    o->difficulty = d ? skpo_xstrdup(d) : NULL;
    o->pid = str_of(json_object_get(row, "question_id"));
    return 1;
}

int ood_parse(const json_t *row, const ood_opts *oo, ood_row *o, const char *where, skpo_err *err) {
    memset(o, 0, sizeof *o);
    int rc = 0;
    if (json_is_array(json_object_get(row, "options")) && json_is_string(json_object_get(row, "question")))
        rc = mmlu_pro(row, o, where, err);
    else if (json_is_string(json_object_get(row, "question_content")) &&
             (json_object_get(row, "public_test_cases") || json_object_get(row, "private_test_cases")))
        rc = livecodebench(row, oo, o, where, err);
    if (rc != 1) ood_row_free(o);
    return rc;
}
