/*
 * tokenizer.c - Hugging Face tokenizer.json, byte-level BPE (Qwen2.5, Llama 3,
 * GPT-2 style files), giving exactly the ids `tokenizers` gives.
 *
 * Pipeline of skpo_tok_encode, in HF's order:
 *   1. added tokens with normalized=false are cut out of the raw text
 *      (leftmost-longest, as HF's Aho-Corasick matcher); special ones only
 *      when allow_special;
 *   2. each remaining piece is normalized (NFC via utf8proc, or nothing), then
 *      added tokens with normalized=true are cut out of it;
 *   3. pre-tokenizers run in sequence: Split (the file's own regex, PCRE2 with
 *      UTF+UCP and JIT, every HF split behaviour) and ByteLevel (optional GPT-2
 *      regex and prefix space);
 *   4. each pre-token word goes through BPE: a heap of candidate merges ordered
 *      by (rank, position), as HF's Word::merge_all; results are cached per
 *      word (raw bytes -> ids).
 * The post-processor is never applied: callers that want BOS put it in the text
 * (chat templates do) and encode with allow_special.
 *
 * Deliberately not supported (rejected at load with a message): other
 * normalizers and pre-tokenizers (Metaspace, BertPreTokenizer, ...), BPE
 * dropout, continuing_subword_prefix / end_of_word_suffix, WordPiece/Unigram.
 */
#include "tokenizer.h"

#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include <zstd.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

// GPT-2's pre-tokenizer regex, used by ByteLevel when use_regex is true.
static const char GPT2_REGEX[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

enum { WC_MAX_WORD = 256, WC_MAX_ENTRIES = 1 << 16 };

// --- hash maps ------------------------------------------------------------

static uint64_t hash_bytes(const void *p, size_t n) {
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

static void smap_init(smap *m, size_t expect) {
    size_t c = 16;
    while (c < expect * 2) c <<= 1;
    m->e = skpo_xcalloc(c, sizeof *m->e);
    m->mask = c - 1;
    m->used = 0;
}

static smap_ent *smap_slot(const smap *m, const char *k, size_t n, uint64_t h) {
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        smap_ent *e = &m->e[i];
        if (!e->h || (e->h == h && e->n == n && !memcmp(e->k, k, n))) return e;
    }
}

static int32_t smap_get(const smap *m, const char *k, size_t n) {
    if (!m->e) return -1;
    smap_ent *e = smap_slot(m, k, n, hash_bytes(k, n));
    return e->h ? e->v : -1;
}

// Insert if absent (the first value wins, as HF's vocab build keeps one id).
static void smap_put(smap *m, const char *k, size_t n, int32_t v) {
    if ((m->used + 1) * 2 > m->mask + 1) {
        smap old = *m;
        smap_init(m, (old.mask + 1));
        for (size_t i = 0; i <= old.mask; i++)
            if (old.e[i].h) *smap_slot(m, old.e[i].k, old.e[i].n, old.e[i].h) = old.e[i], m->used++;
        free(old.e);
    }
    uint64_t h = hash_bytes(k, n);
    smap_ent *e = smap_slot(m, k, n, h);
    if (e->h) return;
    *e = (smap_ent){h, k, (uint32_t)n, v};
    m->used++;
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
    pcre2_code *re;           // Split pattern, or ByteLevel's GPT-2 regex (NULL if !use_regex)
    int jit;                  // re was JIT-compiled
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
    wcache *cache;
};

// --- UTF-8 --------------------------------------------------------------------

// Length of the UTF-8 character at p (n bytes available): > 0 for a valid
// character, 0 if p holds a valid but incomplete prefix running to the end,
// -k for an invalid maximal subpart of k bytes (Unicode "maximal subpart"
// substitution, as Rust's from_utf8_lossy).
static int utf8_step(const unsigned char *p, size_t n) {
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

static int utf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (p[i] < 0x80) { i++; continue; }
        int k = utf8_step(p + i, n - i);
        if (k <= 0) return 0;
        i += (size_t)k;
    }
    return 1;
}

static void buf_put(char **out, size_t *len, size_t *cap, const void *p, size_t n) {
    skpo_xgrow((void **)out, cap, *len + n + 1, 1);
    memcpy(*out + *len, p, n);
    *len += n;
    (*out)[*len] = 0;
}

