/*
 * record.c - the schema table and the record I/O layer (see record.h).
 *
 * Reading: compressed bytes are read from the fd in chunks, decompressed with
 * ZSTD_decompressStream straight into the msgpack_unpacker's buffer, and one
 * map at a time is taken out with msgpack_unpacker_next_with_size and copied
 * into a skpo_rec before the next call (the unpacked object points into the
 * unpacker's buffer). Damage is reported only after every record decoded before
 * it has been returned. Writing: records are packed into a reused buffer and
 * fed to ZSTD_compressStream2; frames carry a checksum.
 *
 * What this file deliberately is not: a general msgpack library. Nested values
 * (maps, arrays, ext) are kept packed (SKPO_V_RAW) and never interpreted here.
 */
#define _GNU_SOURCE
#include "record.h"
#include "mpcheck.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <msgpack.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

// --- schema ------------------------------------------------------------------

const skpo_field_def skpo_schema[] = {
    {F_KIND, SKPO_FT_STR, "record kind: prompt, up, down, full, meta, metrics, state"},
    {F_SCHEMA, SKPO_FT_INT, "meta: record schema version of the stream (SKPO_SCHEMA_VERSION)"},
    {F_TOOL, SKPO_FT_STR, "meta: name of the tool that wrote the stream"},
    {F_ARGV, SKPO_FT_ANY, "meta: the writing tool's command line (array of str)"},
    {F_TIME, SKPO_FT_STR, "meta: UTC time the stream was started, ISO 8601"},
    {F_MODEL, SKPO_FT_STR, "meta: model (checkpoint) the tool used"},
    {F_PID, SKPO_FT_STR, "prompt id, unique in a dataset"},
    {F_UID, SKPO_FT_STR, "unique id of this record"},
    {F_GID, SKPO_FT_STR, "group id: the upstream uid for down records, pid+step for full"},
    {F_STEP, SKPO_FT_INT, "training step that produced the record"},
    {F_POLICY, SKPO_FT_STR, "checkpoint that sampled the record"},
    {F_SEED, SKPO_FT_INT, "sampler seed of this sequence"},
    {F_PROMPT, SKPO_FT_I32S, "token ids of the conditioning input"},
    {F_TOKENS, SKPO_FT_I32S, "response token ids"},
    {F_LOGP, SKPO_FT_F32S, "behaviour log-prob per response token"},
    {F_REF_LOGP, SKPO_FT_F32S, "reference-model log-prob per response token"},
    {F_OLD_LOGP, SKPO_FT_F32S, "recomputed old-policy log-prob per response token"},
    {F_TEXT, SKPO_FT_STR, "decoded response (prompt records: the rendered prompt)"},
    {F_FINISH, SKPO_FT_STR, "why generation stopped: stop or length"},
    {F_PROBLEM, SKPO_FT_STR, "problem statement"},
    {F_ANSWER, SKPO_FT_STR, "gold answer"},
    {F_SOURCE, SKPO_FT_STR, "benchmark or dataset name"},
    {F_REWARD, SKPO_FT_FLOAT, "verifier reward"},
    {F_CORRECT, SKPO_FT_BOOL, "whether the extracted answer matched the gold answer"},
    {F_PRED, SKPO_FT_STR, "answer extracted from the response"},
    {F_ADV, SKPO_FT_FLOAT, "advantage"},
    {F_WEIGHT, SKPO_FT_FLOAT, "phase weight in the loss"},
    {F_CUT, SKPO_FT_INT, "up records: planned split position t_q"},
    {F_NLL, SKPO_FT_FLOAT, "up records: mean NLL of the segment"},
    {NULL, 0, NULL},
};

const skpo_field_def *skpo_schema_find(const char *name) {
    for (const skpo_field_def *d = skpo_schema; d->name; d++)
        if (d->name[0] == name[0] && !strcmp(d->name, name)) return d;
    return NULL;
}

static const char *ftype_name(skpo_ftype t) {
    switch (t) {
    case SKPO_FT_STR: return "str";
    case SKPO_FT_INT: return "int";
    case SKPO_FT_FLOAT: return "float";
    case SKPO_FT_BOOL: return "bool";
    case SKPO_FT_I32S: return "bin of int32";
    case SKPO_FT_F32S: return "bin of float32";
    case SKPO_FT_ANY: return "any";
    }
    return "?";
}

static const char *vtype_name(skpo_vtype t) {
    switch (t) {
    case SKPO_V_NIL: return "nil";
    case SKPO_V_BOOL: return "bool";
    case SKPO_V_INT: return "int";
    case SKPO_V_F32: return "float32";
    case SKPO_V_F64: return "float64";
    case SKPO_V_STR: return "str";
    case SKPO_V_BIN: return "bin";
    case SKPO_V_RAW: return "map/array/ext";
    }
    return "?";
}

// Strict UTF-8 (no overlongs, no surrogates, at most U+10FFFF). Returns the
// byte index of the first bad sequence, or len when all is well.
static size_t utf8_bad_at(const unsigned char *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        if (i + 8 <= len) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!(w & 0x8080808080808080ull)) { i += 8; continue; }
        }
        unsigned c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t n;
        unsigned lo = 0x80, hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf) n = 1;
        else if (c >= 0xe0 && c <= 0xef) { n = 2; if (c == 0xe0) lo = 0xa0; if (c == 0xed) hi = 0x9f; }
        else if (c >= 0xf0 && c <= 0xf4) { n = 3; if (c == 0xf0) lo = 0x90; if (c == 0xf4) hi = 0x8f; }
        else return i;
        if (i + n >= len) return i;
        if (s[i + 1] < lo || s[i + 1] > hi) return i;
        for (size_t k = 2; k <= n; k++)
            if ((s[i + k] & 0xc0) != 0x80) return i;
        i += n + 1;
    }
    return len;
}

