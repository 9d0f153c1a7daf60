// test_record.c - record streams: round trips, concatenation, pass-through,
// every bad-input case with its "at record N (byte offset B)" message, a 100 MB
// record, flushing for pipe consumers, atomic files.
#include "harness.h"
#include "record/record.h"

#include <fcntl.h>
#include <msgpack.h>
#include <poll.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

// --- helpers ------------------------------------------------------------------

static char tmpdir[64];

static char *tpath(const char *name) { return skpo_path_join(tmpdir, name); }

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    SKPO_ASSERT(f);
    SKPO_ASSERT(fwrite(p, 1, n, f) == n);
    fclose(f);
}

static size_t file_size(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (size_t)sb.st_size : 0;
}

// zstd-compress raw msgpack bytes into one frame at path (no checksum: the
// reader must not depend on one).
static void write_zst(const char *path, const void *p, size_t n) {
    size_t cap = ZSTD_compressBound(n);
    char *z = skpo_xmalloc(cap);
    size_t zn = ZSTD_compress(z, cap, p, n, 3);
    SKPO_ASSERT(!ZSTD_isError(zn));
    write_bytes(path, z, zn);
    free(z);
}

static void append_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "ab");
    SKPO_ASSERT(f);
    SKPO_ASSERT(fwrite(p, 1, n, f) == n);
    fclose(f);
}

// A small rollout-like record number i.
static void make_rec(skpo_rec *r, int i) {
    char uid[32];
    snprintf(uid, sizeof uid, "u%d", i);
    skpo_rec_set_str(r, F_KIND, SKPO_KIND_DOWN);
    skpo_rec_set_str(r, F_UID, uid);
    skpo_rec_set_int(r, F_STEP, i);
    int32_t toks[5] = {i, 1, 2, 3, -7};
    skpo_rec_set_i32s(r, F_TOKENS, toks, 5);
    skpo_rec_set_float(r, F_REWARD, i % 2 ? 1.0 : -1.0);
}

static void write_recs(const char *path, int first, int n, bool meta) {
    skpo_writer *w;
    skpo_err e = {0};
    SKPO_ASSERT(skpo_writer_open_file(path, 0, &w, &e) == SKPO_OK);
    char *argv[] = {"test", "--x", NULL};
    if (meta) SKPO_ASSERT(skpo_writer_meta(w, 2, argv, NULL, &e) == SKPO_OK);
    for (int i = first; i < first + n; i++) {
        skpo_rec r;
        skpo_rec_init(&r);
        make_rec(&r, i);
        SKPO_ASSERT(skpo_writer_put(w, &r, &e) == SKPO_OK);
        skpo_rec_free(&r);
    }
    SKPO_ASSERT(skpo_writer_close(w, &e) == SKPO_OK);
}

// Read every record of path; returns how many were good, the final status and
// its message.
static size_t read_until_error(const char *path, skpo_status *st, skpo_err *e) {
    skpo_reader *rd;
    *st = skpo_reader_open(path, &rd, e);
    if (*st) return 0;
    skpo_rec r;
    skpo_rec_init(&r);
    size_t n = 0;
    while ((*st = skpo_reader_next(rd, &r, e)) == SKPO_OK) n++;
    skpo_rec_free(&r);
    skpo_reader_close(rd);
    return n;
}

