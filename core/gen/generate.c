/*
 * generate.c - continuous batching over the paged KV cache; see generate.h.
 *
 * Sections: state, submit/pop, admission, one engine step.
 * Deliberately not here: preemption (admission reserves worst-case blocks
 * instead) and speculative decoding.
 */
#include "gen/generate.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

// --- state -------------------------------------------------------------------------

enum { PH_PREFILL, PH_DECODE };
enum { PAR_NONE, PAR_PREFILL, PAR_READY };

typedef struct group {
    int32_t *prompt;        // (n_prompt)
    int n_prompt, n, max_new;
    uint64_t *seeds;        // (n)
    void *user;
    skpo_gen_sample *res;   // (n)
    int *cap;               // (n) capacity of res[i].tokens / logp
    int started, done;
    int parent, par_state;  // share mode: KV sequence holding the prompt
    size_t par_res;         // blocks reserved for the parent
    float *first_logits;    // (vocab) parent's logits after the prompt
} group;

typedef struct seq {
    group *gr;
    int sample;             // -1: a parent prefilling the group prompt
    int kv;                 // KV sequence id
    int phase, fed;         // fed: prompt tokens already in the KV (prefill)
    int32_t next;           // decode: the token to feed next
    int finished;
    skpo_rng rng;
    size_t res;             // blocks reserved for this sequence
    void *stop;             // state of the text stop hook (NULL: none)
} seq;

struct skpo_gen {
    skpo_gen_opts o;
    int block_size;
    size_t n_blocks, reserved;
    group **q;              // submitted, not popped, in order: q[head..tail)
    size_t head, tail, qcap;
    seq *act;               // (max_batch) running sequences
    int nact;
    int32_t *toks;          // (step_tokens) model call input
    int *off, *rows_seq;    // (max_batch + 1), (max_batch)
    int *kvids;             // (max_batch)
    float *logits;          // (max_batch, vocab)
    skpo_sampler *samplers; // one per OpenMP thread
    int nsamplers;
    skpo_gen_stats st;
};

static size_t blocks_for(const skpo_gen *g, long tokens) {
    return (size_t)((tokens + g->block_size - 1) / g->block_size);
}

skpo_gen *skpo_gen_new(const skpo_gen_opts *o) {
    SKPO_ASSERT(o && o->step && o->kv && o->vocab > 0 && o->max_batch >= 1 && o->ctx_limit >= 2);
    skpo_gen *g = skpo_xcalloc(1, sizeof *g);
    g->o = *o;
    if (g->o.step_tokens <= 0) g->o.step_tokens = 2048;
    if (g->o.step_tokens < o->max_batch + 1) g->o.step_tokens = o->max_batch + 1;
    const skpo_kv_shape *sh = skpo_kv_get_shape(o->kv);
    SKPO_ASSERT(sh->max_seqs >= 2 * o->max_batch + 1);
    g->block_size = sh->block_size;
    g->n_blocks = sh->n_blocks;
    int B = o->max_batch;
    g->act = skpo_xcalloc((size_t)B, sizeof *g->act);
    g->toks = skpo_xmalloc((size_t)g->o.step_tokens * sizeof *g->toks);
    g->off = skpo_xmalloc((size_t)(B + 1) * sizeof *g->off);
    g->rows_seq = skpo_xmalloc((size_t)B * sizeof *g->rows_seq);
    g->kvids = skpo_xmalloc((size_t)B * sizeof *g->kvids);
    g->logits = skpo_xmalloc((size_t)B * (size_t)o->vocab * sizeof *g->logits);
    g->nsamplers = omp_get_max_threads();
    g->samplers = skpo_xcalloc((size_t)g->nsamplers, sizeof *g->samplers);
    for (int i = 0; i < g->nsamplers; i++) skpo_sampler_init(&g->samplers[i], o->vocab);
    return g;
}

static void group_free(group *gr, int with_results) {
    if (with_results)
        for (int i = 0; i < gr->n; i++) { free(gr->res[i].tokens); free(gr->res[i].logp); }
    free(gr->prompt);
    free(gr->seeds);
    free(gr->res);
    free(gr->cap);
    free(gr->first_logits);
    free(gr);
}