// Append bytes to out, replacing invalid sequences by U+FFFD. With keep_tail,
// a valid incomplete character at the end is not written; its length is
// returned so the caller can hold it back.
static size_t utf8_lossy_append(const unsigned char *p, size_t n, int keep_tail, char **out, size_t *len, size_t *cap) {
    size_t i = 0, run = 0;
    while (i < n) {
        int k = utf8_step(p + i, n - i);
        if (k > 0) { i += (size_t)k; continue; }
        buf_put(out, len, cap, p + run, i - run);
        if (k == 0 && keep_tail) return n - i;
        i += k == 0 ? n - i : (size_t)-k;
        buf_put(out, len, cap, "\xEF\xBF\xBD", 3);
        run = i;
    }
    buf_put(out, len, cap, p + run, n - run);
    return 0;
}

// --- GPT-2 byte <-> unicode map --------------------------------------------------

// bytes_to_unicode(): printable Latin-1 bytes map to themselves, the others to
// U+0100 upwards in byte order. Writes the UTF-8 of byte b's char to out.
static int byte_char(int b, char out[4]) {
    int cp;
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) cp = b;
    else {
        int k = 0;
        for (int x = 0; x < b; x++)
            if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) k++;
        cp = 256 + k;
    }
    return (int)utf8proc_encode_char(cp, (utf8proc_uint8_t *)out);
}

// Inverse map: code point -> byte, -1 if not a byte char. cp < 324 always.
static void byte_inverse(int16_t inv[324]) {
    for (int i = 0; i < 324; i++) inv[i] = -1;
    for (int b = 0; b < 256; b++) {
        char s[4];
        utf8proc_int32_t cp;
        int n = byte_char(b, s);
        utf8proc_iterate((const utf8proc_uint8_t *)s, n, &cp);
        inv[cp] = (int16_t)b;
    }
}

// Decode a vocab string with the ByteLevel decoder: every char a byte char ->
// those bytes; otherwise the string's own bytes (as HF). Returns malloc'd or NULL
// when identical to s.
static char *bytelevel_decode(const char *s, size_t n, const int16_t inv[324], uint32_t *outn) {
    char *o = skpo_xmalloc(n + 1);
    size_t m = 0, i = 0;
    while (i < n) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0 || cp >= 324 || inv[cp] < 0) { free(o); return NULL; }
        o[m++] = (char)inv[cp];
        i += (size_t)k;
    }
    o[m] = 0;
    *outn = (uint32_t)m;
    return o;
}


// --- loading ------------------------------------------------------------------

// Parse a JSON file, or FILE.zst when only the compressed copy exists.
static skpo_status load_json(const char *path, json_t **out, skpo_err *err) {
    char *data = NULL;
    size_t len = 0;
    skpo_status st = skpo_read_file(path, &data, &len, err);
    if (st == SKPO_ENOTFOUND) {
        char *zpath = skpo_xmalloc(strlen(path) + 5);
        sprintf(zpath, "%s.zst", path);
        char *z;
        size_t zn;
        skpo_err zerr = {0};
        if (skpo_read_file(zpath, &z, &zn, &zerr) != SKPO_OK) { free(zpath); return st; }
        unsigned long long full = ZSTD_getFrameContentSize(z, zn);
        if (full == ZSTD_CONTENTSIZE_ERROR || full == ZSTD_CONTENTSIZE_UNKNOWN || full > ((size_t)1 << 32)) {
            st = skpo_err_set(err, SKPO_EFORMAT, "'%s': not a zstd frame with a known size", zpath);
        } else {
            data = skpo_xmalloc((size_t)full + 1);
            size_t r = ZSTD_decompress(data, (size_t)full, z, zn);
            if (ZSTD_isError(r)) st = skpo_err_set(err, SKPO_EFORMAT, "'%s': %s", zpath, ZSTD_getErrorName(r));
            else st = SKPO_OK, len = r;
        }
        free(z);
        free(zpath);
        if (st != SKPO_OK) { free(data); return st; }
    } else if (st != SKPO_OK) return st;
    json_error_t je;
    *out = json_loadb(data, len, 0, &je);
    free(data);
    if (!*out) return skpo_err_set(err, SKPO_EFORMAT, "'%s': not JSON: %s (line %d column %d)", path, je.text, je.line, je.column);
    return SKPO_OK;
}

