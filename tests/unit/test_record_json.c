// test_record_json.c - records <-> JSON (core/record/recjson.h): float text, non-finite
// values, base64 bins, escapes, nested values, and the errors of the reverse way.
#include "harness.h"
#include "record/recjson.h"

#include <math.h>
#include <string.h>

static const char *to_json(const skpo_rec *r, skpo_jbuf *b) {
    b->n = 0;
    skpo_rec_to_json(r, NULL, 0, b);
    return skpo_jbuf_cstr(b);
}

// JSON -> record -> JSON must give back the same text.
static bool json_round_trips(const char *json) {
    skpo_rec r;
    skpo_rec_init(&r);
    skpo_err e = {0};
    skpo_jbuf b = {0};
    bool ok = skpo_rec_from_json(json, strlen(json), &r, &e) == SKPO_OK;
    if (!ok) fprintf(stderr, "  %s: %s\n", json, e.msg);
    else if (strcmp(to_json(&r, &b), json)) {
        fprintf(stderr, "  in:  %s\n  out: %s\n", json, b.p);
        ok = false;
    }
    skpo_jbuf_free(&b);
    skpo_rec_free(&r);
    return ok;
}

static void floats_print_shortest_and_always_as_floats(void) {
    skpo_rec r;
    skpo_rec_init(&r);
    skpo_jbuf b = {0};
    skpo_rec_set_float(&r, "a", 0.1);
    skpo_rec_set_f32(&r, "b", 0.1f);
    skpo_rec_set_float(&r, "c", 1.0);
    skpo_rec_set_float(&r, "d", 1e300);
    skpo_rec_set_f32(&r, "e", 3.4028235e38f);
    skpo_rec_set_float(&r, "f", -0.0);
    skpo_rec_set_float(&r, "g", 1.0 / 3.0);
    CHECK_MSG(!strcmp(to_json(&r, &b), "{\"a\":0.1,\"b\":0.1,\"c\":1.0,\"d\":1e+300,\"e\":3.4028235e+38,\"f\":-0.0,"
                                       "\"g\":0.3333333333333333}"), "%s", b.p);
    skpo_jbuf_free(&b);
    skpo_rec_free(&r);
}

static void non_finite_floats_are_strings_and_come_back(void) {
    skpo_rec r, q;
    skpo_rec_init(&r);
    skpo_rec_init(&q);
    skpo_jbuf b = {0};
    float lp[3] = {NAN, -INFINITY, 0.5f};
    skpo_rec_set_f32s(&r, F_LOGP, lp, 3);
    skpo_rec_set_float(&r, F_REWARD, INFINITY);
    skpo_rec_set_float(&r, "other", NAN);
    const char *j = to_json(&r, &b);
    CHECK_MSG(!strcmp(j, "{\"logp\":[\"NaN\",\"-Infinity\",0.5],\"reward\":\"Infinity\",\"other\":\"NaN\"}"), "%s", j);
    skpo_err e = {0};
    CHECK(skpo_rec_from_json(j, strlen(j), &q, &e) == SKPO_OK);
    size_t n;
    const float *l = skpo_rec_f32s(&q, F_LOGP, &n);
    double f;
    CHECK(l && n == 3 && isnan(l[0]) && isinf(l[1]) && l[1] < 0 && l[2] == 0.5f);
    CHECK(skpo_rec_float(&q, F_REWARD, &f) && isinf(f) && f > 0);
    CHECK(skpo_rec_str(&q, "other") && !strcmp(skpo_rec_str(&q, "other"), "NaN")); // outside the schema: a string
    skpo_jbuf_free(&b);
    skpo_rec_free(&r);
    skpo_rec_free(&q);
}

static void bins_and_bad_strings_survive_as_base64(void) {
    CHECK(json_round_trips("{\"a\":{\"$bin\":\"\"},\"b\":{\"$bin\":\"AA==\"},\"c\":{\"$bin\":\"AP8=\"},\"d\":{\"$bin\":\"AP8Q\"},"
                           "\"e\":{\"$bin\":\"AP8QIA==\"}}"));
    skpo_rec r;
    skpo_rec_init(&r);
    skpo_jbuf b = {0};
    skpo_rec_set_strn(&r, "raw", "a\xff", 2); // not UTF-8: only allowed outside the schema
    CHECK_MSG(!strcmp(to_json(&r, &b), "{\"raw\":{\"$str\":\"Yf8=\"}}"), "%s", b.p);
    CHECK(json_round_trips(b.p));
    skpo_jbuf_free(&b);
    skpo_rec_free(&r);
}

static void strings_escape_controls_and_keep_nul(void) {
    skpo_rec r, q;
    skpo_rec_init(&r);
    skpo_rec_init(&q);
    skpo_jbuf b = {0};
    skpo_rec_set_strn(&r, F_TEXT, "q\"b\\\n\t\x01\0z \xc3\xa9", 12);
    const char *j = to_json(&r, &b);
    CHECK_MSG(!strcmp(j, "{\"text\":\"q\\\"b\\\\\\n\\t\\u0001\\u0000z \xc3\xa9\"}"), "%s", j);
    skpo_err e = {0};
    CHECK(skpo_rec_from_json(j, strlen(j), &q, &e) == SKPO_OK);
    const skpo_value *v = skpo_rec_get(&q, F_TEXT);
    CHECK(v && v->len == 12 && !memcmp(v->data, "q\"b\\\n\t\x01\0z \xc3\xa9", 12));
    skpo_jbuf_free(&b);
    skpo_rec_free(&r);
    skpo_rec_free(&q);
}