void skpo_gen_free(skpo_gen *g) {
    if (!g) return;
    for (int i = 0; i < g->nact; i++) {
        skpo_kv_seq_free(g->o.kv, g->act[i].kv);
        if (g->act[i].stop) g->o.stop->close(g->act[i].stop);
    }
    for (size_t i = g->head; i < g->tail; i++) {
        if (g->q[i]->par_state == PAR_READY) // a prefilling parent is in act[], freed above
            skpo_kv_seq_free(g->o.kv, g->q[i]->parent);
        group_free(g->q[i], 1);
    }
    for (int i = 0; i < g->nsamplers; i++) skpo_sampler_destroy(&g->samplers[i]);
    free(g->samplers);
    free(g->q);
    free(g->act);
    free(g->toks);
    free(g->off);
    free(g->rows_seq);
    free(g->kvids);
    free(g->logits);
    free(g);
}

const skpo_gen_stats *skpo_gen_get_stats(const skpo_gen *g) { return &g->st; }

// --- submit / pop ------------------------------------------------------------------------

static int shared(const skpo_gen *g, const group *gr) { return g->o.share_prefix && gr->n > 1; }

// Worst-case blocks of one sample: its own suffix (plus the copied partial
// block) when forked, the whole sequence otherwise.
static size_t sample_blocks(const skpo_gen *g, const group *gr) {
    if (shared(g, gr)) return blocks_for(g, gr->max_new) + 1;
    return blocks_for(g, (long)gr->n_prompt + gr->max_new);
}

skpo_status skpo_gen_submit(skpo_gen *g, const skpo_gen_req *r, skpo_err *err) {
    SKPO_ASSERT(r && r->n >= 1 && r->max_new >= 0 && r->seeds);
    if (r->n_prompt < 1 || !r->prompt) return skpo_err_set(err, SKPO_ERANGE, "empty prompt");
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= g->o.vocab)
            return skpo_err_set(err, SKPO_ERANGE, "prompt token %d is id %d, outside the vocabulary [0, %d)", i,
                                (int)r->prompt[i], g->o.vocab);
    if (r->n_prompt >= g->o.ctx_limit)
        return skpo_err_set(err, SKPO_ERANGE, "prompt of %d tokens leaves no room in a context of %d positions",
                            r->n_prompt, g->o.ctx_limit);
    group *gr = skpo_xcalloc(1, sizeof *gr);
    gr->n_prompt = r->n_prompt;
    gr->n = r->n;
    gr->max_new = r->max_new < g->o.ctx_limit - r->n_prompt ? r->max_new : g->o.ctx_limit - r->n_prompt;
    size_t need = sample_blocks(g, gr) + (shared(g, gr) ? blocks_for(g, gr->n_prompt) : 0);
    if (need > g->n_blocks) {
        free(gr);
        return skpo_err_set(err, SKPO_ERANGE, "a sequence of %d + %d tokens needs %zu KV blocks, the cache has %zu",
                            r->n_prompt, r->max_new, need, g->n_blocks);
    }
    gr->prompt = skpo_xmalloc((size_t)r->n_prompt * sizeof *gr->prompt);
    memcpy(gr->prompt, r->prompt, (size_t)r->n_prompt * sizeof *gr->prompt);
    gr->seeds = skpo_xmalloc((size_t)r->n * sizeof *gr->seeds);
    memcpy(gr->seeds, r->seeds, (size_t)r->n * sizeof *gr->seeds);
    gr->user = r->user;
    gr->res = skpo_xcalloc((size_t)r->n, sizeof *gr->res);
    gr->cap = skpo_xcalloc((size_t)r->n, sizeof *gr->cap);
    gr->parent = -1;
    for (int i = 0; i < r->n; i++) gr->res[i].seed = r->seeds[i];
    if (gr->max_new == 0) gr->started = gr->done = gr->n; // nothing to generate
    if (g->tail == g->qcap) {
        if (g->head > 0) { // slide the live part down before growing
            memmove(g->q, g->q + g->head, (g->tail - g->head) * sizeof *g->q);
            g->tail -= g->head;
            g->head = 0;
        }
        if (g->tail == g->qcap) skpo_xgrow((void **)&g->q, &g->qcap, g->tail + 1, sizeof *g->q);
    }
    g->q[g->tail++] = gr;
    return SKPO_OK;
}

int skpo_gen_pending(const skpo_gen *g) { return (int)(g->tail - g->head); }

int skpo_gen_busy(const skpo_gen *g) {
    if (g->nact > 0) return 1;
    for (size_t i = g->head; i < g->tail; i++)
        if (g->q[i]->started < g->q[i]->n) return 1;
    return 0;
}

skpo_gen_group *skpo_gen_pop(skpo_gen *g) {
    if (g->head == g->tail) return NULL;
    group *gr = g->q[g->head];
    if (gr->done < gr->n) return NULL;
    g->head++;
    skpo_gen_group *out = skpo_xmalloc(sizeof *out);
    out->user = gr->user;
    out->n = gr->n;
    out->s = gr->res;
    gr->res = NULL;
    group_free(gr, 0);
    return out;
}