static int jbool(const json_t *o, const char *key, int dflt) {
    json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static const char *jtype(const json_t *o) {
    return json_string_value(json_object_get(o, "type"));
}

static skpo_status parse_normalizer(skpo_tok *t, const json_t *n, const char *path, skpo_err *err) {
    if (!n || json_is_null(n)) return SKPO_OK;
    const char *ty = jtype(n);
    if (ty && !strcmp(ty, "NFC")) { t->nfc = 1; return SKPO_OK; }
    if (ty && !strcmp(ty, "Sequence")) {
        json_t *arr = json_object_get(n, "normalizers"), *v;
        size_t i;
        if (!json_is_array(arr)) return skpo_err_set(err, SKPO_EFORMAT, "'%s': normalizer Sequence without \"normalizers\"", path);
        json_array_foreach(arr, i, v) {
            skpo_status st = parse_normalizer(t, v, path, err);
            if (st != SKPO_OK) return st;
        }
        return SKPO_OK;
    }
    return skpo_err_set(err, SKPO_EUNSUPPORTED, "'%s': normalizer type '%s' is not supported (only NFC)", path, ty ? ty : "?");
}

static skpo_status compile_regex(pretok *p, const char *pat, size_t n, int literal, const char *path, skpo_err *err) {
    int ec;
    PCRE2_SIZE eo;
    uint32_t opt = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
    p->re = pcre2_compile((PCRE2_SPTR)pat, n, opt, &ec, &eo, NULL);
    if (!p->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return skpo_err_set(err, SKPO_EFORMAT, "'%s': pre-tokenizer regex does not compile at offset %zu: %s", path, (size_t)eo, (char *)msg);
    }
    p->jit = pcre2_jit_compile(p->re, PCRE2_JIT_COMPLETE) == 0;
    return SKPO_OK;
}

static skpo_status add_pretok(skpo_tok *t, const json_t *p, const char *path, skpo_err *err) {
    const char *ty = jtype(p);
    if (ty && !strcmp(ty, "Sequence")) {
        json_t *arr = json_object_get(p, "pretokenizers"), *v;
        size_t i;
        if (!json_is_array(arr)) return skpo_err_set(err, SKPO_EFORMAT, "'%s': pre_tokenizer Sequence without \"pretokenizers\"", path);
        json_array_foreach(arr, i, v) {
            skpo_status st = add_pretok(t, v, path, err);
            if (st != SKPO_OK) return st;
        }
        return SKPO_OK;
    }
    pretok pt = {0};
    if (ty && !strcmp(ty, "ByteLevel")) {
        pt.type = PRE_BYTELEVEL;
        pt.add_prefix_space = jbool(p, "add_prefix_space", 1);
        if (jbool(p, "use_regex", 1)) {
            skpo_status st = compile_regex(&pt, GPT2_REGEX, PCRE2_ZERO_TERMINATED, 0, path, err);
            if (st != SKPO_OK) return st;
        }
        t->bytelevel = 1;
    } else if (ty && !strcmp(ty, "Split")) {
        pt.type = PRE_SPLIT;
        json_t *pat = json_object_get(p, "pattern");
        json_t *re = json_object_get(pat, "Regex"), *lit = json_object_get(pat, "String");
        const char *beh = json_string_value(json_object_get(p, "behavior"));
        static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
        int b = -1;
        for (int i = 0; beh && i < 5; i++)
            if (!strcmp(beh, names[i])) b = i;
        if (b < 0) return skpo_err_set(err, SKPO_EFORMAT, "'%s': Split pre-tokenizer with unknown behavior '%s'", path, beh ? beh : "(none)");
        if (!json_is_string(re) && !json_is_string(lit))
            return skpo_err_set(err, SKPO_EFORMAT, "'%s': Split pre-tokenizer without a \"Regex\" or \"String\" pattern", path);
        pt.behavior = (split_behavior)b;
        pt.invert = jbool(p, "invert", 0);
        json_t *s = json_is_string(re) ? re : lit;
        skpo_status st = compile_regex(&pt, json_string_value(s), json_string_length(s), !json_is_string(re), path, err);
        if (st != SKPO_OK) return st;
    } else {
        return skpo_err_set(err, SKPO_EUNSUPPORTED, "'%s': pre-tokenizer type '%s' is not supported (Split, ByteLevel, Sequence)", path, ty ? ty : "?");
    }
    t->pre = skpo_xrealloc(t->pre, (size_t)(t->npre + 1) * sizeof *t->pre);
    t->pre[t->npre++] = pt;
    return SKPO_OK;
}

static skpo_status parse_decoder(skpo_tok *t, const json_t *d, const char *path, skpo_err *err) {
    if (!d || json_is_null(d)) return SKPO_OK;
    const char *ty = jtype(d);
    if (ty && !strcmp(ty, "Sequence")) {
        json_t *arr = json_object_get(d, "decoders"), *v;
        size_t i;
        json_array_foreach(arr, i, v) {
            skpo_status st = parse_decoder(t, v, path, err);
            if (st != SKPO_OK) return st;
        }
        return SKPO_OK;
    }
    if (ty && !strcmp(ty, "ByteLevel")) t->dec_bytelevel = 1;
    else if (ty && !strcmp(ty, "ByteFallback")) t->dec_bytefallback = 1;
    else if (!ty || strcmp(ty, "Fuse"))
        return skpo_err_set(err, SKPO_EUNSUPPORTED, "'%s': decoder type '%s' is not supported (ByteLevel, ByteFallback, Fuse)", path, ty ? ty : "?");
    return SKPO_OK;
}

static void set_token(skpo_tok *t, int32_t id, const char *s, size_t n) {
    if (t->str[id]) return;
    t->str[id] = skpo_xstrndup(s, n);
    t->strn[id] = (uint32_t)n;
}

static void pair_put(skpo_tok *t, int32_t a, int32_t b, int32_t rank, int32_t id) {
    uint64_t k = pair_key(a, b);
    for (size_t i = pair_hash(k) & t->pair_mask;; i = (i + 1) & t->pair_mask) {
        if (t->pairs[i].key == UINT64_MAX || t->pairs[i].key == k) {
            // a repeated merge keeps the later rank, like HF's HashMap collect
            t->pairs[i] = (pair_ent){k, rank, id};
            return;
        }
    }
}

static inline const pair_ent *pair_get(const skpo_tok *t, int32_t a, int32_t b) {
    uint64_t k = pair_key(a, b);
    for (size_t i = pair_hash(k) & t->pair_mask;; i = (i + 1) & t->pair_mask) {
        const pair_ent *e = &t->pairs[i];
        if (e->key == k) return e;
        if (e->key == UINT64_MAX) return NULL;
    }
}

static skpo_status parse_merges(skpo_tok *t, const json_t *merges, const char *path, skpo_err *err) {
    size_t nm = json_array_size(merges), c = 16;
    while (c < nm * 2 + 2) c <<= 1;
    t->pairs = skpo_xmalloc(c * sizeof *t->pairs);
    for (size_t i = 0; i < c; i++) t->pairs[i].key = UINT64_MAX;
    t->pair_mask = c - 1;
    char *cat = NULL;
    size_t catcap = 0;
    skpo_status st = SKPO_OK;
    for (size_t r = 0; r < nm && st == SKPO_OK; r++) {
        json_t *m = json_array_get(merges, r);
        const char *a, *b;
        size_t na, nb;
        if (json_is_string(m)) {
            a = json_string_value(m);
            const char *sp = strchr(a, ' ');
            if (!sp || strchr(sp + 1, ' ') || json_string_length(m) != strlen(a)) {
                st = skpo_err_set(err, SKPO_EFORMAT, "'%s': merge %zu (\"%.40s\") is not two tokens separated by one space", path, r + 1, a);
                break;
            }
            na = (size_t)(sp - a), b = sp + 1, nb = strlen(b);
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0)), na = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1)), nb = json_string_length(json_array_get(m, 1));
        } else {
            st = skpo_err_set(err, SKPO_EFORMAT, "'%s': merge %zu is neither \"a b\" nor [\"a\", \"b\"]", path, r + 1);
            break;
        }
        int32_t ia = smap_get(&t->vocab, a, na), ib = smap_get(&t->vocab, b, nb);
        skpo_xgrow((void **)&cat, &catcap, na + nb + 1, 1);
        memcpy(cat, a, na);
        memcpy(cat + na, b, nb);
        int32_t im = smap_get(&t->vocab, cat, na + nb);
        if (ia < 0 || ib < 0 || im < 0)
            st = skpo_err_set(err, SKPO_EFORMAT, "'%s': merge %zu (\"%.*s\" + \"%.*s\") uses a token not in the vocab", path,
                              r + 1, (int)(na > 40 ? 40 : na), a, (int)(nb > 40 ? 40 : nb), b);
        else pair_put(t, ia, ib, (int32_t)r, im);
    }
    free(cat);
    return st;
}

