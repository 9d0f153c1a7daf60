// fuzz_config.c - config.json parsing on arbitrary bytes.
#include "base/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    skpo_config c;
    skpo_err e = {0};
    if (skpo_config_parse((const char *)data, size, &c, &e) == SKPO_OK) (void)skpo_config_num_params(&c);
    return 0;
}