static void pk_str(msgpack_packer *pk, const char *s) {
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

// --- round trips ------------------------------------------------------------------

static void every_field_type_round_trips(void) {
    skpo_rec r, back;
    skpo_rec_init(&r);
    skpo_rec_init(&back);
    skpo_rec_set_str(&r, F_KIND, SKPO_KIND_UP);
    skpo_rec_set_str(&r, F_TEXT, "h\xc3\xa9llo \xf0\x9f\x98\x80 world");
    skpo_rec_set_strn(&r, "with_nul", "a\0b", 3);
    skpo_rec_set_int(&r, F_STEP, 42);
    skpo_rec_set_int(&r, "neg", INT64_MIN);
    skpo_rec_set_int(&r, "big", INT64_MAX);
    skpo_rec_set_float(&r, F_REWARD, 0.1);
    skpo_rec_set_f32(&r, "f32", 0.1f);
    skpo_rec_set_bool(&r, F_CORRECT, true);
    skpo_rec_set_nil(&r, F_PRED);
    int32_t ids[4] = {0, -1, INT32_MAX, INT32_MIN};
    skpo_rec_set_i32s(&r, F_TOKENS, ids, 4);
    skpo_rec_set_i32s(&r, F_PROMPT, NULL, 0);
    float lp[3] = {-0.5f, -1e-30f, -3.25f};
    skpo_rec_set_f32s(&r, F_LOGP, lp, 3);
    skpo_rec_set_bin(&r, "blob", "\x00\xff\x10", 3);
    char raw[] = "\x82\xa1x\x01\xa1y\x92\xc0\xc3"; // {"x":1,"y":[nil,true]}
    skpo_rec_set_raw(&r, "nested", raw, sizeof raw - 1);

    char *path = tpath("rt.msgpack.zst");
    skpo_err e = {0};
    CHECK(skpo_write_all(path, &r, 1, &e) == SKPO_OK);
    skpo_rec *recs;
    size_t n;
    CHECK(skpo_read_all(path, &recs, &n, &e) == SKPO_OK && n == 1);
    if (n == 1) {
        const skpo_rec *b = &recs[0];
        int64_t i;
        double f;
        bool bo;
        size_t k;
        CHECK(skpo_rec_is_kind(b, SKPO_KIND_UP));
        CHECK(!strcmp(skpo_rec_str(b, F_TEXT), "h\xc3\xa9llo \xf0\x9f\x98\x80 world"));
        const skpo_value *v = skpo_rec_get(b, "with_nul");
        CHECK(v && v->type == SKPO_V_STR && v->len == 3 && !memcmp(v->data, "a\0b", 3));
        CHECK(skpo_rec_int(b, F_STEP, &i) && i == 42);
        CHECK(skpo_rec_int(b, "neg", &i) && i == INT64_MIN);
        CHECK(skpo_rec_int(b, "big", &i) && i == INT64_MAX);
        CHECK(skpo_rec_float(b, F_REWARD, &f) && f == 0.1);
        v = skpo_rec_get(b, "f32");
        CHECK(v && v->type == SKPO_V_F32 && (float)v->f == 0.1f);
        CHECK(skpo_rec_bool(b, F_CORRECT, &bo) && bo);
        v = skpo_rec_get(b, F_PRED);
        CHECK(v && v->type == SKPO_V_NIL && !skpo_rec_str(b, F_PRED));
        const int32_t *t = skpo_rec_i32s(b, F_TOKENS, &k);
        CHECK(t && k == 4 && !memcmp(t, ids, sizeof ids));
        CHECK(skpo_rec_i32s(b, F_PROMPT, &k) && k == 0);
        const float *l = skpo_rec_f32s(b, F_LOGP, &k);
        CHECK(l && k == 3 && !memcmp(l, lp, sizeof lp));
        v = skpo_rec_get(b, "blob");
        CHECK(v && v->type == SKPO_V_BIN && v->len == 3 && !memcmp(v->data, "\x00\xff\x10", 3));
        v = skpo_rec_get(b, "nested");
        CHECK(v && v->type == SKPO_V_RAW && v->len == sizeof raw - 1 && !memcmp(v->data, raw, v->len));
        // field order is kept and the bytes are identical
        CHECK(b->n == r.n);
        for (size_t j = 0; j < b->n && j < r.n; j++) CHECK(!strcmp(b->v[j].key, r.v[j].key));
        char *p1, *p2;
        size_t n1, n2;
        skpo_rec_pack(&r, &p1, &n1);
        skpo_rec_pack(b, &p2, &n2);
        CHECK(n1 == n2 && !memcmp(p1, p2, n1));
        free(p1);
        free(p2);
        // wrong-type getters say so
        CHECK(!skpo_rec_int(b, F_TEXT, &i) && !skpo_rec_str(b, F_STEP) && !skpo_rec_i32s(b, F_TEXT, &k));
        skpo_recs_free(recs, n);
    }
    skpo_rec_free(&r);
    skpo_rec_free(&back);
    free(path);
}

static void setters_replace_in_place_and_keep_order(void) {
    skpo_rec r, c;
    skpo_rec_init(&r);
    skpo_rec_init(&c);
    skpo_rec_set_str(&r, "a", "1");
    skpo_rec_set_int(&r, "b", 2);
    skpo_rec_set_str(&r, "c", "3");
    skpo_rec_set_float(&r, "a", 1.5); // replaces, stays first
    CHECK(r.n == 3 && !strcmp(r.v[0].key, "a") && r.v[0].type == SKPO_V_F64);
    CHECK(skpo_rec_del(&r, "b") && !skpo_rec_del(&r, "b"));
    CHECK(r.n == 2 && !strcmp(r.v[1].key, "c"));
    skpo_rec_copy(&c, &r);
    skpo_rec_set_str(&r, "c", "changed");
    CHECK(!strcmp(skpo_rec_str(&c, "c"), "3"));
    skpo_rec_free(&r);
    skpo_rec_free(&c);
}

static void unpack_rejects_trailing_bytes(void) {
    skpo_rec r;
    skpo_rec_init(&r);
    make_rec(&r, 1);
    char *p;
    size_t n;
    skpo_rec_pack(&r, &p, &n);
    skpo_rec q;
    skpo_rec_init(&q);
    skpo_err e = {0};
    CHECK(skpo_rec_unpack(p, n, &q, &e) == SKPO_OK && q.n == r.n);
    p = skpo_xrealloc(p, n + 1);
    p[n] = (char)0xc0;
    CHECK(skpo_rec_unpack(p, n + 1, &q, &e) == SKPO_EFORMAT && strstr(e.msg, "trailing"));
    CHECK(skpo_rec_unpack(p, n - 1, &q, &e) == SKPO_EFORMAT);
    free(p);
    skpo_rec_free(&r);
    skpo_rec_free(&q);
}

static void concatenated_streams_read_as_one(void) {
    char *a = tpath("a.zst"), *b = tpath("b.zst"), *ab = tpath("ab.zst");
    write_recs(a, 0, 3, true);
    write_recs(b, 3, 100, true);
    char *da, *db;
    size_t na, nb;
    skpo_err e = {0};
    SKPO_ASSERT(skpo_read_file(a, &da, &na, &e) == SKPO_OK && skpo_read_file(b, &db, &nb, &e) == SKPO_OK);
    write_bytes(ab, da, na);
    append_bytes(ab, db, nb);
    skpo_rec *recs;
    size_t n;
    CHECK(skpo_read_all(ab, &recs, &n, &e) == SKPO_OK);
    CHECK_MSG(n == 105, "n=%zu", n);
    if (n == 105) {
        CHECK(skpo_rec_is_kind(&recs[0], SKPO_KIND_META) && skpo_rec_is_kind(&recs[4], SKPO_KIND_META));
        int64_t s;
        CHECK(skpo_rec_int(&recs[0], F_SCHEMA, &s) && s == SKPO_SCHEMA_VERSION);
        CHECK(!strcmp(skpo_rec_str(&recs[0], F_TOOL), skpo_progname()));
        CHECK(skpo_rec_int(&recs[104], F_STEP, &s) && s == 102);
        skpo_recs_free(recs, n);
    }
    free(da);
    free(db);
    free(a);
    free(b);
    free(ab);
}

static void meta_record_carries_provenance_and_extras(void) {
    char *p = tpath("meta.zst");
    skpo_writer *w;
    skpo_err e = {0};
    skpo_rec extra;
    skpo_rec_init(&extra);
    skpo_rec_set_str(&extra, F_MODEL, "ckpt/7");
    skpo_rec_set_int(&extra, F_STEP, 7);
    char *argv[] = {"skpo-x", "--n", "8", NULL};
    CHECK(skpo_writer_open_file(p, 0, &w, &e) == SKPO_OK);
    CHECK(skpo_writer_meta(w, 3, argv, &extra, &e) == SKPO_OK);
    CHECK(skpo_writer_close(w, &e) == SKPO_OK);
    skpo_rec *recs;
    size_t n;
    CHECK(skpo_read_all(p, &recs, &n, &e) == SKPO_OK && n == 1);
    if (n == 1) {
        const skpo_rec *m = &recs[0];
        int64_t v;
        CHECK(!strcmp(m->v[0].key, F_KIND) && skpo_rec_is_kind(m, SKPO_KIND_META));
        CHECK(skpo_rec_int(m, F_SCHEMA, &v) && v == SKPO_SCHEMA_VERSION);
        CHECK(skpo_rec_int(m, F_STEP, &v) && v == 7 && !strcmp(skpo_rec_str(m, F_MODEL), "ckpt/7"));
        const char *t = skpo_rec_str(m, F_TIME);
        CHECK(t && strlen(t) == 20 && t[4] == '-' && t[10] == 'T' && t[19] == 'Z');
        const skpo_value *a = skpo_rec_get(m, F_ARGV);
        static const char want[] = "\x93\xa6skpo-x\xa3--n\xa1" "8";
        CHECK(a && a->type == SKPO_V_RAW && a->len == sizeof want - 1 && !memcmp(a->data, want, a->len));
        skpo_recs_free(recs, n);
    }
    skpo_rec_free(&extra);
    free(p);
}

static void append_mode_adds_a_frame(void) {
    char *p = tpath("log.zst");
    skpo_err e = {0};
    for (int k = 0; k < 2; k++) {
        skpo_writer *w;
        CHECK(skpo_writer_open_append(p, 0, &w, &e) == SKPO_OK);
        skpo_rec r;
        skpo_rec_init(&r);
        make_rec(&r, k);
        CHECK(skpo_writer_put(w, &r, &e) == SKPO_OK);
        CHECK(skpo_writer_close(w, &e) == SKPO_OK);
        skpo_rec_free(&r);
    }
    skpo_status st;
    CHECK(read_until_error(p, &st, &e) == 2 && st == SKPO_EOF);
    free(p);
}

// Records written by another msgpack producer with fields we do not know:
// nested maps, arrays, ext, a uint64 above INT64_MAX and a float32 come out of
// read + write byte for byte.
static void unknown_fields_pass_through_byte_exact(void) {
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    for (int i = 0; i < 3; i++) {
        msgpack_pack_map(&pk, 7);
        pk_str(&pk, "kind"); pk_str(&pk, "mystery");
        pk_str(&pk, "deep"); msgpack_pack_map(&pk, 1); pk_str(&pk, "k");
        msgpack_pack_array(&pk, 2); msgpack_pack_int(&pk, -3); msgpack_pack_map(&pk, 0);
        pk_str(&pk, "ext"); msgpack_pack_ext(&pk, 4, 7); msgpack_pack_ext_body(&pk, "abcd", 4);
        pk_str(&pk, "u64"); msgpack_pack_uint64(&pk, UINT64_MAX - (uint64_t)i);
        pk_str(&pk, "f32"); msgpack_pack_float(&pk, 1.0f / 3.0f);
        pk_str(&pk, "arr"); msgpack_pack_array(&pk, 1); msgpack_pack_bin(&pk, 2); msgpack_pack_bin_body(&pk, "xy", 2);
        pk_str(&pk, "badutf8_in_unknown"); msgpack_pack_str(&pk, 1); msgpack_pack_str_body(&pk, "\xff", 1);
    }
    char *in = tpath("foreign.zst"), *out = tpath("foreign2.zst");
    write_zst(in, sb.data, sb.size);
    skpo_rec *recs;
    size_t n;
    skpo_err e = {0};
    CHECK(skpo_read_all(in, &recs, &n, &e) == SKPO_OK && n == 3);
    if (n == 3) {
        CHECK(skpo_rec_get(&recs[0], "f32")->type == SKPO_V_F32);
        CHECK(skpo_rec_get(&recs[0], "u64")->type == SKPO_V_RAW);
        CHECK(skpo_write_all(out, recs, n, &e) == SKPO_OK);
        skpo_recs_free(recs, n);
        char *z;
        size_t zn;
        SKPO_ASSERT(skpo_read_file(out, &z, &zn, &e) == SKPO_OK);
        unsigned long long dn = ZSTD_getFrameContentSize(z, zn);
        char *d = skpo_xmalloc(sb.size + 16);
        size_t got = ZSTD_decompress(d, sb.size + 16, z, zn);
        CHECK(!ZSTD_isError(got) && got == sb.size && !memcmp(d, sb.data, sb.size));
        (void)dn;
        free(d);
        free(z);
    }
    msgpack_sbuffer_destroy(&sb);
    free(in);
    free(out);
}

// --- bad input ------------------------------------------------------------------------

static void truncated_frame_reports_record_and_offset(void) {
    char *p = tpath("trunc.zst"), *q = tpath("trunc2.zst");
    write_recs(p, 0, 50, false);
    char *d;
    size_t n;
    skpo_err e = {0};
    SKPO_ASSERT(skpo_read_file(p, &d, &n, &e) == SKPO_OK);
    write_bytes(q, d, n - 6); // cut into the last block + checksum
    skpo_status st;
    size_t good = read_until_error(q, &st, &e);
    CHECK(st == SKPO_EFORMAT);
    CHECK_MSG(strstr(e.msg, "truncated") != NULL, "%s", e.msg);
    char want[128];
    snprintf(want, sizeof want, "at record %zu (byte offset %zu)", good + 1, n - 6);
    CHECK_MSG(strstr(e.msg, want) != NULL, "'%s' lacks '%s'", e.msg, want);
    CHECK(good <= 50);
    free(d);
    free(p);
    free(q);
}

// skpo_read_each: the kind filter, a callback's error stops the walk and comes
// back as is, and a damaged stream's error comes back after the good records.
typedef struct each_ctx { int seen, stop_at; } each_ctx;
static skpo_status count_each(const skpo_rec *r, const char *name, void *ctx, skpo_err *err) {
    each_ctx *c = ctx;
    if (++c->seen == c->stop_at) return skpo_err_set(err, SKPO_ERANGE, "stop at %d (%s)", c->seen, name);
    return SKPO_OK;
}
static void read_each_filters_by_kind_and_stops_at_the_first_error(void) {
    char *p = tpath("each.zst"), *q = tpath("each_cut.zst");
    write_recs(p, 0, 20, true);
    skpo_err e = {0};
    each_ctx c = {0, 0};
    CHECK(skpo_read_each(p, SKPO_KIND_DOWN, count_each, &c, &e) == SKPO_OK && c.seen == 20);
    c = (each_ctx){0, 0};
    CHECK(skpo_read_each(p, NULL, count_each, &c, &e) == SKPO_OK && c.seen == 21); // with the meta record
    c = (each_ctx){0, 0};
    CHECK(skpo_read_each(p, SKPO_KIND_PROMPT, count_each, &c, &e) == SKPO_OK && c.seen == 0);
    c = (each_ctx){0, 5};
    CHECK(skpo_read_each(p, SKPO_KIND_DOWN, count_each, &c, &e) == SKPO_ERANGE && c.seen == 5);
    CHECK_MSG(strstr(e.msg, "stop at 5") != NULL, "%s", e.msg);
    char *d;
    size_t n;
    SKPO_ASSERT(skpo_read_file(p, &d, &n, &e) == SKPO_OK);
    write_bytes(q, d, n - 6);
    c = (each_ctx){0, 0};
    CHECK(skpo_read_each(q, SKPO_KIND_DOWN, count_each, &c, &e) == SKPO_EFORMAT && c.seen < 20);
    CHECK_MSG(strstr(e.msg, "truncated") != NULL, "%s", e.msg);
    free(d);
    free(p);
    free(q);
}

static void record_cut_inside_a_whole_frame_is_truncation(void) {
    skpo_rec r;
    skpo_rec_init(&r);
    make_rec(&r, 1);
    char *b;
    size_t n;
    skpo_rec_pack(&r, &b, &n);
    char *two = skpo_xmalloc(2 * n);
    memcpy(two, b, n);
    memcpy(two + n, b, n);
    char *p = tpath("cutrec.zst");
    write_zst(p, two, 2 * n - 3);
    skpo_status st;
    skpo_err e = {0};
    size_t good = read_until_error(p, &st, &e);
    CHECK(good == 1 && st == SKPO_EFORMAT);
    CHECK_MSG(strstr(e.msg, "truncated record") && strstr(e.msg, "at record 2 (byte offset 0)"), "%s", e.msg);
    free(b);
    free(two);
    free(p);
    skpo_rec_free(&r);
}

static void garbage_after_stream_keeps_good_records(void) {
    char *p = tpath("garb.zst");
    write_recs(p, 0, 7, true);
    size_t n = file_size(p);
    append_bytes(p, "this is not zstd", 16);
    skpo_status st;
    skpo_err e = {0};
    size_t good = read_until_error(p, &st, &e);
    CHECK(good == 8 && st == SKPO_EFORMAT);
    char want[96];
    snprintf(want, sizeof want, "at record 9 (byte offset %zu)", n);
    CHECK_MSG(strstr(e.msg, "corrupt zstd data") && strstr(e.msg, want), "%s", e.msg);
    free(p);
}

static void garbage_input_fails_at_record_one(void) {
    char *p = tpath("garb2.zst");
    write_bytes(p, "{\"kind\":\"up\"}\n", 14);
    skpo_status st;
    skpo_err e = {0};
    CHECK(read_until_error(p, &st, &e) == 0 && st == SKPO_EFORMAT);
    CHECK_MSG(strstr(e.msg, "at record 1 (byte offset 0)"), "%s", e.msg);
    free(p);
}

static void empty_input_is_an_error(void) {
    char *p = tpath("empty.zst");
    write_bytes(p, "", 0);
    skpo_status st;
    skpo_err e = {0};
    CHECK(read_until_error(p, &st, &e) == 0 && st == SKPO_EFORMAT && strstr(e.msg, "empty input"));
    // a stream with zero records is fine
    write_recs(p, 0, 0, false);
    CHECK(file_size(p) > 0 && read_until_error(p, &st, &e) == 0 && st == SKPO_EOF);
    free(p);
}

static void corrupt_byte_in_frame_is_caught(void) {
    char *p = tpath("flip.zst");
    write_recs(p, 0, 20, false);
    char *d;
    size_t n;
    skpo_err e = {0};
    SKPO_ASSERT(skpo_read_file(p, &d, &n, &e) == SKPO_OK);
    d[n - 2] ^= 0x55; // inside the checksum
    write_bytes(p, d, n);
    skpo_status st;
    read_until_error(p, &st, &e);
    CHECK_MSG(st == SKPO_EFORMAT && strstr(e.msg, "corrupt zstd data"), "%s", e.msg);
    free(d);
    free(p);
}

// A stream of raw msgpack values, each given as a packing callback.
static void bad_value_case(void (*pack_bad)(msgpack_packer *), const char *want_what, const char *want_where) {
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    for (int i = 0; i < 2; i++) {
        msgpack_pack_map(&pk, 1);
        pk_str(&pk, "kind");
        pk_str(&pk, "up");
    }
    pack_bad(&pk);
    msgpack_pack_map(&pk, 0); // a good record after the damage is never reached
    char *p = tpath("bad.zst");
    write_zst(p, sb.data, sb.size);
    skpo_status st;
    skpo_err e = {0};
    size_t good = read_until_error(p, &st, &e);
    CHECK(good == 2 && st != SKPO_OK && st != SKPO_EOF);
    CHECK_MSG(strstr(e.msg, want_what) && strstr(e.msg, want_where), "'%s' lacks '%s' / '%s'", e.msg, want_what, want_where);
    msgpack_sbuffer_destroy(&sb);
    free(p);
}

static void pack_array(msgpack_packer *pk) { msgpack_pack_array(pk, 1); msgpack_pack_int(pk, 1); }
static void pack_int(msgpack_packer *pk) { msgpack_pack_int(pk, 5); }
static void pack_wrong_type(msgpack_packer *pk) { msgpack_pack_map(pk, 1); pk_str(pk, "reward"); pk_str(pk, "1.0"); }
static void pack_bad_utf8(msgpack_packer *pk) {
    msgpack_pack_map(pk, 1);
    pk_str(pk, "text");
    msgpack_pack_str(pk, 4);
    msgpack_pack_str_body(pk, "ab\xc0\xaf", 4); // overlong '/'
}
static void pack_odd_bin(msgpack_packer *pk) {
    msgpack_pack_map(pk, 1);
    pk_str(pk, "tokens");
    msgpack_pack_bin(pk, 5);
    msgpack_pack_bin_body(pk, "abcde", 5);
}
static void pack_int_key(msgpack_packer *pk) { msgpack_pack_map(pk, 1); msgpack_pack_int(pk, 1); msgpack_pack_int(pk, 1); }
static void pack_dup(msgpack_packer *pk) {
    msgpack_pack_map(pk, 2);
    pk_str(pk, "uid"); pk_str(pk, "a");
    pk_str(pk, "uid"); pk_str(pk, "b");
}
static void pack_reserved_byte(msgpack_packer *pk) {
    char c = (char)0xc1; // never used in msgpack
    msgpack_sbuffer_write(pk->data, &c, 1);
}
static void pack_bool_as_int(msgpack_packer *pk) { msgpack_pack_map(pk, 1); pk_str(pk, "step"); msgpack_pack_true(pk); }
static void pack_new_schema(msgpack_packer *pk) {
    msgpack_pack_map(pk, 2);
    pk_str(pk, "kind"); pk_str(pk, "meta");
    pk_str(pk, "schema"); msgpack_pack_int(pk, SKPO_SCHEMA_VERSION + 1);
}

static void non_map_value_is_an_error(void) {
    bad_value_case(pack_array, "not a msgpack map (got array)", "at record 3 (byte offset 0)");
    bad_value_case(pack_int, "not a msgpack map (got int)", "at record 3");
}

static void schema_field_of_wrong_type_is_an_error(void) {
    bad_value_case(pack_wrong_type, "field 'reward' is str, want float", "at record 3 (byte offset 0)");
    bad_value_case(pack_bool_as_int, "field 'step' is bool, want int", "at record 3");
    bad_value_case(pack_odd_bin, "field 'tokens' is a bin of 5 bytes", "at record 3");
}

static void invalid_utf8_in_text_is_an_error(void) {
    bad_value_case(pack_bad_utf8, "field 'text' is not valid UTF-8 (bad byte at 2)", "at record 3");
}

static void malformed_maps_are_errors(void) {
    bad_value_case(pack_int_key, "key 0 is not a string", "at record 3");
    bad_value_case(pack_dup, "field 'uid' appears twice", "at record 3");
    bad_value_case(pack_reserved_byte, "malformed msgpack", "at record 3");
}

static void meta_of_another_schema_names_the_stream(void) {
    bad_value_case(pack_new_schema, "bad.zst' has record schema 2 but this skpo reads schema 1", "at record 3");
}

// 5 bytes claiming 2^32 - 1 elements must be an error, not a 100 GB
// allocation inside msgpack-c; also the inputs fuzzing found.
static void pack_huge_array(msgpack_packer *pk) { msgpack_sbuffer_write(pk->data, "\xdd\xff\xff\xff\xff\x01", 6); }
static void pack_big_map(msgpack_packer *pk) { msgpack_sbuffer_write(pk->data, "\xdf\x50\x8c\x8c\x8c\x50\x8c\x8c\x8c\x8c", 10); }
static void pack_deep(msgpack_packer *pk) {
    msgpack_pack_map(pk, 1);
    pk_str(pk, "deep");
    for (int i = 0; i < 100; i++) msgpack_pack_array(pk, 1);
    msgpack_pack_nil(pk);
}
static void pack_deep40(msgpack_packer *pk) {
    msgpack_pack_map(pk, 1);
    pk_str(pk, "deep");
    for (int i = 0; i < 40; i++) msgpack_pack_array(pk, 1);
    msgpack_pack_nil(pk);
}

static void declared_counts_beyond_the_data_are_errors(void) {
    bad_value_case(pack_huge_array, "malformed msgpack", "at record 3");
    bad_value_case(pack_big_map, "declares 2702776600 elements", "at record 3");
    bad_value_case(pack_deep, "nesting deeper", "at record 3");
    // 40 levels is within the limit (64) and passes through byte for byte
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_deep40(&pk);
    skpo_rec d;
    skpo_rec_init(&d);
    skpo_err de = {0};
    CHECK(skpo_rec_unpack(sb.data, sb.size, &d, &de) == SKPO_OK && d.n == 1 && d.v[0].type == SKPO_V_RAW);
    char *back;
    size_t nback;
    skpo_rec_pack(&d, &back, &nback);
    CHECK(nback == sb.size && !memcmp(back, sb.data, nback));
    free(back);
    skpo_rec_free(&d);
    msgpack_sbuffer_destroy(&sb);
    static const char crash1[] = "\xdf\x50\x8c\x8c\x8c\x50\x8c\x8c\x8c\x8c";
    char crash2[35];
    memset(crash2, 0xdf, 34);
    crash2[34] = 0x50;
    skpo_rec r;
    skpo_rec_init(&r);
    skpo_err e = {0};
    CHECK(skpo_rec_unpack(crash1, sizeof crash1 - 1, &r, &e) == SKPO_EFORMAT);
    CHECK(skpo_rec_unpack(crash2, sizeof crash2, &r, &e) == SKPO_EFORMAT);
    CHECK(skpo_rec_unpack("\xdd\xff\xff\xff\xff", 5, &r, &e) == SKPO_EFORMAT);
    skpo_rec_free(&r);
}

static void error_offset_points_at_the_damaged_frame(void) {
    // two streams back to back; the second one's first record is bad: the
    // offset must be where the second stream starts
    char *a = tpath("off.zst");
    write_recs(a, 0, 30, true);
    size_t n = file_size(a);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_wrong_type(&pk);
    size_t cap = ZSTD_compressBound(sb.size);
    char *z = skpo_xmalloc(cap);
    size_t zn = ZSTD_compress(z, cap, sb.data, sb.size, 3);
    append_bytes(a, z, zn);
    skpo_status st;
    skpo_err e = {0};
    size_t good = read_until_error(a, &st, &e);
    char want[96];
    snprintf(want, sizeof want, "at record 32 (byte offset %zu)", n);
    CHECK(good == 31);
    CHECK_MSG(strstr(e.msg, want), "'%s' lacks '%s'", e.msg, want);
    free(z);
    msgpack_sbuffer_destroy(&sb);
    free(a);
}

static void reader_error_is_sticky(void) {
    char *p = tpath("sticky.zst");
    write_bytes(p, "garbage!", 8);
    skpo_reader *rd;
    skpo_err e = {0}, e2 = {0};
    CHECK(skpo_reader_open(p, &rd, &e) == SKPO_OK);
    skpo_rec r;
    skpo_rec_init(&r);
    skpo_status s1 = skpo_reader_next(rd, &r, &e);
    skpo_status s2 = skpo_reader_next(rd, &r, &e2);
    CHECK(s1 == SKPO_EFORMAT && s2 == s1 && !strcmp(e.msg, e2.msg));
    CHECK(skpo_reader_count(rd) == 0 && !strcmp(skpo_reader_name(rd), p));
    skpo_reader_close(rd);
    skpo_rec_free(&r);
    char *missing = tpath("no-such-file.zst");
    CHECK(skpo_reader_open(missing, &rd, &e) == SKPO_ENOTFOUND && strstr(e.msg, "no-such-file"));
    free(missing);
    free(p);
}

// --- big records -------------------------------------------------------------------------

static void hundred_megabyte_record_round_trips(void) {
    size_t n = (size_t)25 << 20; // 25 Mi int32 = 100 MiB
    int32_t *ids = skpo_xmalloc(n * sizeof *ids);
    uint32_t x = 12345;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        ids[i] = (int32_t)(x >> 12); // 20 bits of noise: realistic vocab ids, hard to compress
    }
    skpo_rec r;
    skpo_rec_init(&r);
    skpo_rec_set_str(&r, F_KIND, SKPO_KIND_FULL);
    skpo_rec_set_i32s(&r, F_TOKENS, ids, n);
    char *p = tpath("big.zst");
    skpo_err e = {0};
    CHECK(skpo_write_all(p, &r, 1, &e) == SKPO_OK);
    skpo_rec_free(&r);
    skpo_reader *rd;
    CHECK(skpo_reader_open(p, &rd, &e) == SKPO_OK);
    CHECK(skpo_reader_next(rd, &r, &e) == SKPO_OK);
    size_t k = 0;
    const int32_t *t = skpo_rec_i32s(&r, F_TOKENS, &k);
    CHECK(t && k == n && !memcmp(t, ids, n * sizeof *ids));
    CHECK(skpo_reader_next(rd, &r, &e) == SKPO_EOF);
    skpo_reader_close(rd);
    skpo_rec_free(&r);
    free(ids);
    unlink(p);
    free(p);
}

