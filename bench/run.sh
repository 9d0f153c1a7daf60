#!/bin/sh
# `make bench`: runs every bench/b_*.sh. Each prints its measurements and the
# ratio against a peer measured in the same run (never a fixed threshold).
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
export PATH="$top/bin:$PATH" SKPO_TOP="$top" SKPO_SHARED="${SKPO_SHARED:-$top/../shared}"
rc=0
for b in bench/b_*.sh; do
  [ -f "$b" ] || continue
  [ -n "${SKPO_BENCH_ONLY:-}" ] && case "$b" in *$SKPO_BENCH_ONLY*) ;; *) continue;; esac
  echo "== $b"
  sh "$b" || { echo "bench $b failed" >&2; rc=1; }
done
exit $rc
