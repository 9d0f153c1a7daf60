/*
 * test_sampler_engine.c - the generation engine (continuous batching, prefix
 * sharing, seeds, stop conditions, KV accounting) driven by a fake model.
 *
 * The fake model stores each token and its position in the paged KV cache and
 * computes logits from the history it reads BACK from the cache, so a wrong
 * block table, a missed copy-on-write or a token fed to the wrong sequence
 * changes the logits. The reference recomputes the same logits from the token
 * list alone (no cache) and replays the sampler with the recorded seed.
 * Real-model checks are in test_sampler_model.c.
 */
#include "gen/generate.h"
#include "harness.h"
#include "model/kvcache.h"
#include "base/rng.h"
#include "gen/sampler.h"

#include <string.h>

enum { VOCAB = 16, EOS = 0, BS = 4 };

typedef struct fake {
    double eos_bias;
    int calls, max_rows;
} fake;

// Logits after a history h[0..n): a hash of the history spread over VOCAB.
static void fake_logits(const fake *f, const int32_t *h, int n, float *out) {
    uint64_t x = 0x12345;
    for (int i = 0; i < n; i++) x = skpo_mix64(x ^ (uint64_t)h[i]);
    for (int v = 0; v < VOCAB; v++) out[v] = (float)((skpo_mix64(x + (uint64_t)v) >> 40) * 0x1.0p-24 * 4.0);
    out[EOS] += (float)f->eos_bias;
}

static skpo_status fake_step(void *ctx, skpo_kv *kv, const int *seq, int nseq, const int32_t *toks, const int *off,
                             float *logits, skpo_err *err) {
    fake *f = ctx;
    f->calls++;
    if (nseq > f->max_rows) f->max_rows = nseq;
    for (int i = 0; i < nseq; i++) {
        int n = off[i + 1] - off[i];
        int pos = skpo_kv_seq_append(kv, seq[i], n);
        if (pos < 0) return skpo_err_set(err, SKPO_ERANGE, "kv cache full");
        for (int j = 0; j < n; j++) {
            float *k = skpo_kv_k(kv, seq[i], 0, pos + j);
            k[0] = (float)toks[off[i] + j];
            k[1] = (float)(pos + j);
        }
        int len = skpo_kv_seq_len(kv, seq[i]);
        int32_t *h = skpo_xmalloc((size_t)len * sizeof *h);
        for (int p = 0; p < len; p++) {
            const float *k = skpo_kv_k(kv, seq[i], 0, p);
            if (k[1] != (float)p) { free(h); return skpo_err_set(err, SKPO_EFORMAT, "position %d corrupted", p); }
            h[p] = (int32_t)k[0];
        }
        fake_logits(f, h, len, logits + (size_t)i * VOCAB);
        free(h);
    }
    return SKPO_OK;
}

typedef struct rig {
    fake f;
    skpo_kv *kv;
    skpo_gen *g;
    int32_t eos[1];
} rig;

static void rig_init(rig *r, int batch, int share, size_t n_blocks, int ctx, double eos_bias, skpo_sample_params sp) {
    memset(r, 0, sizeof *r);
    r->f.eos_bias = eos_bias;
    skpo_kv_shape sh = {.n_layers = 1, .kv_dim = 2, .block_size = BS, .n_blocks = n_blocks, .max_seqs = 2 * batch + 1};
    r->kv = skpo_kv_new(&sh, NULL);
    r->eos[0] = EOS;
    skpo_gen_opts o = {.step = fake_step, .step_ctx = &r->f, .kv = r->kv, .vocab = VOCAB, .max_batch = batch,
                       .step_tokens = 0, .share_prefix = share, .ctx_limit = ctx, .sample = sp,
                       .eos = r->eos, .n_eos = 1};
    r->g = skpo_gen_new(&o);
}

static void rig_free(rig *r) {
    skpo_gen_free(r->g);
    CHECK(skpo_kv_blocks_used(r->kv) == 0); // every sequence returned its blocks
    skpo_kv_free(r->kv);
}

// Prompt p of group k: deterministic, lengths 1..23 (crossing block edges).
static int make_prompt(int k, int32_t *p) {
    int n = 1 + (k * 7) % 23;
    for (int i = 0; i < n; i++) p[i] = 1 + (int32_t)((k * 31 + i * 5) % (VOCAB - 1));
    return n;
}

