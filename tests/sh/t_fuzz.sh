#!/bin/sh
# t_fuzz.sh - every libFuzzer target (tests/fuzz/fuzz_*.c, ASan + UBSan) replays
# its committed regression inputs and then fuzzes for 5 s (60 s under
# `make test-long`), one PASS/FAIL line each; SKIP when clang is missing.
# Also: the record inputs that once crashed the reader (or made it allocate
# without bound) fail fast with a one-line message through skpo-cat.
. "$(dirname "$0")/lib.sh"

regressions_fail_cleanly() {
  for f in "$FIX"/fuzz/crash-record-*; do
    # As a stream (zstd-wrapped), under a 1 GiB address-space cap (ASan
    # builds reserve far more virtual memory, so the cap is off there).
    zstd -qc "$f" >"$TMP/in.zst" || return 1
    ( case "${SKPO_BUILD:-build}" in *asan*) ;; *) ulimit -v 1048576;; esac
      exec skpo-cat "$TMP/in.zst" ) >"$TMP/o" 2>"$TMP/e"; rc=$?
    [ "$rc" = 1 ] || { echo "$f: exit $rc, want 1"; cat "$TMP/e"; return 1; }
    [ "$(wc -l <"$TMP/e")" = 1 ] && grep -q "^skpo-cat: malformed msgpack\|^skpo-cat: record " "$TMP/e" ||
      { echo "$f: want one 'skpo-cat: malformed msgpack|record' line:"; cat "$TMP/e"; return 1; }
  done
}
if [ -x "$TOP/bin/skpo-cat" ]; then
  t "record fuzz regressions (huge declared counts, empty key) fail in one line under a 1 GiB cap" regressions_fail_cleanly
fi

if ! command -v "${FUZZ_CC:-clang}" >/dev/null 2>&1; then
  skip "fuzz smoke runs" "clang not found (apt-get install clang)"
  exit 0
fi
case "${SKPO_BUILD:-build}" in
  *asan*) skip "fuzz smoke runs" "not repeated under make asan (the fuzz build is sanitized already)"; exit 0 ;;
esac
secs=5
[ -n "${SKPO_TEST_LONG:-}" ] && secs=60
# run.sh prints the PASS/FAIL lines itself; its exit status is re-checked by tests/run.sh.
sh "$TOP/tests/fuzz/run.sh" "$secs"
