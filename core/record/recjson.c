/*
 * recjson.c - records <-> JSON (see recjson.h for the mapping).
 *
 * Output is written by hand (not through jansson) so float32 keeps its
 * shortest text, non-finite values never produce invalid JSON, and large token
 * arrays print without building a tree. Input is parsed with jansson.
 */
#include "record/recjson.h"
#include "record/mpcheck.h"

#include <jansson.h>
#include <math.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

// --- buffer --------------------------------------------------------------------

void skpo_jbuf_put(skpo_jbuf *b, const void *s, size_t n) {
    if (!n) return;
    if (b->n + n + 1 > b->cap) skpo_xgrow((void **)&b->p, &b->cap, b->n + n + 1, 1);
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void putc_(skpo_jbuf *b, char c) {
    if (b->n + 2 > b->cap) skpo_xgrow((void **)&b->p, &b->cap, b->n + 2, 1);
    b->p[b->n++] = c;
}

static void puts_(skpo_jbuf *b, const char *s) { skpo_jbuf_put(b, s, strlen(s)); }

const char *skpo_jbuf_cstr(skpo_jbuf *b) {
    putc_(b, 0);
    b->n--;
    return b->p;
}

void skpo_jbuf_free(skpo_jbuf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

static int jbuf_write(void *data, const char *buf, size_t len) {
    skpo_jbuf_put(data, buf, len);
    return 0;
}

// --- base64 --------------------------------------------------------------------

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void put_b64(skpo_jbuf *b, const unsigned char *p, size_t n) {
    putc_(b, '"');
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        char q[4] = {b64[v >> 18 & 63], b64[v >> 12 & 63], i + 1 < n ? b64[v >> 6 & 63] : '=', i + 2 < n ? b64[v & 63] : '='};
        skpo_jbuf_put(b, q, 4);
    }
    putc_(b, '"');
}

// Decode standard base64 (padding required). Returns -1 on a bad string.
static int from_b64(const char *s, size_t n, skpo_jbuf *out) {
    if (n % 4) return -1;
    for (size_t i = 0; i < n; i += 4) {
        unsigned v = 0;
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            const char c = s[i + k];
            const char *at = c ? strchr(b64, c) : NULL;
            if (c == '=' && i + 4 == n && k >= 2) { pad++; v <<= 6; continue; }
            if (!at || pad) return -1;
            v = v << 6 | (unsigned)(at - b64);
        }
        char q[3] = {(char)(v >> 16), (char)(v >> 8), (char)v};
        skpo_jbuf_put(out, q, (size_t)(3 - pad));
    }
    return 0;
}

// --- record -> JSON ------------------------------------------------------------------

void skpo_json_str(const char *s, size_t n, skpo_jbuf *b) {
    static const char hex[] = "0123456789abcdef";
    putc_(b, '"');
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        skpo_jbuf_put(b, s + run, i - run);
        run = i + 1;
        char e[7] = {'\\', 0};
        switch (c) {
        case '"': e[1] = '"'; break;
        case '\\': e[1] = '\\'; break;
        case '\n': e[1] = 'n'; break;
        case '\t': e[1] = 't'; break;
        case '\r': e[1] = 'r'; break;
        default: e[1] = 'u'; e[2] = '0'; e[3] = '0'; e[4] = hex[c >> 4]; e[5] = hex[c & 15]; break;
        }
        skpo_jbuf_put(b, e, e[1] == 'u' ? 6 : 2);
    }
    skpo_jbuf_put(b, s + run, n - run);
    putc_(b, '"');
}

void skpo_json_float(double f, bool is_f32, skpo_jbuf *b) {
    if (isnan(f)) { puts_(b, "\"NaN\""); return; }
    if (isinf(f)) { puts_(b, f > 0 ? "\"Infinity\"" : "\"-Infinity\""); return; }
    char t[40];
    // shortest text that reads back to the same value
    if (is_f32) {
        for (int p = 6; p <= 9; p++) {
            snprintf(t, sizeof t, "%.*g", p, f);
            if (strtof(t, NULL) == (float)f) break;
        }
    } else {
        for (int p = 15; p <= 17; p++) {
            snprintf(t, sizeof t, "%.*g", p, f);
            if (strtod(t, NULL) == f) break;
        }
    }
    puts_(b, t);
    if (!strpbrk(t, ".e")) puts_(b, ".0");
}

static void put_i64(skpo_jbuf *b, int64_t v) {
    char t[24];
    char *e = t + sizeof t, *p = e;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do *--p = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0) *--p = '-';
    skpo_jbuf_put(b, p, (size_t)(e - p));
}