// Submit ng groups of G samples; returns the groups popped in order.
static skpo_gen_group **run_groups(rig *r, int ng, int G, int max_new) {
    skpo_gen_group **out = skpo_xcalloc((size_t)ng, sizeof *out);
    int got = 0;
    for (int k = 0; k < ng; k++) {
        int32_t p[32];
        uint64_t seeds[64];
        for (int i = 0; i < G; i++) seeds[i] = skpo_seed_derive(99, "t", (uint64_t)(k * 100 + i));
        skpo_gen_req q = {.prompt = p, .n_prompt = make_prompt(k, p), .n = G, .max_new = max_new, .seeds = seeds,
                          .user = (void *)(intptr_t)k};
        CHECK(skpo_gen_submit(r->g, &q, NULL) == SKPO_OK);
    }
    skpo_err err = {0};
    while (skpo_gen_busy(r->g)) {
        skpo_status st = skpo_gen_step(r->g, &err);
        CHECK_MSG(st == SKPO_OK, "%s", err.msg);
        if (st != SKPO_OK) break;
        skpo_gen_group *gr;
        while ((gr = skpo_gen_pop(r->g))) out[got++] = gr;
    }
    skpo_gen_group *gr;
    while ((gr = skpo_gen_pop(r->g))) out[got++] = gr;
    CHECK(got == ng);
    return out;
}

static void free_groups(skpo_gen_group **gs, int ng) {
    for (int i = 0; i < ng; i++) skpo_gen_group_free(gs[i]);
    free(gs);
}

static int same_groups(skpo_gen_group **a, skpo_gen_group **b, int ng) {
    for (int k = 0; k < ng; k++) {
        if (!a[k] || !b[k] || a[k]->n != b[k]->n || a[k]->user != b[k]->user) return 0;
        for (int i = 0; i < a[k]->n; i++) {
            skpo_gen_sample *x = &a[k]->s[i], *y = &b[k]->s[i];
            if (x->n != y->n || x->stopped != y->stopped || x->seed != y->seed) return 0;
            if (memcmp(x->tokens, y->tokens, (size_t)x->n * sizeof *x->tokens)) return 0;
            if (memcmp(x->logp, y->logp, (size_t)x->n * sizeof *x->logp)) return 0;
        }
    }
    return 1;
}

static const skpo_sample_params T1 = {1.0, 1.0, 0};

static void tokens_equal_recomputation_without_cache(void) {
    rig r;
    rig_init(&r, 5, 1, 400, 64, 0.5, T1);
    int ng = 6, G = 4, max_new = 12;
    skpo_gen_group **gs = run_groups(&r, ng, G, max_new);
    skpo_sampler sm;
    skpo_sampler_init(&sm, VOCAB);
    for (int k = 0; k < ng && gs[k]; k++) {
        CHECK(gs[k]->user == (void *)(intptr_t)k); // submission order
        for (int i = 0; i < G; i++) {
            skpo_gen_sample *s = &gs[k]->s[i];
            int32_t h[64];
            int n = make_prompt(k, h);
            skpo_rng rng;
            skpo_rng_seed(&rng, s->seed);
            CHECK(s->n >= 1 && s->n <= max_new);
            for (int t = 0; t < s->n; t++) {
                float lg[VOCAB], lp;
                fake_logits(&r.f, h, n, lg);
                int tok = skpo_sample(&sm, lg, &T1, skpo_rng_uniform(&rng), &lp);
                CHECK_MSG(tok == s->tokens[t], "group %d sample %d token %d: %d vs %d", k, i, t, tok, s->tokens[t]);
                CHECK(lp == s->logp[t]);
                h[n++] = tok;
            }
            int last = s->tokens[s->n - 1];
            CHECK(s->stopped == (last == EOS));
            if (!s->stopped) CHECK(s->n == max_new);
        }
    }
    skpo_sampler_destroy(&sm);
    free_groups(gs, ng);
    rig_free(&r);
}

