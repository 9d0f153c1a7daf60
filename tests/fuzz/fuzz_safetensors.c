// fuzz_safetensors.c - the safetensors header and tensor reader on arbitrary
// bytes (written to a temp file, as the loader maps files).
#define _GNU_SOURCE
#include "model/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/skpo-fuzz-st-%d.safetensors", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    skpo_st *st;
    skpo_err e = {0};
    if (skpo_st_open_file(path, &st, &e) == SKPO_OK) {
        for (int i = 0; i < skpo_st_count(st); i++) {
            const skpo_st_tensor *t = skpo_st_get(st, i);
            (void)t;
        }
        skpo_st_close(st);
    }
    unlink(path);
    return 0;
}
