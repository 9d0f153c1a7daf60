/*
 * tokenizer_encode.c - skpo_tok_encode: added-token splitting, NFC, the
 * pre-tokenizers and BPE with a per-word cache (the pipeline is described at
 * the top of tokenizer.c).
 */
#include "tokenizer/tokenizer_impl.h"

#include <stdlib.h>
#include <utf8proc.h>

// --- encoding: BPE ----------------------------------------------------------------

typedef struct hent {
    int32_t rank, pos;
} hent;

typedef struct enc {
    const skpo_tok *t;
    int allow_special;
    int32_t *ids;
    size_t n, cap;
    wcache *cache;              // NULL when another thread holds it
    pcre2_match_data *md;
    pcre2_match_context *mctx;  // created with a bigger JIT stack on demand
    pcre2_jit_stack *jstack;
    int32_t *sid, *srk, *sprev, *snext;  // BPE symbols (scratch)
    size_t scap;
    hent *heap;
    size_t hn, hcap;
    skpo_status st;
    skpo_err *err;
} enc;

static inline void emit(enc *e, int32_t id) {
    if (e->n == e->cap) skpo_xgrow((void **)&e->ids, &e->cap, e->n + 1, sizeof *e->ids);
    e->ids[e->n++] = id;
}

static inline int32_t rank_of(const skpo_tok *t, int32_t a, int32_t b) {
    const pair_ent *p = pair_get(t, a, b);
    return p ? p->rank : INT32_MAX;
}

static void heap_push(enc *e, int32_t rank, int32_t pos) {
    if (e->hn == e->hcap) skpo_xgrow((void **)&e->heap, &e->hcap, e->hn + 1, sizeof *e->heap);
    size_t i = e->hn++;
    hent x = {rank, pos};
    while (i > 0) {
        size_t p = (i - 1) / 2;
        hent *y = &e->heap[p];
        if (y->rank < x.rank || (y->rank == x.rank && y->pos < x.pos)) break;
        e->heap[i] = *y;
        i = p;
    }
    e->heap[i] = x;
}

static hent heap_pop(enc *e) {
    hent top = e->heap[0], x = e->heap[--e->hn];
    size_t i = 0, n = e->hn;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && (e->heap[c + 1].rank < e->heap[c].rank ||
                          (e->heap[c + 1].rank == e->heap[c].rank && e->heap[c + 1].pos < e->heap[c].pos))) c++;
        if (x.rank < e->heap[c].rank || (x.rank == e->heap[c].rank && x.pos < e->heap[c].pos)) break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (n) e->heap[i] = x;
    return top;
}

// Long words: HF's Word::merge_all, a heap of (rank, position) over a linked
// list; stale entries are skipped when popped.
static size_t merge_heap(enc *e, size_t m) {
    const skpo_tok *t = e->t;
    int32_t *id = e->sid, *prev = e->sprev, *next = e->snext;
    e->hn = 0;
    for (size_t i = 0; i < m; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < m ? (int32_t)i + 1 : -1;
        if (i + 1 < m) {
            int32_t r = rank_of(t, id[i], id[i + 1]);
            if (r != INT32_MAX) heap_push(e, r, (int32_t)i);
        }
    }
    while (e->hn) {
        hent h = heap_pop(e);
        int32_t p = h.pos, q = next[p];
        if (id[p] < 0 || q < 0) continue;
        const pair_ent *pe = pair_get(t, id[p], id[q]);
        if (!pe || pe->rank != h.rank) continue;
        id[p] = pe->id;
        id[q] = -1;
        next[p] = next[q];
        if (next[q] >= 0) prev[next[q]] = p;
        if (prev[p] >= 0) {
            int32_t r = rank_of(t, id[prev[p]], id[p]);
            if (r != INT32_MAX) heap_push(e, r, prev[p]);
        }
        if (next[p] >= 0) {
            int32_t r = rank_of(t, id[p], id[next[p]]);
            if (r != INT32_MAX) heap_push(e, r, p);
        }
    }
    size_t k = 0;
    for (size_t i = 0; i < m; i++)
        if (id[i] >= 0) id[k++] = id[i];
    return k;
}