// --- flushing and files -------------------------------------------------------------------

static bool readable_within(int fd, int ms) {
    struct pollfd pf = {fd, POLLIN, 0};
    return poll(&pf, 1, ms) == 1;
}

// The consumer sees each record as soon as the writer flushes, well before close.
static void flushed_records_reach_a_pipe_reader_before_close(void) {
    int fds[2];
    SKPO_ASSERT(pipe(fds) == 0);
    skpo_writer *w;
    skpo_reader *rd;
    skpo_err e = {0};
    CHECK(skpo_writer_open_fd(fds[1], 0, &w, &e) == SKPO_OK);
    CHECK(skpo_reader_open_fd(fds[0], "pipe", &rd, &e) == SKPO_OK);
    skpo_rec r, got;
    skpo_rec_init(&r);
    skpo_rec_init(&got);
    make_rec(&r, 1);
    // Each step reads only after poll says bytes are there, so a writer that
    // fails to flush makes the test fail instead of hang.
    CHECK(skpo_writer_put(w, &r, &e) == SKPO_OK);
    CHECK(!readable_within(fds[0], 0)); // one record: buffered
    CHECK(skpo_writer_flush(w, &e) == SKPO_OK);
    bool ok = readable_within(fds[0], 1000);
    CHECK(ok);
    if (ok) CHECK(skpo_reader_next(rd, &got, &e) == SKPO_OK && skpo_rec_str(&got, F_UID) && !strcmp(skpo_rec_str(&got, F_UID), "u1"));
    // SKPO_FLUSH_RECORDS puts flush by themselves
    for (int i = 0; ok && i < SKPO_FLUSH_RECORDS; i++) CHECK(skpo_writer_put(w, &r, &e) == SKPO_OK);
    ok = ok && readable_within(fds[0], 1000);
    CHECK(ok);
    for (int i = 0; ok && i < SKPO_FLUSH_RECORDS; i++) CHECK(skpo_reader_next(rd, &got, &e) == SKPO_OK);
    // so does a put more than SKPO_FLUSH_MS after the last flush
    usleep((SKPO_FLUSH_MS + 50) * 1000);
    if (ok) CHECK(skpo_writer_put(w, &r, &e) == SKPO_OK);
    ok = ok && readable_within(fds[0], 1000);
    CHECK(ok);
    if (ok) CHECK(skpo_reader_next(rd, &got, &e) == SKPO_OK);
    CHECK(skpo_writer_close(w, &e) == SKPO_OK);
    close(fds[1]);
    CHECK(skpo_reader_next(rd, &got, &e) == SKPO_EOF);
    skpo_reader_close(rd);
    close(fds[0]);
    skpo_rec_free(&r);
    skpo_rec_free(&got);
}

