/*
 * analyze.h - the parts of skpo-analyze (private to tools/analyze).
 *
 * Input: rewarded `down` records of segments cut by skpo-cut and continued by
 * skpo-splice (fields rel, src, src_gid, src_correct, label from skpo-cut; gid
 * = the segment's uid from skpo-splice; correct/reward/pred from skpo-reward).
 * read.c gathers them into prefixes (one per segment, with the outcomes of its
 * continuations in input order); signs.c and outcomes.c aggregate prefixes
 * into rows (rows.c); main.c prints the rows and writes metrics records.
 */
#ifndef SKPO_TOOL_ANALYZE_H
#define SKPO_TOOL_ANALYZE_H

#include "base/common.h"
#include "base/strmap.h"
#include "record/record.h"

#include <stdint.h>

// --- prefixes (read.c) ---
typedef struct prefix {
    char *gid, *pid, *label, *src_gid;
    double rel;
    int src_ok;               // outcome of the response the segment was cut from: 1, 0, -1 unknown
    int64_t seg;              // segment length in tokens
    int n, cap;               // continuations
    unsigned char *ok;        // (n) 1 = correct
    char **pred;              // (n) extracted answers, NULL = none
    int64_t *len;             // (n) continuation lengths in tokens
} prefix;

typedef struct prefixes {
    prefix *p;
    size_t n, cap;
    skpo_strmap by_gid;       // "label\x1fgid" -> index into p (SKPO_STRMAP_COPY: keys are built in a buffer)
} prefixes;

// Add every down record of path ("-" = stdin). Dies on a record without gid
// or rel or without an outcome (correct or reward), naming it.
void prefixes_read(prefixes *ps, const char *path);
void prefixes_free(prefixes *ps);

// --- result rows (rows.c; main.c prints them) ---
#define ROW_MAX_COLS 12

typedef struct row {
    char *label;              // method / layout; "-" when none (owned)
    double rel;
    char *group;              // sub-group: "all", "mc k=8", "grpo:c=3/8" (owned)
    double v[ROW_MAX_COLS];
} row;

typedef struct rows {
    const char *what;               // analysis name
    const char *cols[ROW_MAX_COLS]; // value column names
    int ncols;
    row *r;
    size_t n, cap;
    skpo_strmap idx;                // "label\x1fgroup\x1frel" -> row (SKPO_STRMAP_COPY)
} rows;

// The row for (label, rel, group), created zeroed when new.
row *rows_get(rows *t, const char *label, double rel, const char *group);
// Order by label, group, position (so each curve is one contiguous block).
void rows_sort(rows *t);
void rows_free(rows *t);

// --- analyses ---
// signs.c: sign agreement of k-continuation estimates (k in ks, each block of
// k continuations vs the rest) and of the source outcome (GRPO) with the
// leave-out reference, per position, over groups of segments cut from one
// source group (src_gid) at one position.
void analyze_signs(const prefixes *ps, const long *ks, int nks, rows *out);
// outcomes.c: shortcut validation (answer diversity, all-same-outcome rate,
// accuracy, length per label and position) and implicit advantage (success
// rate per label and position, normalised across labels per problem).
void analyze_shortcut(const prefixes *ps, rows *out);
void analyze_implicit(const prefixes *ps, rows *out);

#endif
