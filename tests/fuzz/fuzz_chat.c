// fuzz_chat.c - chat templates and prompt wordings on arbitrary messages:
// bytes split into messages at \002, role and content at \001.
#include "tokenizer.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size + 1);
    memcpy(buf, data, size);
    buf[size] = 0;
    skpo_chat_msg msgs[16];
    int n = 0;
    for (char *p = buf; p && n < 16; n++) {
        char *next = strchr(p, '\002');
        if (next) *next++ = 0;
        char *sep = strchr(p, '\001');
        msgs[n].role = p;
        msgs[n].content = sep ? sep + 1 : "";
        if (sep) *sep = 0;
        p = next;
    }
    static const char *tmpls[] = {"qwen2.5", "qwen2.5-math", "llama3", "plain", "nope"};
    static const char *words[] = {"dapo", "boxed", "raw", "nope"};
    for (int i = 0; i < 5; i++) {
        skpo_err e = {0};
        char *t = skpo_chat_render(tmpls[i], msgs, n, size & 1, &e);
        if (!t && !e.msg[0]) abort(); // a failure always says why
        free(t);
    }
    for (int i = 0; i < 4; i++) {
        skpo_err e = {0};
        free(skpo_prompt_wording(words[i], msgs[0].content, &e));
    }
    free(buf);
    return 0;
}
