/*
 * cat.h - internals of skpo-cat shared by its files: input sources (record
 * streams or JSON lines), --where filters, the --view printer and --stats.
 */
#ifndef SKPO_CAT_H
#define SKPO_CAT_H

#include "base/cli.h"
#include "record/recjson.h"
#include "record/record.h"

#include <stdio.h>

// --- input: several files (or "-") read one after another ------------------------

typedef struct cat_in {
    const char **paths;
    int npaths, cur;
    bool json;          // inputs are JSON lines (--pack)
    bool live;          // some input is not a regular file: flush per record
    skpo_reader *rd;
    FILE *jf;
    char *line;
    size_t line_cap;
    uint64_t lineno;
} cat_in;

// Opens lazily; paths must outlive the cat_in.
void cat_in_init(cat_in *in, const char **paths, int n, bool json);
// Next record, or false at the end of the last input. Dies on bad input with
// "skpo-cat: <what> at record N (byte offset B)" (or "at line N" for JSON).
bool cat_in_next(cat_in *in, skpo_rec *r);
void cat_in_free(cat_in *in);

// --- --where FIELD=VALUE -------------------------------------------------------------

// Dies with a usage error (exit 2) unless every entry looks like FIELD=VALUE.
void cat_where_check(const skpo_strlist *where, const char *synopsis);
// True when r matches every entry (AND). A missing field never matches.
bool cat_where_match(const skpo_rec *r, const skpo_strlist *where, skpo_jbuf *scratch);

// --- --view ------------------------------------------------------------------------------

typedef struct cat_view {
    char *group;        // gid of the group whose records are being printed
    char **ups;         // uids of up records already shown
    size_t nups, cap;
    skpo_jbuf tmp;
} cat_view;

void cat_view_put(cat_view *v, const skpo_rec *r, FILE *out);
void cat_view_free(cat_view *v);

// --- --stats -------------------------------------------------------------------------------

typedef struct cat_kstats {
    char *kind;
    uint64_t n, nreward, nadv, nonfinite;
    double reward_sum, adv_mean, adv_m2;  // Welford for the advantage
    uint32_t *len;                        // response lengths (tokens)
    size_t nlen, cap;
} cat_kstats;

typedef struct cat_stats {
    cat_kstats *k;      // one per kind, in order of first appearance
    size_t n, cap;
} cat_stats;

void cat_stats_add(cat_stats *s, const skpo_rec *r);
void cat_stats_print(cat_stats *s, FILE *out);
void cat_stats_free(cat_stats *s);

#endif