// Type check of one value against the schema (NULL def: unknown field, any
// type). nil is accepted for every field: it means "not known yet".
bool skpo_utf8_valid(const char *s, size_t n) { return utf8_bad_at((const unsigned char *)s, n) == n; }

static skpo_status check_value(const skpo_field_def *d, const skpo_value *v, skpo_err *err) {
    if (!d || d->type == SKPO_FT_ANY || v->type == SKPO_V_NIL) return SKPO_OK;
    bool ok = false;
    switch (d->type) {
    case SKPO_FT_STR: ok = v->type == SKPO_V_STR; break;
    case SKPO_FT_INT: ok = v->type == SKPO_V_INT; break;
    case SKPO_FT_FLOAT: ok = v->type == SKPO_V_F32 || v->type == SKPO_V_F64 || v->type == SKPO_V_INT; break;
    case SKPO_FT_BOOL: ok = v->type == SKPO_V_BOOL; break;
    case SKPO_FT_I32S:
    case SKPO_FT_F32S:
        ok = v->type == SKPO_V_BIN;
        if (ok && v->len % 4)
            return skpo_err_set(err, SKPO_ETYPE, "field '%s' is a bin of %zu bytes, not a whole number of 4-byte %s values",
                                v->key, v->len, d->type == SKPO_FT_I32S ? "int32" : "float32");
        break;
    case SKPO_FT_ANY: ok = true; break;
    }
    if (!ok)
        return skpo_err_set(err, SKPO_ETYPE, "field '%s' is %s, want %s", v->key, vtype_name(v->type), ftype_name(d->type));
    if (d->type == SKPO_FT_STR) {
        size_t at = utf8_bad_at((const unsigned char *)v->data, v->len);
        if (at != v->len)
            return skpo_err_set(err, SKPO_EFORMAT, "field '%s' is not valid UTF-8 (bad byte at %zu)", v->key, at);
    }
    return SKPO_OK;
}

skpo_status skpo_rec_validate(const skpo_rec *r, skpo_err *err) {
    for (size_t i = 0; i < r->n; i++) {
        skpo_status st = check_value(skpo_schema_find(r->v[i].key), &r->v[i], err);
        if (st) return st;
    }
    return SKPO_OK;
}

// --- records in memory ---------------------------------------------------------

void skpo_rec_init(skpo_rec *r) { memset(r, 0, sizeof *r); }

static void value_free(skpo_value *v) {
    free(v->key);
    free(v->data);
    memset(v, 0, sizeof *v);
}

// Drop a value's payload but keep its key.
static void value_reset(skpo_value *v) {
    free(v->data);
    v->data = NULL;
    v->len = 0;
    v->b = false;
    v->i = 0;
    v->f = 0;
    v->type = SKPO_V_NIL;
}

void skpo_rec_clear(skpo_rec *r) {
    for (size_t i = 0; i < r->n; i++) value_free(&r->v[i]);
    r->n = 0;
}

void skpo_rec_free(skpo_rec *r) {
    skpo_rec_clear(r);
    free(r->v);
    skpo_rec_init(r);
}

static char *dup_bytes(const void *p, size_t n, bool nul) {
    char *d = skpo_xmalloc(n + (nul ? 1 : 0));
    if (n) memcpy(d, p, n);
    if (nul) d[n] = 0;
    return d;
}

void skpo_rec_copy(skpo_rec *dst, const skpo_rec *src) {
    skpo_rec_clear(dst);
    skpo_xgrow((void **)&dst->v, &dst->cap, src->n, sizeof *dst->v);
    for (size_t i = 0; i < src->n; i++) {
        const skpo_value *s = &src->v[i];
        skpo_value *d = &dst->v[i];
        *d = *s;
        d->key = skpo_xstrdup(s->key);
        d->data = s->data ? dup_bytes(s->data, s->len, s->type == SKPO_V_STR) : NULL;
    }
    dst->n = src->n;
}

// --- typed access (get) ----------------------------------------------------------

const skpo_value *skpo_rec_get(const skpo_rec *r, const char *key) {
    for (size_t i = 0; i < r->n; i++)
        if (r->v[i].key[0] == key[0] && !strcmp(r->v[i].key, key)) return &r->v[i];
    return NULL;
}

const char *skpo_rec_str(const skpo_rec *r, const char *key) {
    const skpo_value *v = skpo_rec_get(r, key);
    return v && v->type == SKPO_V_STR ? v->data : NULL;
}

bool skpo_rec_is_kind(const skpo_rec *r, const char *kind) {
    const char *k = skpo_rec_str(r, F_KIND);
    return k && !strcmp(k, kind);
}

bool skpo_rec_int(const skpo_rec *r, const char *key, int64_t *out) {
    const skpo_value *v = skpo_rec_get(r, key);
    if (!v || v->type != SKPO_V_INT) return false;
    *out = v->i;
    return true;
}

bool skpo_rec_float(const skpo_rec *r, const char *key, double *out) {
    const skpo_value *v = skpo_rec_get(r, key);
    if (!v) return false;
    if (v->type == SKPO_V_F32 || v->type == SKPO_V_F64) *out = v->f;
    else if (v->type == SKPO_V_INT) *out = (double)v->i;
    else return false;
    return true;
}

bool skpo_rec_bool(const skpo_rec *r, const char *key, bool *out) {
    const skpo_value *v = skpo_rec_get(r, key);
    if (!v || v->type != SKPO_V_BOOL) return false;
    *out = v->b;
    return true;
}

const int32_t *skpo_rec_i32s(const skpo_rec *r, const char *key, size_t *n) {
    const skpo_value *v = skpo_rec_get(r, key);
    if (!v || v->type != SKPO_V_BIN || v->len % 4) return NULL;
    *n = v->len / 4;
    // A zero-length bin has no buffer; hand out a valid, aligned pointer anyway.
    static const int32_t empty[1] = {0};
    return v->data ? (const int32_t *)(const void *)v->data : empty;
}

