/*
 * fixture_model.h - a committed model fixture (tests/fixtures/REL) loaded on
 * the CPU for a unit test; SKPO_TOP names the source tree (tests/run.sh sets
 * it). NULL, with the reason on stderr, when it does not load.
 */
#ifndef SKPO_TEST_FIXTURE_MODEL_H
#define SKPO_TEST_FIXTURE_MODEL_H

#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>

static inline skpo_model *fixture_model_load(const char *rel) {
    const char *top = getenv("SKPO_TOP");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/%s", top ? top : ".", rel);
    skpo_model_opts o = {.device = SKPO_DEV_CPU};
    skpo_model *m = NULL;
    skpo_err err = {0};
    if (skpo_model_load(dir, &o, &m, &err) != SKPO_OK) fprintf(stderr, "  load %s: %s\n", dir, err.msg);
    return m;
}

#endif
