/*
 * gen_stop.c - stop strings for the engine over a tokenizer's incremental
 * decoder (kept apart from generate.c so the engine links without a
 * tokenizer).
 */
#include "gen/generate.h"

#include <stdlib.h>

typedef struct stops_ctx {
    skpo_gen_stop hooks;       // first member: the public handle
    const skpo_tok *tok;
    const char *const *stops;
    int n;
} stops_ctx;

typedef struct stop_state {
    const stops_ctx *c;
    skpo_tok_stream ts;
    char *text;
    size_t len, cap;
} stop_state;

static void *stops_open(void *ctx) {
    stops_ctx *c = ctx;
    stop_state *s = skpo_xcalloc(1, sizeof *s);
    s->c = c;
    skpo_tok_stream_init(&s->ts, c->tok, 1);
    return s;
}

static int stops_feed(void *state, int32_t id) {
    stop_state *s = state;
    size_t from = s->len;
    skpo_tok_stream_feed(&s->ts, id, &s->text, &s->len, &s->cap);
    return s->len > from && skpo_stop_find(s->text, s->len, from, s->c->stops, s->c->n) >= 0;
}

static void stops_close(void *state) {
    stop_state *s = state;
    free(s->text);
    free(s);
}

skpo_gen_stop *skpo_gen_stops_new(const skpo_tok *tok, const char *const *stops, int n_stops) {
    SKPO_ASSERT(tok && (stops || n_stops == 0));
    stops_ctx *c = skpo_xcalloc(1, sizeof *c);
    c->tok = tok;
    c->stops = stops;
    c->n = n_stops;
    c->hooks = (skpo_gen_stop){.open = stops_open, .feed = stops_feed, .close = stops_close, .ctx = c};
    return &c->hooks;
}

void skpo_gen_stops_free(skpo_gen_stop *s) { free(s); }
