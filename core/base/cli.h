/*
 * cli.h - declarative long-option parsing for every skpo tool (git parse-options
 * in miniature). A tool describes its options in a table; skpo_cli_parse fills
 * the destinations, prints usage for --help (stdout, exit 0) and rejects bad
 * flags or out-of-range numbers with "skpo-TOOL: ..." on stderr and exit 2.
 * Numbers are never clamped.
 */
#ifndef SKPO_CLI_H
#define SKPO_CLI_H

typedef enum skpo_opt_type {
    SKPO_OPT_END = 0,
    SKPO_OPT_FLAG,    // dest: int*, set to 1
    SKPO_OPT_INT,     // dest: long*, range [min, max]
    SKPO_OPT_DOUBLE,  // dest: double*, range [min, max]
    SKPO_OPT_STR,     // dest: const char**
    SKPO_OPT_LIST,    // dest: skpo_strlist*, repeatable
} skpo_opt_type;

typedef struct skpo_strlist {
    const char *v[64];
    int n;
} skpo_strlist;

typedef struct skpo_opt {
    const char *name;  // long name without "--"
    char shortname;    // 0 for none
    skpo_opt_type type;
    void *dest;
    double min, max;   // inclusive range for INT/DOUBLE
    const char *arg;   // metavariable shown in help ("N", "DIR")
    const char *help;  // one line
} skpo_opt;

// Parse argv. `synopsis` is the usage line(s) after the tool name, e.g.
// "[--head N] [FILE...]"; `about` is a one-paragraph description printed by
// --help. argv is permuted (never shortened): positional arguments move to
// argv[1..n] in order, followed by the option words, so argc/argv stay the
// whole command line. Returns n. Exits on --help or a usage error.
int skpo_cli_parse(const char *synopsis, const char *about, const skpo_opt *opts, int argc, char **argv);

// Usage error: prints "prog: msg" and the synopsis, exits 2.
void skpo_cli_usage_error(const char *synopsis, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

#endif
