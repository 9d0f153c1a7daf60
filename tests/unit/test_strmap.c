// test_strmap.c - the one string hash (FNV-1a) and the one string map of base/strmap.h.
#include "harness.h"
#include "base/common.h"
#include "base/strmap.h"

#include <stdio.h>
#include <string.h>

static void hash_is_64_bit_fnv1a(void) {
    // Published FNV-1a 64 test vectors.
    CHECK(skpo_hash_str("") == 0xcbf29ce484222325ULL);
    CHECK(skpo_hash_str("a") == 0xaf63dc4c8601ec8cULL);
    CHECK(skpo_hash_str("foobar") == 0x85944171f73967e8ULL);
}

static void hash_bytes_continues_where_the_last_call_stopped(void) {
    CHECK(skpo_hash_bytes(skpo_hash_str("foo"), "bar", 3) == skpo_hash_str("foobar"));
    CHECK(skpo_hash_bytes(SKPO_HASH_INIT, "a\0b", 3) != skpo_hash_str("a")); // NUL bytes count
}

static void missing_keys_are_null_in_empty_and_full_maps(void) {
    skpo_strmap m = {0};
    CHECK(skpo_strmap_get(&m, "x") == NULL);
    skpo_strmap_add(&m, "y", 1, NULL);
    CHECK(skpo_strmap_get(&m, "x") == NULL);
    CHECK(skpo_strmap_get(&m, "") == NULL);
    skpo_strmap_free(&m);
    CHECK(m.n == 0 && skpo_strmap_get(&m, "y") == NULL);
}

static void add_keeps_the_first_value_and_says_whether_it_added(void) {
    skpo_strmap m;
    skpo_strmap_init(&m, SKPO_STRMAP_BORROW);
    int added = -1;
    CHECK(*skpo_strmap_add(&m, "k", 7, &added) == 7 && added == 1);
    CHECK(*skpo_strmap_add(&m, "k", 9, &added) == 7 && added == 0);
    *skpo_strmap_add(&m, "k", 0, NULL) = 11; // overwrite through the pointer
    CHECK(*skpo_strmap_get(&m, "k") == 11 && m.n == 1);
    skpo_strmap_free(&m);
}

// Enough keys for several doublings; every one is found with its own value,
// and the table stays more than half empty.
static void every_key_is_found_after_the_table_grows(void) {
    enum { N = 5000 };
    static char keys[N][16];
    skpo_strmap m = {0};
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof keys[i], "p%d", i);
        skpo_strmap_add(&m, keys[i], (size_t)i, NULL);
    }
    CHECK(m.n == N && m.cap > 2 * m.n);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        size_t *v = skpo_strmap_get(&m, keys[i]);
        bad += !v || *v != (size_t)i;
    }
    CHECK(bad == 0);
    CHECK(skpo_strmap_get(&m, "p5000") == NULL);
    skpo_strmap_free(&m);
}

static void copied_keys_outlive_the_callers_buffer(void) {
    skpo_strmap m;
    skpo_strmap_init(&m, SKPO_STRMAP_COPY);
    char buf[16];
    for (int i = 0; i < 200; i++) {
        snprintf(buf, sizeof buf, "g%d", i);
        skpo_strmap_add(&m, buf, (size_t)i, NULL);
    }
    strcpy(buf, "overwritten");
    size_t *v = skpo_strmap_get(&m, "g123");
    CHECK(v && *v == 123);
    CHECK(skpo_strmap_get(&m, "overwritten") == NULL);
    skpo_strmap_free(&m); // frees the copies (LeakSanitizer checks it)
    CHECK(m.copy == SKPO_STRMAP_COPY);
}

int main(void) {
    RUN(hash_is_64_bit_fnv1a);
    RUN(hash_bytes_continues_where_the_last_call_stopped);
    RUN(missing_keys_are_null_in_empty_and_full_maps);
    RUN(add_keeps_the_first_value_and_says_whether_it_added);
    RUN(every_key_is_found_after_the_table_grows);
    RUN(copied_keys_outlive_the_callers_buffer);
    return TEST_SUMMARY();
}
