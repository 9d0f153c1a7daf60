// fuzz_chat.c - the chat-template renderer and the prompt wordings on
// arbitrary messages. Byte 0 picks the template (one of the five, or an
// unknown name) and add_generation_prompt; the rest is messages separated by
// \002, each "role\001content" (C strings: a NUL ends a field early). Known
// templates with valid roles must render, anything else must fail with a
// message; every wording must wrap every content.
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

static const char *TEMPLATES[] = {"qwen2.5", "qwen2.5-math", "qwen2", "llama3", "plain", "qwen2.5-mathx", ""};
static const char *WORDINGS[] = {"dapo", "boxed", "raw", "Raw"};

static int valid_role(const char *r) {
    return !strcmp(r, "system") || !strcmp(r, "user") || !strcmp(r, "assistant");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 1 << 16) return 0;
    const char *tmpl = TEMPLATES[(data[0] & 0x7f) % 7];
    int gen = data[0] >> 7;
    char *buf = malloc(size);  // fields become NUL-terminated in place
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = 0;
    int n = 0, cap = 8, ok = (data[0] & 0x7f) % 7 < 5;
    skpo_chat_msg *m = malloc(cap * sizeof *m);
    for (char *p = buf, *next; p; p = next) {
        next = strchr(p, '\002');
        if (next) *next++ = 0;
        char *c = strchr(p, '\001');
        if (c) *c++ = 0;
        if (n == cap) m = realloc(m, (cap *= 2) * sizeof *m);
        m[n].role = p;
        m[n].content = c ? c : "";
        ok &= valid_role(p);
        n++;
    }
    skpo_err e = {0};
    char *out = skpo_chat_render(tmpl, m, n, gen, &e);
    if ((out != NULL) != ok) abort();
    if (!out && !e.msg[0]) abort();
    free(out);
    for (int w = 0; w < 4; w++) {
        e.msg[0] = 0;
        char *p = skpo_prompt_wording(WORDINGS[w], m[0].content, &e);
        if ((p != NULL) != (w < 3) || (p && !strstr(p, m[0].content))) abort();
        free(p);
    }
    free(m);
    free(buf);
    return 0;
}