void skpo_gen_group_free(skpo_gen_group *gr) {
    if (!gr) return;
    for (int i = 0; i < gr->n; i++) { free(gr->s[i].tokens); free(gr->s[i].logp); }
    free(gr->s);
    free(gr);
}

// --- tokens and stopping ----------------------------------------------------------------------

static void finish_seq(skpo_gen *g, seq *s) {
    skpo_kv_seq_free(g->o.kv, s->kv);
    g->reserved -= s->res;
    if (s->stop) g->o.stop->close(s->stop);
    s->stop = NULL;
    s->finished = 1;
    // The prompt blocks stay shared by the samples until the last one ends.
    if (++s->gr->done == s->gr->n) { g->reserved -= s->gr->par_res; s->gr->par_res = 0; }
}

static int is_eos(const skpo_gen *g, int32_t t) {
    for (int i = 0; i < g->o.n_eos; i++) if (g->o.eos[i] == t) return 1;
    return 0;
}

// Record a sampled token of s and decide whether s goes on.
static void take_token(skpo_gen *g, seq *s, int32_t tok, float lp) {
    group *gr = s->gr;
    skpo_gen_sample *r = &gr->res[s->sample];
    if (r->n == gr->cap[s->sample]) {
        size_t c = (size_t)gr->cap[s->sample], c2 = c;
        skpo_xgrow((void **)&r->tokens, &c, (size_t)r->n + 1, sizeof *r->tokens);
        skpo_xgrow((void **)&r->logp, &c2, (size_t)r->n + 1, sizeof *r->logp);
        gr->cap[s->sample] = (int)(c < c2 ? c : c2);
    }
    r->tokens[r->n] = tok;
    r->logp[r->n] = lp;
    r->n++;
    g->st.gen_tokens++;
    if (is_eos(g, tok)) { r->stopped = 1; finish_seq(g, s); return; }
    if (s->stop && g->o.stop->feed(s->stop, tok)) {
        r->stopped = 1;
        finish_seq(g, s);
        return;
    }
    if (r->n >= gr->max_new) { finish_seq(g, s); return; }
    s->phase = PH_DECODE;
    s->next = tok;
}

static void seq_start(skpo_gen *g, seq *s, group *gr, int sample, int kv, size_t res) {
    memset(s, 0, sizeof *s);
    s->gr = gr;
    s->sample = sample;
    s->kv = kv;
    s->res = res;
    s->phase = PH_PREFILL;
    g->reserved += res;
    if (sample >= 0) {
        skpo_rng_seed(&s->rng, gr->seeds[sample]);
        if (g->o.stop) s->stop = g->o.stop->open(g->o.stop->ctx);
    }
}

static int sample_row(skpo_gen *g, skpo_sampler *sm, const float *logits, seq *s, float *lp) {
    return skpo_sample(sm, logits, &g->o.sample, skpo_rng_uniform(&s->rng), lp);
}

// The device path of one step's sampling: a coin per wanted row from its
// sequence's generator (as sample_row draws it), one batched device call.
static skpo_status sample_dev(skpo_gen *g, int rows, const int *want, int32_t *tok, float *lp, int *bad,
                              skpo_err *err) {
    double *coin = skpo_xmalloc((size_t)rows * sizeof *coin);
    for (int r = 0; r < rows; r++) coin[r] = want[r] ? skpo_rng_uniform(&g->act[g->rows_seq[r]].rng) : 0.0;
    skpo_status st = g->o.dev->sample(g->o.dev->ctx, rows, &g->o.sample, coin, tok, lp, err);
    free(coin);
    for (int r = 0; st == SKPO_OK && r < rows; r++) *bad |= want[r] && tok[r] < 0;
    return st;
}

// --- admission -----------------------------------------------------------------------------------

// Fork one sample of a ready group from its parent; it draws its first token
// from the parent's logits at once (and may finish there). 0 if no room.
static skpo_status fork_child(skpo_gen *g, group *gr, int *added, skpo_err *err) {
    size_t need = sample_blocks(g, gr);
    *added = 0;
    if (g->reserved + need > g->n_blocks) return SKPO_OK;
    int kv = skpo_kv_seq_fork(g->o.kv, gr->parent);
    if (kv < 0) return SKPO_OK;
    seq *s = &g->act[g->nact];
    seq_start(g, s, gr, gr->started++, kv, need);
    float lp;
    int tok = sample_row(g, &g->samplers[0], gr->first_logits, s, &lp);
    if (tok < 0) return skpo_err_set(err, SKPO_ENUMERIC, "model produced NaN/Inf logits");
    take_token(g, s, tok, lp);
    if (!s->finished) g->nact++;
    *added = 1;
    return SKPO_OK;
}

