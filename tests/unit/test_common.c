// test_common.c - strict number parsing, atomic files, path helpers.
#include "harness.h"
#include "base/common.h"

#include <string.h>
#include <unistd.h>

static void parse_long_rejects_junk_and_out_of_range(void) {
    long v;
    CHECK(skpo_parse_long("12", 0, 100, &v) == 0 && v == 12);
    CHECK(skpo_parse_long("12x", 0, 100, &v) != 0);
    CHECK(skpo_parse_long("", 0, 100, &v) != 0);
    CHECK(skpo_parse_long("101", 0, 100, &v) != 0);
    CHECK(skpo_parse_long("-1", 0, 100, &v) != 0);
}

static void parse_double_rejects_nan_and_inf(void) {
    double d;
    CHECK(skpo_parse_double("0.5", 0, 1, &d) == 0 && d == 0.5);
    CHECK(skpo_parse_double("nan", -1e300, 1e300, &d) != 0);
    CHECK(skpo_parse_double("inf", -1e300, 1e300, &d) != 0);
    CHECK(skpo_parse_double("1.5", 0, 1, &d) != 0);
}

static void atomic_write_replaces_file_and_leaves_no_temp(void) {
    char dir[] = "/tmp/skpo-test-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char *p = skpo_path_join(dir, "f.txt");
    skpo_err e = {0};
    CHECK(skpo_write_file_atomic(p, "one", 3, &e) == SKPO_OK);
    CHECK(skpo_write_file_atomic(p, "two!", 4, &e) == SKPO_OK);
    char *d;
    size_t n;
    CHECK(skpo_read_file(p, &d, &n, &e) == SKPO_OK && n == 4 && !memcmp(d, "two!", 4));
    free(d);
    skpo_afile af;
    CHECK(skpo_afile_open(&af, p, &e) == SKPO_OK);
    fputs("partial", af.f);
    skpo_afile_abort(&af);
    CHECK(skpo_read_file(p, &d, &n, &e) == SKPO_OK && n == 4);
    free(d);
    CHECK(skpo_rm_rf(dir, &e) == SKPO_OK && !skpo_path_exists(dir));
    free(p);
}

int main(void) {
    RUN(parse_long_rejects_junk_and_out_of_range);
    RUN(parse_double_rejects_nan_and_inf);
    RUN(atomic_write_replaces_file_and_leaves_no_temp);
    return TEST_SUMMARY();
}
