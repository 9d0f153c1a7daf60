// test_mpcheck.c - the msgpack structure walker that guards decoders.
#include "harness.h"
#include "record/mpcheck.h"

#include <string.h>

static skpo_status chk(const char *b, size_t n, int complete, size_t *used) {
    skpo_err e = {0};
    return skpo_mp_check(b, n, complete, used, &e);
}

static void well_formed_map_reports_its_size(void) {
    // {"kind": "up", "t": bin8[3], "a": [1, -1, 2.5f32], "m": {}}
    const char m[] = "\x84\xa4kind\xa2up\xa1t\xc4\x03\x01\x02\x03\xa1" "a\x93\x01\xff\xca\x40\x20\x00\x00\xa1m\x80";
    size_t n = sizeof m - 1, used = 0;
    CHECK(chk(m, n, 1, &used) == SKPO_OK && used == n);
    char two[64];
    memcpy(two, m, n);
    memcpy(two + n, m, n);
    CHECK(chk(two, 2 * n, 0, &used) == SKPO_OK && used == n);  // first of two back-to-back values
}

static void huge_declared_counts_are_rejected_without_allocation(void) {
    size_t used;
    CHECK(chk("\xdf\xff\xff\xff\xff\x01", 6, 1, &used) == SKPO_EFORMAT);    // map32 of 4G pairs
    CHECK(chk("\xdd\x10\x00\x00\x00\x01\x02", 7, 1, &used) == SKPO_EFORMAT); // array32 of 256M
    CHECK(chk("\xdf\xff\xff\xff\xff", 5, 0, &used) == SKPO_EFORMAT);        // impossible even streaming
    CHECK(chk("\xc6\xff\xff\xff\xff", 5, 1, &used) == SKPO_EFORMAT);        // bin32 past the end
}

static void truncated_value_asks_for_more_when_streaming(void) {
    const char m[] = "\x82\xa1" "a\x01\xa1" "b\xa3xyz";
    size_t n = sizeof m - 1, used;
    for (size_t k = 0; k < n; k++) {
        CHECK(chk(m, k, 0, &used) == SKPO_EOF);
        CHECK(chk(m, k, 1, &used) == SKPO_EFORMAT);
    }
    CHECK(chk(m, n, 0, &used) == SKPO_OK && used == n);
}

static void deep_nesting_and_bad_type_bytes_are_malformed(void) {
    char deep[200];
    memset(deep, 0x91, sizeof deep);  // [[[[...
    size_t used;
    CHECK(chk(deep, sizeof deep, 0, &used) == SKPO_EFORMAT);
    CHECK(chk("\xc1", 1, 1, &used) == SKPO_EFORMAT);
    char ok[10];
    memset(ok, 0x91, 9);
    ok[9] = 0x01;
    CHECK(chk(ok, 10, 1, &used) == SKPO_OK && used == 10);
}

int main(void) {
    RUN(well_formed_map_reports_its_size);
    RUN(huge_declared_counts_are_rejected_without_allocation);
    RUN(truncated_value_asks_for_more_when_streaming);
    RUN(deep_nesting_and_bad_type_bytes_are_malformed);
    return TEST_SUMMARY();
}