static void sharing_and_batch_size_do_not_change_tokens(void) {
    rig a, b, c;
    rig_init(&a, 8, 1, 400, 64, 0.2, T1);
    rig_init(&b, 8, 0, 400, 64, 0.2, T1);
    rig_init(&c, 1, 1, 400, 64, 0.2, T1);
    skpo_gen_group **ga = run_groups(&a, 5, 3, 15), **gb = run_groups(&b, 5, 3, 15), **gc = run_groups(&c, 5, 3, 15);
    CHECK(same_groups(ga, gb, 5));
    CHECK(same_groups(ga, gc, 5));
    CHECK(a.f.max_rows > 1 && c.f.max_rows == 1);
    free_groups(ga, 5);
    free_groups(gb, 5);
    free_groups(gc, 5);
    rig_free(&a);
    rig_free(&b);
    rig_free(&c);
}

static void seed_reproduces_tokens_and_differs_across_seeds(void) {
    rig a, b;
    rig_init(&a, 4, 1, 400, 64, -2.0, T1);
    rig_init(&b, 2, 0, 400, 64, -2.0, T1);
    skpo_gen_group **ga = run_groups(&a, 3, 4, 10), **gb = run_groups(&b, 3, 4, 10);
    CHECK(same_groups(ga, gb, 3));
    // Samples of one prompt have different seeds and (here) different tokens.
    CHECK(ga[0]->s[0].seed != ga[0]->s[1].seed);
    CHECK(ga[0]->s[0].n != ga[0]->s[1].n ||
          memcmp(ga[0]->s[0].tokens, ga[0]->s[1].tokens, (size_t)ga[0]->s[0].n * sizeof(int32_t)));
    free_groups(ga, 3);
    free_groups(gb, 3);
    rig_free(&a);
    rig_free(&b);
}

// One prompt of P tokens, G samples of exactly M tokens (EOS disabled): the
// shared run holds the prompt once plus G suffixes.
static void forked_samples_hold_one_prefix_plus_suffixes(void) {
    enum { P = 40, G = 8, M = 6 };
    size_t used[2];
    for (int share = 0; share < 2; share++) {
        rig r;
        rig_init(&r, G, share, 400, 128, -1e30, T1);
        int32_t p[P];
        for (int i = 0; i < P; i++) p[i] = 1 + i % 15;
        uint64_t seeds[G];
        for (int i = 0; i < G; i++) seeds[i] = (uint64_t)i;
        skpo_gen_req q = {.prompt = p, .n_prompt = P, .n = G, .max_new = M, .seeds = seeds};
        CHECK(skpo_gen_submit(r.g, &q, NULL) == SKPO_OK);
        CHECK(skpo_gen_run(r.g, NULL) == SKPO_OK);
        used[share] = skpo_gen_get_stats(r.g)->peak_blocks;
        skpo_gen_group *gr = skpo_gen_pop(r.g);
        CHECK(gr && gr->s[0].n == M && !gr->s[0].stopped);
        skpo_gen_group_free(gr);
        rig_free(&r);
    }
    // KV holds P + M - 1 positions per sample: 45 -> 12 blocks alone; the
    // prefix is 10 full blocks, each suffix (positions 40..44) 2 blocks.
    CHECK_MSG(used[0] == (size_t)G * 12, "unshared peak %zu", used[0]);
    CHECK_MSG(used[1] == 10 + (size_t)G * 2, "shared peak %zu", used[1]);
}

static void stops_at_eos_max_new_and_context_limit(void) {
    rig r;
    rig_init(&r, 4, 1, 400, 20, -1e30, T1); // EOS never sampled
    int32_t p[16];
    for (int i = 0; i < 16; i++) p[i] = 3;
    uint64_t seeds[2] = {1, 2};
    skpo_gen_req q = {.prompt = p, .n_prompt = 16, .n = 2, .max_new = 100, .seeds = seeds};
    CHECK(skpo_gen_submit(r.g, &q, NULL) == SKPO_OK);
    q.n_prompt = 5;
    q.max_new = 3;
    CHECK(skpo_gen_submit(r.g, &q, NULL) == SKPO_OK);
    CHECK(skpo_gen_run(r.g, NULL) == SKPO_OK);
    skpo_gen_group *a = skpo_gen_pop(r.g), *b = skpo_gen_pop(r.g);
    CHECK(a && a->s[0].n == 4 && a->s[1].n == 4 && !a->s[0].stopped); // ctx 20 - prompt 16
    CHECK(b && b->s[0].n == 3 && !b->s[0].stopped);
    skpo_gen_group_free(a);
    skpo_gen_group_free(b);
    rig_free(&r);
    rig_init(&r, 4, 1, 400, 64, 1e30, T1); // EOS always: one token, kept
    q.max_new = 10;
    CHECK(skpo_gen_submit(r.g, &q, NULL) == SKPO_OK);
    CHECK(skpo_gen_run(r.g, NULL) == SKPO_OK);
    a = skpo_gen_pop(r.g);
    CHECK(a && a->s[1].n == 1 && a->s[1].tokens[0] == EOS && a->s[1].stopped);
    skpo_gen_group_free(a);
    rig_free(&r);
}