// Short words: the same order (lowest rank, then leftmost) by scanning.
static size_t merge_scan(enc *e, size_t m) {
    const skpo_tok *t = e->t;
    int32_t *id = e->sid, *rk = e->srk;
    for (size_t i = 0; i + 1 < m; i++) rk[i] = rank_of(t, id[i], id[i + 1]);
    while (m > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < m; i++)
            if (rk[i] < rk[best]) best = i;
        if (rk[best] == INT32_MAX) break;
        id[best] = pair_get(t, id[best], id[best + 1])->id;
        memmove(id + best + 1, id + best + 2, (m - best - 2) * sizeof *id);
        if (best + 3 <= m) memmove(rk + best + 1, rk + best + 2, (m - best - 3) * sizeof *rk);
        m--;
        if (best + 1 < m) rk[best] = rank_of(t, id[best], id[best + 1]);
        if (best > 0) rk[best - 1] = rank_of(t, id[best - 1], id[best]);
    }
    return m;
}

static void push_sym(enc *e, size_t *m, int32_t id, int unk) {
    if (unk && e->t->fuse_unk && *m > 0 && e->sid[*m - 1] == id) return;
    e->sid[(*m)++] = id;
}

// Initial symbols: one per byte (byte-level) or per character, with byte
// fallback or unk for characters missing from the vocab (none: dropped, as HF).
static size_t word_symbols(enc *e, const unsigned char *w, size_t n) {
    const skpo_tok *t = e->t;
    size_t m = 0;
    if (t->bytelevel) {
        for (size_t i = 0; i < n; i++) {
            int32_t id = t->byte_id[w[i]];
            if (id >= 0) push_sym(e, &m, id, 0);
            else if (t->unk_id >= 0) push_sym(e, &m, t->unk_id, 1);
        }
        return m;
    }
    for (size_t i = 0; i < n;) {
        int k = utf8_step(w + i, n - i);
        size_t cl = k > 0 ? (size_t)k : 1;
        int32_t id = smap_get(&t->vocab, (const char *)w + i, cl);
        if (id >= 0) push_sym(e, &m, id, 0);
        else {
            int ok = t->byte_fallback;
            for (size_t j = 0; ok && j < cl; j++) ok = t->byte_fb[w[i + j]] >= 0;
            if (ok)
                for (size_t j = 0; j < cl; j++) push_sym(e, &m, t->byte_fb[w[i + j]], 0);
            else if (t->unk_id >= 0) push_sym(e, &m, t->unk_id, 1);
        }
        i += cl;
    }
    return m;
}

static void bpe_compute(enc *e, const unsigned char *w, size_t n) {
    const skpo_tok *t = e->t;
    if (t->ignore_merges) {
        int32_t id = smap_get(&t->words, (const char *)w, n);
        if (id >= 0) { emit(e, id); return; }
    }
    if (n > e->scap) {
        size_t c = e->scap;
        skpo_xgrow((void **)&e->sid, &c, n, sizeof *e->sid);
        e->srk = skpo_xrealloc(e->srk, c * sizeof *e->srk);
        e->sprev = skpo_xrealloc(e->sprev, c * sizeof *e->sprev);
        e->snext = skpo_xrealloc(e->snext, c * sizeof *e->snext);
        e->scap = c;
    }
    size_t m = word_symbols(e, w, n);
    m = m <= 48 ? merge_scan(e, m) : merge_heap(e, m);
    for (size_t i = 0; i < m; i++) emit(e, e->sid[i]);
}

// --- encoding: the word cache ---------------------------------------------------

static void cache_reset(wcache *c) {
    if (!c->e) c->e = skpo_xmalloc(2 * WC_MAX_ENTRIES * sizeof *c->e);
    memset(c->e, 0, 2 * WC_MAX_ENTRIES * sizeof *c->e);
    c->mask = 2 * WC_MAX_ENTRIES - 1;
    c->used = c->klen = c->ilen = 0;
}

static wc_ent *cache_slot(wcache *c, const unsigned char *w, size_t n, uint64_t h) {
    for (size_t i = h & c->mask;; i = (i + 1) & c->mask) {
        wc_ent *x = &c->e[i];
        if (!x->h || (x->h == h && x->klen == n && !memcmp(c->keys + x->koff, w, n))) return x;
    }
}

