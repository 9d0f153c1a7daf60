/*
 * cli.c - see cli.h.
 */
#include "base/cli.h"
#include "base/common.h"

#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const char *skpo_enum_name(const skpo_enum *e, int v) { return v >= 0 && v < e->n ? e->name(v) : NULL; }

int skpo_enum_parse(const skpo_enum *e, const char *s) {
    for (int v = 0; s && v < e->n; v++) {
        const char *nm = e->name(v);
        if (nm && !strcmp(nm, s)) return v;
    }
    return -1;
}

char *skpo_enum_list(const skpo_enum *e, const char *sep, const char *last, char *buf, size_t cap) {
    SKPO_ASSERT(cap > 0);
    int total = 0, k = 0;
    for (int v = 0; v < e->n; v++) total += e->name(v) != NULL;
    size_t len = 0;
    buf[0] = 0;
    for (int v = 0; v < e->n; v++) {
        const char *nm = e->name(v);
        if (!nm) continue;
        const char *pre = k == 0 ? "" : k == total - 1 ? last : sep;
        int w = snprintf(buf + len, cap - len, "%s%s", pre, nm);
        if (w < 0 || (size_t)w >= cap - len) {   // does not fit: end at the last whole name
            buf[len] = 0;
            break;
        }
        len += (size_t)w, k++;
    }
    return buf;
}

static void print_help(const char *synopsis, const char *about, const skpo_opt *opts) {
    printf("usage: %s %s\n", skpo_progname(), synopsis);
    if (about && *about) printf("\n%s\n", about);
    printf("\noptions:\n");
    for (const skpo_opt *o = opts; o && o->type != SKPO_OPTT_END; o++) {
        if (o->type == SKPO_OPTT_ALIAS) continue;
        char left[320];
        int n = 0;
        if (o->shortname) n = snprintf(left, sizeof left, "-%c, ", o->shortname);
        else n = snprintf(left, sizeof left, "    ");
        if (o->type == SKPO_OPTT_FLAG) snprintf(left + n, sizeof left - (size_t)n, "--%s", o->name);
        else if (o->type == SKPO_OPTT_ENUM && !o->arg) {
            char names[256];
            snprintf(left + n, sizeof left - (size_t)n, "--%s %s", o->name, skpo_enum_list(o->en, "|", "|", names, sizeof names));
        } else snprintf(left + n, sizeof left - (size_t)n, "--%s %s", o->name, o->arg ? o->arg : "X");
        // a long list of names takes a line of its own
        if (o->type == SKPO_OPTT_ENUM && strlen(left) > 28) printf("  %s\n  %-28s %s\n", left, "", o->help ? o->help : "");
        else printf("  %-28s %s\n", left, o->help ? o->help : "");
    }
    printf("  %-28s %s\n", "-h, --help", "show this help and exit");
}

void skpo_cli_usage_error(const char *synopsis, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", skpo_progname());
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fprintf(stderr, "usage: %s %s\n", skpo_progname(), synopsis);
    exit(SKPO_EXIT_USAGE);
}

static const skpo_opt *find(const skpo_opt *opts, const char *name, size_t len, char sh) {
    for (const skpo_opt *o = opts; o && o->type != SKPO_OPTT_END; o++) {
        if (sh && o->shortname == sh) return o;
        if (!sh && strlen(o->name) == len && !strncmp(o->name, name, len)) {
            if (o->type != SKPO_OPTT_ALIAS) return o;
            const skpo_opt *to = find(opts, o->arg, strlen(o->arg), 0);
            SKPO_ASSERT(to && to->type != SKPO_OPTT_ALIAS);
            return to;
        }
    }
    return NULL;
}