static bool utf8_ok(const char *s, size_t n) { return skpo_utf8_valid(s, n); }

static void put_str_or_b64(const char *s, size_t n, skpo_jbuf *b) {
    if (utf8_ok(s, n)) { skpo_json_str(s, n, b); return; }
    puts_(b, "{\"$str\":");
    put_b64(b, (const unsigned char *)s, n);
    putc_(b, '}');
}

static uint64_t be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = v << 8 | p[i];
    return v;
}

// Where a msgpack value's payload starts (h), its byte length (strings, bin,
// ext) or element count (arrays, maps).
typedef struct mp_head {
    size_t h, len, kids;
    int map;
} mp_head;

static int mp_is_container(unsigned c) { return (c >= 0x80 && c <= 0x9f) || (c >= 0xdc && c <= 0xdf); }

// The header of a value whose first byte is not a fix type: numbers are
// written here and their size returned, as is a short buffer or an unknown
// byte (null, the rest of the buffer); otherwise *hd is filled and 0 returned.
static size_t mp_sized_head(const unsigned char *p, size_t n, skpo_jbuf *b, mp_head *hd) {
    static const int w[] = {1, 2, 4, 8};
    unsigned c = p[0];
    int lw = 0, vw = 0; // width of a length field, or of a fixed-size payload
    switch (c) {
    case 0xc4: case 0xd9: case 0xc7: lw = 1; break;
    case 0xc5: case 0xda: case 0xc8: case 0xdc: case 0xde: lw = 2; break;
    case 0xc6: case 0xdb: case 0xc9: case 0xdd: case 0xdf: lw = 4; break;
    case 0xca: vw = 4; break;
    case 0xcb: vw = 8; break;
    case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8: vw = 1 + (1 << (c - 0xd4)); break;
    default: if (c >= 0xcc && c <= 0xd3) vw = w[(c - 0xcc) & 3]; break;
    }
    if (n < 1 + (size_t)(lw + vw) || (!lw && !vw)) { puts_(b, "null"); return n; }
    uint64_t x = be(p + 1, lw ? lw : (vw > 8 ? 0 : vw));
    hd->h = 1 + (size_t)lw;
    if (c >= 0xcc && c <= 0xcf) {
        char t[24];
        snprintf(t, sizeof t, "%llu", (unsigned long long)x);
        puts_(b, t);
        return 1 + (size_t)vw;
    }
    if (c >= 0xd0 && c <= 0xd3) {
        put_i64(b, vw == 8 ? (int64_t)x : (int64_t)(x ^ (1ull << (8 * vw - 1))) - (int64_t)(1ull << (8 * vw - 1)));
        return 1 + (size_t)vw;
    }
    if (c == 0xca) { uint32_t u = (uint32_t)x; float f; memcpy(&f, &u, 4); skpo_json_float(f, true, b); return 5; }
    if (c == 0xcb) { double d; memcpy(&d, &x, 8); skpo_json_float(d, false, b); return 9; }
    if (c >= 0xd4 && c <= 0xd8) { hd->len = (size_t)vw - 1; hd->h = 1; } // fixext: type byte then payload
    else if (c == 0xdc || c == 0xdd) hd->kids = x;
    else if (c == 0xde || c == 0xdf) { hd->kids = x; hd->map = 1; }
    else hd->len = x;
    return 0;
}

// A string, bin or ext payload: {"$ext":[type,base64]}, {"$bin":base64}, or
// the string (base64 under "$str" when it is not UTF-8).
static size_t mp_bytes_to_json(const unsigned char *p, size_t n, const mp_head *hd, skpo_jbuf *b) {
    unsigned c = p[0];
    bool ext = c == 0xc7 || c == 0xc8 || c == 0xc9 || (c >= 0xd4 && c <= 0xd8);
    size_t need = hd->h + (ext ? 1 : 0) + hd->len;
    if (need > n) { puts_(b, "null"); return n; }
    const char *d = (const char *)p + hd->h + (ext ? 1 : 0);
    if (ext) {
        puts_(b, "{\"$ext\":[");
        put_i64(b, (int8_t)p[hd->h]);
        putc_(b, ',');
        put_b64(b, (const unsigned char *)d, hd->len);
        puts_(b, "]}");
    } else if (c >= 0xc4 && c <= 0xc6) {
        puts_(b, "{\"$bin\":");
        put_b64(b, (const unsigned char *)d, hd->len);
        putc_(b, '}');
    } else {
        put_str_or_b64(d, hd->len, b);
    }
    return need;
}

static size_t mp_to_json(const unsigned char *p, size_t n, skpo_jbuf *b);