static void file_appears_only_on_successful_close(void) {
    char *p = tpath("atomic.zst");
    skpo_writer *w;
    skpo_err e = {0};
    skpo_rec r;
    skpo_rec_init(&r);
    make_rec(&r, 1);
    CHECK(skpo_writer_open_file(p, 0, &w, &e) == SKPO_OK);
    CHECK(skpo_writer_put(w, &r, &e) == SKPO_OK && skpo_writer_flush(w, &e) == SKPO_OK);
    CHECK(!skpo_path_exists(p));
    skpo_writer_abort(w);
    CHECK(!skpo_path_exists(p));
    CHECK(skpo_writer_open_file(p, 0, &w, &e) == SKPO_OK);
    CHECK(skpo_writer_put(w, &r, &e) == SKPO_OK);
    CHECK(skpo_writer_close(w, &e) == SKPO_OK && skpo_path_exists(p));
    // nothing but the file is left in the directory
    char *tmp = skpo_xmalloc(strlen(p) + 32);
    sprintf(tmp, "%s.tmp.%ld", p, (long)getpid());
    CHECK(!skpo_path_exists(tmp));
    free(tmp);
    skpo_rec_free(&r);
    free(p);
}

static void writer_refuses_an_invalid_record_and_goes_on(void) {
    char *p = tpath("inval.zst");
    skpo_writer *w;
    skpo_err e = {0};
    skpo_rec r;
    skpo_rec_init(&r);
    CHECK(skpo_writer_open_file(p, 0, &w, &e) == SKPO_OK);
    make_rec(&r, 1);
    CHECK(skpo_writer_put(w, &r, &e) == SKPO_OK);
    skpo_rec_set_str(&r, F_REWARD, "high");
    CHECK(skpo_writer_put(w, &r, &e) == SKPO_ETYPE);
    CHECK_MSG(strstr(e.msg, "record 2 written to") && strstr(e.msg, "field 'reward' is str, want float"), "%s", e.msg);
    skpo_rec_set_float(&r, F_REWARD, 1.0);
    CHECK(skpo_writer_put(w, &r, &e) == SKPO_OK);
    CHECK(skpo_writer_close(w, &e) == SKPO_OK);
    skpo_status st;
    CHECK(read_until_error(p, &st, &e) == 2 && st == SKPO_EOF);
    skpo_rec_free(&r);
    free(p);
}

