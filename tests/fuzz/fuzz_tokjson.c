// fuzz_tokjson.c - arbitrary bytes loaded as tokenizer.json (through a temp
// folder, as skpo_tok_load reads a folder). Loading must succeed or fail with
// a message; a tokenizer that loads must encode and decode a fixed text.
#define _GNU_SOURCE
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64], file[96];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    snprintf(dir, sizeof dir, "/tmp/skpo-fuzz-tok-XXXXXX");
    if (!mkdtemp(dir)) abort();
    snprintf(file, sizeof file, "%s/tokenizer.json", dir);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f = fopen(file, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    skpo_tok *t;
    skpo_err e = {0};
    if (skpo_tok_load(dir, &t, &e) == SKPO_OK) {
        static const char text[] = "Hello, world! 123 <|im_start|>user\n\xc3\xa9\xe4\xb8\xad \xff";
        int32_t *ids = NULL;
        size_t n = 0;
        for (int sp = 0; sp < 2; sp++) {
            if (skpo_tok_encode(t, text, sizeof text - 1, sp, &ids, &n, &e) == SKPO_OK) {
                size_t dl;
                free(skpo_tok_decode(t, ids, n, sp, &dl));
            }
            free(ids);
            ids = NULL;
        }
        int32_t eos[8];
        (void)skpo_tok_eos_ids(t, eos, 8);
        (void)skpo_tok_bos_id(t);
        skpo_tok_free(t);
    } else if (!e.msg[0]) {
        abort();  // a failure must say why
    }
    unlink(file);
    return 0;
}
