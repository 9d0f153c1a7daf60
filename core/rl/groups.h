/*
 * groups.h - filters over the groups of a step's rollouts: the `full` records
 * of one prompt (pid), in first-seen order. The pipelines' sampling filters
 * (docs/baselines.md) are these, applied by skpo-cut's group modes:
 *   informative  a group whose outcomes are not all equal. The outcome of a
 *                record is its `correct` when it has one (DAPO's dynamic sampling
 *                decides on accuracy, not on the reward its overlong penalty
 *                shapes), else its `reward` (a custom reward stage); a group
 *                mixing records with and without `correct` is informative.
 *   keep_informative N   drop the full records of the informative groups after
 *                the first N; all-equal groups stay (skpo-advantage --mode dapo
 *                counts and drops them). DAPO.
 *   keep_accuracy N [LOW, HIGH]   keep the full records of N groups: first those
 *                whose mean `correct` (true = 1) lies in [LOW, HIGH] (1e-9
 *                slack), in first-seen order, then the others (verl's
 *                filter_and_downsample: the batch keeps its size). PRIME.
 * Records of other kinds always stay. keep[i] is set for every record.
 */
#ifndef SKPO_GROUPS_H
#define SKPO_GROUPS_H

#include "record/record.h"

#include <stddef.h>

// How many groups of recs are informative.
size_t skpo_groups_count_informative(const skpo_rec *recs, size_t n);
// keep[0..n): DAPO's filter (above).
void skpo_groups_keep_informative(const skpo_rec *recs, size_t n, size_t max_groups, unsigned char *keep);
// keep[0..n): PRIME's filter (above).
void skpo_groups_keep_accuracy(const skpo_rec *recs, size_t n, size_t max_groups, double lo, double hi,
                               unsigned char *keep);

#endif
