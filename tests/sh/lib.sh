# tests/sh/lib.sh - helpers for black-box tool tests (sourced).
# Each test: `t "what the behaviour is" cmd...` runs cmd in a subshell and
# prints PASS/FAIL with the title; `skip "title" "why"` prints SKIP.
# $TMP is a fresh directory removed at exit; tools are on PATH (bin/).
set -u
TOP=${SKPO_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}
PATH="$TOP/bin:$PATH"
FIX="$TOP/tests/fixtures"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
t() {
  title=$1; shift
  if ( "$@" ) >"$TMP/.out" 2>&1; then echo "PASS $title"
  else echo "FAIL $title"; sed 's/^/    /' "$TMP/.out" | tail -n 20 >&2; fi
}
skip() { echo "SKIP $1: $2"; }
# fails with a message unless "$1" (a command string) exits with code $2
expect_exit() { want=$1; shift; "$@"; rc=$?; [ "$rc" = "$want" ] || { echo "exit $rc, want $want: $*" >&2; return 1; }; }
# same_json_lines A B [RTOL]: the two files of JSON lines are equal as text except
# that each number may differ by RTOL (1e-6 relative; absolute below 1e-6). Pinned
# floats from float32 forwards differ in the last digit between CPUs, because
# OpenBLAS picks its kernels by CPU model; the structure and every integer must not.
same_json_lines() {
  awk -v rtol="${3:-1e-6}" '
    function split_nums(s, nums, txt,   n, m) {
      n = 0; txt[0] = ""
      while (match(s, /-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?/)) {
        txt[n] = txt[n] substr(s, 1, RSTART - 1); nums[++n] = substr(s, RSTART, RLENGTH) + 0; txt[n] = ""
        s = substr(s, RSTART + RLENGTH)
      }
      txt[n] = txt[n] s
      return n
    }
    NR == FNR { a[FNR] = $0; na = FNR; next }
    { nb = FNR
      if (!(FNR in a)) { print "line " FNR ": only in " FILENAME; bad = 1; next }
      n1 = split_nums(a[FNR], x, tx); n2 = split_nums($0, y, ty)
      ok = n1 == n2
      for (i = 0; ok && i <= n1; i++) if (tx[i] != ty[i]) ok = 0
      for (i = 1; ok && i <= n1; i++) {
        d = x[i] - y[i]; if (d < 0) d = -d
        if (d > rtol * (x[i] < 0 ? -x[i] : x[i]) && d > 1e-6) ok = 0
      }
      if (!ok) { print "line " FNR " differs:\n  " a[FNR] "\n  " $0; bad = 1 }
    }
    END { if (na != nb) { print "line counts differ: " na " vs " nb; bad = 1 } exit bad }' "$1" "$2"
}