static void nested_values_round_trip(void) {
    CHECK(json_round_trips("{\"kind\":\"x\",\"n\":{\"a\":[1,-2,2.5,null,true,\"s\",{\"$bin\":\"AQI=\"}],\"e\":{\"$ext\":[5,\"YWJj\"]},"
                           "\"deep\":[[[{}]]]},\"big\":-9223372036854775808}"));
    CHECK(json_round_trips("{\"tokens\":[0,-1,2147483647,-2147483648],\"prompt\":[],\"step\":3,\"correct\":false,\"pred\":null}"));
}

// Nested values written by another producer: every msgpack type inside a
// field outside the schema prints as JSON.
static void nested_msgpack_of_every_type_prints(void) {
    // [fixext1, ext8, uint64 max, int16 -300, float32 0.5, bin8, str8, fixmap{1:nil}, deep [[[]]]]
    static const unsigned char raw[] = {0x99, 0xd4, 0x01, 0x41, 0xc7, 0x02, 0xfe, 0x61, 0x62, 0xcf, 0xff, 0xff, 0xff,
                                        0xff, 0xff, 0xff, 0xff, 0xff, 0xd1, 0xfe, 0xd4, 0xca, 0x3f, 0x00, 0x00, 0x00,
                                        0xc4, 0x01, 0x00, 0xd9, 0x01, 0x7a, 0x81, 0x01, 0xc0, 0x91, 0x91, 0x90};
    skpo_rec r;
    skpo_rec_init(&r);
    skpo_rec_set_raw(&r, "x", raw, sizeof raw);
    skpo_jbuf b = {0};
    const char *want = "{\"x\":[{\"$ext\":[1,\"QQ==\"]},{\"$ext\":[-2,\"YWI=\"]},18446744073709551615,-300,0.5,"
                       "{\"$bin\":\"AA==\"},\"z\",{\"1\":null},[[[]]]]}";
    CHECK_MSG(!strcmp(to_json(&r, &b), want), "%s", b.p);
    skpo_jbuf_free(&b);
    skpo_rec_free(&r);
}

static void schema_types_are_enforced_on_the_way_in(void) {
    static const char *bad[] = {
        "[1,2]",                         // not an object
        "{\"kind\":1}",                  // str field
        "{\"step\":1.5}",                // int field
        "{\"correct\":1}",               // bool field
        "{\"reward\":\"high\"}",         // float field
        "{\"tokens\":[1.5]}",            // int32 elements
        "{\"tokens\":[2147483648]}",     // out of int32 range
        "{\"logp\":[\"x\"]}",            // float32 elements
        "{\"tokens\":{\"$bin\":\"AAA\"}}", // bad base64
        "{\"tokens\":{\"$bin\":\"AAAAAAA=\"}}", // 5 bytes: not whole int32s
        "{\"text\":{\"$str\":\"/w==\"}}",  // a str schema field must be UTF-8 text
        "{\"a\":1,\"a\":2}",             // duplicate key
        "{\"a\":1",                      // truncated
    };
    skpo_rec r;
    skpo_rec_init(&r);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        skpo_err e = {0};
        skpo_status st = skpo_rec_from_json(bad[i], strlen(bad[i]), &r, &e);
        CHECK_MSG(st != SKPO_OK && e.msg[0] && r.n == 0, "accepted %s", bad[i]);
    }
    skpo_err e = {0};
    CHECK(skpo_rec_from_json("{\"reward\":1}", 12, &r, &e) == SKPO_OK && skpo_rec_get(&r, F_REWARD)->type == SKPO_V_F64);
    CHECK(skpo_rec_from_json("{\"other\":1}", 11, &r, &e) == SKPO_OK && skpo_rec_get(&r, "other")->type == SKPO_V_INT);
    skpo_rec_free(&r);
}

static void fields_select_and_order(void) {
    skpo_rec r;
    skpo_rec_init(&r);
    skpo_rec_set_str(&r, "a", "1");
    skpo_rec_set_int(&r, "b", 2);
    skpo_jbuf b = {0};
    const char *f[] = {"b", "missing", "a"};
    skpo_rec_to_json(&r, f, 3, &b);
    CHECK_MSG(!strcmp(skpo_jbuf_cstr(&b), "{\"b\":2,\"a\":\"1\"}"), "%s", b.p);
    skpo_jbuf_free(&b);
    skpo_rec_free(&r);
}

int main(void) {
    RUN(floats_print_shortest_and_always_as_floats);
    RUN(non_finite_floats_are_strings_and_come_back);
    RUN(bins_and_bad_strings_survive_as_base64);
    RUN(strings_escape_controls_and_keep_nul);
    RUN(nested_values_round_trip);
    RUN(nested_msgpack_of_every_type_prints);
    RUN(schema_types_are_enforced_on_the_way_in);
    RUN(fields_select_and_order);
    return TEST_SUMMARY();
}