const float *skpo_rec_f32s(const skpo_rec *r, const char *key, size_t *n) {
    size_t k;
    const int32_t *p = skpo_rec_i32s(r, key, &k);
    if (!p) return NULL;
    *n = k;
    return (const float *)(const void *)p;
}

// --- typed access (set) ----------------------------------------------------------

// The slot for key: the existing one emptied, or a new one at the end.
static skpo_value *slot(skpo_rec *r, const char *key) {
    for (size_t i = 0; i < r->n; i++)
        if (!strcmp(r->v[i].key, key)) {
            value_reset(&r->v[i]);
            return &r->v[i];
        }
    skpo_xgrow((void **)&r->v, &r->cap, r->n + 1, sizeof *r->v);
    skpo_value *v = &r->v[r->n++];
    memset(v, 0, sizeof *v);
    v->key = skpo_xstrdup(key);
    return v;
}

void skpo_rec_set_strn(skpo_rec *r, const char *key, const char *s, size_t len) {
    skpo_value *v = slot(r, key);
    v->type = SKPO_V_STR;
    v->data = dup_bytes(s, len, true);
    v->len = len;
}

void skpo_rec_set_str(skpo_rec *r, const char *key, const char *s) { skpo_rec_set_strn(r, key, s, strlen(s)); }

void skpo_rec_set_int(skpo_rec *r, const char *key, int64_t x) {
    skpo_value *v = slot(r, key);
    v->type = SKPO_V_INT;
    v->i = x;
}

void skpo_rec_set_float(skpo_rec *r, const char *key, double x) {
    skpo_value *v = slot(r, key);
    v->type = SKPO_V_F64;
    v->f = x;
}

void skpo_rec_set_bool(skpo_rec *r, const char *key, bool x) {
    skpo_value *v = slot(r, key);
    v->type = SKPO_V_BOOL;
    v->b = x;
}

void skpo_rec_set_nil(skpo_rec *r, const char *key) { slot(r, key)->type = SKPO_V_NIL; }

static void set_bytes(skpo_rec *r, const char *key, skpo_vtype t, const void *p, size_t len) {
    skpo_value *v = slot(r, key);
    v->type = t;
    v->data = len ? dup_bytes(p, len, false) : NULL;
    v->len = len;
}

void skpo_rec_set_i32s(skpo_rec *r, const char *key, const int32_t *a, size_t n) {
    SKPO_ASSERT(n <= SIZE_MAX / 4);
    set_bytes(r, key, SKPO_V_BIN, a, n * 4);
}

void skpo_rec_set_f32s(skpo_rec *r, const char *key, const float *a, size_t n) {
    SKPO_ASSERT(n <= SIZE_MAX / 4);
    set_bytes(r, key, SKPO_V_BIN, a, n * 4);
}

void skpo_rec_set_bin(skpo_rec *r, const char *key, const void *p, size_t len) {
    set_bytes(r, key, SKPO_V_BIN, p, len);
}

void skpo_rec_set_f32(skpo_rec *r, const char *key, float x) {
    skpo_value *v = slot(r, key);
    v->type = SKPO_V_F32;
    v->f = x;
}

void skpo_rec_set_raw(skpo_rec *r, const char *key, const void *msgpack, size_t len) {
    SKPO_ASSERT(len > 0);
    set_bytes(r, key, SKPO_V_RAW, msgpack, len);
}

void skpo_rec_set_value(skpo_rec *r, const skpo_value *src) {
    skpo_value *d = slot(r, src->key);
    char *key = d->key;
    *d = *src;
    d->key = key;
    d->data = src->data ? dup_bytes(src->data, src->len, src->type == SKPO_V_STR) : NULL;
}

bool skpo_rec_del(skpo_rec *r, const char *key) {
    for (size_t i = 0; i < r->n; i++)
        if (!strcmp(r->v[i].key, key)) {
            value_free(&r->v[i]);
            memmove(&r->v[i], &r->v[i + 1], (r->n - i - 1) * sizeof *r->v);
            r->n--;
            return true;
        }
    return false;
}

// --- msgpack encoding ------------------------------------------------------------

// A growable byte buffer for msgpack_packer; allocation failure dies (xrealloc).
typedef struct pbuf {
    char *p;
    size_t n, cap;
} pbuf;

static int pbuf_write(void *data, const char *buf, size_t len) {
    pbuf *b = data;
    if (!len) return 0; // msgpack-c passes NULL bodies for empty str/bin
    if (b->n + len > b->cap) {
        size_t c = b->cap ? b->cap : 4096;
        while (c < b->n + len) {
            SKPO_ASSERT(c <= SIZE_MAX / 2);
            c *= 2;
        }
        b->p = skpo_xrealloc(b->p, c);
        b->cap = c;
    }
    memcpy(b->p + b->n, buf, len);
    b->n += len;
    return 0;
}

static void pack_value(msgpack_packer *pk, pbuf *b, const skpo_value *v) {
    switch (v->type) {
    case SKPO_V_NIL: msgpack_pack_nil(pk); break;
    case SKPO_V_BOOL: v->b ? msgpack_pack_true(pk) : msgpack_pack_false(pk); break;
    case SKPO_V_INT: msgpack_pack_int64(pk, v->i); break;
    case SKPO_V_F32: msgpack_pack_float(pk, (float)v->f); break;
    case SKPO_V_F64: msgpack_pack_double(pk, v->f); break;
    case SKPO_V_STR:
        msgpack_pack_str(pk, v->len);
        msgpack_pack_str_body(pk, v->data, v->len);
        break;
    case SKPO_V_BIN:
        msgpack_pack_bin(pk, v->len);
        msgpack_pack_bin_body(pk, v->data, v->len);
        break;
    case SKPO_V_RAW: pbuf_write(b, v->data, v->len); break;
    }
}