static skpo_status check_model_opts(skpo_tok *t, const json_t *m, const char *path, skpo_err *err) {
    const char *ty = jtype(m);
    if (ty && strcmp(ty, "BPE")) return skpo_err_set(err, SKPO_EUNSUPPORTED, "'%s': model type '%s' is not supported (BPE only)", path, ty);
    json_t *d = json_object_get(m, "dropout");
    if (d && !json_is_null(d) && json_number_value(d) != 0.0)
        return skpo_err_set(err, SKPO_EUNSUPPORTED, "'%s': BPE dropout is not supported", path);
    const char *affix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const char *s = json_string_value(json_object_get(m, affix[i]));
        if (s && *s) return skpo_err_set(err, SKPO_EUNSUPPORTED, "'%s': BPE %s is not supported", path, affix[i]);
    }
    t->byte_fallback = jbool(m, "byte_fallback", 0);
    t->ignore_merges = jbool(m, "ignore_merges", 0);
    t->fuse_unk = jbool(m, "fuse_unk", 0);
    return SKPO_OK;
}

// Token tables: the model vocab and added_tokens share one id space.
static skpo_status parse_vocab(skpo_tok *t, const json_t *vocab, const json_t *added, const char *path, skpo_err *err) {
    const char *k;
    json_t *v;
    int64_t maxid = -1;
    json_object_foreach((json_t *)vocab, k, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= (1 << 24))
            return skpo_err_set(err, SKPO_EFORMAT, "'%s': vocab entry \"%.40s\" has no valid id", path, k);
        if (json_integer_value(v) > maxid) maxid = json_integer_value(v);
    }
    size_t i;
    json_array_foreach((json_t *)added, i, v) {
        json_t *id = json_object_get(v, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= (1 << 24) ||
            !json_is_string(json_object_get(v, "content")))
            return skpo_err_set(err, SKPO_EFORMAT, "'%s': added token %zu needs \"id\" and \"content\"", path, i + 1);
        if (json_integer_value(id) > maxid) maxid = json_integer_value(id);
    }
    t->nvocab = (int)(maxid + 1);
    t->str = skpo_xcalloc((size_t)t->nvocab + 1, sizeof *t->str);
    t->strn = skpo_xcalloc((size_t)t->nvocab + 1, sizeof *t->strn);
    t->special = skpo_xcalloc((size_t)t->nvocab + 1, 1);
    smap_init(&t->vocab, json_object_size(vocab));
    json_object_foreach((json_t *)vocab, k, v) {
        int32_t id = (int32_t)json_integer_value(v);
        set_token(t, id, k, strlen(k));
        smap_put(&t->vocab, t->str[id], t->strn[id], id);
    }
    t->added = skpo_xcalloc(json_array_size(added) + 1, sizeof *t->added);
    json_array_foreach((json_t *)added, i, v) {
        json_t *c = json_object_get(v, "content");
        added_tok *a = &t->added[t->nadded++];
        a->n = json_string_length(c);
        a->s = skpo_xstrndup(json_string_value(c), a->n);
        a->id = (int32_t)json_integer_value(json_object_get(v, "id"));
        a->special = jbool(v, "special", 0);
        a->lstrip = jbool(v, "lstrip", 0);
        a->rstrip = jbool(v, "rstrip", 0);
        a->single_word = jbool(v, "single_word", 0);
        a->normalized = jbool(v, "normalized", !a->special);
        if (a->n == 0) { t->nadded--; free(a->s); continue; }
        set_token(t, a->id, a->s, a->n);
        t->special[a->id] = (unsigned char)a->special;
        t->added_first[a->normalized ? 1 : 0][(unsigned char)a->s[0]] = 1;
    }
    return SKPO_OK;
}