static void bpe_word(enc *e, const unsigned char *w, size_t n) {
    if (n == 0) return;
    wcache *c = e->cache;
    if (!c || n > WC_MAX_WORD) { bpe_compute(e, w, n); return; }
    uint64_t h = hash_bytes(w, n);
    if (!c->e) cache_reset(c);
    wc_ent *x = cache_slot(c, w, n, h);
    if (x->h) {
        if (e->n + x->nids > e->cap) skpo_xgrow((void **)&e->ids, &e->cap, e->n + x->nids, sizeof *e->ids);
        if (x->nids) memcpy(e->ids + e->n, c->ids + x->ioff, x->nids * sizeof *e->ids);
        e->n += x->nids;
        return;
    }
    size_t start = e->n;
    bpe_compute(e, w, n);
    if (c->used >= WC_MAX_ENTRIES) {
        cache_reset(c);
        x = cache_slot(c, w, n, h);
    }
    size_t nids = e->n - start;
    skpo_xgrow((void **)&c->keys, &c->kcap, c->klen + n, 1);
    skpo_xgrow((void **)&c->ids, &c->icap, c->ilen + nids, sizeof *c->ids);
    memcpy(c->keys + c->klen, w, n);
    if (nids) memcpy(c->ids + c->ilen, e->ids + start, nids * sizeof *c->ids);
    *x = (wc_ent){h, (uint32_t)c->klen, (uint32_t)n, (uint32_t)c->ilen, (uint32_t)nids};
    c->klen += n;
    c->ilen += nids;
    c->used++;
}

// --- encoding: pre-tokenizers -------------------------------------------------------

static void pretok_run(enc *e, int level, const char *p, size_t n);

// Next match of re in p[0..n) at or after *pos; HF (onig find_iter) semantics
// for empty matches: one right after the previous match is skipped.
static int regex_next(enc *e, const pcre2_code *re, int jit, const char *p, size_t n, size_t *pos, size_t *ms, size_t *me,
                      size_t *last_end) {
    for (;;) {
        if (*pos > n) return 0;
        int rc = jit && !e->mctx ? pcre2_jit_match(re, (PCRE2_SPTR)p, n, *pos, PCRE2_NO_UTF_CHECK, e->md, NULL)
                                 : pcre2_match(re, (PCRE2_SPTR)p, n, *pos, PCRE2_NO_UTF_CHECK, e->md, e->mctx);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !e->mctx) {
            e->jstack = pcre2_jit_stack_create(64 * 1024, 256 * 1024 * 1024, NULL);
            e->mctx = pcre2_match_context_create(NULL);
            if (!e->jstack || !e->mctx) skpo_die("out of memory for the regex stack");
            pcre2_jit_stack_assign(e->mctx, NULL, e->jstack);
            continue;
        }
        if (rc == PCRE2_ERROR_NOMATCH) return 0;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            if (e->st == SKPO_OK) e->st = skpo_err_set(e->err, SKPO_EFORMAT, "pre-tokenizer regex failed: %s", (char *)msg);
            return 0;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
        *ms = ov[0], *me = ov[1];
        if (*ms == *me && *last_end == *me) {
            // skip this empty match: advance one character
            size_t k = 1;
            while (*ms + k < n && ((unsigned char)p[*ms + k] & 0xC0) == 0x80) k++;
            *pos = *ms + k;
            continue;
        }
        *pos = *me > *ms ? *me : *me + 1;
        while (*pos < n && ((unsigned char)p[*pos] & 0xC0) == 0x80) (*pos)++;
        *last_end = *me;
        return 1;
    }
}

// Whether p holds a code point where PCRE2's and Oniguruma's classes differ
// (see ONIG_EXTRA_L in tokenizer.c): U+180E, U+1C89..U+1C8A, U+A7CB..U+A7DC,
// or anything beyond the BMP. Text without them can use the faster re_low.
static int needs_onig(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < 0xE1) continue;
        if (p[i] >= 0xF0) return 1;
        if (i + 2 >= n) continue;
        unsigned b = p[i + 1], c = p[i + 2];
        if (p[i] == 0xE1 && ((b == 0xA0 && c == 0x8E) || (b == 0xB2 && (c == 0x89 || c == 0x8A)))) return 1;
        if (p[i] == 0xEA && b == 0x9F && c >= 0x8B && c <= 0x9C) return 1;
    }
    return 0;
}

typedef struct span {
    size_t s, e;
    int m;
} span;

