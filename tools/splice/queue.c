/*
 * queue.c - a reader thread for skpo-splice: records from stdin go into a
 * bounded queue so the engine can keep generating while the upstream stage
 * is still writing, and take new groups as soon as they arrive.
 */
#include "splice.h"

#include <stdlib.h>
#include <string.h>

enum { QCAP = 1024 };

static void *reader_main(void *arg) {
    rec_queue *q = arg;
    for (;;) {
        skpo_rec r;
        skpo_rec_init(&r);
        skpo_err err = {0};
        skpo_status st = skpo_reader_next(q->rd, &r, &err);
        pthread_mutex_lock(&q->mu);
        if (st != SKPO_OK) {
            skpo_rec_free(&r);
            q->done = 1;
            q->st = st == SKPO_EOF ? SKPO_OK : st;
            q->err = err;
            pthread_cond_broadcast(&q->cv);
            pthread_mutex_unlock(&q->mu);
            return NULL;
        }
        while (q->n == QCAP) pthread_cond_wait(&q->cv, &q->mu);
        q->items[(q->head + q->n) % QCAP] = r; // moved in: the queue owns its fields now
        q->n++;
        pthread_cond_broadcast(&q->cv);
        pthread_mutex_unlock(&q->mu);
    }
}

void rq_start(rec_queue *q, skpo_reader *rd) {
    memset(q, 0, sizeof *q);
    q->rd = rd;
    q->items = skpo_xcalloc(QCAP, sizeof *q->items);
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    if (pthread_create(&q->th, NULL, reader_main, q) != 0) skpo_die("cannot start the reader thread");
}

int rq_pop(rec_queue *q, skpo_rec *r, int wait) {
    pthread_mutex_lock(&q->mu);
    while (wait && q->n == 0 && !q->done) pthread_cond_wait(&q->cv, &q->mu);
    int got = -1;
    if (q->n > 0) {
        *r = q->items[q->head];
        skpo_rec_init(&q->items[q->head]);
        q->head = (q->head + 1) % QCAP;
        q->n--;
        got = 1;
        pthread_cond_broadcast(&q->cv);
    } else if (q->done) {
        got = 0;
    }
    pthread_mutex_unlock(&q->mu);
    return got;
}

void rq_join(rec_queue *q) {
    pthread_join(q->th, NULL);
    for (size_t i = 0; i < q->n; i++) skpo_rec_free(&q->items[(q->head + i) % QCAP]);
    free(q->items);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
}
