/*
 * prep_ood.h - MMLU-Pro and LiveCodeBench rows for skpo-prep (ood.c).
 */
#ifndef SKPO_PREP_OOD_H
#define SKPO_PREP_OOD_H

#include "base/common.h"

#include <jansson.h>

#define SKPO_CHOICE_LETTERS 16 // A..P, as MMLU-Pro's evaluation lists them

typedef struct ood_opts {
    const char *after, *before; // LiveCodeBench contest_date window: after <= date < before (YYYY-MM-DD prefixes)
} ood_opts;

typedef struct ood_row {
    char *problem, *answer, *system, *user, *tests, *pid, *category, *difficulty;
    const char *task; // "choice" | "code"
} ood_row;

// 1: an MMLU-Pro or LiveCodeBench row, *o filled; 0: neither (o empty);
// 2: a LiveCodeBench row outside the --after/--before window; -1: a malformed
// row of one of them (err names where).
int ood_parse(const json_t *row, const ood_opts *oo, ood_row *o, const char *where, skpo_err *err);
void ood_row_free(ood_row *o);

#endif