static int added_cmp(const void *a, const void *b) {
    const added_tok *x = a, *y = b;
    return x->n < y->n ? 1 : x->n > y->n ? -1 : 0;
}

// Per-byte ids (byte-level and byte_fallback), decoder bytes and the
// whole-word map used by ignore_merges.
static void build_tables(skpo_tok *t) {
    int16_t inv[324];
    byte_inverse(inv);
    for (int b = 0; b < 256; b++) {
        char s[8];
        int n = byte_char(b, s);
        t->byte_id[b] = t->bytelevel ? smap_get(&t->vocab, s, (size_t)n) : -1;
        n = snprintf(s, sizeof s, "<0x%02X>", b);
        t->byte_fb[b] = t->byte_fallback ? smap_get(&t->vocab, s, (size_t)n) : -1;
    }
    t->dec = skpo_xcalloc((size_t)t->nvocab + 1, sizeof *t->dec);
    t->decn = skpo_xcalloc((size_t)t->nvocab + 1, sizeof *t->decn);
    for (int id = 0; id < t->nvocab; id++) {
        const char *s = t->str[id];
        if (!s) continue;
        t->dec[id] = t->str[id], t->decn[id] = t->strn[id];
        unsigned hx;
        char tail;
        if (t->dec_bytefallback && t->strn[id] == 6 && sscanf(s, "<0x%2X%c", &hx, &tail) == 2 && tail == '>') {
            t->dec[id] = skpo_xmalloc(2);
            t->dec[id][0] = (char)hx, t->dec[id][1] = 0, t->decn[id] = 1;
        } else if (t->dec_bytelevel) {
            char *d = bytelevel_decode(s, t->strn[id], inv, &t->decn[id]);
            if (d) t->dec[id] = d;
            else t->decn[id] = t->strn[id];
        }
    }
    if (t->ignore_merges) {
        // words reach BPE as raw bytes in byte-level mode: key the map that way
        smap_init(&t->words, t->vocab.used);
        for (int id = 0; id < t->nvocab; id++) {
            if (!t->str[id] || smap_get(&t->vocab, t->str[id], t->strn[id]) != id) continue;
            if (!t->bytelevel) { smap_put(&t->words, t->str[id], t->strn[id], id); continue; }
            uint32_t n;
            char *raw = bytelevel_decode(t->str[id], t->strn[id], inv, &n);
            if (!raw) continue;
            // keys must outlive the map: keep them in dec when it is the same text
            if (t->dec[id] != t->str[id] && t->decn[id] == n && !memcmp(t->dec[id], raw, n)) {
                free(raw);
                smap_put(&t->words, t->dec[id], n, id);
            } else if (n == t->strn[id] && !memcmp(raw, t->str[id], n)) {
                free(raw);
                smap_put(&t->words, t->str[id], n, id);
            } else {
                free(raw); // token not decodable consistently; leave it to the merges
            }
        }
    }
}

