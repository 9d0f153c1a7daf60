#!/bin/sh
# Option rows are typed (core/base/cli.h): a row whose destination has another
# C type than its macro says, and a row in the old brace style, do not compile.
. "$(dirname "$0")/lib.sh"
CC=${CC:-cc}
command -v "$CC" >/dev/null || { skip "option rows are type-checked" "no C compiler"; exit 0; }
compiles() { printf '#include "base/cli.h"\n%s\n' "$1" >"$TMP/r.c"; "$CC" -std=gnu11 -fsyntax-only -I"$TOP/core" "$TMP/r.c" 2>"$TMP/r.err"; }
# fails_to_compile SNIPPET WHAT: the compiler rejects it and names WHAT
fails_to_compile() { if compiles "$1"; then echo "compiled"; return 1; fi; grep -q "$2" "$TMP/r.err" || { cat "$TMP/r.err"; return 1; }; }
t "a row of the matching type compiles" compiles 'int k; long n; double x; const char *s; skpo_strlist l;
const skpo_opt o[] = {SKPO_OPT_INT("k", 0, &k, 0, 9, "K", ""), SKPO_OPT_LONG("n", 0, &n, 0, 9, "N", ""),
  SKPO_OPT_DOUBLE("x", 0, &x, 0, 1, "X", ""), SKPO_OPT_STR("s", 0, &s, "S", ""), SKPO_OPT_LIST("l", 0, &l, "L", ""),
  SKPO_OPT_FLAG("f", 0, &k, ""), SKPO_OPT_ALIAS("kk", "k"), SKPO_OPT_END};'
t "SKPO_OPT_INT on a long field does not compile" fails_to_compile 'long n; const skpo_opt o[] = {SKPO_OPT_INT("n", 0, &n, 0, 9, "N", ""), SKPO_OPT_END};' '_Generic'
t "SKPO_OPT_LONG on an int field does not compile" fails_to_compile 'int n; const skpo_opt o[] = {SKPO_OPT_LONG("n", 0, &n, 0, 9, "N", ""), SKPO_OPT_END};' '_Generic'
t "an old-style brace row does not compile" fails_to_compile 'long n; const skpo_opt o[] = {{"n", 0, SKPO_OPT_INT, &n, 0, 9, "N", ""}, {0}};' 'SKPO_OPT_INT'
t "SKPO_OPT_ENUM on an int field with a name table compiles" compiles 'static const char *nm(int v) { return v == 0 ? "a" : "b"; }
static const skpo_enum e = {2, nm}; int k; const skpo_opt o[] = {SKPO_OPT_ENUM("k", 0, &k, &e, ""), SKPO_OPT_END};'
t "SKPO_OPT_ENUM on a string field does not compile" fails_to_compile 'static const skpo_enum e = {0, 0}; const char *s;
const skpo_opt o[] = {SKPO_OPT_ENUM("s", 0, &s, &e, ""), SKPO_OPT_END};' '_Generic'