static void pack_rec(pbuf *b, const skpo_rec *r) {
    msgpack_packer pk;
    msgpack_packer_init(&pk, b, pbuf_write);
    msgpack_pack_map(&pk, r->n);
    for (size_t i = 0; i < r->n; i++) {
        size_t kl = strlen(r->v[i].key);
        msgpack_pack_str(&pk, kl);
        msgpack_pack_str_body(&pk, r->v[i].key, kl);
        pack_value(&pk, b, &r->v[i]);
    }
}

void skpo_rec_pack(const skpo_rec *r, char **buf, size_t *len) {
    pbuf b = {0};
    pack_rec(&b, r);
    *buf = b.p;
    *len = b.n;
}

// Copy one unpacked map into r (cleared first) and validate it. `scratch`
// receives re-packed nested values. Returns an error message without the
// "at record N" suffix.
static skpo_status from_object(const msgpack_object *o, skpo_rec *r, pbuf *scratch, skpo_err *err) {
    static const char *const otype[] = {"nil", "bool", "int", "int", "float64", "str", "array", "map", "bin", "ext", "float32"};
    skpo_rec_clear(r);
    if (o->type != MSGPACK_OBJECT_MAP) {
        unsigned t = (unsigned)o->type;
        const char *tn = t == MSGPACK_OBJECT_FLOAT32 ? "float32" : t < 10 ? otype[t] : "unknown";
        return skpo_err_set(err, SKPO_EFORMAT, "record is not a msgpack map (got %s)", tn);
    }
    const msgpack_object_map *m = &o->via.map;
    skpo_xgrow((void **)&r->v, &r->cap, m->size, sizeof *r->v);
    uint64_t seen = 0; // schema fields seen, to reject duplicates
    for (uint32_t i = 0; i < m->size; i++) {
        const msgpack_object *k = &m->ptr[i].key, *x = &m->ptr[i].val;
        if (k->type != MSGPACK_OBJECT_STR)
            return skpo_err_set(err, SKPO_EFORMAT, "record key %u is not a string", i);
        skpo_value *v = &r->v[r->n++];
        memset(v, 0, sizeof *v);
        v->key = dup_bytes(k->via.str.ptr, k->via.str.size, true);
        if (k->via.str.size && memchr(k->via.str.ptr, 0, k->via.str.size)) // ptr is NULL for ""
            return skpo_err_set(err, SKPO_EFORMAT, "record key %u contains a NUL byte", i);
        switch (x->type) {
        case MSGPACK_OBJECT_NIL: v->type = SKPO_V_NIL; break;
        case MSGPACK_OBJECT_BOOLEAN: v->type = SKPO_V_BOOL; v->b = x->via.boolean; break;
        case MSGPACK_OBJECT_POSITIVE_INTEGER:
            if (x->via.u64 <= (uint64_t)INT64_MAX) { v->type = SKPO_V_INT; v->i = (int64_t)x->via.u64; break; }
            goto raw;
        case MSGPACK_OBJECT_NEGATIVE_INTEGER: v->type = SKPO_V_INT; v->i = x->via.i64; break;
        case MSGPACK_OBJECT_FLOAT32: v->type = SKPO_V_F32; v->f = x->via.f64; break;
        case MSGPACK_OBJECT_FLOAT64: v->type = SKPO_V_F64; v->f = x->via.f64; break;
        case MSGPACK_OBJECT_STR:
            v->type = SKPO_V_STR;
            v->data = dup_bytes(x->via.str.ptr, x->via.str.size, true);
            v->len = x->via.str.size;
            break;
        case MSGPACK_OBJECT_BIN:
            v->type = SKPO_V_BIN;
            v->len = x->via.bin.size;
            v->data = v->len ? dup_bytes(x->via.bin.ptr, v->len, false) : NULL;
            break;
        default:
        raw: {
            msgpack_packer pk;
            scratch->n = 0;
            msgpack_packer_init(&pk, scratch, pbuf_write);
            msgpack_pack_object(&pk, *x);
            v->type = SKPO_V_RAW;
            v->data = dup_bytes(scratch->p, scratch->n, false);
            v->len = scratch->n;
        }
        }
        const skpo_field_def *d = skpo_schema_find(v->key);
        if (d) {
            uint64_t bit = 1ull << ((size_t)(d - skpo_schema) & 63);
            if (seen & bit) return skpo_err_set(err, SKPO_EFORMAT, "field '%s' appears twice", v->key);
            seen |= bit;
            skpo_status st = check_value(d, v, err);
            if (st) return st;
        }
    }
    return SKPO_OK;
}

skpo_status skpo_rec_unpack(const char *buf, size_t len, skpo_rec *r, skpo_err *err) {
    skpo_rec_clear(r);
    size_t used = 0;
    skpo_err e;
    skpo_status st = skpo_mp_check(buf, len, 0, &used, &e);
    if (st == SKPO_EOF) return skpo_err_set(err, SKPO_EFORMAT, "truncated record (%zu bytes)", len);
    if (st) return skpo_err_set(err, SKPO_EFORMAT, "malformed msgpack (%s)", e.msg);
    if (used != len) return skpo_err_set(err, SKPO_EFORMAT, "%zu trailing bytes after the record", len - used);
    msgpack_unpacked res;
    msgpack_unpacked_init(&res);
    size_t off = 0;
    msgpack_unpack_return ur = msgpack_unpack_next(&res, buf, len, &off);
    if (ur == MSGPACK_UNPACK_SUCCESS && off == len) {
        pbuf scratch = {0};
        st = from_object(&res.data, r, &scratch, err);
        free(scratch.p);
    } else if (ur == MSGPACK_UNPACK_SUCCESS) {
        st = skpo_err_set(err, SKPO_EFORMAT, "%zu trailing bytes after the record", len - off);
    } else if (ur == MSGPACK_UNPACK_CONTINUE || ur == MSGPACK_UNPACK_EXTRA_BYTES) {
        st = skpo_err_set(err, SKPO_EFORMAT, "truncated record (%zu bytes)", len);
    } else {
        st = skpo_err_set(err, SKPO_EFORMAT, "malformed msgpack (rejected by the decoder)");
    }
    msgpack_unpacked_destroy(&res);
    if (st) skpo_rec_clear(r);
    return st;
}