// A map key. JSON keys are strings: a string key prints as itself, a
// container key as the base64 of its bytes (as escaped JSON text, keys nested
// in keys would double in size per level), any other key as its JSON text in
// a string.
static size_t mp_key_to_json(const unsigned char *p, size_t n, skpo_jbuf *b) {
    unsigned k = p[0];
    size_t kl;
    skpo_err ke;
    if ((k >= 0xa0 && k <= 0xbf) || (k >= 0xd9 && k <= 0xdb)) return mp_to_json(p, n, b);
    if (mp_is_container(k) && skpo_mp_check((const char *)p, n, 0, &kl, &ke) == SKPO_OK) {
        put_b64(b, p, kl);
        return kl;
    }
    skpo_jbuf t = {0};
    size_t used = mp_to_json(p, n, &t);
    skpo_json_str(t.p ? t.p : "", t.n, b);
    skpo_jbuf_free(&t);
    return used;
}

// An array or a map's elements; a short buffer ends it early.
static size_t mp_container_to_json(const unsigned char *p, size_t n, const mp_head *hd, skpo_jbuf *b) {
    size_t o = hd->h;
    putc_(b, hd->map ? '{' : '[');
    for (size_t i = 0; i < hd->kids && o < n; i++) {
        if (i) putc_(b, ',');
        if (hd->map) {
            o += mp_key_to_json(p + o, n - o, b);
            putc_(b, ':');
        }
        o += mp_to_json(p + o, n - o, b);
    }
    putc_(b, hd->map ? '}' : ']');
    return o;
}

// One msgpack value at p[0..n) as JSON; returns its size in bytes. The bytes
// come from a record the reader framed with skpo_mp_check (or from our own
// packer), so they are well formed and nested at most 64 deep; a short
// buffer still only ends the output early (as null), never reads past n.
static size_t mp_to_json(const unsigned char *p, size_t n, skpo_jbuf *b) {
    if (!n) { puts_(b, "null"); return 0; }
    unsigned c = p[0];
    mp_head hd = {1, 0, 0, 0};
    if (c <= 0x7f || c >= 0xe0) { put_i64(b, (int8_t)c); return 1; }
    if (c == 0xc0) { puts_(b, "null"); return 1; }
    if (c == 0xc2 || c == 0xc3) { puts_(b, c == 0xc3 ? "true" : "false"); return 1; }
    if (c >= 0x80 && c <= 0x9f) { hd.kids = c & 0x0f; hd.map = c <= 0x8f; }
    else if (c >= 0xa0 && c <= 0xbf) hd.len = c & 0x1f;
    else {
        size_t used = mp_sized_head(p, n, b, &hd);
        if (used) return used;
    }
    return mp_is_container(c) ? mp_container_to_json(p, n, &hd, b) : mp_bytes_to_json(p, n, &hd, b);
}

void skpo_value_to_json(const skpo_value *v, skpo_jbuf *b) {
    switch (v->type) {
    case SKPO_V_NIL: puts_(b, "null"); return;
    case SKPO_V_BOOL: puts_(b, v->b ? "true" : "false"); return;
    case SKPO_V_INT: put_i64(b, v->i); return;
    case SKPO_V_F32: skpo_json_float(v->f, true, b); return;
    case SKPO_V_F64: skpo_json_float(v->f, false, b); return;
    case SKPO_V_STR: put_str_or_b64(v->data, v->len, b); return;
    case SKPO_V_BIN: {
        const skpo_field_def *d = skpo_schema_find(v->key);
        skpo_ftype t = d ? d->type : SKPO_FT_ANY;
        if ((t == SKPO_FT_I32S || t == SKPO_FT_F32S) && v->len % 4 == 0) {
            putc_(b, '[');
            for (size_t i = 0; i < v->len / 4; i++) {
                if (i) putc_(b, ',');
                if (t == SKPO_FT_I32S) {
                    int32_t x;
                    memcpy(&x, v->data + 4 * i, 4);
                    put_i64(b, x);
                } else {
                    float x;
                    memcpy(&x, v->data + 4 * i, 4);
                    skpo_json_float(x, true, b);
                }
            }
            putc_(b, ']');
            return;
        }
        puts_(b, "{\"$bin\":");
        put_b64(b, (const unsigned char *)v->data, v->len);
        putc_(b, '}');
        return;
    }
    case SKPO_V_RAW: mp_to_json((const unsigned char *)v->data, v->len, b); return;
    }
}