// Start sequences for the oldest groups while batch slots and KV blocks allow.
// Stops at the first group that does not fit, so a big group is never starved
// by small ones behind it.
static skpo_status admit(skpo_gen *g, skpo_err *err) {
    for (size_t gi = g->head; gi < g->tail && g->nact < g->o.max_batch; gi++) {
        group *gr = g->q[gi];
        if (gr->started == gr->n) continue;
        if (!shared(g, gr)) {
            while (gr->started < gr->n && g->nact < g->o.max_batch) {
                size_t need = sample_blocks(g, gr);
                if (g->reserved + need > g->n_blocks) return SKPO_OK;
                int kv = skpo_kv_seq_new(g->o.kv);
                if (kv < 0) return SKPO_OK;
                seq_start(g, &g->act[g->nact++], gr, gr->started++, kv, need);
            }
            continue;
        }
        if (gr->par_state == PAR_NONE) {
            size_t need = blocks_for(g, gr->n_prompt);
            if (g->reserved + need > g->n_blocks) return SKPO_OK;
            int kv = skpo_kv_seq_new(g->o.kv);
            if (kv < 0) return SKPO_OK;
            seq_start(g, &g->act[g->nact++], gr, -1, kv, need);
            gr->parent = kv;
            gr->par_res = need;
            gr->par_state = PAR_PREFILL;
            continue;
        }
        if (gr->par_state == PAR_PREFILL) continue;
        while (gr->started < gr->n && g->nact < g->o.max_batch) {
            int added;
            skpo_status st = fork_child(g, gr, &added, err);
            if (st != SKPO_OK) return st;
            if (!added) return SKPO_OK;
        }
        if (gr->started == gr->n) { // every sample holds its own reference now
            skpo_kv_seq_free(g->o.kv, gr->parent); // its reservation ends with the last sample
            gr->parent = -1;
            gr->par_state = PAR_NONE;
            free(gr->first_logits);
            gr->first_logits = NULL;
        }
    }
    return SKPO_OK;
}

// --- one engine step -------------------------------------------------------------------------------

// Lay out the model call: decoding sequences one token each, then prefill
// chunks in admission order within the token budget. Returns the row count.
static int build_batch(skpo_gen *g) {
    int rows = 0, ntok = 0;
    g->off[0] = 0;
    for (int i = 0; i < g->nact; i++) {
        seq *s = &g->act[i];
        if (s->phase != PH_DECODE) continue;
        g->toks[ntok++] = s->next;
        g->rows_seq[rows] = i;
        g->kvids[rows++] = s->kv;
        g->off[rows] = ntok;
    }
    for (int i = 0; i < g->nact && ntok < g->o.step_tokens; i++) {
        seq *s = &g->act[i];
        if (s->phase != PH_PREFILL) continue;
        int chunk = s->gr->n_prompt - s->fed;
        if (chunk > g->o.step_tokens - ntok) chunk = g->o.step_tokens - ntok;
        memcpy(g->toks + ntok, s->gr->prompt + s->fed, (size_t)chunk * sizeof *g->toks);
        ntok += chunk;
        g->rows_seq[rows] = i;
        g->kvids[rows++] = s->kv;
        g->off[rows] = ntok;
    }
    return rows;
}

static void retire_finished(skpo_gen *g) {
    int k = 0;
    for (int i = 0; i < g->nact; i++)
        if (!g->act[i].finished) g->act[k++] = g->act[i];
    g->nact = k;
}

// Nothing runs but the oldest open group cannot start: parents of later groups
// (prefilled in the same steps, none of their samples running) hold the
// blocks. Drop those parents; their groups prefill again when their turn
// comes (same tokens: a sample's randomness is its own seed).
static int release_later_parents(skpo_gen *g) {
    size_t first = g->head;
    while (first < g->tail && g->q[first]->started == g->q[first]->n) first++;
    int freed = 0;
    for (size_t i = first + 1; i < g->tail; i++) {
        group *gr = g->q[i];
        if (gr->par_state != PAR_READY) continue;
        skpo_kv_seq_free(g->o.kv, gr->parent);
        g->reserved -= gr->par_res;
        gr->par_res = 0;
        gr->parent = -1;
        gr->par_state = PAR_NONE;
        free(gr->first_logits);
        gr->first_logits = NULL;
        freed = 1;
    }
    return freed;
}

