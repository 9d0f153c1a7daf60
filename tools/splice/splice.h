/*
 * splice.h - the parts of skpo-splice (private to tools/splice).
 */
#ifndef SKPO_TOOL_SPLICE_H
#define SKPO_TOOL_SPLICE_H

#include "base/cli.h"
#include "record/record.h"
#include "gen/rollout.h"

#include <pthread.h>

// --- reader thread (queue.c) ---
typedef struct rec_queue {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    skpo_reader *rd;
    skpo_rec *items;        // ring of QCAP records
    size_t head, n;
    int done;               // the reader has stopped (end of input or error)
    skpo_status st;         // SKPO_OK at a clean end
    skpo_err err;
} rec_queue;

void rq_start(rec_queue *q, skpo_reader *rd);
// 1: *r holds the next record (caller frees); 0: input ended (see q->st);
// -1: none available now (only when wait = 0).
int rq_pop(rec_queue *q, skpo_rec *r, int wait);
// Wait for the reader to finish (call after rq_pop returned 0) and free.
void rq_join(rec_queue *q);

// --- splicing (splice.c) ---
enum splice_layout { LAYOUT_SKIP, LAYOUT_CONTINUAL };

typedef struct splice_cfg {
    skpo_rollout_opts ro;
    const char *layout_s, *policy;
    long group, seed;
    int no_share;
    int stats;              // --stats: generated tokens and peak KV on stderr at the end
    int layout;
    skpo_strlist stops;
} splice_cfg;

void splice_cfg_default(splice_cfg *c);
void splice_cfg_check(splice_cfg *c, const char *synopsis);

// Read stdin, write stdout: every record passes through in order; each `up`
// record is followed by its G `down` records.
skpo_status splice_run(const splice_cfg *c, skpo_rollout *ro, skpo_reader *rd, skpo_writer *w, skpo_err *err);

// The conditioning prefix of the downstream rollouts (docs/algorithm.md Q2): skip =
// s ++ q (a leading BOS of q moves to the front), continual = q ++ s.
int32_t *splice_prefix(int layout, const int32_t *s, size_t ns, const int32_t *q, size_t nq, int bos, size_t *n);

#endif
