/*
 * tokenizer_impl.h - internals shared by tokenizer.c (loading, decoding) and
 * tokenizer_encode.c (encoding). Not a public header: nothing outside those two
 * files includes it.
 */
#ifndef SKPO_TOKENIZER_IMPL_H
#define SKPO_TOKENIZER_IMPL_H

#include "tokenizer/tokenizer.h"

#include <pthread.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

enum { WC_MAX_WORD = 256, WC_MAX_ENTRIES = 1 << 16 };

// --- hash maps ------------------------------------------------------------

static inline uint64_t hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0x94d049bb133111ebull;
    h ^= h >> 29;
    return h | 1; // 0 marks an empty slot
}

// String -> int32 map over keys the caller keeps alive.
typedef struct smap_ent {
    uint64_t h;
    const char *k;
    uint32_t n;
    int32_t v;
} smap_ent;
typedef struct smap {
    smap_ent *e;
    size_t mask, used;
} smap;

static inline smap_ent *smap_slot(const smap *m, const char *k, size_t n, uint64_t h) {
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        smap_ent *e = &m->e[i];
        if (!e->h || (e->h == h && e->n == n && !memcmp(e->k, k, n))) return e;
    }
}

static inline int32_t smap_get(const smap *m, const char *k, size_t n) {
    if (!m->e) return -1;
    smap_ent *e = smap_slot(m, k, n, hash_bytes(k, n));
    return e->h ? e->v : -1;
}

// (left id, right id) -> (rank, merged id).
typedef struct pair_ent {
    uint64_t key; // UINT64_MAX = empty
    int32_t rank, id;
} pair_ent;

static inline uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }
static inline size_t pair_hash(uint64_t k) { k *= 0x9e3779b97f4a7c15ull; return (size_t)(k ^ (k >> 29)); }
// --- the tokenizer ----------------------------------------------------------

typedef enum { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS } split_behavior;
typedef enum { PRE_SPLIT, PRE_BYTELEVEL } pre_type;

typedef struct pretok {
    pre_type type;
    pcre2_code *re;           // Split pattern, or ByteLevel's GPT-2 regex (NULL if !use_regex),
    int jit;                  //   rewritten to Oniguruma's \s, \p{L}, \p{N}; re was JIT-compiled
    pcre2_code *re_low;       // the pattern as written: the same matches on text without code
    int jit_low;              //   points >= U+1000, and faster (NULL if it does not compile)
    split_behavior behavior;
    int invert, add_prefix_space;
} pretok;

typedef struct added_tok {
    char *s;
    size_t n;
    int32_t id;
    int special, lstrip, rstrip, single_word, normalized;
} added_tok;

typedef struct wc_ent {
    uint64_t h;
    uint32_t koff, klen, ioff, nids;
} wc_ent;

// Per-word BPE cache. Shared by calls on one tokenizer; a call that cannot take
// the lock (another thread encoding) simply runs without it.
typedef struct wcache {
    pthread_mutex_t mu;
    wc_ent *e;
    size_t mask, used;
    char *keys;
    size_t klen, kcap;
    int32_t *ids;
    size_t ilen, icap;
} wcache;

struct skpo_tok {
    int nvocab;                // 1 + largest id
    char **str;                // token string per id (vocab form), NULL for holes
    uint32_t *strn;
    char **dec;                // decoder output bytes per id (may alias str)
    uint32_t *decn;
    unsigned char *special;    // per id
    smap vocab;                // model vocab string -> id
    smap words;                // ignore_merges: whole word (model input bytes) -> id
    pair_ent *pairs;
    size_t pair_mask;
    added_tok *added;
    int nadded;
    unsigned char added_first[2][256]; // first bytes of added tokens, [normalized]
    int nfc;
    pretok *pre;
    int npre;
    int bytelevel;             // a ByteLevel pre-tokenizer maps bytes to chars
    int32_t byte_id[256];      // byte-level: vocab id of each byte's char (-1 if none)
    int32_t byte_fb[256];      // byte_fallback: id of "<0xXX>" (-1 if none)
    int byte_fallback, ignore_merges, fuse_unk;
    int32_t unk_id;
    int dec_bytelevel, dec_bytefallback;
    int32_t bos_id, eos_id;
    int32_t bos_to_add;        // post-processor's leading special token, -1 if none
    wcache *cache;
};


static inline const pair_ent *pair_get(const skpo_tok *t, int32_t a, int32_t b) {
    uint64_t k = pair_key(a, b);
    for (size_t i = pair_hash(k) & t->pair_mask;; i = (i + 1) & t->pair_mask) {
        const pair_ent *e = &t->pairs[i];
        if (e->key == k) return e;
        if (e->key == UINT64_MAX) return NULL;
    }
}


// --- UTF-8 --------------------------------------------------------------------

// Length of the UTF-8 character at p (n bytes available): > 0 for a valid
// character, 0 if p holds a valid but incomplete prefix running to the end,
// -k for an invalid maximal subpart of k bytes (Unicode "maximal subpart"
// substitution, as Rust's from_utf8_lossy).
static inline int utf8_step(const unsigned char *p, size_t n) {
    unsigned c = p[0];
    if (c < 0x80) return 1;
    int need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return -1;
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n) return 0;
        unsigned b = p[i];
        if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xBF)) return -i;
    }
    return need + 1;
}


// Defined in tokenizer.c.
int skpo_tok_utf8_valid(const char *s, size_t n);

#endif
