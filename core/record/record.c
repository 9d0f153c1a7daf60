/*
 * record.c - the schema table, validation, records in memory and the msgpack
 * encoding of one record (see record.h). Streams are in recstream.c.
 *
 * What this file deliberately is not: a general msgpack library. Nested values
 * (maps, arrays, ext) are kept packed (SKPO_V_RAW) and never interpreted here.
 */
#define _GNU_SOURCE
#include "record/mpcheck.h"
#include "record/record.h"
#include "record/record_impl.h"

#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

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
    {F_PRM_LOGP, SKPO_FT_F32S, "implicit PRM log-prob per response token (PRIME)"},
    {F_TEXT, SKPO_FT_STR, "decoded response (prompt records: the rendered prompt)"},
    {F_FINISH, SKPO_FT_STR, "why generation stopped: stop or length"},
    {F_PROBLEM, SKPO_FT_STR, "problem statement"},
    {F_ANSWER, SKPO_FT_STR, "gold answer"},
    {F_SOURCE, SKPO_FT_STR, "benchmark or dataset name"},
    {F_REWARD, SKPO_FT_FLOAT, "verifier reward"},
    {F_CORRECT, SKPO_FT_BOOL, "whether the extracted answer matched the gold answer"},
    {F_PRED, SKPO_FT_STR, "answer extracted from the response"},
    {F_ADV, SKPO_FT_FLOAT, "advantage"},
    {F_ADV_TOK, SKPO_FT_F32S, "per-token advantage (PRIME); used instead of adv"},
    {F_WEIGHT, SKPO_FT_FLOAT, "phase weight in the loss"},
    {F_CUT, SKPO_FT_INT, "up records: planned split position t_q"},
    {F_NLL, SKPO_FT_FLOAT, "up records: mean NLL of the segment"},
    {F_SEG_TOKENS, SKPO_FT_I32S, "state records: token ids of the prompt's last upstream segment"},
    {F_SEG_LOGP, SKPO_FT_F32S, "state records: behaviour log-probs of that segment"},
    {F_SEG_PROMPT, SKPO_FT_I32S, "state records: prompt ids that segment was conditioned on"},
    {F_TASK, SKPO_FT_STR, "reward task of a prompt: choice, code (absent or math: a math answer)"},
    {F_TESTS, SKPO_FT_STR, "code: LiveCodeBench input_output JSON {inputs, outputs, fn_name}"},
    {F_REASON, SKPO_FT_STR, "choice/code: short reason for the verdict"},
    {F_TESTS_PASSED, SKPO_FT_INT, "code: tests passed before the first failing one"},
    {F_CATEGORY, SKPO_FT_STR, "benchmark category of a problem (MMLU-Pro); skpo-eval reports each"},
    {F_DIFFICULTY, SKPO_FT_STR, "problem difficulty (LiveCodeBench); skpo-eval reports each"},
    {F_REFINE, SKPO_FT_BOOL, "full records: a Critique-GRPO refinement, trained with skpo-update's shaped loss"},
    {F_CRITIQUE_OF, SKPO_FT_STR, "critique prompts and refinements: uid of the direct response critiqued"},
    {F_CRITIQUE, SKPO_FT_STR, "refinement prompts and refinements: the critique they were conditioned on"},
    {F_REWARD_STATUS, SKPO_FT_STR, "timeout or error: the verifier gave no verdict in its bound (the reward is a wrong answer's, counted); absent: judged"},
    {F_RAW_TOKENS, SKPO_FT_FLOAT, "metrics (skpo-update): prompt + response tokens the passes were given"},
    {F_PACKED_TOKENS, SKPO_FT_FLOAT, "metrics (skpo-update): tokens computed after packing shared prefixes"},
    {F_SHARED_RATIO, SKPO_FT_FLOAT, "metrics (skpo-update): 1 - packed_tokens / raw_tokens, the share of work saved"},
    {F_MICRO_BATCHES, SKPO_FT_FLOAT, "metrics (skpo-update): forward/backward passes of the mini-batch (micro-batches, all ranks)"},
    {NULL, 0, NULL},
};

_Static_assert(sizeof skpo_schema / sizeof skpo_schema[0] <= 128, "the duplicate check holds 128 schema fields");

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
    // Every tool dispatches on `kind`: a nil kind would pass for "some other kind".
    if (d && v->type == SKPO_V_NIL && !strcmp(v->key, F_KIND))
        return skpo_err_set(err, SKPO_ETYPE, "field 'kind' is nil, want str");
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

