// test_safetensors.c - safetensors read/write (safetensors.h): round trips in F32
// and BF16, sharding with an index, and strict header validation.
#include "harness.h"
#include "model/safetensors.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *tmpdir(void) {
    char *d = strdup("/tmp/skpo_st_XXXXXX");
    return mkdtemp(d);
}

static void rm_dir(char *d) {
    skpo_err err = {0};
    skpo_rm_rf(d, &err);
    free(d);
}

// Two tensors a (3, 5) and b (7).
static void make_tensors(skpo_st_wtensor t[2], float *a, float *b) {
    for (int i = 0; i < 15; i++) a[i] = (float)i * 0.37f - 2.0f;
    for (int i = 0; i < 7; i++) b[i] = 1.0f / (float)(i + 1);
    t[0] = (skpo_st_wtensor){"model.a.weight", a, 2, {3, 5}};
    t[1] = (skpo_st_wtensor){"model.b.bias", b, 1, {7}};
}

static void f32_round_trip_is_exact(void) {
    char *d = tmpdir();
    float a[15], b[7], ra[15], rb[7];
    skpo_st_wtensor t[2];
    make_tensors(t, a, b);
    skpo_err err = {0};
    CHECK(skpo_st_write_dir(d, t, 2, SKPO_ST_F32, 0, &err) == SKPO_OK);
    skpo_st *st;
    CHECK(skpo_st_open_dir(d, &st, &err) == SKPO_OK);
    CHECK(skpo_st_count(st) == 2);
    CHECK(skpo_st_read_f32(st, "model.a.weight", ra, 2, (int64_t[]){3, 5}, &err) == SKPO_OK);
    CHECK(skpo_st_read_f32(st, "model.b.bias", rb, 1, (int64_t[]){7}, &err) == SKPO_OK);
    CHECK(!memcmp(a, ra, sizeof a) && !memcmp(b, rb, sizeof b));
    CHECK(skpo_st_read_f32(st, "model.a.weight", ra, 2, (int64_t[]){5, 3}, &err) == SKPO_ERANGE);
    CHECK(strstr(err.msg, "(3,5)") != NULL);
    CHECK(skpo_st_read_f32(st, "nope", ra, 1, (int64_t[]){1}, &err) == SKPO_ENOTFOUND);
    skpo_st_close(st);
    rm_dir(d);
}