static int32_t config_token_id(const skpo_tok *t, const json_t *cfg, const char *key) {
    json_t *v = json_object_get(cfg, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    const char *s = json_string_value(v);
    return s ? skpo_tok_id(t, s) : -1;
}

static skpo_status load_config(skpo_tok *t, const char *dir, skpo_err *err) {
    char *path = skpo_path_join(dir, "tokenizer_config.json");
    json_t *cfg = NULL;
    skpo_status st = SKPO_OK;
    t->bos_id = t->eos_id = -1;
    if (skpo_path_exists(path)) {
        st = load_json(path, &cfg, err);
        if (st == SKPO_OK && !json_is_object(cfg)) st = skpo_err_set(err, SKPO_EFORMAT, "'%s': not a JSON object", path);
        if (st == SKPO_OK) {
            t->bos_id = config_token_id(t, cfg, "bos_token");
            t->eos_id = config_token_id(t, cfg, "eos_token");
        }
    }
    json_decref(cfg);
    free(path);
    return st;
}

static skpo_status load_tokenizer_json(skpo_tok *t, const json_t *j, const char *path, skpo_err *err) {
    if (!json_is_object(j)) return skpo_err_set(err, SKPO_EFORMAT, "'%s': not a JSON object", path);
    json_t *model = json_object_get(j, "model");
    if (!json_is_object(model)) return skpo_err_set(err, SKPO_EFORMAT, "'%s': missing \"model\"", path);
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    if (!json_is_object(vocab)) return skpo_err_set(err, SKPO_EFORMAT, "'%s': model has no \"vocab\" object", path);
    if (!json_is_array(merges)) return skpo_err_set(err, SKPO_EFORMAT, "'%s': model has no \"merges\" array", path);
    json_t *added = json_object_get(j, "added_tokens");
    json_t *none = json_array();
    skpo_status st = check_model_opts(t, model, path, err);
    if (st == SKPO_OK) st = parse_vocab(t, vocab, json_is_array(added) ? added : none, path, err);
    json_decref(none);
    if (st == SKPO_OK) st = parse_merges(t, merges, path, err);
    if (st == SKPO_OK) st = parse_normalizer(t, json_object_get(j, "normalizer"), path, err);
    json_t *pre = json_object_get(j, "pre_tokenizer");
    if (st == SKPO_OK && pre && !json_is_null(pre)) st = add_pretok(t, pre, path, err);
    if (st == SKPO_OK) st = parse_decoder(t, json_object_get(j, "decoder"), path, err);
    if (st != SKPO_OK) return st;
    const char *unk = json_string_value(json_object_get(model, "unk_token"));
    t->unk_id = unk ? smap_get(&t->vocab, unk, strlen(unk)) : -1;
    qsort(t->added, (size_t)t->nadded, sizeof *t->added, added_cmp);
    build_tables(t);
    return SKPO_OK;
}

skpo_status skpo_tok_load(const char *dir, skpo_tok **out, skpo_err *err) {
    SKPO_ASSERT(dir && out);
    *out = NULL;
    char *path = skpo_path_join(dir, "tokenizer.json");
    json_t *j = NULL;
    skpo_status st = load_json(path, &j, err);
    if (st != SKPO_OK) { free(path); return st; }
    skpo_tok *t = skpo_xcalloc(1, sizeof *t);
    st = load_tokenizer_json(t, j, path, err);
    json_decref(j);
    free(path);
    if (st == SKPO_OK) st = load_config(t, dir, err);
    if (st != SKPO_OK) { skpo_tok_free(t); return st; }
    t->cache = skpo_xcalloc(1, sizeof *t->cache);
    pthread_mutex_init(&t->cache->mu, NULL);
    *out = t;
    return SKPO_OK;
}

static void cache_free(wcache *c) {
    if (!c) return;
    pthread_mutex_destroy(&c->mu);
    free(c->e);
    free(c->keys);
    free(c->ids);
    free(c);
}

void skpo_tok_free(skpo_tok *t) {
    if (!t) return;
    for (int id = 0; t->str && id < t->nvocab; id++) {
        if (t->dec && t->dec[id] != t->str[id]) free(t->dec[id]);
        free(t->str[id]);
    }
    free(t->str);
    free(t->strn);
    free(t->dec);
    free(t->decn);
    free(t->special);
    free(t->vocab.e);
    free(t->words.e);
    free(t->pairs);
    for (int i = 0; i < t->nadded; i++) free(t->added[i].s);
    free(t->added);
    for (int i = 0; i < t->npre; i++) pcre2_code_free(t->pre[i].re);
    free(t->pre);
    cache_free(t->cache);
    free(t);
}

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
        memcpy(e->ids + e->n, c->ids + x->ioff, x->nids * sizeof *e->ids);
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
    memcpy(c->ids + c->ilen, e->ids + start, nids * sizeof *c->ids);
    *x = (wc_ent){h, (uint32_t)c->klen, (uint32_t)n, (uint32_t)c->ilen, (uint32_t)nids};
    c->klen += n;
    c->ilen += nids;
    c->used++;
}