// --- reading -----------------------------------------------------------------------

#define READ_CHUNK ((size_t)1 << 17)
#define OUT_CHUNK ((size_t)1 << 18)

// Where decompressed bytes came from: output up to out_end was produced by a
// decompress call that started at compressed offset in_start.
typedef struct ckpt {
    uint64_t out_end, in_start;
} ckpt;

struct skpo_reader {
    int fd;
    bool own_fd, eof, any_input, out_full;
    char *name;
    ZSTD_DCtx *dctx;
    char *in;
    ZSTD_inBuffer zin;
    uint64_t in_base;  // compressed bytes read before `in`
    size_t last_ret;   // last ZSTD_decompressStream result: 0 = at a frame end
    msgpack_unpacker mp;
    msgpack_unpacked res;
    uint64_t fed;      // decompressed bytes handed to the unpacker
    ckpt *ck;
    size_t ck_head, ck_n, ck_cap;
    uint64_t count;
    size_t recheck_at; // walk a pending record again once this many bytes are buffered
    pbuf scratch;
    skpo_status sticky;
    skpo_err sticky_err;
};

static void ck_push(skpo_reader *rd, uint64_t out_end, uint64_t in_start) {
    if (rd->ck_head > 0 && rd->ck_head * 2 >= rd->ck_n) {
        memmove(rd->ck, rd->ck + rd->ck_head, (rd->ck_n - rd->ck_head) * sizeof *rd->ck);
        rd->ck_n -= rd->ck_head;
        rd->ck_head = 0;
    }
    skpo_xgrow((void **)&rd->ck, &rd->ck_cap, rd->ck_n + 1, sizeof *rd->ck);
    rd->ck[rd->ck_n++] = (ckpt){out_end, in_start};
}

// Compressed offset at which the decompressed byte `d` was produced. Entries
// for output before `d` are dropped: records are consumed in order.
static uint64_t ck_map(skpo_reader *rd, uint64_t d) {
    while (rd->ck_head < rd->ck_n && rd->ck[rd->ck_head].out_end <= d) rd->ck_head++;
    if (rd->ck_head < rd->ck_n) return rd->ck[rd->ck_head].in_start;
    return rd->in_base + rd->zin.size;
}

// Start (decompressed offset) of the value the unpacker is working on.
static uint64_t cur_start(const skpo_reader *rd) {
    return rd->fed - (rd->mp.used - rd->mp.off) - rd->mp.parsed;
}