static void bf16_write_rounds_to_nearest_even_and_reads_back(void) {
    CHECK(skpo_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(skpo_bf16_to_f32(0x3f80) == 1.0f);
    // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0)
    CHECK(skpo_f32_to_bf16(1.00390625f) == 0x3f80);
    CHECK(skpo_f32_to_bf16(1.01171875f) == 0x3f82); // 1 + 3*2^-8: halfway, rounds up to even
    CHECK(isnan(skpo_bf16_to_f32(skpo_f32_to_bf16(NAN))));
    CHECK(skpo_f16_to_f32(0x3c00) == 1.0f && skpo_f16_to_f32(0xc000) == -2.0f);
    CHECK(skpo_f16_to_f32(0x0001) == 5.9604644775390625e-8f); // smallest subnormal
    CHECK(isinf(skpo_f16_to_f32(0x7c00)));
    char *d = tmpdir();
    float a[15], b[7], ra[15];
    skpo_st_wtensor t[2];
    make_tensors(t, a, b);
    skpo_err err = {0};
    CHECK(skpo_st_write_dir(d, t, 2, SKPO_ST_BF16, 0, &err) == SKPO_OK);
    skpo_st *st;
    CHECK(skpo_st_open_dir(d, &st, &err) == SKPO_OK);
    CHECK(skpo_st_find(st, "model.a.weight")->dtype == SKPO_ST_BF16);
    CHECK(skpo_st_read_f32(st, "model.a.weight", ra, 2, (int64_t[]){3, 5}, &err) == SKPO_OK);
    for (int i = 0; i < 15; i++) CHECK(ra[i] == skpo_bf16_to_f32(skpo_f32_to_bf16(a[i])));
    skpo_st_close(st);
    rm_dir(d);
}

// A NaN whose payload is all in the dropped half would truncate to an
// infinity; base/bf16.h sets the quiet bit instead. Infinities and the
// largest finite values round as the rule says, and the array forms agree.
static void bf16_keeps_nans_that_truncation_would_make_infinite(void) {
    uint32_t bits[] = {0x7f800001u, 0xff800001u, 0x7fc00000u};
    for (int i = 0; i < 3; i++) {
        float f;
        memcpy(&f, &bits[i], 4);
        CHECK(isnan(skpo_bf16_to_f32(skpo_f32_to_bf16(f))));
        CHECK(isnan(skpo_bf16_round(f)));
    }
    CHECK(skpo_f32_to_bf16(INFINITY) == 0x7f80 && skpo_f32_to_bf16(-INFINITY) == 0xff80);
    CHECK(skpo_f32_to_bf16(3.4028235e38f) == 0x7f80); // FLT_MAX rounds up to +inf, as __float2bfloat16 does
    float x[4] = {1.00390625f, -2.5f, NAN, 1e-40f}, y[4];
    uint16_t h[4];
    skpo_f32_to_bf16_host(h, x, 4);
    skpo_bf16_to_f32_host(y, h, 4);
    for (int i = 0; i < 4; i++) CHECK(h[i] == skpo_f32_to_bf16(x[i]));
    CHECK(y[0] == 1.0f && y[1] == -2.5f && isnan(y[2]));
}

static void large_checkpoints_are_sharded_with_an_index(void) {
    char *d = tmpdir();
    float a[15], b[7], rb[7];
    skpo_st_wtensor t[2];
    make_tensors(t, a, b);
    skpo_err err = {0};
    CHECK(skpo_st_write_dir(d, t, 2, SKPO_ST_F32, 0, &err) == SKPO_OK); // a stale single file
    CHECK(skpo_st_write_dir(d, t, 2, SKPO_ST_F32, 64, &err) == SKPO_OK); // 60 + 28 bytes > 64
    char *p = skpo_path_join(d, "model-00002-of-00002.safetensors");
    CHECK(skpo_path_exists(p));
    free(p);
    p = skpo_path_join(d, "model.safetensors");
    CHECK(!skpo_path_exists(p)); // removed so loaders cannot pick up old weights
    free(p);
    skpo_st *st;
    CHECK(skpo_st_open_dir(d, &st, &err) == SKPO_OK);
    CHECK(skpo_st_count(st) == 2);
    CHECK(skpo_st_read_f32(st, "model.b.bias", rb, 1, (int64_t[]){7}, &err) == SKPO_OK);
    CHECK(!memcmp(b, rb, sizeof b));
    skpo_st_close(st);
    // An index naming a shard that does not hold the tensor (it is in the other one) is refused.
    const char *idx = "{\"weight_map\": {\"NAME_A\": \"model-00001-of-00002.safetensors\", "
                      "\"model.b.bias\": \"model-00001-of-00002.safetensors\"}}";
    char buf[512];
    snprintf(buf, sizeof buf, "%s", idx);
    char *at = strstr(buf, "NAME_A");
    char rest[512];
    snprintf(rest, sizeof rest, "%s", at + 6);
    snprintf(at, sizeof buf - (size_t)(at - buf), "%s%s", t[0].name, rest);
    p = skpo_path_join(d, "model.safetensors.index.json");
    CHECK(skpo_write_file_atomic(p, buf, strlen(buf), &err) == SKPO_OK);
    free(p);
    st = NULL;
    CHECK(skpo_st_open_dir(d, &st, &err) == SKPO_EFORMAT && st == NULL);
    CHECK_MSG(strstr(err.msg, "'model.b.bias' is not in its shard 'model-00001-of-00002.safetensors'"), "%s", err.msg);
    rm_dir(d);
}

static void truncated_file_names_file_and_tensor(void) {
    char *d = tmpdir();
    float a[15], b[7];
    skpo_st_wtensor t[2];
    make_tensors(t, a, b);
    skpo_err err = {0};
    CHECK(skpo_st_write_dir(d, t, 2, SKPO_ST_F32, 0, &err) == SKPO_OK);
    char *p = skpo_path_join(d, "model.safetensors");
    struct stat sb;
    stat(p, &sb);
    CHECK(truncate(p, sb.st_size - 4) == 0);
    skpo_st *st = NULL;
    CHECK(skpo_st_open_dir(d, &st, &err) == SKPO_EFORMAT);
    CHECK_MSG(strstr(err.msg, "model.safetensors") && strstr(err.msg, "model.b.bias") && strstr(err.msg, "truncated"),
              "%s", err.msg);
    CHECK(truncate(p, 5) == 0);
    CHECK(skpo_st_open_dir(d, &st, &err) == SKPO_EFORMAT);
    free(p);
    rm_dir(d);
}

static void write_raw(const char *path, const char *header) {
    FILE *f = fopen(path, "wb");
    uint64_t n = strlen(header);
    fwrite(&n, 8, 1, f);
    fputs(header, f);
    fwrite("\0\0\0\0\0\0\0\0", 1, 8, f);
    fclose(f);
}

static void bad_headers_are_rejected(void) {
    const char *cases[] = {
        "{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}",   // size != numel * 4
        "{\"x\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}",   // unsupported dtype
        "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}",   // end < begin
        "{\"x\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}",  // negative dim
        "{\"x\":{\"dtype\":\"F32\",\"shape\":[1]}}",                           // no offsets
        "[1]",
        "{not json",
        // overlapping data ranges: y's bytes alias x's second half
        "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
    };
    char path[] = "/tmp/skpo_st_bad_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_raw(path, cases[i]);
        skpo_st *st = NULL;
        skpo_err err = {0};
        skpo_status s = skpo_st_open_file(path, &st, &err);
        CHECK_MSG(s != SKPO_OK && st == NULL && strstr(err.msg, path), "case %zu: %s", i, err.msg);
    }
    // The overlap is named.
    write_raw(path, cases[sizeof cases / sizeof cases[0] - 1]);
    {
        skpo_st *o = NULL;
        skpo_err oe = {0};
        CHECK(skpo_st_open_file(path, &o, &oe) == SKPO_EFORMAT && strstr(oe.msg, "overlapping data ranges"));
    }
    // Adjacent (touching) ranges are fine.
    write_raw(path, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}");
    {
        skpo_st *o = NULL;
        skpo_err oe = {0};
        CHECK_MSG(skpo_st_open_file(path, &o, &oe) == SKPO_OK, "%s", oe.msg);
        skpo_st_close(o);
    }
    write_raw(path, "{\"__metadata__\":{\"format\":\"pt\"},\"x\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,8]}}");
    skpo_st *st = NULL;
    skpo_err err = {0};
    CHECK(skpo_st_open_file(path, &st, &err) == SKPO_OK);
    skpo_st_close(st);
    unlink(path);
}

int main(void) {
    RUN(f32_round_trip_is_exact);
    RUN(bf16_write_rounds_to_nearest_even_and_reads_back);
    RUN(bf16_keeps_nans_that_truncation_would_make_infinite);
    RUN(large_checkpoints_are_sharded_with_an_index);
    RUN(truncated_file_names_file_and_tensor);
    RUN(bad_headers_are_rejected);
    return TEST_SUMMARY();
}
