// test_cli.c - option parsing: argv is left as typed, positionals come back in
// order, typed rows write their own field type, aliases and ranges.
#include "harness.h"
#include "base/cli.h"

#include <string.h>

static void parse_leaves_argv_whole_and_returns_positionals_in_order(void) {
    long n = 0;
    int k = 0, f = 0;
    double t = 0;
    const char *s = NULL;
    skpo_opt opts[] = {
        SKPO_OPT_LONG("num", 'n', &n, 0, 100, "N", "a number"),
        SKPO_OPT_INT("k", 0, &k, -5, 5, "K", "a small int"),
        SKPO_OPT_DOUBLE("temp", 0, &t, 0, 2, "T", "a float"),
        SKPO_OPT_STR("name", 0, &s, "S", "a string"),
        SKPO_OPT_FLAG("flag", 0, &f, "a flag"),
        SKPO_OPT_ALIAS("old-temp", "temp"),
        SKPO_OPT_END,
    };
    char *argv[] = {"prog", "a.txt", "--num", "7", "--old-temp=0.5", "b.txt", "--flag", "--k", "-3", "--name", "x",
                    "--", "-c", NULL};
    int argc = 13;
    char *copy[14];
    memcpy(copy, argv, sizeof copy);
    const char *pos[13];
    int np = skpo_cli_parse("[opts] FILE...", "", opts, argc, argv, pos);
    CHECK(np == 3);
    CHECK(!strcmp(pos[0], "a.txt") && !strcmp(pos[1], "b.txt") && !strcmp(pos[2], "-c"));
    CHECK(n == 7 && k == -3 && t == 0.5 && f == 1 && s && !strcmp(s, "x"));
    for (int i = 0; i <= argc; i++) CHECK(argv[i] == copy[i]);  // argv untouched: provenance sees it as typed
}

// A table with a hole: value 1 exists but this table does not offer it.
static const char *three(int v) { return v == 0 ? "first" : v == 2 ? "third" : NULL; }
static const skpo_enum three_but_one = {3, three};

static void enum_option_stores_the_index_of_an_offered_name_and_lists_only_offered_ones(void) {
    int v = -1;
    skpo_opt opts[] = {SKPO_OPT_ENUM("pick", 0, &v, &three_but_one, "one of them"), SKPO_OPT_END};
    char *argv[] = {"prog", "--pick", "third", NULL};
    CHECK(skpo_cli_parse("", "", opts, 3, argv, NULL) == 0 && v == 2);
    CHECK(skpo_enum_parse(&three_but_one, "first") == 0 && skpo_enum_parse(&three_but_one, "second") == -1);
    CHECK(skpo_enum_parse(&three_but_one, NULL) == -1);
    CHECK(skpo_enum_name(&three_but_one, 1) == NULL && skpo_enum_name(&three_but_one, 3) == NULL);
    CHECK(!strcmp(skpo_enum_name(&three_but_one, -1 + 1), "first"));
    char buf[64];
    CHECK(!strcmp(skpo_enum_list(&three_but_one, ", ", " or ", buf, sizeof buf), "first or third"));
    CHECK(!strcmp(skpo_enum_list(&three_but_one, "|", "|", buf, sizeof buf), "first|third"));
    CHECK(!strcmp(skpo_enum_list(&three_but_one, "|", "|", buf, 8), "first"));   // truncated at a whole name
}

int main(void) {
    RUN(parse_leaves_argv_whole_and_returns_positionals_in_order);
    RUN(enum_option_stores_the_index_of_an_offered_name_and_lists_only_offered_ones);
    return TEST_SUMMARY();
}
