/*
 * pack.h - the packed layout of a scoring or training pass: the sequences of
 * a group that share a prefix (GRPO's G answers under one prompt q; SKPO's G
 * continuations under [s, q], and its G upstream candidates under q) become
 * one row that holds the shared prefix once, then each continuation:
 *
 *     row   | p_0 .. p_{P-1} | c1_0 .. c1_{n1-P-1} | c2_0 .. | ... | cG_0 .. |
 *     seg   |  0  ..   0     |  1   ..   1         |  2  ..  | ... |  G  ..  |
 *     pos   |  0  ..  P-1    |  P   ..  n1-1       |  P  ..  | ... |  P  ..  |
 *
 * A continuation attends to the prefix and to its own earlier tokens only
 * (base/attn_mask.h), and its positions continue from the prefix, so every
 * token sees the keys, values and rotary angles it has in its own unpacked
 * sequence: the log-probs are those of the unpacked pass (the same bits on
 * the CPU, whose attention row does not depend on how the keys are cut), and
 * the gradients equal the unpacked ones up to float summation order (a prefix
 * token's gradient arrives once, summed over the G continuations, instead of
 * G times). The loss never sees the layout: scored tokens come back in the
 * caller's order, sequence by sequence.
 *
 * Grouping is exact by construction: sequences join a row when their first
 * `start` tokens (the prompt) are the same tokens; the row's prefix is then
 * the longest common prefix of its members, capped so that every
 * continuation keeps at least one token. A group need not be contiguous in
 * the batch. A group split across micro-batches is packed in each part (the
 * prefix computed once per part): exact, only the saving is smaller.
 * Not here: the kernels (cpu/ops.h, cuda/) and where a pass packs (model.h
 * skpo_model_set_pack).
 */
#ifndef SKPO_PACK_H
#define SKPO_PACK_H

#include "model/model.h"

typedef struct skpo_pack {
    int nseq;
    int nrows;       // rows: packed groups and single sequences, in order of first member
    int N;           // packed tokens (sum of row lengths)
    long raw;        // tokens of the sequences as given (sum of n)
    int packed;      // some row holds more than one sequence (else seg is all 0)
    int *row_off;    // (nrows + 1) token offset of each row
    int32_t *ids;    // (N)
    int *pos;        // (N) rotary position of each token
    int *seg;        // (N) segment (base/attn_mask.h): 0 prefix or plain, i continuation i of its row
    int S;           // scored tokens (sum of n - start)
    int *srow;       // (S) packed token whose output predicts scored token k (sequence order)
    int32_t *stgt;   // (S) the scored token
} skpo_pack;

// Lay out seqs[0..nseq). pack = 0: one row per sequence, every seg 0 (the
// unpacked pass). The arrays are owned by p (skpo_pack_free).
void skpo_pack_plan(const skpo_seq *seqs, int nseq, int pack, skpo_pack *p);
void skpo_pack_free(skpo_pack *p);
// Token counts of the plan without building it: *raw = sum n, *packed = N.
void skpo_pack_count(const skpo_seq *seqs, int nseq, int pack, long *raw, long *packed);

// The same counts for a batch grown one sequence at a time (skpo-update
// fills a micro-batch until its packed size reaches the budget): after each
// skpo_pack_tally_add, raw and packed are what skpo_pack_count gives for the
// sequences added so far, at O(groups + n) per sequence instead of a recount.
// The grouping rule is the plan's own (skpo_pack_plan builds on a tally).
// The sequences' ids are borrowed: they must outlive the tally.
typedef struct skpo_pack_tally {
    int pack;
    int nseq;         // sequences added
    long raw, packed;
    int ngroups, cap;
    skpo_seq *lead;   // (ngroups) first member of each group
    int *first;       // (ngroups) its index in order of adding
    uint64_t *hash;   // (ngroups) hash of the lead's prompt
    int *size;        // (ngroups) members
    int *share;       // (ngroups) common prefix so far: min over members of lcp with the lead and n - 1
    long *sum;        // (ngroups) tokens of the members
} skpo_pack_tally;

void skpo_pack_tally_init(skpo_pack_tally *t, int pack);
// Add s; returns its group (groups in order of first member).
int skpo_pack_tally_add(skpo_pack_tally *t, const skpo_seq *s);
// Tokens group k computes (its members alone in a pass give this N).
long skpo_pack_tally_group(const skpo_pack_tally *t, int k);
void skpo_pack_tally_free(skpo_pack_tally *t);

#endif