void skpo_rec_to_json(const skpo_rec *r, const char *const *fields, size_t nfields, skpo_jbuf *b) {
    putc_(b, '{');
    bool first = true;
    size_t n = fields ? nfields : r->n;
    for (size_t i = 0; i < n; i++) {
        const skpo_value *v = fields ? skpo_rec_get(r, fields[i]) : &r->v[i];
        if (!v) continue;
        if (!first) putc_(b, ',');
        first = false;
        skpo_json_str(v->key, strlen(v->key), b);
        putc_(b, ':');
        skpo_value_to_json(v, b);
    }
    putc_(b, '}');
}

// --- JSON -> record ------------------------------------------------------------------

// {"$tag": value} with exactly one key: the value, else NULL.
static json_t *tagged(json_t *j, const char *tag) {
    if (!json_is_object(j) || json_object_size(j) != 1) return NULL;
    return json_object_get(j, tag);
}

// On failure *out is freed: a partial decode must not leak from error paths.
static bool b64_of(json_t *s, skpo_jbuf *out) {
    if (json_is_string(s) && from_b64(json_string_value(s), json_string_length(s), out) == 0) return true;
    skpo_jbuf_free(out);
    return false;
}

// A float from a JSON number or one of the non-finite spellings.
static bool json_float(json_t *j, double *out) {
    if (json_is_number(j)) { *out = json_number_value(j); return true; }
    if (!json_is_string(j)) return false;
    const char *s = json_string_value(j);
    if (!strcmp(s, "NaN")) *out = NAN;
    else if (!strcmp(s, "Infinity")) *out = INFINITY;
    else if (!strcmp(s, "-Infinity")) *out = -INFINITY;
    else return false;
    return true;
}

// Pack any JSON value as msgpack (nested values of fields outside the schema).
static skpo_status pack_json(msgpack_packer *pk, json_t *j, const char *key, skpo_err *err) {
    json_t *t;
    skpo_jbuf raw = {0};
    skpo_status st = SKPO_OK;
    if ((t = tagged(j, "$bin")) || (t = tagged(j, "$str"))) {
        bool bin = json_object_get(j, "$bin") != NULL;
        if (!b64_of(t, &raw)) st = skpo_err_set(err, SKPO_EFORMAT, "field '%s': bad base64 in {\"%s\"}", key, bin ? "$bin" : "$str");
        else if (bin) { msgpack_pack_bin(pk, raw.n); msgpack_pack_bin_body(pk, raw.p, raw.n); }
        else { msgpack_pack_str(pk, raw.n); msgpack_pack_str_body(pk, raw.p, raw.n); }
    } else if ((t = tagged(j, "$ext"))) {
        json_t *ty = json_array_get(t, 0);
        if (json_array_size(t) != 2 || !json_is_integer(ty) || json_integer_value(ty) < -128 || json_integer_value(ty) > 127 ||
            !b64_of(json_array_get(t, 1), &raw))
            st = skpo_err_set(err, SKPO_EFORMAT, "field '%s': {\"$ext\"} wants [type, \"base64\"]", key);
        else { msgpack_pack_ext(pk, raw.n, (int8_t)json_integer_value(ty)); msgpack_pack_ext_body(pk, raw.p, raw.n); }
    } else if (json_is_object(j)) {
        const char *k;
        json_t *v;
        msgpack_pack_map(pk, json_object_size(j));
        json_object_foreach(j, k, v) {
            msgpack_pack_str(pk, strlen(k));
            msgpack_pack_str_body(pk, k, strlen(k));
            if ((st = pack_json(pk, v, key, err))) break;
        }
    } else if (json_is_array(j)) {
        msgpack_pack_array(pk, json_array_size(j));
        for (size_t i = 0; i < json_array_size(j) && !st; i++) st = pack_json(pk, json_array_get(j, i), key, err);
    } else if (json_is_string(j)) {
        msgpack_pack_str(pk, json_string_length(j));
        msgpack_pack_str_body(pk, json_string_value(j), json_string_length(j));
    } else if (json_is_integer(j)) {
        msgpack_pack_int64(pk, json_integer_value(j));
    } else if (json_is_real(j)) {
        msgpack_pack_double(pk, json_real_value(j));
    } else if (json_is_boolean(j)) {
        json_is_true(j) ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
    } else {
        msgpack_pack_nil(pk);
    }
    skpo_jbuf_free(&raw);
    return st;
}

