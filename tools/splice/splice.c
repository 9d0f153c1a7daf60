/*
 * splice.c - skpo-splice's loop: take records as they arrive, start G
 * downstream rollouts for each `up` record at once, write everything in input
 * order (each `up` followed by its `down` records).
 *
 * Output order equals input order, whatever the timing: an output slot is
 * kept per input record and slots leave the head of the FIFO only when ready.
 * Down records: every field of the up record, then kind=down,
 * uid "<up uid>:<i>", gid = up uid, prompt = the [s,q] prefix, policy = this
 * model, tokens/logp/text/finish/seed of the rollout; cut and nll dropped.
 */
#include "splice.h"

#include <stdlib.h>
#include <string.h>

void splice_cfg_default(splice_cfg *c) {
    memset(c, 0, sizeof *c);
    skpo_rollout_opts_default(&c->ro);
    c->group = 8;
    c->layout_s = "skip";
}

void splice_cfg_check(splice_cfg *c, const char *syn) {
    if (!c->ro.model_dir) skpo_cli_usage_error(syn, "--model is required");
    if (!strcmp(c->layout_s, "skip")) c->layout = LAYOUT_SKIP;
    else if (!strcmp(c->layout_s, "continual")) c->layout = LAYOUT_CONTINUAL;
    else if (!strcmp(c->layout_s, "inside"))
        skpo_cli_usage_error(syn, "--layout inside (segment inside the user message) is not implemented");
    else skpo_cli_usage_error(syn, "--layout: '%s' is not skip or continual", c->layout_s);
    c->ro.share_prefix = !c->no_share;
    c->ro.stops = c->stops.v;
    c->ro.n_stops = c->stops.n;
}

int32_t *splice_prefix(int layout, const int32_t *s, size_t ns, const int32_t *q, size_t nq, int bos, size_t *n) {
    int32_t *p = skpo_xmalloc((ns + nq + 1) * sizeof *p);
    size_t k = 0;
    if (layout == LAYOUT_CONTINUAL) {
        memcpy(p, q, nq * sizeof *p);
        memcpy(p + nq, s, ns * sizeof *p);
        *n = ns + nq;
        return p;
    }
    if (bos >= 0 && nq > 0 && q[0] == bos) { p[k++] = bos; q++; nq--; } // one BOS, at the very start
    memcpy(p + k, s, ns * sizeof *p);
    memcpy(p + k + ns, q, nq * sizeof *p);
    *n = k + ns + nq;
    return p;
}

// One input record waiting for output.
typedef struct slot {
    skpo_rec rec;
    int is_up, ready;
    int32_t *prefix;
    size_t nprefix;
    skpo_gen_group *res;
} slot;

typedef struct splicer {
    const splice_cfg *c;
    skpo_rollout *ro;
    slot **fifo;            // fifo[head..tail)
    size_t head, tail, cap;
    uint64_t nread, nup, ndone;
} splicer;

// Queue an up record's rollouts; a prefix that fills the context gets G empty
// `length` responses (docs/algorithm.md Q3: no room = truncated = wrong).
static void start_up(splicer *sp, slot *s) {
    const char *uid = skpo_rec_str(&s->rec, F_UID), *pid = skpo_rec_str(&s->rec, F_PID);
    size_t ns = 0, nq = 0;
    const int32_t *seg = skpo_rec_i32s(&s->rec, F_TOKENS, &ns), *q = skpo_rec_i32s(&s->rec, F_PROMPT, &nq);
    s->prefix = splice_prefix(sp->c->layout, seg, seg ? ns : 0, q, nq, sp->ro->bos, &s->nprefix);
    int64_t step = 0;
    skpo_rec_int(&s->rec, F_STEP, &step);
    int G = (int)sp->c->group;
    if ((long)s->nprefix >= sp->ro->ctx) {
        skpo_warn("[s,q] of %zu tokens fills the context of %d: %d empty responses (pid %s)", s->nprefix,
                  sp->ro->ctx, G, pid ? pid : "?");
        s->res = skpo_xcalloc(1, sizeof *s->res);
        s->res->n = G;
        s->res->s = skpo_xcalloc((size_t)G, sizeof *s->res->s);
        for (int i = 0; i < G; i++) s->res->s[i].seed = skpo_rollout_seed((uint64_t)sp->c->seed, step, "down", uid, (uint64_t)i);
        s->ready = 1;
        return;
    }
    uint64_t *seeds = skpo_xmalloc((size_t)G * sizeof *seeds);
    for (int i = 0; i < G; i++) seeds[i] = skpo_rollout_seed((uint64_t)sp->c->seed, step, "down", uid, (uint64_t)i);
    long mt = sp->c->ro.max_tokens < 1 << 30 ? sp->c->ro.max_tokens : 1 << 30;
    skpo_gen_req r = {.prompt = s->prefix, .n_prompt = (int)s->nprefix, .n = G, .max_new = (int)mt, .seeds = seeds,
                      .user = s};
    skpo_err err = {0};
    if (skpo_gen_submit(sp->ro->gen, &r, &err) != SKPO_OK)
        skpo_die("up record %llu: %s (pid %s)", (unsigned long long)sp->nread, err.msg, pid ? pid : "?");
    free(seeds);
}

