#!/bin/sh
# Build and run the libFuzzer targets (clang): tests/fuzz/fuzz_*.c linked with
# the core library compiled with -fsanitize=fuzzer-no-link,address,undefined.
# usage: tests/fuzz/run.sh SECONDS_PER_TARGET [TARGET...]
# Seed corpora come from tests/fixtures (tests/fuzz/seeds.sh); findings are
# kept in build-fuzz/crash-* and make the run fail.
set -u
secs=${1:-600}; shift 2>/dev/null || true
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1
B=build-fuzz
CC=${FUZZ_CC:-clang}
command -v "$CC" >/dev/null || { echo "SKIP fuzz: clang not found"; exit 0; }
SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
CFL="-O1 -g -std=gnu11 -D_GNU_SOURCE -Icore -I/usr/include/x86_64-linux-gnu/openblas-pthread $(pkg-config --cflags ompi-c 2>/dev/null) -fopenmp=libgomp"
LIBS="-lmsgpackc -lzstd -lopenblas -lpcre2-8 -lutf8proc -ljansson -lm -lpthread -lgomp $(pkg-config --libs ompi-c 2>/dev/null)"
mkdir -p "$B/obj"
objs=""
for c in core/*.c core/cpu/*.c; do
  [ -f "$c" ] || continue
  o="$B/obj/$(echo "$c" | tr / _).o"
  if [ ! -f "$o" ] || [ "$c" -nt "$o" ] || [ -n "$(find core -name '*.h' -newer "$o" 2>/dev/null | head -n 1)" ]; then
    $CC $CFL $SAN -c "$c" -o "$o" || { echo "FAIL fuzz build $c"; exit 1; }
  fi
  objs="$objs $o"
done
targets=${*:-$(ls tests/fuzz/fuzz_*.c | sed 's|.*/fuzz_||; s|\.c$||')}
rc=0
for t in $targets; do
  src=tests/fuzz/fuzz_$t.c
  bin=$B/fuzz_$t
  $CC $CFL -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined "$src" $objs -o "$bin" $LIBS \
    || { echo "FAIL fuzz_$t (build)"; rc=1; continue; }
  corpus=$B/corpus/$t
  mkdir -p "$corpus"
  sh tests/fuzz/seeds.sh "$t" "$corpus"
  log=$B/fuzz_$t.log
  ASAN_OPTIONS=detect_leaks=1 "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 -max_len=65536 \
    -artifact_prefix="$B/crash-$t-" "$corpus" >"$log" 2>&1
  r=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  [ -n "$execs" ] || execs=$(grep -Eo '#[0-9]+' "$log" | tail -n 1 | tr -d '#')
  if [ "$r" = 0 ]; then echo "PASS fuzz_$t runs clean for ${secs}s (${execs:-?} executions)"
  else echo "FAIL fuzz_$t (exit $r, see $log)"; tail -n 30 "$log" >&2; rc=1; fi
done
exit $rc
