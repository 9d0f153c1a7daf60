// test_cli.c - option parsing keeps argv whole and puts positionals first.
#include "harness.h"
#include "base/cli.h"

#include <string.h>

static void parse_puts_positionals_first_and_keeps_every_word(void) {
    long n = 0;
    double t = 0;
    const char *s = NULL;
    int f = 0;
    skpo_opt opts[] = {
        {"num", 'n', SKPO_OPT_INT, &n, 0, 100, "N", "a number"},
        {"temp", 0, SKPO_OPT_DOUBLE, &t, 0, 2, "T", "a float"},
        {"name", 0, SKPO_OPT_STR, &s, 0, 0, "S", "a string"},
        {"flag", 0, SKPO_OPT_FLAG, &f, 0, 0, NULL, "a flag"},
        {0},
    };
    char *argv[] = {"prog", "a.txt", "--num", "7", "--temp=0.5", "b.txt", "--flag", "--name", "x", "--", "-c", NULL};
    int argc = 11;
    int np = skpo_cli_parse("[opts] FILE...", "", opts, argc, argv);
    CHECK(np == 3);
    CHECK(!strcmp(argv[1], "a.txt") && !strcmp(argv[2], "b.txt") && !strcmp(argv[3], "-c"));
    CHECK(n == 7 && t == 0.5 && f == 1 && s && !strcmp(s, "x"));
    for (int i = 0; i < argc; i++) CHECK(argv[i] != NULL);  // nothing lost: provenance still sees every word
    CHECK(argv[argc] == NULL);
}

int main(void) {
    RUN(parse_puts_positionals_first_and_keeps_every_word);
    return TEST_SUMMARY();
}