bool skpo_rec_is_rollout(const skpo_rec *r) {
    const char *k = skpo_rec_str(r, F_KIND);
    return k && (!strcmp(k, SKPO_KIND_DOWN) || !strcmp(k, SKPO_KIND_FULL) || !strcmp(k, SKPO_KIND_SELF));
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

int skpo_pbuf_write(void *data, const char *buf, size_t len) {
    skpo_pbuf *b = data;
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

static void pack_value(msgpack_packer *pk, skpo_pbuf *b, const skpo_value *v) {
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
    case SKPO_V_RAW: skpo_pbuf_write(b, v->data, v->len); break;
    }
}

void skpo_rec_pack_into(skpo_pbuf *b, const skpo_rec *r) {
    msgpack_packer pk;
    msgpack_packer_init(&pk, b, skpo_pbuf_write);
    msgpack_pack_map(&pk, r->n);
    for (size_t i = 0; i < r->n; i++) {
        size_t kl = strlen(r->v[i].key);
        msgpack_pack_str(&pk, kl);
        msgpack_pack_str_body(&pk, r->v[i].key, kl);
        pack_value(&pk, b, &r->v[i]);
    }
}

void skpo_rec_pack(const skpo_rec *r, char **buf, size_t *len) {
    skpo_pbuf b = {0};
    skpo_rec_pack_into(&b, r);
    *buf = b.p;
    *len = b.n;
}

// --- decoding one record ------------------------------------------------------------
// The bytes were walked by skpo_mp_check first (framing), so every count and
// length below is backed by the buffer; the bounds checks stay as a second
// line of defence. Nested values are copied as their exact bytes.

static uint64_t be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = v << 8 | p[i];
    return v;
}

static const char *mp_type_name(unsigned c) {
    if (c <= 0x7f || c >= 0xe0 || (c >= 0xcc && c <= 0xd3)) return "int";
    if (c <= 0x8f || c == 0xde || c == 0xdf) return "map";
    if (c <= 0x9f || c == 0xdc || c == 0xdd) return "array";
    if (c <= 0xbf || (c >= 0xd9 && c <= 0xdb)) return "str";
    if (c == 0xc0) return "nil";
    if (c == 0xc2 || c == 0xc3) return "bool";
    if (c >= 0xc4 && c <= 0xc6) return "bin";
    if (c == 0xca) return "float32";
    if (c == 0xcb) return "float64";
    return "ext";
}

// Length of a str or bin header at p: header bytes in *h, payload bytes
// returned; -1 if p is neither (bin when want_bin).
static int64_t str_bin_len(const unsigned char *p, size_t avail, bool want_bin, size_t *h) {
    unsigned c = p[0];
    int lb = 0;
    if (!want_bin && c >= 0xa0 && c <= 0xbf) { *h = 1; return c & 0x1f; }
    if (want_bin) lb = c == 0xc4 ? 1 : c == 0xc5 ? 2 : c == 0xc6 ? 4 : 0;
    else lb = c == 0xd9 ? 1 : c == 0xda ? 2 : c == 0xdb ? 4 : 0;
    if (!lb || avail < 1 + (size_t)lb) return -1;
    *h = 1 + (size_t)lb;
    return (int64_t)be(p + 1, lb);
}

