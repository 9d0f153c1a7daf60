/*
 * cli.h - declarative long-option parsing for every skpo tool (git parse-options
 * in miniature). A tool describes its options in a table; skpo_cli_parse fills
 * the destinations, prints usage for --help (stdout, exit 0) and rejects bad
 * flags or out-of-range numbers with "skpo-TOOL: ..." on stderr and exit 2.
 * Numbers are never clamped.
 */
#ifndef SKPO_CLI_H
#define SKPO_CLI_H

#include <stddef.h>

typedef enum skpo_opt_type {
    SKPO_OPTT_END = 0,
    SKPO_OPTT_FLAG,    // dest: int*, set to 1
    SKPO_OPTT_INT,     // dest: int*, range [min, max]
    SKPO_OPTT_LONG,    // dest: long*, range [min, max]
    SKPO_OPTT_DOUBLE,  // dest: double*, range [min, max]
    SKPO_OPTT_STR,     // dest: const char**
    SKPO_OPTT_LIST,    // dest: skpo_strlist*, repeatable
    SKPO_OPTT_ALIAS,   // a deprecated spelling of the option named by `arg` (hidden from --help)
    SKPO_OPTT_ENUM,    // dest: int*, one of the names of `en` (the value's index)
} skpo_opt_type;

// The names of an extension point (loss forms, advantage modes, reward tasks,
// devices, ...), owned by the core module that implements them: value v is
// spelled name(v), for v in [0, n). A NULL name is a value this table does not
// offer (SFT is no phase's loss form). Options of type ENUM parse against it,
// and --help and the usage errors list its names, so a new row in the core's
// table is a new accepted spelling everywhere with no list to update.
typedef struct skpo_enum {
    int n;
    const char *(*name)(int v);
} skpo_enum;

// v's name in e, or NULL when e does not offer v.
const char *skpo_enum_name(const skpo_enum *e, int v);
// The value named s in e, or -1.
int skpo_enum_parse(const skpo_enum *e, const char *s);
// "a, b or c" (sep ", ", last " or ") or "a|b|c" (sep "|", last "|") into buf
// (truncated to cap, NUL-terminated); returns buf.
char *skpo_enum_list(const skpo_enum *e, const char *sep, const char *last, char *buf, size_t cap);

typedef struct skpo_strlist {
    const char *v[64];
    int n;
} skpo_strlist;

typedef struct skpo_opt {
    const char *name;  // long name without "--"
    char shortname;    // 0 for none
    skpo_opt_type type;
    void *dest;
    double min, max;   // inclusive range for INT/LONG/DOUBLE
    const char *arg;   // metavariable shown in help ("N", "DIR"); ALIAS: the option it spells
    const char *help;  // one line
    const skpo_enum *en; // ENUM: the names it takes (arg NULL: --help shows them as a|b|c)
} skpo_opt;

// Rows of an option table, one macro per destination type. The destination's
// C type is checked at compile time (_Generic): SKPO_OPT_INT takes an int*,
// SKPO_OPT_LONG a long*, and so on, so a row can only write the field it
// names, with no shadow copy. (A row written as a brace list with the old
// enum names does not compile: rewrite it with these macros.)
#define SKPO_OPT_DEST_(T, p) _Generic((p), T: (void *)(p))
#define SKPO_OPT_FLAG(name, sh, dest, help) {name, sh, SKPO_OPTT_FLAG, SKPO_OPT_DEST_(int *, dest), 0, 0, 0, help, 0}
#define SKPO_OPT_INT(name, sh, dest, lo, hi, arg, help) \
    {name, sh, SKPO_OPTT_INT, SKPO_OPT_DEST_(int *, dest), lo, hi, arg, help, 0}
#define SKPO_OPT_LONG(name, sh, dest, lo, hi, arg, help) \
    {name, sh, SKPO_OPTT_LONG, SKPO_OPT_DEST_(long *, dest), lo, hi, arg, help, 0}
#define SKPO_OPT_DOUBLE(name, sh, dest, lo, hi, arg, help) \
    {name, sh, SKPO_OPTT_DOUBLE, SKPO_OPT_DEST_(double *, dest), lo, hi, arg, help, 0}
#define SKPO_OPT_STR(name, sh, dest, arg, help) {name, sh, SKPO_OPTT_STR, SKPO_OPT_DEST_(const char **, dest), 0, 0, arg, help, 0}
#define SKPO_OPT_LIST(name, sh, dest, arg, help) \
    {name, sh, SKPO_OPTT_LIST, SKPO_OPT_DEST_(skpo_strlist *, dest), 0, 0, arg, help, 0}
// dest: int*, set to the index of the name given; the metavariable in --help
// is the table's names (a|b|c) and a name not in it is a usage error that lists them.
#define SKPO_OPT_ENUM(name, sh, dest, en, help) \
    {name, sh, SKPO_OPTT_ENUM, SKPO_OPT_DEST_(int *, dest), 0, 0, 0, help, en}
// --old is accepted as another spelling of --name (kept for one release; not in --help).
#define SKPO_OPT_ALIAS(old, name) {old, 0, SKPO_OPTT_ALIAS, 0, 0, 0, name, 0, 0}
#define SKPO_OPT_END {0}

// Parse argv (left untouched: provenance records keep the whole command line).
// `synopsis` is the usage line(s) after the tool name, e.g. "[--head N]
// [FILE...]"; `about` is a one-paragraph description printed by --help. The
// positional words (in order; everything after "--" is positional) go to
// pos, which has room for argc entries; pos == NULL means the tool takes none
// and a positional word is a usage error. Returns their count. Exits on
// --help or a usage error.
int skpo_cli_parse(const char *synopsis, const char *about, const skpo_opt *opts, int argc, char **argv,
                   const char **pos);

// skpo_cli_parse for a tool that reads at most one input FILE: returns it, or
// dflt when none is given; a second one is a usage error.
const char *skpo_cli_parse_input(const char *synopsis, const char *about, const skpo_opt *opts, int argc, char **argv,
                                 const char *dflt);
// Usage error: prints "prog: msg" and the synopsis, exits 2.
void skpo_cli_usage_error(const char *synopsis, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

#endif