static skpo_status fail(skpo_reader *rd, skpo_status st, uint64_t off, skpo_err *err, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static skpo_status fail(skpo_reader *rd, skpo_status st, uint64_t off, skpo_err *err, const char *fmt, ...) {
    char what[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    rd->sticky = st;
    // name the stream, unless the message already does
    char quoted[300];
    snprintf(quoted, sizeof quoted, "'%s'", rd->name);
    bool named = strstr(what, quoted) != NULL;
    skpo_err_set(&rd->sticky_err, st, "%s%s%s at record %llu (byte offset %llu)", what, named ? "" : " in ",
                 named ? "" : quoted, (unsigned long long)rd->count + 1, (unsigned long long)off);
    if (err) *err = rd->sticky_err;
    return st;
}

skpo_status skpo_reader_open_fd(int fd, const char *name, skpo_reader **out, skpo_err *err) {
    skpo_reader *rd = skpo_xcalloc(1, sizeof *rd);
    rd->fd = fd;
    rd->name = skpo_xstrdup(name);
    rd->dctx = ZSTD_createDCtx();
    rd->in = skpo_xmalloc(READ_CHUNK);
    msgpack_unpacked_init(&rd->res);
    if (!rd->dctx || !msgpack_unpacker_init(&rd->mp, (size_t)1 << 20)) {
        if (rd->dctx) ZSTD_freeDCtx(rd->dctx);
        free(rd->in);
        free(rd->name);
        free(rd);
        return skpo_err_set(err, SKPO_ENOMEM, "cannot allocate a reader for '%s'", name);
    }
    rd->zin.src = rd->in;
    *out = rd;
    return SKPO_OK;
}

skpo_status skpo_reader_open(const char *path, skpo_reader **out, skpo_err *err) {
    if (!strcmp(path, "-")) return skpo_reader_open_fd(0, "stdin", out, err);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return skpo_err_set(err, errno == ENOENT ? SKPO_ENOTFOUND : SKPO_EIO, "cannot open '%s': %s", path, strerror(errno));
    skpo_status st = skpo_reader_open_fd(fd, path, out, err);
    if (st) close(fd);
    else (*out)->own_fd = true;
    return st;
}

// Decompress more bytes into the unpacker. SKPO_EOF when the input is
// exhausted and the decompressor holds nothing more.
static skpo_status fill(skpo_reader *rd, skpo_err *err) {
    for (;;) {
        if (rd->zin.pos == rd->zin.size && !rd->out_full) {
            if (rd->eof) return SKPO_EOF;
            ssize_t k;
            do k = read(rd->fd, rd->in, READ_CHUNK);
            while (k < 0 && errno == EINTR);
            if (k < 0)
                return fail(rd, SKPO_EIO, rd->in_base + rd->zin.size, err, "cannot read '%s': %s", rd->name, strerror(errno));
            rd->in_base += rd->zin.size;
            rd->zin.size = (size_t)k;
            rd->zin.pos = 0;
            if (k == 0) {
                rd->eof = true;
                return SKPO_EOF;
            }
            rd->any_input = true;
        }
        if (msgpack_unpacker_message_size(&rd->mp) > SKPO_MAX_RECORD_BYTES)
            return fail(rd, SKPO_ERANGE, ck_map(rd, cur_start(rd)), err, "record larger than %zu bytes", SKPO_MAX_RECORD_BYTES);
        if (!msgpack_unpacker_reserve_buffer(&rd->mp, OUT_CHUNK))
            return fail(rd, SKPO_ENOMEM, ck_map(rd, cur_start(rd)), err, "out of memory buffering a record");
        ZSTD_outBuffer zout = {msgpack_unpacker_buffer(&rd->mp), msgpack_unpacker_buffer_capacity(&rd->mp), 0};
        uint64_t in_start = rd->in_base + rd->zin.pos;
        size_t ret = ZSTD_decompressStream(rd->dctx, &zout, &rd->zin);
        if (ZSTD_isError(ret))
            return fail(rd, SKPO_EFORMAT, in_start, err, "corrupt zstd data (%s)", ZSTD_getErrorName(ret));
        rd->last_ret = ret;
        rd->out_full = zout.pos == zout.size;
        if (zout.pos) {
            msgpack_unpacker_buffer_consumed(&rd->mp, zout.pos);
            rd->fed += zout.pos;
            ck_push(rd, rd->fed, in_start);
            return SKPO_OK;
        }
    }
}

// Clean end of input or one of the truncation errors.
static skpo_status at_eof(skpo_reader *rd, skpo_err *err) {
    uint64_t end = rd->in_base;
    if (!rd->any_input) return fail(rd, SKPO_EFORMAT, 0, err, "empty input (no zstd frame)");
    if (rd->last_ret != 0) return fail(rd, SKPO_EFORMAT, end, err, "truncated zstd frame");
    if (msgpack_unpacker_message_size(&rd->mp) > 0)
        return fail(rd, SKPO_EFORMAT, ck_map(rd, cur_start(rd)), err, "truncated record (%zu bytes of an incomplete msgpack value at the end)",
                    msgpack_unpacker_message_size(&rd->mp));
    return SKPO_EOF;
}

static skpo_status check_meta(skpo_reader *rd, const skpo_rec *r, uint64_t off, skpo_err *err) {
    int64_t v;
    if (!skpo_rec_is_kind(r, SKPO_KIND_META) || !skpo_rec_int(r, F_SCHEMA, &v) || v == SKPO_SCHEMA_VERSION) return SKPO_OK;
    return fail(rd, SKPO_EUNSUPPORTED, off, err,
                "stream '%s' has record schema %lld but this skpo reads schema %d (regenerate the stream with this "
                "skpo's tools, or read it with the skpo build that wrote it)",
                rd->name, (long long)v, SKPO_SCHEMA_VERSION);
}

// Is more input ready without blocking (decompressor output pending, input
// buffered, or the fd readable now)?
static bool more_ready(skpo_reader *rd) {
    if (rd->eof) return false;
    if (rd->zin.pos < rd->zin.size || rd->out_full) return true;
    struct pollfd pf = {rd->fd, POLLIN, 0};
    return poll(&pf, 1, 0) == 1;
}

// Find the next complete record in the unpacker's buffer (*size its bytes).
// skpo_mp_check walks it before msgpack-c sees it, so msgpack-c never sizes
// an allocation from a declared count the bytes cannot back. A record that
// spans many reads is walked again only once its buffered prefix has doubled
// or no more input is ready: linear overall, and no added latency in a pipe.
static skpo_status frame(skpo_reader *rd, bool final, size_t *size, skpo_err *err) {
    size_t pending = rd->mp.used - rd->mp.off;
    if (!pending) return SKPO_EOF;
    if (!final && pending < rd->recheck_at && more_ready(rd)) return SKPO_EOF;
    skpo_err e;
    skpo_status st = skpo_mp_check(rd->mp.buffer + rd->mp.off, pending, 0, size, &e);
    if (st == SKPO_EOF) {
        rd->recheck_at = 2 * pending;
        return SKPO_EOF;
    }
    if (st) return fail(rd, SKPO_EFORMAT, ck_map(rd, cur_start(rd)), err, "malformed msgpack (%s)", e.msg);
    rd->recheck_at = 0;
    return SKPO_OK;
}

// Decode the complete record of `size` bytes at the front of the buffer.
static skpo_status decode(skpo_reader *rd, skpo_rec *r, size_t size, skpo_err *err) {
    uint64_t off = ck_map(rd, cur_start(rd));
    size_t got = 0;
    msgpack_unpack_return ur = msgpack_unpacker_next_with_size(&rd->mp, &rd->res, &got);
    skpo_status st;
    if (ur != MSGPACK_UNPACK_SUCCESS || got != size) {
        msgpack_unpacked_destroy(&rd->res);
        st = fail(rd, SKPO_EFORMAT, off, err, "malformed msgpack (%s)",
                  ur == MSGPACK_UNPACK_NOMEM_ERROR ? "out of memory or nested too deeply" : "rejected by the decoder");
    } else {
        skpo_err e;
        st = from_object(&rd->res.data, r, &rd->scratch, &e);
        msgpack_unpacked_destroy(&rd->res);
        if (!st) st = check_meta(rd, r, off, err);
        else fail(rd, st, off, err, "%s", e.msg);
    }
    if (st) {
        skpo_rec_clear(r);
        return st;
    }
    rd->count++;
    return SKPO_OK;
}

skpo_status skpo_reader_next(skpo_reader *rd, skpo_rec *r, skpo_err *err) {
    if (rd->sticky) {
        if (err) *err = rd->sticky_err;
        skpo_rec_clear(r);
        return rd->sticky;
    }
    for (;;) {
        size_t size = 0;
        skpo_status st = frame(rd, false, &size, err);
        if (st == SKPO_OK) return decode(rd, r, size, err);
        if (st == SKPO_EOF) st = fill(rd, err);
        if (st == SKPO_EOF) {
            st = frame(rd, true, &size, err);
            if (st == SKPO_OK) return decode(rd, r, size, err);
            if (st == SKPO_EOF) st = at_eof(rd, err);
        }
        if (st) {
            skpo_rec_clear(r);
            return st;
        }
    }
}

uint64_t skpo_reader_count(const skpo_reader *rd) { return rd->count; }
const char *skpo_reader_name(const skpo_reader *rd) { return rd->name; }

void skpo_reader_close(skpo_reader *rd) {
    if (!rd) return;
    if (rd->own_fd) close(rd->fd);
    msgpack_unpacked_destroy(&rd->res);
    msgpack_unpacker_destroy(&rd->mp);
    ZSTD_freeDCtx(rd->dctx);
    free(rd->in);
    free(rd->ck);
    free(rd->scratch.p);
    free(rd->name);
    free(rd);
}

skpo_status skpo_read_all(const char *path, skpo_rec **recs, size_t *n, skpo_err *err) {
    skpo_reader *rd;
    skpo_status st = skpo_reader_open(path, &rd, err);
    if (st) return st;
    skpo_rec *a = NULL;
    size_t cnt = 0, cap = 0;
    for (;;) {
        skpo_xgrow((void **)&a, &cap, cnt + 1, sizeof *a);
        skpo_rec_init(&a[cnt]);
        st = skpo_reader_next(rd, &a[cnt], err);
        if (st) break;
        cnt++;
    }
    skpo_rec_free(&a[cnt]);
    skpo_reader_close(rd);
    if (st != SKPO_EOF) {
        skpo_recs_free(a, cnt);
        return st;
    }
    *recs = a;
    *n = cnt;
    return SKPO_OK;
}

void skpo_recs_free(skpo_rec *recs, size_t n) {
    for (size_t i = 0; i < n; i++) skpo_rec_free(&recs[i]);
    free(recs);
}

// --- writing -----------------------------------------------------------------------

struct skpo_writer {
    int fd;
    enum { W_FD, W_ATOMIC, W_APPEND } mode;
    skpo_afile af;
    char *name;
    ZSTD_CCtx *cctx;
    char *out;
    size_t out_cap;
    pbuf pk;
    uint64_t since_flush;
    double last_flush;
    skpo_status sticky;
    skpo_err sticky_err;
};

static skpo_status wfail(skpo_writer *w, skpo_status st, skpo_err *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static skpo_status wfail(skpo_writer *w, skpo_status st, skpo_err *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->sticky_err.msg, sizeof w->sticky_err.msg, fmt, ap);
    va_end(ap);
    w->sticky = st;
    if (err) *err = w->sticky_err;
    return st;
}

static skpo_status write_all_fd(skpo_writer *w, const char *p, size_t n, skpo_err *err) {
    while (n) {
        ssize_t k = write(w->fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return wfail(w, SKPO_EIO, err, "cannot write '%s': %s", w->name, k < 0 ? strerror(errno) : "short write");
        p += k;
        n -= (size_t)k;
    }
    return SKPO_OK;
}

// Feed input to the compressor with `op`, writing out everything produced.
// For flush/end, loop until zstd reports nothing pending.
static skpo_status compress(skpo_writer *w, const void *src, size_t len, ZSTD_EndDirective op, skpo_err *err) {
    ZSTD_inBuffer in = {src, len, 0};
    for (;;) {
        ZSTD_outBuffer out = {w->out, w->out_cap, 0};
        size_t rem = ZSTD_compressStream2(w->cctx, &out, &in, op);
        if (ZSTD_isError(rem)) return wfail(w, SKPO_EIO, err, "zstd compression failed for '%s': %s", w->name, ZSTD_getErrorName(rem));
        if (out.pos) {
            skpo_status st = write_all_fd(w, w->out, out.pos, err);
            if (st) return st;
        }
        bool done = op == ZSTD_e_continue ? in.pos == in.size : rem == 0;
        if (done) return SKPO_OK;
    }
}

static skpo_status writer_new(int fd, int level, const char *name, skpo_writer **out, skpo_err *err) {
    skpo_writer *w = skpo_xcalloc(1, sizeof *w);
    w->fd = fd;
    w->name = skpo_xstrdup(name);
    w->cctx = ZSTD_createCCtx();
    if (!w->cctx) {
        free(w->name);
        free(w);
        return skpo_err_set(err, SKPO_ENOMEM, "cannot allocate a zstd compressor for '%s'", name);
    }
    size_t r1 = ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_compressionLevel, level ? level : 3);
    size_t r2 = ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_checksumFlag, 1);
    if (ZSTD_isError(r1) || ZSTD_isError(r2)) {
        ZSTD_freeCCtx(w->cctx);
        free(w->name);
        free(w);
        return skpo_err_set(err, SKPO_ERANGE, "bad zstd level %d for '%s'", level, name);
    }
    w->out_cap = ZSTD_CStreamOutSize();
    w->out = skpo_xmalloc(w->out_cap);
    w->last_flush = skpo_now();
    *out = w;
    return SKPO_OK;
}

skpo_status skpo_writer_open_fd(int fd, int level, skpo_writer **out, skpo_err *err) {
    char name[32];
    snprintf(name, sizeof name, fd == 1 ? "stdout" : "fd %d", fd);
    return writer_new(fd, level, name, out, err);
}

skpo_status skpo_writer_open_file(const char *path, int level, skpo_writer **out, skpo_err *err) {
    skpo_afile af;
    skpo_status st = skpo_afile_open(&af, path, err);
    if (st) return st;
    st = writer_new(fileno(af.f), level, path, out, err);
    if (st) {
        skpo_afile_abort(&af);
        return st;
    }
    (*out)->mode = W_ATOMIC;
    (*out)->af = af;
    return SKPO_OK;
}

// A writer killed mid-append leaves a torn last frame; anything appended after
// it would be unreadable. Cut the file back to the end of its last whole zstd
// frame (structure only: block headers and sizes) before appending.
static skpo_status cut_torn_tail(int fd, const char *path, skpo_err *err) {
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size == 0) return SKPO_OK;
    size_t size = (size_t)sb.st_size, off = 0;
    char *p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return skpo_err_set(err, SKPO_EIO, "cannot map '%s': %s", path, strerror(errno));
    while (off < size) {
        size_t k = ZSTD_findFrameCompressedSize(p + off, size - off);
        if (ZSTD_isError(k)) break;
        off += k;
    }
    munmap(p, size);
    if (off < size && ftruncate(fd, (off_t)off) != 0)
        return skpo_err_set(err, SKPO_EIO, "cannot cut the torn end of '%s': %s", path, strerror(errno));
    return SKPO_OK;
}