// HF Split: the list of (offsets, is_match) pieces, then the behaviour.
static void split_regex(enc *e, int level, const pretok *pt, const char *p, size_t n) {
    size_t pos = 0, ms, me, prev = 0, last_end = (size_t)-1;
    const pcre2_code *re = pt->re;
    int jit = pt->jit;
    if (pt->re_low && !needs_onig(p, n)) re = pt->re_low, jit = pt->jit_low;
    if (pt->behavior == SPLIT_ISOLATED && !pt->invert) {
        while (regex_next(e, re, jit, p, n, &pos, &ms, &me, &last_end)) {
            if (ms > prev) pretok_run(e, level + 1, p + prev, ms - prev);
            pretok_run(e, level + 1, p + ms, me - ms);
            prev = me;
        }
        if (prev < n) pretok_run(e, level + 1, p + prev, n - prev);
        return;
    }
    span *sp = NULL;
    size_t ns = 0, cap = 0;
    while (regex_next(e, re, jit, p, n, &pos, &ms, &me, &last_end)) {
        skpo_xgrow((void **)&sp, &cap, ns + 2, sizeof *sp);
        if (ms > prev) sp[ns++] = (span){prev, ms, 0};
        sp[ns++] = (span){ms, me, 1};
        prev = me;
    }
    skpo_xgrow((void **)&sp, &cap, ns + 1, sizeof *sp);
    if (prev < n || n == 0) sp[ns++] = (span){prev, n, 0};
    for (size_t i = 0; i < ns; i++) sp[i].m ^= pt->invert;
    span *out = skpo_xmalloc((ns + 1) * sizeof *out);
    size_t no = 0;
    int prevm = -1;
    if (pt->behavior == SPLIT_MERGED_NEXT) {
        for (size_t k = ns; k-- > 0;) {
            if (sp[k].m && prevm != 1 && no) out[no - 1].s = sp[k].s;
            else out[no++] = sp[k];
            prevm = sp[k].m;
        }
        for (size_t i = 0; i < no / 2; i++) {
            span x = out[i];
            out[i] = out[no - 1 - i], out[no - 1 - i] = x;
        }
    } else {
        for (size_t k = 0; k < ns; k++) {
            int merge = pt->behavior == SPLIT_MERGED_PREV ? sp[k].m && prevm != 1 && no
                      : pt->behavior == SPLIT_CONTIGUOUS ? prevm == sp[k].m && no : 0;
            if (pt->behavior == SPLIT_REMOVED && sp[k].m) merge = -1;
            if (merge == 1) out[no - 1].e = sp[k].e;
            else if (merge == 0) out[no++] = sp[k];
            prevm = sp[k].m;
        }
    }
    for (size_t i = 0; i < no; i++)
        if (out[i].e > out[i].s) pretok_run(e, level + 1, p + out[i].s, out[i].e - out[i].s);
    free(out);
    free(sp);
}

static void pretok_run(enc *e, int level, const char *p, size_t n) {
    const skpo_tok *t = e->t;
    if (n == 0 || e->st != SKPO_OK) return;
    if (level == t->npre) { bpe_word(e, (const unsigned char *)p, n); return; }
    const pretok *pt = &t->pre[level];
    if (pt->type == PRE_SPLIT) { split_regex(e, level, pt, p, n); return; }
    char *tmp = NULL;
    if (pt->add_prefix_space && p[0] != ' ') {
        tmp = skpo_xmalloc(n + 1);
        tmp[0] = ' ';
        memcpy(tmp + 1, p, n);
        p = tmp, n++;
    }
    if (pt->re) {
        pretok pi = *pt;
        pi.behavior = SPLIT_ISOLATED, pi.invert = 0;
        split_regex(e, level, &pi, p, n);
    } else {
        pretok_run(e, level + 1, p, n);
    }
    free(tmp);
}

// --- encoding: added tokens and normalization --------------------------------------

