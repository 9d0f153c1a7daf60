#!/bin/sh
# Build and run the libFuzzer targets (clang): tests/fuzz/fuzz_*.c linked with
# the core library compiled with -fsanitize=fuzzer-no-link,address,undefined.
# usage: tests/fuzz/run.sh SECONDS_PER_TARGET [TARGET...]
# Prints one PASS/FAIL line per target (and one for its regression inputs).
# Seed corpora come from tests/fixtures (tests/fuzz/seeds.sh) and grow in
# build-fuzz/corpus/TARGET across runs; findings are kept in
# build-fuzz/crash-TARGET-* and make the run fail: commit a reproducer as
# tests/fixtures/fuzz/crash-TARGET-NAME once the bug is fixed.
set -u
secs=${1:-600}; shift 2>/dev/null || true
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1
B=build-fuzz
CC=${FUZZ_CC:-clang}
command -v "$CC" >/dev/null || { echo "SKIP fuzz: clang not found"; exit 0; }
SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
CFL="-O1 -g -std=gnu11 -D_GNU_SOURCE -Wno-macro-redefined -Wno-unknown-attributes -Icore -I/usr/include/x86_64-linux-gnu/openblas-pthread $(pkg-config --cflags ompi-c 2>/dev/null) -fopenmp=libgomp"
LIBS="-lmsgpackc -lzstd -lopenblas -lpcre2-8 -lutf8proc -ljansson -lflint -lmpfr -lgmp -lm -lpthread -lgomp $(pkg-config --libs ompi-c 2>/dev/null)"
mkdir -p "$B/obj"
# clang < 15 has no _Float16 on x86; its storage-only __fp16 converts the same
# way (round to nearest even, through compiler-rt), which is all core/train/optim.c
# asks of it. tests/fuzz/clang_compat.h supplies glibc's GCC-only CMPLX.
printf '_Float16 h;\n' >"$B/f16.c"
if ! $CC -c "$B/f16.c" -o "$B/f16.o" 2>/dev/null; then
  CFL="$CFL -D_Float16=__fp16"
  LIBS="$LIBS $($CC -print-libgcc-file-name -rtlib=compiler-rt)"
fi
CFL="$CFL -include tests/fuzz/clang_compat.h"
objs=""
for c in core/*/*.c; do
  [ -f "$c" ] || continue
  o="$B/obj/$(echo "$c" | tr / _).o"
  if [ ! -f "$o" ] || [ "$c" -nt "$o" ] || [ tests/fuzz/run.sh -nt "$o" ] || [ -n "$(find core -name '*.h' -newer "$o" 2>/dev/null | head -n 1)" ]; then
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
  # Inputs that once crashed this target are replayed first, on their own.
  crashes=$(ls tests/fixtures/fuzz/crash-"$t"-* 2>/dev/null)
  if [ -n "$crashes" ]; then
    if ASAN_OPTIONS=detect_leaks=1 "$bin" -timeout=10 -rss_limit_mb=4096 $crashes >"$B/fuzz_$t.replay.log" 2>&1; then
      echo "PASS fuzz_$t replays $(echo "$crashes" | wc -l) regression inputs cleanly"
    else
      echo "FAIL fuzz_$t regression input (see $B/fuzz_$t.replay.log)"; tail -n 30 "$B/fuzz_$t.replay.log" >&2; rc=1
    fi
  fi
  corpus=$B/corpus/$t
  mkdir -p "$corpus"
  sh tests/fuzz/seeds.sh "$t" "$corpus" "$bin"
  log=$B/fuzz_$t.log
  ASAN_OPTIONS=detect_leaks=1 "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 -max_len=65536 \
    -artifact_prefix="$B/crash-$t-" "$corpus" >"$log" 2>&1
  r=$?
  execs=$(grep -ao 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  [ -n "$execs" ] || execs=$(grep -aEo '#[0-9]+' "$log" | tail -n 1 | tr -d '#')
  if [ "$r" = 0 ]; then echo "PASS fuzz_$t runs clean for ${secs}s (${execs:-?} executions)"
  else echo "FAIL fuzz_$t (exit $r, see $log)"; tail -n 30 "$log" >&2; rc=1; fi
done
exit $rc