skpo_status skpo_writer_open_append(const char *path, int level, skpo_writer **out, skpo_err *err) {
    int fd = open(path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) return skpo_err_set(err, SKPO_EIO, "cannot open '%s' for appending: %s", path, strerror(errno));
    if (cut_torn_tail(fd, path, err) != SKPO_OK) {
        close(fd);
        return SKPO_EIO;
    }
    skpo_status st = writer_new(fd, level, path, out, err);
    if (st) {
        close(fd);
        return st;
    }
    (*out)->mode = W_APPEND;
    return SKPO_OK;
}

skpo_status skpo_writer_put(skpo_writer *w, const skpo_rec *r, skpo_err *err) {
    if (w->sticky) {
        if (err) *err = w->sticky_err;
        return w->sticky;
    }
    w->pk.n = 0;
    pack_rec(&w->pk, r);
    if (w->pk.n > SKPO_MAX_RECORD_BYTES)
        return wfail(w, SKPO_ERANGE, err, "record of %zu bytes exceeds the %zu-byte limit writing '%s'", w->pk.n, SKPO_MAX_RECORD_BYTES, w->name);
    skpo_status st = compress(w, w->pk.p, w->pk.n, ZSTD_e_continue, err);
    if (st) return st;
    if (w->pk.cap > ((size_t)64 << 20)) { // do not hold on to the buffer of a huge record
        free(w->pk.p);
        w->pk = (pbuf){0};
    }
    w->since_flush++;
    if (w->since_flush >= SKPO_FLUSH_RECORDS || (skpo_now() - w->last_flush) * 1000.0 >= SKPO_FLUSH_MS)
        return skpo_writer_flush(w, err);
    return SKPO_OK;
}