// Store val into o's destination. Returns 0, or 1 with a usage message in msg.
static int set(const skpo_opt *o, const char *val, char *msg, size_t cap) {
    switch (o->type) {
    case SKPO_OPTT_FLAG: *(int *)o->dest = 1; break;
    case SKPO_OPTT_INT:
    case SKPO_OPTT_LONG: {
        long v;
        if (skpo_parse_long(val, (long)o->min, (long)o->max, &v)) {
            snprintf(msg, cap, "--%s: '%s' is not an integer in [%ld, %ld]", o->name, val, (long)o->min, (long)o->max);
            return 1;
        }
        if (o->type == SKPO_OPTT_INT) {
            SKPO_ASSERT(o->min >= INT_MIN && o->max <= INT_MAX); // the table's range fits the int field
            *(int *)o->dest = (int)v;
        } else {
            *(long *)o->dest = v;
        }
        break;
    }
    case SKPO_OPTT_DOUBLE: {
        double v;
        if (skpo_parse_double(val, o->min, o->max, &v)) {
            snprintf(msg, cap, "--%s: '%s' is not a number in [%g, %g]", o->name, val, o->min, o->max);
            return 1;
        }
        *(double *)o->dest = v;
        break;
    }
    case SKPO_OPTT_STR: *(const char **)o->dest = val; break;
    case SKPO_OPTT_ENUM: {
        int v = skpo_enum_parse(o->en, val);
        if (v < 0) {
            char names[256];
            snprintf(msg, cap, "--%s: '%s' is not %s", o->name, val, skpo_enum_list(o->en, ", ", " or ", names, sizeof names));
            return 1;
        }
        *(int *)o->dest = v;
        break;
    }
    case SKPO_OPTT_LIST: {
        skpo_strlist *l = o->dest;
        if (l->n >= (int)(sizeof l->v / sizeof l->v[0])) {
            snprintf(msg, cap, "--%s: too many values", o->name);
            return 1;
        }
        l->v[l->n++] = val;
        break;
    }
    case SKPO_OPTT_ALIAS:
    case SKPO_OPTT_END: break;
    }
    return 0;
}

int skpo_cli_parse(const char *synopsis, const char *about, const skpo_opt *opts, int argc, char **argv,
                   const char **pos) {
    // argv is only read: option values are pointers into it, positional
    // words are collected in pos.
    int npos = 0, only_pos = 0;
    char msg[512];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (only_pos || a[0] != '-' || !strcmp(a, "-")) {
            if (!pos) { snprintf(msg, sizeof msg, "unexpected argument '%s'", a); goto usage; }
            pos[npos++] = a;
            continue;
        }
        if (!strcmp(a, "--")) { only_pos = 1; continue; }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            print_help(synopsis, about, opts);
            exit(SKPO_EXIT_OK);
        }
        const skpo_opt *o;
        const char *val = NULL;
        if (a[1] == '-') {
            const char *name = a + 2, *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            o = find(opts, name, len, 0);
            if (!o) { snprintf(msg, sizeof msg, "unknown option '--%.*s'", (int)len, name); goto usage; }
            if (eq) val = eq + 1;
        } else {
            o = a[2] ? NULL : find(opts, NULL, 0, a[1]);
            if (!o) { snprintf(msg, sizeof msg, "unknown option '%s'", a); goto usage; }
        }
        if (o->type == SKPO_OPTT_FLAG) {
            if (val) { snprintf(msg, sizeof msg, "--%s takes no value", o->name); goto usage; }
        } else if (!val) {
            if (i + 1 >= argc) { snprintf(msg, sizeof msg, "--%s needs a value", o->name); goto usage; }
            val = argv[++i];
        }
        if (set(o, val, msg, sizeof msg)) goto usage;
    }
    return npos;
usage:
    skpo_cli_usage_error(synopsis, "%s", msg);
}

const char *skpo_cli_parse_input(const char *synopsis, const char *about, const skpo_opt *opts, int argc, char **argv,
                                 const char *dflt) {
    const char **pos = skpo_xcalloc((size_t)argc, sizeof *pos);
    int npos = skpo_cli_parse(synopsis, about, opts, argc, argv, pos);
    const char *in = npos == 1 ? pos[0] : dflt;
    free(pos);
    if (npos > 1) skpo_cli_usage_error(synopsis, "at most one input file");
    return in;
}
