/*
 * recjson.c - records <-> JSON (see recjson.h for the mapping).
 *
 * Output is written by hand (not through jansson) so float32 keeps its
 * shortest text, non-finite values never produce invalid JSON, and large token
 * arrays print without building a tree. Input is parsed with jansson.
 */
#include "recjson.h"

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

static void obj_to_json(const msgpack_object *o, skpo_jbuf *b);

static void map_key(const msgpack_object *k, skpo_jbuf *b) {
    if (k->type == MSGPACK_OBJECT_STR && utf8_ok(k->via.str.ptr, k->via.str.size)) {
        skpo_json_str(k->via.str.ptr, k->via.str.size, b);
        return;
    }
    skpo_jbuf t = {0};
    obj_to_json(k, &t);
    skpo_json_str(t.p, t.n, b);
    skpo_jbuf_free(&t);
}

static void obj_to_json(const msgpack_object *o, skpo_jbuf *b) {
    switch (o->type) {
    case MSGPACK_OBJECT_NIL: puts_(b, "null"); break;
    case MSGPACK_OBJECT_BOOLEAN: puts_(b, o->via.boolean ? "true" : "false"); break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: {
        char t[24];
        snprintf(t, sizeof t, "%llu", (unsigned long long)o->via.u64);
        puts_(b, t);
        break;
    }
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: put_i64(b, o->via.i64); break;
    case MSGPACK_OBJECT_FLOAT32: skpo_json_float(o->via.f64, true, b); break;
    case MSGPACK_OBJECT_FLOAT64: skpo_json_float(o->via.f64, false, b); break;
    case MSGPACK_OBJECT_STR:
        if (utf8_ok(o->via.str.ptr, o->via.str.size)) skpo_json_str(o->via.str.ptr, o->via.str.size, b);
        else { puts_(b, "{\"$str\":"); put_b64(b, (const unsigned char *)o->via.str.ptr, o->via.str.size); putc_(b, '}'); }
        break;
    case MSGPACK_OBJECT_BIN:
        puts_(b, "{\"$bin\":");
        put_b64(b, (const unsigned char *)o->via.bin.ptr, o->via.bin.size);
        putc_(b, '}');
        break;
    case MSGPACK_OBJECT_EXT:
        puts_(b, "{\"$ext\":[");
        put_i64(b, o->via.ext.type);
        putc_(b, ',');
        put_b64(b, (const unsigned char *)o->via.ext.ptr, o->via.ext.size);
        puts_(b, "]}");
        break;
    case MSGPACK_OBJECT_ARRAY:
        putc_(b, '[');
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            if (i) putc_(b, ',');
            obj_to_json(&o->via.array.ptr[i], b);
        }
        putc_(b, ']');
        break;
    case MSGPACK_OBJECT_MAP:
        putc_(b, '{');
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            if (i) putc_(b, ',');
            map_key(&o->via.map.ptr[i].key, b);
            putc_(b, ':');
            obj_to_json(&o->via.map.ptr[i].val, b);
        }
        putc_(b, '}');
        break;
    }
}

void skpo_value_to_json(const skpo_value *v, skpo_jbuf *b) {
    switch (v->type) {
    case SKPO_V_NIL: puts_(b, "null"); return;
    case SKPO_V_BOOL: puts_(b, v->b ? "true" : "false"); return;
    case SKPO_V_INT: put_i64(b, v->i); return;
    case SKPO_V_F32: skpo_json_float(v->f, true, b); return;
    case SKPO_V_F64: skpo_json_float(v->f, false, b); return;
    case SKPO_V_STR: {
        msgpack_object o = {.type = MSGPACK_OBJECT_STR, .via.str = {(uint32_t)v->len, v->data}};
        obj_to_json(&o, b);
        return;
    }
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
    case SKPO_V_RAW: {
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        size_t off = 0;
        if (msgpack_unpack_next(&u, v->data, v->len, &off) == MSGPACK_UNPACK_SUCCESS) obj_to_json(&u.data, b);
        else puts_(b, "null"); // RAW values come from a parsed record; cannot happen
        msgpack_unpacked_destroy(&u);
        return;
    }
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

static bool b64_of(json_t *s, skpo_jbuf *out) {
    return json_is_string(s) && from_b64(json_string_value(s), json_string_length(s), out) == 0;
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