static void bad_requests_are_rejected(void) {
    rig r;
    rig_init(&r, 2, 1, 8, 16, 0, T1);
    int32_t p[20] = {1, 2, VOCAB, 3};
    uint64_t seeds[2] = {0, 1};
    skpo_err err = {0};
    skpo_gen_req q = {.prompt = p, .n_prompt = 0, .n = 2, .max_new = 4, .seeds = seeds};
    CHECK(skpo_gen_submit(r.g, &q, &err) == SKPO_ERANGE && strstr(err.msg, "empty"));
    q.n_prompt = 4;
    CHECK(skpo_gen_submit(r.g, &q, &err) == SKPO_ERANGE && strstr(err.msg, "vocabulary"));
    p[2] = -1;
    CHECK(skpo_gen_submit(r.g, &q, &err) == SKPO_ERANGE);
    for (int i = 0; i < 20; i++) p[i] = 1;
    q.n_prompt = 16;
    CHECK(skpo_gen_submit(r.g, &q, &err) == SKPO_ERANGE && strstr(err.msg, "context"));
    rig_free(&r);
    rig_init(&r, 2, 0, 3, 64, 0, T1); // 3 blocks = 12 positions
    q.n_prompt = 10;
    q.max_new = 8;
    CHECK(skpo_gen_submit(r.g, &q, &err) == SKPO_ERANGE && strstr(err.msg, "KV blocks"));
    CHECK(skpo_gen_pending(r.g) == 0);
    rig_free(&r);
}

// A small cache and batch: sequences must wait for blocks and slots, join as
// others finish, and still give the tokens of an unconstrained run.
static void continuous_batching_under_tight_memory(void) {
    rig a, b;
    rig_init(&a, 3, 1, 14, 64, 0.3, T1);
    rig_init(&b, 16, 0, 1000, 64, 0.3, T1);
    skpo_gen_group **ga = run_groups(&a, 7, 4, 12), **gb = run_groups(&b, 7, 4, 12);
    CHECK(same_groups(ga, gb, 7));
    CHECK(a.f.max_rows <= 3);
    CHECK(skpo_gen_get_stats(a.g)->peak_blocks <= 14);
    // Continuous batching: far fewer model calls than one group at a time.
    uint64_t tokens = skpo_gen_get_stats(a.g)->gen_tokens;
    CHECK_MSG(a.f.calls < (int)tokens, "%d calls for %llu tokens", a.f.calls, (unsigned long long)tokens);
    free_groups(ga, 7);
    free_groups(gb, 7);
    rig_free(&a);
    rig_free(&b);
}

static void greedy_is_deterministic_without_seed_effect(void) {
    skpo_sample_params g0 = {0, 1, 0};
    rig r;
    rig_init(&r, 4, 1, 200, 64, 0, g0);
    skpo_gen_group **gs = run_groups(&r, 2, 3, 8);
    for (int k = 0; k < 2; k++) {
        CHECK(gs[k]->s[0].n == gs[k]->s[1].n);
        CHECK(!memcmp(gs[k]->s[0].tokens, gs[k]->s[2].tokens, (size_t)gs[k]->s[0].n * sizeof(int32_t)));
    }
    free_groups(gs, 2);
    rig_free(&r);
}

