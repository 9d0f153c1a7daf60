/*
 * tokenizer.c - Hugging Face tokenizer.json, byte-level BPE (Qwen2.5, Llama 3,
 * GPT-2 style files), giving exactly the ids `tokenizers` gives. This file
 * loads the file and decodes; tokenizer_encode.c encodes. See docs/tokenizer.md.
 *
 * Pipeline of skpo_tok_encode, in HF's order:
 *   1. added tokens with normalized=false are cut out of the raw text
 *      (leftmost-longest, as HF's Aho-Corasick matcher); special ones only
 *      when allow_special;
 *   2. each remaining piece is normalized (NFC via utf8proc, or nothing), then
 *      added tokens with normalized=true are cut out of it;
 *   3. pre-tokenizers run in sequence: Split (the file's own regex, compiled by
 *      PCRE2 with UTF+UCP and JIT after rewriting \s and \p{L}/\p{N} to
 *      Oniguruma's meaning; every HF split behaviour) and ByteLevel (optional
 *      GPT-2 regex and prefix space);
 *   4. each pre-token word goes through BPE: merges lowest rank first, leftmost
 *      on ties, as HF's Word::merge_all; results are cached per word (raw bytes
 *      -> ids).
 * The post-processor is never applied; skpo_tok_bos_to_add tells callers which
 * BOS HF's add_special_tokens would put in front.
 *
 * Deliberately not supported (rejected at load with a message): other
 * normalizers and pre-tokenizers (Metaspace, BertPreTokenizer, ...), BPE
 * dropout, continuing_subword_prefix / end_of_word_suffix, WordPiece/Unigram.
 */
#include "tokenizer/tokenizer_impl.h"

#include <jansson.h>
#include <stdlib.h>
#include <utf8proc.h>
#include <zstd.h>