skpo_status skpo_writer_flush(skpo_writer *w, skpo_err *err) {
    if (w->sticky) {
        if (err) *err = w->sticky_err;
        return w->sticky;
    }
    w->since_flush = 0;
    w->last_flush = skpo_now();
    return compress(w, NULL, 0, ZSTD_e_flush, err);
}

static void writer_free(skpo_writer *w) {
    ZSTD_freeCCtx(w->cctx);
    free(w->out);
    free(w->pk.p);
    free(w->name);
    free(w);
}

void skpo_writer_abort(skpo_writer *w) {
    if (!w) return;
    if (w->mode == W_ATOMIC) skpo_afile_abort(&w->af);
    if (w->mode == W_APPEND) close(w->fd);
    writer_free(w);
}

skpo_status skpo_writer_close(skpo_writer *w, skpo_err *err) {
    skpo_status st = w->sticky;
    if (st) {
        if (err) *err = w->sticky_err;
    } else {
        st = compress(w, NULL, 0, ZSTD_e_end, err);
    }
    if (st) {
        skpo_writer_abort(w);
        return st;
    }
    if (w->mode == W_ATOMIC) {
        st = skpo_afile_commit(&w->af, err);
    } else if (w->mode == W_APPEND) {
        if (fsync(w->fd) != 0 && errno != EINVAL) st = skpo_err_set(err, SKPO_EIO, "cannot fsync '%s': %s", w->name, strerror(errno));
        if (close(w->fd) != 0 && !st) st = skpo_err_set(err, SKPO_EIO, "cannot close '%s': %s", w->name, strerror(errno));
    }
    writer_free(w);
    return st;
}

// argv as a packed msgpack array of str.
static void pack_argv(pbuf *b, int argc, char **argv) {
    msgpack_packer pk;
    msgpack_packer_init(&pk, b, pbuf_write);
    msgpack_pack_array(&pk, argc > 0 ? (size_t)argc : 0);
    for (int i = 0; i < argc; i++) {
        size_t l = strlen(argv[i]);
        msgpack_pack_str(&pk, l);
        msgpack_pack_str_body(&pk, argv[i], l);
    }
}

skpo_status skpo_writer_meta(skpo_writer *w, int argc, char **argv, const skpo_rec *extra, skpo_err *err) {
    skpo_rec m;
    skpo_rec_init(&m);
    skpo_rec_set_str(&m, F_KIND, SKPO_KIND_META);
    skpo_rec_set_int(&m, F_SCHEMA, SKPO_SCHEMA_VERSION);
    skpo_rec_set_str(&m, F_TOOL, skpo_progname());
    pbuf b = {0};
    pack_argv(&b, argc, argv);
    skpo_rec_set_raw(&m, F_ARGV, b.p, b.n);
    free(b.p);
    char ts[64];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    skpo_rec_set_str(&m, F_TIME, ts);
    if (extra) {
        for (size_t i = 0; i < extra->n; i++) skpo_rec_set_value(&m, &extra->v[i]);
    }
    skpo_status st = skpo_rec_validate(&m, err);
    if (!st) st = skpo_writer_put(w, &m, err);
    skpo_rec_free(&m);
    return st;
}

skpo_status skpo_write_all(const char *path, const skpo_rec *recs, size_t n, skpo_err *err) {
    skpo_writer *w;
    skpo_status st = skpo_writer_open_file(path, 0, &w, err);
    if (st) return st;
    for (size_t i = 0; i < n && !st; i++) st = skpo_writer_put(w, &recs[i], err);
    if (st) {
        skpo_writer_abort(w);
        return st;
    }
    return skpo_writer_close(w, err);
}