// Rust char::is_whitespace (Unicode White_Space).
static int is_ws(int32_t c) {
    return (c >= 9 && c <= 13) || c == ' ' || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
           c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

static int is_word(int32_t c) {
    utf8proc_category_t k = utf8proc_category(c);
    return c == '_' || (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
           (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

static int32_t cp_before(const char *p, size_t i, size_t *start) {
    size_t j = i;
    while (j > 0 && ((unsigned char)p[j - 1] & 0xC0) == 0x80) j--;
    if (j > 0) j--;
    utf8proc_int32_t c = -1;
    utf8proc_iterate((const utf8proc_uint8_t *)p + j, (utf8proc_ssize_t)(i - j), &c);
    *start = j;
    return c;
}

static int32_t cp_at(const char *p, size_t i, size_t n, size_t *len) {
    utf8proc_int32_t c = -1;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)p + i, (utf8proc_ssize_t)(n - i), &c);
    *len = k > 0 ? (size_t)k : 1;
    return c;
}

static void encode_normalized(enc *e, const char *p, size_t n);

// Cut added tokens (of one pass: normalized or not) out of p; the text between
// them goes on to normalization (pass 0) or pre-tokenization (pass 1).
static void split_added(enc *e, int pass, const char *p, size_t n) {
    const skpo_tok *t = e->t;
    size_t prev = 0, i = 0;
    while (i < n && e->st == SKPO_OK) {
        if (!t->added_first[pass][(unsigned char)p[i]]) { i++; continue; }
        const added_tok *hit = NULL;
        for (int k = 0; k < t->nadded && !hit; k++) {
            const added_tok *a = &t->added[k];
            if (a->normalized != pass || (a->special && !e->allow_special) || a->n > n - i || memcmp(p + i, a->s, a->n)) continue;
            size_t js, jl;
            if (a->single_word && ((i > 0 && is_word(cp_before(p, i, &js))) || (i + a->n < n && is_word(cp_at(p, i + a->n, n, &jl)))))
                continue;
            hit = a;
        }
        if (!hit) { i++; continue; }
        size_t s = i, end = i + hit->n, js, jl;
        if (hit->lstrip)
            while (s > prev && is_ws(cp_before(p, s, &js))) s = js;
        if (hit->rstrip)
            while (end < n && is_ws(cp_at(p, end, n, &jl))) end += jl;
        if (s > prev) (pass ? pretok_run(e, 0, p + prev, s - prev) : encode_normalized(e, p + prev, s - prev));
        emit(e, hit->id);
        prev = i = end;
    }
    if (prev < n) (pass ? pretok_run(e, 0, p + prev, n - prev) : encode_normalized(e, p + prev, n - prev));
}

static void encode_normalized(enc *e, const char *p, size_t n) {
    const skpo_tok *t = e->t;
    int ascii = 1;
    for (size_t i = 0; i < n && ascii; i++) ascii = (unsigned char)p[i] < 0x80;
    utf8proc_uint8_t *norm = NULL;
    if (t->nfc && !ascii) {
        utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)p, (utf8proc_ssize_t)n, &norm, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (r < 0) {
            e->st = skpo_err_set(e->err, SKPO_EFORMAT, "NFC normalization failed: %s", utf8proc_errmsg(r));
            return;
        }
        p = (const char *)norm, n = (size_t)r;
    }
    split_added(e, 1, p, n);
    free(norm);
}

skpo_status skpo_tok_encode(const skpo_tok *t, const char *text, size_t len, int allow_special, int32_t **ids, size_t *n, skpo_err *err) {
    SKPO_ASSERT(t && (text || len == 0) && ids && n);
    *ids = NULL;
    *n = 0;
    if (!skpo_tok_utf8_valid(text, len)) return skpo_err_set(err, SKPO_EFORMAT, "text to encode is not valid UTF-8");
    enc e = {.t = t, .allow_special = allow_special, .err = err};
    e.md = pcre2_match_data_create(1, NULL);
    if (!e.md) skpo_die("out of memory for regex match data");
    if (pthread_mutex_trylock(&t->cache->mu) == 0) e.cache = t->cache;
    split_added(&e, 0, text, len);
    if (e.cache) pthread_mutex_unlock(&t->cache->mu);
    pcre2_match_data_free(e.md);
    pcre2_match_context_free(e.mctx);
    pcre2_jit_stack_free(e.jstack);
    free(e.sid), free(e.srk), free(e.sprev), free(e.snext), free(e.heap);
    if (e.st != SKPO_OK) {
        free(e.ids);
        return e.st;
    }
    *ids = e.ids ? e.ids : skpo_xmalloc(sizeof **ids);
    *n = e.n;
    return SKPO_OK;
}

