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