// --- encoding: pre-tokenizers -------------------------------------------------------

static void pretok_run(enc *e, int level, const char *p, size_t n);

// Next match of re in p[0..n) at or after *pos; HF (onig find_iter) semantics
// for empty matches: one right after the previous match is skipped.
static int regex_next(enc *e, const pretok *pt, const char *p, size_t n, size_t *pos, size_t *ms, size_t *me, size_t *last_end) {
    for (;;) {
        if (*pos > n) return 0;
        int rc = pt->jit && !e->mctx ? pcre2_jit_match(pt->re, (PCRE2_SPTR)p, n, *pos, PCRE2_NO_UTF_CHECK, e->md, NULL)
                                     : pcre2_match(pt->re, (PCRE2_SPTR)p, n, *pos, PCRE2_NO_UTF_CHECK, e->md, e->mctx);
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

typedef struct span {
    size_t s, e;
    int m;
} span;

// HF Split: the list of (offsets, is_match) pieces, then the behaviour.
static void split_regex(enc *e, int level, const pretok *pt, const char *p, size_t n) {
    size_t pos = 0, ms, me, prev = 0, last_end = (size_t)-1;
    if (pt->behavior == SPLIT_ISOLATED && !pt->invert) {
        while (regex_next(e, pt, p, n, &pos, &ms, &me, &last_end)) {
            if (ms > prev) pretok_run(e, level + 1, p + prev, ms - prev);
            pretok_run(e, level + 1, p + ms, me - ms);
            prev = me;
        }
        if (prev < n) pretok_run(e, level + 1, p + prev, n - prev);
        return;
    }
    span *sp = NULL;
    size_t ns = 0, cap = 0;
    while (regex_next(e, pt, p, n, &pos, &ms, &me, &last_end)) {
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
    if (!utf8_valid(text, len)) return skpo_err_set(err, SKPO_EFORMAT, "text to encode is not valid UTF-8");
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

// --- decoding ------------------------------------------------------------------------

char *skpo_tok_decode(const skpo_tok *t, const int32_t *ids, size_t n, int skip_special, size_t *len) {
    SKPO_ASSERT(t && (ids || n == 0));
    size_t raw_n = 0, raw_cap = 0;
    char *raw = NULL;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->nvocab || !t->dec[id] || (skip_special && t->special[id])) continue;
        buf_put(&raw, &raw_n, &raw_cap, t->dec[id], t->decn[id]);
    }
    char *out = NULL;
    size_t on = 0, oc = 0;
    buf_put(&out, &on, &oc, "", 0);
    utf8_lossy_append((const unsigned char *)raw, raw_n, 0, &out, &on, &oc);
    free(raw);
    if (len) *len = on;
    return out;
}

void skpo_tok_stream_init(skpo_tok_stream *s, const skpo_tok *t, int skip_special) {
    SKPO_ASSERT(s && t);
    memset(s, 0, sizeof *s);
    s->tok = t;
    s->skip_special = skip_special;
}

// Emits every complete character; a valid but unfinished one (at most 3
// bytes) waits in pending. The output equals skpo_tok_decode of all ids.
size_t skpo_tok_stream_feed(skpo_tok_stream *s, int32_t id, char **out, size_t *len, size_t *cap) {
    const skpo_tok *t = s->tok;
    if (id < 0 || id >= t->nvocab || !t->dec[id] || (s->skip_special && t->special[id])) return 0;
    size_t before = *len, n = (size_t)s->npending + t->decn[id];
    unsigned char stackbuf[64], *b = n <= sizeof stackbuf ? stackbuf : skpo_xmalloc(n);
    memcpy(b, s->pending, (size_t)s->npending);
    memcpy(b + s->npending, t->dec[id], t->decn[id]);
    size_t keep = utf8_lossy_append(b, n, 1, out, len, cap);
    SKPO_ASSERT(keep < sizeof s->pending);
    memcpy(s->pending, b + n - keep, keep);
    s->npending = (int)keep;
    if (b != stackbuf) free(b);
    if (!*out) buf_put(out, len, cap, "", 0);
    return *len - before;
}

size_t skpo_tok_stream_finish(skpo_tok_stream *s, char **out, size_t *len, size_t *cap) {
    size_t before = *len;
    utf8_lossy_append((const unsigned char *)s->pending, (size_t)s->npending, 0, out, len, cap);
    s->npending = 0;
    if (!*out) buf_put(out, len, cap, "", 0);
    return *len - before;
}

// --- vocabulary queries --------------------------------------------------------------

int skpo_tok_vocab_size(const skpo_tok *t) { return t->nvocab; }

int skpo_tok_id(const skpo_tok *t, const char *token) {
    size_t n = strlen(token);
    for (int i = 0; i < t->nadded; i++)
        if (t->added[i].n == n && !memcmp(t->added[i].s, token, n)) return t->added[i].id;
    return smap_get(&t->vocab, token, n);
}

const char *skpo_tok_str(const skpo_tok *t, int id) {
    return id >= 0 && id < t->nvocab ? t->str[id] : NULL;
}

int skpo_tok_is_special(const skpo_tok *t, int id) {
    return id >= 0 && id < t->nvocab && t->special[id];
}

int skpo_tok_eos_ids(const skpo_tok *t, int32_t *out, int max) {
    // the configured eos first, then the end-of-turn / end-of-text tokens of
    // the Qwen and Llama 3 templates when the vocab has them
    static const char *names[] = {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>"};
    int32_t cand[5];
    int nc = 0, n = 0;
    cand[nc++] = t->eos_id;
    for (int i = 0; i < 4; i++) cand[nc++] = skpo_tok_id(t, names[i]);
    for (int i = 0; i < nc; i++) {
        int dup = cand[i] < 0;
        for (int j = 0; j < n && !dup; j++) dup = out[j] == cand[i];
        if (!dup && n < max) out[n++] = cand[i];
    }
    return n;
}

int skpo_tok_bos_id(const skpo_tok *t) { return t->bos_id; }