// A schema int32/float32 array: JSON array or {"$bin"}.
static skpo_status set_array(skpo_rec *r, const char *key, json_t *j, bool f32, skpo_err *err) {
    json_t *t = tagged(j, "$bin");
    skpo_jbuf raw = {0};
    if (t) {
        if (!b64_of(t, &raw)) return skpo_err_set(err, SKPO_EFORMAT, "field '%s': bad base64 in {\"$bin\"}", key);
    } else if (json_is_array(j)) {
        size_t i;
        json_t *x;
        json_array_foreach(j, i, x) {
            double f;
            if (f32 && json_float(x, &f)) {
                float v = (float)f;
                skpo_jbuf_put(&raw, &v, 4);
            } else if (!f32 && json_is_integer(x) && json_integer_value(x) >= INT32_MIN && json_integer_value(x) <= INT32_MAX) {
                int32_t v = (int32_t)json_integer_value(x);
                skpo_jbuf_put(&raw, &v, 4);
            } else {
                skpo_jbuf_free(&raw);
                return skpo_err_set(err, SKPO_ETYPE, "field '%s': element %zu is not %s", key, i, f32 ? "a number" : "an int32");
            }
        }
    } else {
        return skpo_err_set(err, SKPO_ETYPE, "field '%s' must be an array of %s", key, f32 ? "numbers" : "int32");
    }
    skpo_rec_set_bin(r, key, raw.p, raw.n);
    skpo_jbuf_free(&raw);
    return SKPO_OK;
}

static skpo_status set_field(skpo_rec *r, const char *key, json_t *j, skpo_err *err) {
    const skpo_field_def *d = skpo_schema_find(key);
    skpo_ftype t = d ? d->type : SKPO_FT_ANY;
    double f;
    json_t *t2;
    if (json_is_null(j)) { skpo_rec_set_nil(r, key); return SKPO_OK; }
    switch (t) {
    case SKPO_FT_I32S: return set_array(r, key, j, false, err);
    case SKPO_FT_F32S: return set_array(r, key, j, true, err);
    case SKPO_FT_FLOAT:
        if (!json_float(j, &f)) return skpo_err_set(err, SKPO_ETYPE, "field '%s' must be a number", key);
        skpo_rec_set_float(r, key, f);
        return SKPO_OK;
    case SKPO_FT_INT:
        if (!json_is_integer(j)) return skpo_err_set(err, SKPO_ETYPE, "field '%s' must be an integer", key);
        break;
    case SKPO_FT_BOOL:
        if (!json_is_boolean(j)) return skpo_err_set(err, SKPO_ETYPE, "field '%s' must be true or false", key);
        break;
    case SKPO_FT_STR:
        if (!json_is_string(j)) return skpo_err_set(err, SKPO_ETYPE, "field '%s' must be a string", key);
        break;
    default: break;
    }
    if (json_is_string(j)) skpo_rec_set_strn(r, key, json_string_value(j), json_string_length(j));
    else if (json_is_integer(j)) skpo_rec_set_int(r, key, json_integer_value(j));
    else if (json_is_real(j)) skpo_rec_set_float(r, key, json_real_value(j));
    else if (json_is_boolean(j)) skpo_rec_set_bool(r, key, json_is_true(j));
    else if ((t2 = tagged(j, "$bin")) || (t2 = tagged(j, "$str"))) {
        // a top-level $bin/$str is a plain value, not a nested one
        bool bin = json_object_get(j, "$bin") != NULL;
        skpo_jbuf dec = {0};
        if (!b64_of(t2, &dec)) return skpo_err_set(err, SKPO_EFORMAT, "field '%s': bad base64 in {\"%s\"}", key, bin ? "$bin" : "$str");
        if (bin) skpo_rec_set_bin(r, key, dec.p, dec.n);
        else skpo_rec_set_strn(r, key, dec.p ? dec.p : "", dec.n);
        skpo_jbuf_free(&dec);
    } else {
        skpo_jbuf raw = {0};
        msgpack_packer pk;
        msgpack_packer_init(&pk, &raw, jbuf_write);
        skpo_status st = pack_json(&pk, j, key, err);
        if (!st) skpo_rec_set_raw(r, key, raw.p, raw.n);
        skpo_jbuf_free(&raw);
        return st;
    }
    return SKPO_OK;
}

skpo_status skpo_rec_from_json(const char *text, size_t len, skpo_rec *r, skpo_err *err) {
    skpo_rec_clear(r);
    json_error_t je;
    json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!j) return skpo_err_set(err, SKPO_EFORMAT, "bad JSON (%s, column %d)", je.text, je.column);
    skpo_status st = SKPO_OK;
    if (!json_is_object(j)) st = skpo_err_set(err, SKPO_EFORMAT, "JSON value is not an object");
    const char *k;
    json_t *v;
    if (!st) json_object_foreach(j, k, v) {
        if ((st = set_field(r, k, v, err))) break;
    }
    json_decref(j);
    if (!st) st = skpo_rec_validate(r, err);
    if (st) skpo_rec_clear(r);
    return st;
}