// GPT-2's pre-tokenizer regex, used by ByteLevel when use_regex is true.
static const char GPT2_REGEX[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// --- hash maps (building) ----------------------------------------------------

static void smap_init(smap *m, size_t expect) {
    size_t c = 16;
    while (c < expect * 2) c <<= 1;
    m->e = skpo_xcalloc(c, sizeof *m->e);
    m->mask = c - 1;
    m->used = 0;
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

int skpo_tok_utf8_valid(const char *s, size_t n) {
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
    if (n) memcpy(*out + *len, p, n);
    *len += n;
    (*out)[*len] = 0;
}

// Append bytes to out, replacing invalid sequences by U+FFFD. With keep_tail,
// a valid incomplete character at the end is not written; its length is
// returned so the caller can hold it back.
static size_t utf8_lossy_append(const unsigned char *p, size_t n, int keep_tail, char **out, size_t *len, size_t *cap) {
    size_t i = 0, run = 0;
    if (n == 0) return 0;
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

// Decode a vocab string with the ByteLevel decoder: when every char is a byte
// char, the malloc'd bytes; otherwise NULL, and the caller keeps the string's
// own bytes (as HF does).
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

// Letters and numbers in the Unicode 16 tables of Oniguruma (HF's regex
// engine) that PCRE2 10.42 (Unicode 14) lacks, found by matching every code
// point with both; PCRE2 has none that Oniguruma lacks. Added to \p{L} / \p{N}.
#define ONIG_EXTRA_L \
    "\\x{1C89}-\\x{1C8A}\\x{A7CB}-\\x{A7CD}\\x{A7DA}-\\x{A7DC}\\x{105C0}-\\x{105F3}" \
    "\\x{10D4A}-\\x{10D65}\\x{10D6F}-\\x{10D85}\\x{10EC2}-\\x{10EC4}\\x{1123F}-\\x{11240}" \
    "\\x{11380}-\\x{11389}\\x{1138B}\\x{1138E}\\x{11390}-\\x{113B5}\\x{113B7}\\x{113D1}" \
    "\\x{113D3}\\x{11BC0}-\\x{11BE0}\\x{11F02}\\x{11F04}-\\x{11F10}\\x{11F12}-\\x{11F33}" \
    "\\x{1342F}\\x{13441}-\\x{13446}\\x{13460}-\\x{143FA}\\x{16100}-\\x{1611D}" \
    "\\x{16D40}-\\x{16D6C}\\x{18CFF}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}" \
    "\\x{1E030}-\\x{1E06D}\\x{1E4D0}-\\x{1E4EB}\\x{1E5D0}-\\x{1E5ED}\\x{1E5F0}\\x{2B739}" \
    "\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{323AF}"
#define ONIG_EXTRA_N \
    "\\x{10D40}-\\x{10D49}\\x{116D0}-\\x{116E3}\\x{11BF0}-\\x{11BF9}\\x{11F50}-\\x{11F59}" \
    "\\x{16130}-\\x{16139}\\x{16D70}-\\x{16D79}\\x{1CCF0}-\\x{1CCF9}\\x{1D2C0}-\\x{1D2D3}" \
    "\\x{1E4F0}-\\x{1E4F9}\\x{1E5F1}-\\x{1E5FA}"

// Unicode White_Space, which Oniguruma's \s (what HF uses) matches. PCRE2's
// \s under UCP also takes U+180E, so \s and \S are spelled out instead.
#define WS_BODY "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

// Copy of pat in Oniguruma's terms: \s -> [WS] (WS inside a class), \S ->
// [^WS] outside classes (a \S inside a class is left to PCRE2), \p{L} and \p{N}
// with the ranges above. Other escapes are copied whole.
static char *onig_compat(const char *pat, size_t n, size_t *outn) {
    char *o = NULL;
    size_t len = 0, cap = 0;
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = pat[i];
        const char *rep = NULL;
        if (c == '\\' && i + 1 < n) {
            char d = pat[++i];
            if (d == 's') rep = in_class ? WS_BODY : "[" WS_BODY "]";
            else if (d == 'S' && !in_class) rep = "[^" WS_BODY "]";
            else if (d == 'p' && i + 3 < n && pat[i + 1] == '{' && pat[i + 3] == '}' && (pat[i + 2] == 'L' || pat[i + 2] == 'N')) {
                int letter = pat[i + 2] == 'L';
                rep = in_class ? (letter ? "\\p{L}" ONIG_EXTRA_L : "\\p{N}" ONIG_EXTRA_N)
                               : (letter ? "[\\p{L}" ONIG_EXTRA_L "]" : "[\\p{N}" ONIG_EXTRA_N "]");
                i += 3;
            }
            if (!rep) {
                char esc[2] = {c, d};
                buf_put(&o, &len, &cap, esc, 2);
                continue;
            }
            buf_put(&o, &len, &cap, rep, strlen(rep));
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = 1;
            buf_put(&o, &len, &cap, &c, 1);
            // a leading ^ and a leading ] belong to the class syntax
            if (i + 1 < n && pat[i + 1] == '^') buf_put(&o, &len, &cap, &pat[++i], 1);
            if (i + 1 < n && pat[i + 1] == ']') buf_put(&o, &len, &cap, &pat[++i], 1);
            continue;
        }
        if (c == ']' && in_class) in_class = 0;
        buf_put(&o, &len, &cap, &c, 1);
    }
    if (!o) buf_put(&o, &len, &cap, "", 0);
    *outn = len;
    return o;
}

static skpo_status compile_regex(pretok *p, const char *pat, size_t n, int literal, const char *path, skpo_err *err) {
    int ec;
    PCRE2_SIZE eo;
    uint32_t opt = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    size_t m = n;
    char *src = literal ? NULL : onig_compat(pat, n, &m);
    p->re = pcre2_compile((PCRE2_SPTR)(src ? src : pat), m, opt, &ec, &eo, NULL);
    free(src);
    if (!p->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return skpo_err_set(err, SKPO_EFORMAT, "'%s': pre-tokenizer regex does not compile (offset %zu after rewriting \\s, \\p): %s", path,
                            (size_t)eo, (char *)msg);
    }
    p->jit = pcre2_jit_compile(p->re, PCRE2_JIT_COMPLETE) == 0;
    // the two engines agree on text without the code points above (U+180E and
    // the extra letters/digits; needs_onig finds them): use the faster original
    p->re_low = literal ? NULL : pcre2_compile((PCRE2_SPTR)pat, n, opt, &ec, &eo, NULL);
    p->jit_low = p->re_low && pcre2_jit_compile(p->re_low, PCRE2_JIT_COMPLETE) == 0;
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
            skpo_status st = compile_regex(&pt, GPT2_REGEX, strlen(GPT2_REGEX), 0, path, err);
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
    // A model without a vocabulary encodes nothing (every id would be an added token or unknown).
    if (json_object_size(vocab) == 0) return skpo_err_set(err, SKPO_EFORMAT, "'%s': model vocab is empty", path);
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
        // HF gives an added token that is already in the model vocab the model's id
        int32_t mid = smap_get(&t->vocab, a->s, a->n);
        if (mid >= 0) a->id = mid;
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

// HF's TemplateProcessing "single" template (possibly inside a Sequence of
// processors): the id of a leading SpecialToken, else -1.
static int32_t post_bos(const skpo_tok *t, const json_t *pp) {
    const char *ty = jtype(pp);
    if (ty && !strcmp(ty, "Sequence")) {
        json_t *v;
        size_t i;
        json_array_foreach(json_object_get(pp, "processors"), i, v) {
            int32_t id = post_bos(t, v);
            if (id >= 0) return id;
        }
        return -1;
    }
    if (!ty || strcmp(ty, "TemplateProcessing")) return -1;
    json_t *first = json_array_get(json_object_get(pp, "single"), 0);
    const char *name = json_string_value(json_object_get(json_object_get(first, "SpecialToken"), "id"));
    if (!name) return -1;
    json_t *ids = json_object_get(json_object_get(json_object_get(pp, "special_tokens"), name), "ids");
    json_int_t id = json_array_size(ids) == 1 ? json_integer_value(json_array_get(ids, 0)) : skpo_tok_id(t, name);
    return id >= 0 && id < t->nvocab ? (int32_t)id : -1;
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
    t->bos_to_add = post_bos(t, json_object_get(j, "post_processor"));
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
    for (int i = 0; i < t->npre; i++) pcre2_code_free(t->pre[i].re), pcre2_code_free(t->pre[i].re_low);
    free(t->pre);
    cache_free(t->cache);
    free(t);
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

int skpo_tok_bos_to_add(const skpo_tok *t) { return t->bos_to_add; }