static size_t started_total(const skpo_gen *g) {
    size_t n = 0;
    for (size_t i = g->head; i < g->tail; i++) n += (size_t)g->q[i]->started;
    return n;
}

skpo_status skpo_gen_step(skpo_gen *g, skpo_err *err) {
    size_t before = started_total(g);
    skpo_status st = admit(g, err);
    if (st == SKPO_OK) retire_finished(g);
    if (st == SKPO_OK && g->nact == 0 && skpo_gen_busy(g) && release_later_parents(g)) {
        st = admit(g, err);
        if (st == SKPO_OK) retire_finished(g);
    }
    if (st != SKPO_OK) return st;
    if (g->nact == 0) {
        // Samples that finished at their fork (first token EOS) are progress;
        // starting nothing with nothing running is not, and would spin.
        if (!skpo_gen_busy(g) || started_total(g) > before) return SKPO_OK;
        return skpo_err_set(err, SKPO_ERANGE, "KV cache of %zu blocks cannot start the next sequence", g->n_blocks);
    }
    int rows = build_batch(g);
    const skpo_gen_dev *dev = g->o.dev;
    if (dev) st = dev->step(dev->ctx, g->o.kv, g->kvids, rows, g->toks, g->off, err);
    else st = g->o.step(g->o.step_ctx, g->o.kv, g->kvids, rows, g->toks, g->off, g->logits, err);
    if (st != SKPO_OK) return st;
    g->st.steps++;
    size_t used = skpo_kv_blocks_used(g->o.kv); // before anything finishing frees blocks
    if (used > g->st.peak_blocks) g->st.peak_blocks = used;
    // Which rows sample a token: decoders, and prefills that reached the prompt end.
    int *want = skpo_xmalloc((size_t)rows * sizeof *want);
    int32_t *tok = skpo_xmalloc((size_t)rows * sizeof *tok);
    float *lp = skpo_xmalloc((size_t)rows * sizeof *lp);
    for (int r = 0; r < rows; r++) {
        seq *s = &g->act[g->rows_seq[r]];
        want[r] = 1;
        if (s->phase == PH_PREFILL) {
            int chunk = g->off[r + 1] - g->off[r];
            s->fed += chunk;
            g->st.prefill_tokens += (uint64_t)chunk;
            if (s->fed < s->gr->n_prompt) want[r] = 0;
            else if (s->sample < 0) { // a parent: keep its logits for the forks
                group *gr = s->gr;
                gr->first_logits = skpo_xmalloc((size_t)g->o.vocab * sizeof *gr->first_logits);
                if (dev) st = st != SKPO_OK ? st : dev->row(dev->ctx, r, gr->first_logits, err);
                else memcpy(gr->first_logits, g->logits + (size_t)r * g->o.vocab, (size_t)g->o.vocab * sizeof(float));
                gr->par_state = PAR_READY;
                s->finished = 1; // leaves the batch, keeps its KV (freed after the last fork)
                want[r] = 0;
            }
        }
    }
    int bad = 0;
    if (dev && st == SKPO_OK) st = sample_dev(g, rows, want, tok, lp, &bad, err);
    else if (!dev) {
#pragma omp parallel for schedule(dynamic, 1) reduction(|:bad)
        for (int r = 0; r < rows; r++) {
            if (!want[r]) continue;
            skpo_sampler *sm = &g->samplers[omp_get_thread_num() % g->nsamplers];
            tok[r] = sample_row(g, sm, g->logits + (size_t)r * g->o.vocab, &g->act[g->rows_seq[r]], &lp[r]);
            bad |= tok[r] < 0;
        }
    }
    if (st != SKPO_OK) {
        free(want);
        free(tok);
        free(lp);
        return st;
    }
    if (!bad)
        for (int r = 0; r < rows; r++)
            if (want[r]) take_token(g, &g->act[g->rows_seq[r]], tok[r], lp[r]);
    free(want);
    free(tok);
    free(lp);
    if (bad) return skpo_err_set(err, SKPO_ENUMERIC, "model produced NaN/Inf logits");
    retire_finished(g);
    return SKPO_OK;
}

skpo_status skpo_gen_run(skpo_gen *g, skpo_err *err) {
    while (skpo_gen_busy(g)) {
        skpo_status st = skpo_gen_step(g, err);
        if (st != SKPO_OK) return st;
    }
    return SKPO_OK;
}
