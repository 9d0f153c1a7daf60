#!/bin/sh
# b_records.sh - record stream throughput on realistic rollout records (256
# prompt ids, 1024 response ids + log-probs, ~3 KB of text each; ~95 MB of
# msgpack for the default 8000 records):
#   pack:   skpo_writer (msgpack + zstd level 3) into /dev/null
#   unpack: skpo_reader (zstd + framing + decode + validation)
#   skpo-cat --count FILE  vs  zstd -dc FILE > /dev/null, same file, same run
# Times are the best of SKPO_BENCH_REPS runs, wall and CPU: on a shared machine
# wall time mostly measures the scheduler (zstd's CLI decompresses and writes
# on two threads, which a busy machine rewards), so the CPU ratio is the one to
# read there, and zstd -dc --no-asyncio is timed as a one-thread peer too.
# Target: skpo-cat --count within 1.5x of zstd -dc.
set -eu
top=${SKPO_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
B=$top/${SKPO_BUILD:-build}
N=${SKPO_BENCH_RECORDS:-8000}
REPS=${SKPO_BENCH_REPS:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
command -v zstd >/dev/null || { echo "b_records: zstd command not found (make deps)"; exit 1; }
cc -O2 -std=gnu11 -I"$top/core" "$top/bench/records_bench.c" "$B/libskpo.a" -fopenmp -Wl,--as-needed \
  -lmsgpackc -lzstd -lopenblas -lpcre2-8 -lutf8proc -ljansson -lm -lpthread $(pkg-config --libs ompi-c 2>/dev/null) \
  -o "$tmp/rb"
f=$tmp/rollouts.msgpack.zst
"$tmp/rb" write "$N" "$f" >/dev/null
zstd -dc "$f" >"$tmp/raw.msgpack"
raw=$(wc -c <"$tmp/raw.msgpack")
zsz=$(wc -c <"$f")
best() { sort -n | head -n 1; }
# best wall and best CPU of REPS runs of a "wall cpu" printing command
w1=$tmp/w1 c1=$tmp/c1
best2() { : >"$w1"; : >"$c1"; for i in $(seq "$REPS"); do "$@" | { read -r w c _; echo "$w" >>"$w1"; echo "$c" >>"$c1"; }; done
  echo "$(best <"$w1") $(best <"$c1")"; }
packw() { "$tmp/rb" write "$N" - 2>&1 >/dev/null; }
set -- $(best2 packw); pw=$1 pc=$2
set -- $(best2 "$tmp/rb" read "$f"); uw=$1 uc=$2
set -- $("$tmp/rb" time "$REPS" zstd -3 -q -c --no-asyncio "$tmp/raw.msgpack"); zpw=$1 zpc=$2
set -- $("$tmp/rb" time "$REPS" "$top/bin/skpo-cat" --count "$f"); cw=$1 cc_=$2
set -- $("$tmp/rb" time "$REPS" zstd -dc "$f"); zw=$1 zc=$2
# zstd's CLI decompresses and writes on two threads (asyncio); on a shared
# machine that alone changes its wall time, so also time it single-threaded.
if zstd -dc --no-asyncio "$f" >/dev/null 2>&1; then
  set -- $("$tmp/rb" time "$REPS" zstd -dc --no-asyncio "$f"); z1w=$1 z1c=$2
else z1w=0 z1c=0; fi
awk -v n="$N" -v raw="$raw" -v zsz="$zsz" -v pw="$pw" -v pc="$pc" -v uw="$uw" -v uc="$uc" -v cw="$cw" -v cc="$cc_" -v zw="$zw" -v zc="$zc" -v z1w="$z1w" -v z1c="$z1c" -v zpw="$zpw" -v zpc="$zpc" 'BEGIN {
  mb = raw / 1e6
  printf "records: %d rollout records, %.1f MB msgpack, %.1f MB zstd; best of runs, wall and CPU seconds\n", n, mb, zsz / 1e6
  printf "pack   (skpo_writer -> /dev/null): wall %.3f s cpu %.3f s  %7.1f MB/s  %8.0f records/s (by cpu)\n", pw, pc, mb / pc, n / pc
  printf "peer: zstd -3 of the same msgpack:  wall %.3f s cpu %.3f s  %7.1f MB/s  (pack / zstd cpu %.2fx)\n", zpw, zpc, mb / zpc, pc / zpc
  printf "unpack (skpo_reader):              wall %.3f s cpu %.3f s  %7.1f MB/s  %8.0f records/s (by cpu)\n", uw, uc, mb / uc, n / uc
  printf "skpo-cat --count FILE:             wall %.3f s cpu %.3f s\n", cw, cc
  printf "peer: zstd -dc FILE >/dev/null:    wall %.3f s cpu %.3f s\n", zw, zc
  if (z1w > 0) printf "peer: zstd -dc --no-asyncio:      wall %.3f s cpu %.3f s  (one thread, like skpo-cat)\n", z1w, z1c
  printf "ratio skpo-cat --count / zstd -dc: cpu %.2fx  wall %.2fx  (target <= 1.5x)\n", cc / zc, cw / zw
  if (z1w > 0) printf "ratio skpo-cat --count / zstd -dc --no-asyncio: cpu %.2fx  wall %.2fx\n", cc / z1c, cw / z1w
}'