static void take_record(splicer *sp, skpo_rec *r) {
    sp->nread++;
    skpo_err err = {0};
    // nread counts every record read from stdin: the stream's own numbering
    if (skpo_rec_check_needs(r, "skpo-splice", NULL, "stdin", sp->nread, &err)) skpo_die("%s", err.msg);
    slot *s = skpo_xcalloc(1, sizeof *s);
    s->rec = *r; // moved
    s->is_up = skpo_rec_is_kind(&s->rec, SKPO_KIND_UP);
    skpo_xgrow((void **)&sp->fifo, &sp->cap, sp->tail + 1, sizeof *sp->fifo);
    sp->fifo[sp->tail++] = s;
    if (s->is_up) { sp->nup++; start_up(sp, s); }
    else s->ready = 1;
}

static skpo_status put_slot(splicer *sp, slot *s, skpo_writer *w, skpo_err *err) {
    skpo_status st = skpo_writer_put(w, &s->rec, err);
    const char *uid = skpo_rec_str(&s->rec, F_UID);
    for (int i = 0; st == SKPO_OK && s->is_up && i < s->res->n; i++) {
        skpo_rec d;
        skpo_rec_init(&d);
        skpo_rec_copy(&d, &s->rec);
        skpo_rec_set_str(&d, F_KIND, SKPO_KIND_DOWN);
        char id[1100];
        snprintf(id, sizeof id, "%s:%d", uid, i);
        skpo_rec_set_str(&d, F_UID, id);
        skpo_rec_set_str(&d, F_GID, uid);
        skpo_rec_set_i32s(&d, F_PROMPT, s->prefix, s->nprefix);
        skpo_rec_set_str(&d, F_POLICY, sp->c->policy ? sp->c->policy : sp->c->ro.model_dir);
        skpo_rec_del(&d, F_CUT);
        skpo_rec_del(&d, F_NLL);
        const skpo_gen_sample *g = &s->res->s[i];
        skpo_rollout_fill(sp->ro, &d, g->tokens, g->logp, g->n, g->stopped, g->seed);
        st = skpo_writer_put(w, &d, err);
        skpo_rec_free(&d);
    }
    return st;
}

static void slot_free(slot *s) {
    skpo_rec_free(&s->rec);
    free(s->prefix);
    skpo_gen_group_free(s->res);
    free(s);
}

// Write the ready head of the FIFO; flush once if anything went out.
static skpo_status drain(splicer *sp, skpo_writer *w, skpo_err *err) {
    size_t before = sp->head;
    while (sp->head < sp->tail && sp->fifo[sp->head]->ready) {
        slot *s = sp->fifo[sp->head++];
        skpo_status st = put_slot(sp, s, w, err);
        sp->ndone += (uint64_t)s->is_up;
        slot_free(s);
        if (st != SKPO_OK) return st;
    }
    if (sp->head == sp->tail) sp->head = sp->tail = 0;
    return sp->head != before || sp->tail == 0 ? skpo_writer_flush(w, err) : SKPO_OK;
}

skpo_status splice_run(const splice_cfg *c, skpo_rollout *ro, skpo_reader *rd, skpo_writer *w, skpo_err *err) {
    splicer sp = {.c = c, .ro = ro};
    rec_queue *q = skpo_xmalloc(sizeof *q); // on the heap: the reader thread may outlive an error return
    rq_start(q, rd);
    int eof = 0;
    skpo_status st = SKPO_OK;
    skpo_progress prog;
    skpo_progress_init(&prog);
    while (st == SKPO_OK && !(eof && sp.head == sp.tail)) {
        int wait = !skpo_gen_busy(ro->gen) && !eof;
        skpo_rec r;
        int got;
        while (!eof && (got = rq_pop(q, &r, wait)) != -1) {
            if (got == 0) { eof = 1; break; }
            take_record(&sp, &r);
            wait = 0;
        }
        if (skpo_gen_busy(ro->gen)) st = skpo_gen_step(ro->gen, err);
        skpo_gen_group *g;
        while (st == SKPO_OK && (g = skpo_gen_pop(ro->gen))) {
            slot *s = g->user;
            s->res = g;
            s->ready = 1;
        }
        if (st == SKPO_OK) st = drain(&sp, w, err);
        uint64_t toks = skpo_gen_get_stats(ro->gen)->gen_tokens;
        double dt = skpo_now() - prog.start;
        skpo_progress_update(&prog, "%llu/%llu segments done%s, %llu tokens, %.0f tok/s", (unsigned long long)sp.ndone,
                             (unsigned long long)sp.nup, eof ? "" : " (input open)", (unsigned long long)toks,
                             dt > 0 ? toks / dt : 0.0);
    }
    skpo_progress_done(&prog);
    for (size_t i = sp.head; i < sp.tail; i++) slot_free(sp.fifo[i]);
    free(sp.fifo);
    // After an engine or write error the caller exits; the reader may be
    // blocked on a full queue, so it is not joined then.
    if (st != SKPO_OK) return st;
    rq_join(q);
    if (q->st != SKPO_OK) { st = q->st; *err = q->err; }
    free(q);
    return st;
}