static void validate_names_the_field(void) {
    skpo_rec r;
    skpo_rec_init(&r);
    skpo_err e = {0};
    skpo_rec_set_str(&r, F_KIND, "up");
    skpo_rec_set_int(&r, "anything", 1);
    CHECK(skpo_rec_validate(&r, &e) == SKPO_OK);
    skpo_rec_set_int(&r, F_TEXT, 3);
    CHECK(skpo_rec_validate(&r, &e) == SKPO_ETYPE && strstr(e.msg, "'text'"));
    skpo_rec_set_str(&r, F_TEXT, "\xed\xa0\x80"); // a surrogate
    CHECK(skpo_rec_validate(&r, &e) == SKPO_EFORMAT && strstr(e.msg, "UTF-8"));
    skpo_rec_set_str(&r, F_TEXT, "\xf4\x8f\xbf\xbf ok");
    CHECK(skpo_rec_validate(&r, &e) == SKPO_OK);
    skpo_rec_free(&r);
    for (const skpo_field_def *d = skpo_schema; d->name; d++) {
        CHECK(skpo_schema_find(d->name) == d);
        CHECK(d->doc && *d->doc);
    }
    CHECK(skpo_schema_find("no_such_field") == NULL);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/skpo-test-record-XXXXXX");
    SKPO_ASSERT(mkdtemp(tmpdir));
    alarm(300); // a hung reader must fail the run, not stall it
    RUN(every_field_type_round_trips);
    RUN(setters_replace_in_place_and_keep_order);
    RUN(unpack_rejects_trailing_bytes);
    RUN(concatenated_streams_read_as_one);
    RUN(meta_record_carries_provenance_and_extras);
    RUN(append_mode_adds_a_frame);
    RUN(unknown_fields_pass_through_byte_exact);
    RUN(truncated_frame_reports_record_and_offset);
    RUN(read_each_filters_by_kind_and_stops_at_the_first_error);
    RUN(record_cut_inside_a_whole_frame_is_truncation);
    RUN(garbage_after_stream_keeps_good_records);
    RUN(garbage_input_fails_at_record_one);
    RUN(empty_input_is_an_error);
    RUN(corrupt_byte_in_frame_is_caught);
    RUN(non_map_value_is_an_error);
    RUN(schema_field_of_wrong_type_is_an_error);
    RUN(invalid_utf8_in_text_is_an_error);
    RUN(malformed_maps_are_errors);
    RUN(meta_of_another_schema_names_the_stream);
    RUN(declared_counts_beyond_the_data_are_errors);
    RUN(error_offset_points_at_the_damaged_frame);
    RUN(reader_error_is_sticky);
    RUN(hundred_megabyte_record_round_trips);
    RUN(flushed_records_reach_a_pipe_reader_before_close);
    RUN(file_appears_only_on_successful_close);
    RUN(writer_refuses_an_invalid_record_and_goes_on);
    RUN(validate_names_the_field);
    skpo_err e = {0};
    skpo_rm_rf(tmpdir, &e);
    return TEST_SUMMARY();
}
