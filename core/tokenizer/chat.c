/*
 * chat.c - chat templates as small declarative tables, and the prompt
 * wordings used to turn a math problem into a user message.
 *
 * A template is not a Jinja engine: each entry transcribes the non-tool branch
 * of the model's own chat_template (checked byte for byte against
 * transformers' apply_chat_template, tests/ref/make_chat_fixtures.py):
 *   qwen2.5       Qwen2.5-Instruct: ChatML, default system
 *                 "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
 *   qwen2         Qwen2-Instruct: the same with "You are a helpful assistant."
 *   qwen2.5-math  Qwen2.5-Math(-Instruct): ChatML, default system
 *                 "Please reason step by step, and put your final answer within \boxed{}."
 *   llama3        Llama 3.1 / 3.2 Instruct: <|begin_of_text|>, a system turn that is
 *                 always present and starts with the knowledge-cutoff lines, every
 *                 content trimmed. The date line is fixed at the template's own fallback
 *                 "26 Jul 2024" (Llama 3.2's template would print today's date when the
 *                 renderer provides strftime_now); so renders are reproducible.
 *   plain         the message contents concatenated, nothing added.
 * Tool calls and tool roles are not supported.
 */
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

typedef struct chat_template {
    const char *name;
    const char *bos;            // emitted first
    int turns;                  // 0: contents only (plain)
    const char *default_system; // system turn content when none is given (always a system turn)
    const char *system_preamble;// written inside the system turn before its content
    const char *open_pre, *open_post; // a turn opens with open_pre + role + open_post
    const char *close;          // and ends with close
    int trim;                   // Jinja `|trim` on contents
} chat_template;

static const chat_template TEMPLATES[] = {
    {"qwen2.5", "", 1, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.", "", "<|im_start|>", "\n",
     "<|im_end|>\n", 0},
    {"qwen2", "", 1, "You are a helpful assistant.", "", "<|im_start|>", "\n", "<|im_end|>\n", 0},
    {"qwen2.5-math", "", 1, "Please reason step by step, and put your final answer within \\boxed{}.", "", "<|im_start|>",
     "\n", "<|im_end|>\n", 0},
    {"llama3", "<|begin_of_text|>", 1, "", "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n",
     "<|start_header_id|>", "<|end_header_id|>\n\n", "<|eot_id|>", 1},
    {"plain", "", 0, NULL, "", "", "", "", 0},
};

static const chat_template *find_template(const char *name) {
    for (size_t i = 0; i < sizeof TEMPLATES / sizeof TEMPLATES[0]; i++)
        if (!strcmp(TEMPLATES[i].name, name)) return &TEMPLATES[i];
    return NULL;
}

// Python's str.isspace, which Jinja's trim uses.
static size_t space_len(const unsigned char *p, size_t n, int at_end) {
    static const char *uni[] = {"\xC2\x85", "\xC2\xA0", "\xE1\x9A\x80", "\xE2\x80\xA8", "\xE2\x80\xA9", "\xE2\x80\xAF",
                                "\xE2\x81\x9F", "\xE3\x80\x80"};
    if (n == 0) return 0;
    unsigned c = at_end ? p[n - 1] : p[0];
    if (c == ' ' || (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x1F)) return 1;
    for (size_t i = 0; i < sizeof uni / sizeof uni[0]; i++) {
        size_t k = strlen(uni[i]);
        if (n >= k && !memcmp(at_end ? p + n - k : p, uni[i], k)) return k;
    }
    // U+2000..U+200A
    if (n >= 3) {
        const unsigned char *q = at_end ? p + n - 3 : p;
        if (q[0] == 0xE2 && q[1] == 0x80 && q[2] >= 0x80 && q[2] <= 0x8A) return 3;
    }
    return 0;
}

static void put_trimmed(char **out, size_t *len, size_t *cap, const char *s, int trim) {
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), k;
    if (trim) {
        while ((k = space_len(p, n, 0)) > 0) p += k, n -= k;
        while ((k = space_len(p, n, 1)) > 0) n -= k;
    }
    skpo_xgrow((void **)out, cap, *len + n + 1, 1);
    memcpy(*out + *len, p, n);
    *len += n;
    (*out)[*len] = 0;
}

static void put(char **out, size_t *len, size_t *cap, const char *s) { put_trimmed(out, len, cap, s, 0); }

static void put_turn(const chat_template *t, char **out, size_t *len, size_t *cap, const char *role, const char *pre,
                     const char *content) {
    put(out, len, cap, t->open_pre);
    put(out, len, cap, role);
    put(out, len, cap, t->open_post);
    put(out, len, cap, pre);
    put_trimmed(out, len, cap, content, t->trim);
    put(out, len, cap, t->close);
}

char *skpo_chat_render(const char *tmpl, const skpo_chat_msg *msgs, int n, int add_generation_prompt, skpo_err *err) {
    SKPO_ASSERT(tmpl && (msgs || n == 0) && n >= 0);
    const chat_template *t = find_template(tmpl);
    if (!t) {
        skpo_err_set(err, SKPO_ENOTFOUND, "unknown chat template '%s' (qwen2.5, qwen2, qwen2.5-math, llama3, plain)", tmpl);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        const char *r = msgs[i].role;
        if (!r || !msgs[i].content || (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant"))) {
            skpo_err_set(err, SKPO_EUNSUPPORTED, "message %d: needs a string content and a role of system, user or "
                         "assistant (got '%s')", i + 1, r ? r : "(none)");
            return NULL;
        }
    }
    char *out = NULL;
    size_t len = 0, cap = 0;
    put(&out, &len, &cap, t->bos);
    int first = 0;
    const char *sys = t->default_system;
    if (n > 0 && !strcmp(msgs[0].role, "system")) sys = msgs[0].content, first = 1;
    if (t->turns) put_turn(t, &out, &len, &cap, "system", t->system_preamble, sys);
    else if (sys) put(&out, &len, &cap, sys); // plain: the content only
    for (int i = first; i < n; i++) {
        if (t->turns) put_turn(t, &out, &len, &cap, msgs[i].role, "", msgs[i].content);
        else put(&out, &len, &cap, msgs[i].content);
    }
    if (add_generation_prompt && t->turns) {
        put(&out, &len, &cap, t->open_pre);
        put(&out, &len, &cap, "assistant");
        put(&out, &len, &cap, t->open_post);
    }
    return out;
}

// --- prompt wordings -------------------------------------------------------------

// DAPO-Math-17k's stored user message (docs/algorithm.md section 5), around the problem.
static const char DAPO_HEAD[] =
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n";
static const char DAPO_TAIL[] = "\n\nRemember to put your answer on its own line after \"Answer:\".";
static const char BOXED_TAIL[] = "\nPlease reason step by step, and put your final answer within \\boxed{}.";

char *skpo_prompt_wording(const char *wording, const char *problem, skpo_err *err) {
    SKPO_ASSERT(wording && problem);
    const char *head = "", *tail = "";
    if (!strcmp(wording, "dapo")) head = DAPO_HEAD, tail = DAPO_TAIL;
    else if (!strcmp(wording, "boxed")) tail = BOXED_TAIL;
    else if (strcmp(wording, "raw")) {
        skpo_err_set(err, SKPO_ENOTFOUND, "unknown prompt wording '%s' (dapo, boxed, raw)", wording);
        return NULL;
    }
    size_t a = strlen(head), b = strlen(problem), c = strlen(tail);
    char *out = skpo_xmalloc(a + b + c + 1);
    memcpy(out, head, a);
    memcpy(out + a, problem, b);
    memcpy(out + a + b, tail, c + 1);
    return out;
}