// One value at p[0..avail) into v (key already set); *used = its size.
static skpo_status decode_value(const unsigned char *p, size_t avail, skpo_value *v, size_t *used, skpo_err *err) {
    unsigned c = p[0];
    size_t h;
    int64_t n;
    static const int intw[] = {1, 2, 4, 8};
    if (c <= 0x7f || c >= 0xe0) { v->type = SKPO_V_INT; v->i = (int8_t)c; *used = 1; return SKPO_OK; }
    if (c == 0xc0) { v->type = SKPO_V_NIL; *used = 1; return SKPO_OK; }
    if (c == 0xc2 || c == 0xc3) { v->type = SKPO_V_BOOL; v->b = c == 0xc3; *used = 1; return SKPO_OK; }
    if ((c >= 0xcc && c <= 0xd3) || c == 0xca || c == 0xcb) {
        int w = c == 0xca ? 4 : c == 0xcb ? 8 : intw[(c - 0xcc) & 3];
        if (avail < 1 + (size_t)w) return skpo_err_set(err, SKPO_EFORMAT, "field '%s' is cut short", v->key);
        uint64_t x = be(p + 1, w);
        *used = 1 + (size_t)w;
        if (c == 0xca) { uint32_t u = (uint32_t)x; float f; memcpy(&f, &u, 4); v->type = SKPO_V_F32; v->f = f; return SKPO_OK; }
        if (c == 0xcb) { double d; memcpy(&d, &x, 8); v->type = SKPO_V_F64; v->f = d; return SKPO_OK; }
        if (c >= 0xd0) { // signed: sign-extend from w bytes
            v->type = SKPO_V_INT;
            v->i = w == 8 ? (int64_t)x : (int64_t)(x ^ (1ull << (8 * w - 1))) - (int64_t)(1ull << (8 * w - 1));
            return SKPO_OK;
        }
        if (x <= (uint64_t)INT64_MAX) { v->type = SKPO_V_INT; v->i = (int64_t)x; return SKPO_OK; }
        // a uint64 above INT64_MAX stays packed (RAW) so it passes through unchanged
    } else if ((n = str_bin_len(p, avail, false, &h)) >= 0 || (n = str_bin_len(p, avail, true, &h)) >= 0) {
        if ((uint64_t)n > avail - h) return skpo_err_set(err, SKPO_EFORMAT, "field '%s' is cut short", v->key);
        bool str = !(c >= 0xc4 && c <= 0xc6);
        v->type = str ? SKPO_V_STR : SKPO_V_BIN;
        v->len = (size_t)n;
        v->data = (str || n) ? dup_bytes(p + h, (size_t)n, str) : NULL;
        *used = h + (size_t)n;
        return SKPO_OK;
    } else {
        skpo_err e;
        if (skpo_mp_check((const char *)p, avail, 0, used, &e) != SKPO_OK)
            return skpo_err_set(err, SKPO_EFORMAT, "field '%s': %s", v->key, e.msg);
    }
    v->type = SKPO_V_RAW;
    v->data = dup_bytes(p, *used, false);
    v->len = *used;
    return SKPO_OK;
}

skpo_status skpo_rec_decode(const char *buf, size_t len, skpo_rec *r, skpo_err *err) {
    const unsigned char *p = (const unsigned char *)buf;
    skpo_rec_clear(r);
    if (!len) return skpo_err_set(err, SKPO_EFORMAT, "empty record");
    unsigned c = p[0];
    uint64_t n;
    size_t o;
    if (c >= 0x80 && c <= 0x8f) { n = c & 0x0f; o = 1; }
    else if ((c == 0xde && len >= 3) || (c == 0xdf && len >= 5)) { o = c == 0xde ? 3 : 5; n = be(p + 1, (int)o - 1); }
    else return skpo_err_set(err, SKPO_EFORMAT, "record is not a msgpack map (got %s)", mp_type_name(c));
    if (n > (len - o) / 2) return skpo_err_set(err, SKPO_EFORMAT, "record map declares %llu fields in %zu bytes", (unsigned long long)n, len);
    skpo_xgrow((void **)&r->v, &r->cap, (size_t)n, sizeof *r->v);
    uint64_t seen[2] = {0, 0}; // schema fields seen, to reject duplicates
    for (uint64_t i = 0; i < n; i++) {
        size_t h, used = 0;
        int64_t kl = o < len ? str_bin_len(p + o, len - o, false, &h) : -1;
        if (kl < 0) return skpo_err_set(err, SKPO_EFORMAT, "record key %llu is not a string", (unsigned long long)i);
        if ((uint64_t)kl > len - o - h || o + h + (size_t)kl >= len)
            return skpo_err_set(err, SKPO_EFORMAT, "record key %llu is cut short", (unsigned long long)i);
        if (memchr(p + o + h, 0, (size_t)kl)) return skpo_err_set(err, SKPO_EFORMAT, "record key %llu contains a NUL byte", (unsigned long long)i);
        skpo_value *v = &r->v[r->n++];
        memset(v, 0, sizeof *v);
        v->key = dup_bytes(p + o + h, (size_t)kl, true);
        o += h + (size_t)kl;
        skpo_status st = decode_value(p + o, len - o, v, &used, err);
        if (st) return st;
        o += used;
        const skpo_field_def *d = skpo_schema_find(v->key);
        if (d) {
            size_t k = (size_t)(d - skpo_schema);
            uint64_t bit = 1ull << (k & 63);
            if (seen[k >> 6] & bit) return skpo_err_set(err, SKPO_EFORMAT, "field '%s' appears twice", v->key);
            seen[k >> 6] |= bit;
            if ((st = check_value(d, v, err))) return st;
        }
    }
    if (o != len) return skpo_err_set(err, SKPO_EFORMAT, "%zu bytes left inside the record", len - o);
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
    st = skpo_rec_decode(buf, len, r, err);
    if (st) skpo_rec_clear(r);
    return st;
}