// Text stop hook: stops when the decoded "text" (each id one letter) ends in
// "cd", i.e. ids 2 then 3 - a stop string spanning two tokens.
typedef struct letters { char last; } letters;
static void *letters_open(void *ctx) { return skpo_xcalloc(1, sizeof(letters)); }
static int letters_feed(void *st, int32_t id) {
    letters *l = st;
    char c = (char)('a' + id);
    int hit = l->last == 'c' && c == 'd';
    l->last = c;
    return hit;
}
static void letters_close(void *st) { free(st); }

static void text_stop_hook_ends_sequence_on_completing_token(void) {
    rig r;
    rig_init(&r, 4, 1, 800, 1000, -1e30, T1);
    skpo_gen_stop hooks = {.open = letters_open, .feed = letters_feed, .close = letters_close};
    skpo_gen_free(r.g);
    skpo_gen_opts o = {.step = fake_step, .step_ctx = &r.f, .kv = r.kv, .vocab = VOCAB, .max_batch = 4,
                       .share_prefix = 1, .ctx_limit = 1000, .sample = T1, .eos = r.eos, .n_eos = 1, .stop = &hooks};
    r.g = skpo_gen_new(&o);
    skpo_gen_group **gs = run_groups(&r, 3, 4, 600);
    int stopped = 0;
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 4; i++) {
            skpo_gen_sample *s = &gs[k]->s[i];
            int first = -1; // first "cd" in the tokens
            for (int t = 1; t < s->n && first < 0; t++) if (s->tokens[t - 1] == 2 && s->tokens[t] == 3) first = t;
            if (s->stopped) { stopped++; CHECK(first == s->n - 1); }
            else CHECK(first < 0 && s->n == 600);
        }
    CHECK(stopped >= 8); // p("cd") = 1/256 per token: ~90% of 600-token samples stop
    free_groups(gs, 3);
    rig_free(&r);
}

// Two prompts prefilled in the same step leave two parents holding blocks;
// the first group's samples then do not fit until the later parent gives its
// blocks back (it re-prefills afterwards). Must finish, with the same tokens.
static void parents_waiting_for_room_do_not_deadlock(void) {
    rig a, b;
    rig_init(&a, 4, 1, 10, 64, -1e30, T1); // 10 blocks of 4: two 16-token prompts fill 8
    rig_init(&b, 4, 1, 400, 64, -1e30, T1);
    for (int k = 0; k < 2; k++) {
        rig *r = k ? &b : &a;
        for (int j = 0; j < 2; j++) {
            int32_t p[16];
            for (int i = 0; i < 16; i++) p[i] = 1 + (i + j) % 15;
            uint64_t seeds[2] = {(uint64_t)j, (uint64_t)j + 10};
            skpo_gen_req q = {.prompt = p, .n_prompt = 16, .n = 2, .max_new = 8, .seeds = seeds};
            CHECK(skpo_gen_submit(r->g, &q, NULL) == SKPO_OK);
        }
        int steps = 0;
        skpo_err err = {0};
        while (skpo_gen_busy(r->g) && steps++ < 1000) CHECK_MSG(skpo_gen_step(r->g, &err) == SKPO_OK, "%s", err.msg);
        CHECK(steps < 1000);
    }
    for (int j = 0; j < 2; j++) {
        skpo_gen_group *x = skpo_gen_pop(a.g), *y = skpo_gen_pop(b.g);
        CHECK(x && y);
        if (x && y) {
            skpo_gen_group *xs[1] = {x}, *ys[1] = {y};
            CHECK(same_groups(xs, ys, 1));
        }
        skpo_gen_group_free(x);
        skpo_gen_group_free(y);
    }
    rig_free(&a);
    rig_free(&b);
}

int main(void) {
    RUN(parents_waiting_for_room_do_not_deadlock);
    RUN(text_stop_hook_ends_sequence_on_completing_token);
    RUN(tokens_equal_recomputation_without_cache);
    RUN(sharing_and_batch_size_do_not_change_tokens);
    RUN(seed_reproduces_tokens_and_differs_across_seeds);
    RUN(forked_samples_hold_one_prefix_plus_suffixes);
    RUN(stops_at_eos_max_new_and_context_limit);
    RUN(bad_requests_are_rejected);
    RUN(continuous_batching_under_tight_memory);
    RUN(greedy_is_deterministic_without_seed_effect);
    return TEST_SUMMARY();
}
