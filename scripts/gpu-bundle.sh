#!/bin/sh
# scripts/gpu-bundle.sh - build here what the GPU run needs, for a bare GPU image.
#
# The lent GPU machine has the CUDA toolkit, PyTorch and its pip packages, and
# nothing of Debian's: no msgpack, zstd, OpenBLAS, PCRE2, utf8proc, jansson,
# FLINT, MPFR, GMP, no apt and no network. So the run's binaries are built
# here (BUNDLE=1: one libskpo.so with sm_90 + PTX and -lineinfo, no MPI) and
# every library they need that the image lacks is copied beside them. What the
# image provides is written in tests/gpu/image-libs.txt; tests/gpu/bundle-check.sh
# proves that list plus the bundle resolve every binary.
#
# Output: .gpu-bundle/bundle.tar.xz (git-ignored; carried by the device call)
# and .gpu-bundle/MANIFEST. The staging tree stays in build-gpu/bundle/.
#   bin/    every skpo-* tool            tests/  the CUDA unit tests
#   gpu/    the GPU benchmarks           lib/    libskpo.so + the libraries the image lacks
#   share/  the Qwen2.5 tokenizer (the real-shape SKPO step)
#
# Environment: SKPO_BUNDLE_OUT (.gpu-bundle), SKPO_BUNDLE_JOBS (nproc),
# SKPO_BUNDLE_PACK=0 (stage only, no tarball: the library check needs none).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
out=${SKPO_BUNDLE_OUT:-.gpu-bundle}
jobs=${SKPO_BUNDLE_JOBS:-$(nproc)}
b=build-gpu
stage=$b/bundle
say() { echo "gpu-bundle: $*" >&2; }

command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] || {
  say "needs nvcc (the CUDA toolkit); none here"; exit 1; }
command -v nvcc >/dev/null 2>&1 || PATH=/usr/local/cuda/bin:$PATH

cuda_tests=$(ls tests/unit/test_cuda_*.c | grep -v _fake | sed "s#tests/unit/\(.*\)\.c#$b/tests/\1#")
gpu_bins=$(ls tests/gpu/*.c | sed "s#tests/gpu/\(.*\)\.c#$b/gpu/\1#")
tools=$(ls -d tools/*/ | sed "s#tools/\(.*\)/#$b/bin/skpo-\1#")
# MPI_* empty: the image has no OpenMPI; one rank, NCCL for the collectives.
mkdir -p $b
make --no-print-directory -j"$jobs" BUNDLE=1 CUDA=1 BUILD=$b BIN=$b/bin MPI_CFLAGS= MPI_LIBS= \
  $b/libskpo.so $tools $cuda_tests $gpu_bins >$b/build.log 2>&1 || {
  grep -E "error|undefined" $b/build.log | head -20 >&2; say "build failed (full log: $b/build.log)"; exit 1; }

rm -rf "$stage" && mkdir -p "$stage/bin" "$stage/tests" "$stage/gpu" "$stage/lib" "$stage/share/qwen2.5"
# --strip-debug keeps the symbol table (backtraces) and the CUDA fatbin with its line info.
for f in $tools; do strip --strip-debug -o "$stage/bin/$(basename "$f")" "$f"; done
for f in $cuda_tests; do strip --strip-debug -o "$stage/tests/$(basename "$f")" "$f"; done
for f in $gpu_bins; do strip --strip-debug -o "$stage/gpu/$(basename "$f")" "$f"; done
strip --strip-debug -o "$stage/lib/libskpo.so" $b/libskpo.so
cp tests/gpu/image-libs.txt "$stage/lib/IMAGE-LIBS"
tok=${SKPO_TOKENIZER_DIR:-$top/../shared/data/tokenizer/qwen2.5}
if [ -f "$tok/tokenizer.json" ]; then
  cp "$tok/tokenizer.json" "$tok/tokenizer_config.json" "$stage/share/qwen2.5/"
else
  say "no Qwen2.5 tokenizer at $tok: the real-shape SKPO step will be skipped there"
fi

# Copy every library a bundled ELF needs that the image does not provide,
# as resolved on this machine, then the same for what those need.
provided() { sh tests/gpu/bundle-check.sh --provided "$1"; }
todo=$(find "$stage/bin" "$stage/tests" "$stage/gpu" "$stage/lib" -type f -name '*' ! -name IMAGE-LIBS)
while [ -n "$todo" ]; do
  next=""
  for f in $todo; do
    # ldd maps each needed name to this machine's file; names the image has are skipped
    LD_LIBRARY_PATH="$top/$stage/lib:${LD_LIBRARY_PATH:-}" ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
    while read -r name path; do
      [ -e "$stage/lib/$name" ] && continue
      provided "$name" && continue
      cp -L "$path" "$stage/lib/$name"
      strip --strip-debug "$stage/lib/$name" 2>/dev/null || true
      echo "$stage/lib/$name"
    done >"$b/new.txt"
    next="$next $(cat "$b/new.txt")"
  done
  todo=$(echo $next)
done
rm -f "$b/new.txt"

[ "${SKPO_BUNDLE_PACK:-1}" = 0 ] && { say "staged in $stage (not packed: SKPO_BUNDLE_PACK=0)"; exit 0; }
mkdir -p "$out"
# xz: the image has python3 (tarfile reads it) where it might lack the zstd CLI.
tar -C "$stage" -cf - . | xz -T"$jobs" -6 >"$out/bundle.tar.xz.tmp"
mv "$out/bundle.tar.xz.tmp" "$out/bundle.tar.xz"
{
  echo "# skpo GPU bundle, built $(date -u +%FT%TZ) from $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo '+dirty')"
  echo "# nvcc $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'), $(cc --version | head -1)"
  echo "# packed $(du -k "$out/bundle.tar.xz" | cut -f1) KiB, unpacked $(du -sk "$stage" | cut -f1) KiB"
  (cd "$stage" && find . -type f | sort | while read -r f; do echo "$(du -k "$f" | cut -f1) $f"; done)
} >"$out/MANIFEST"
say "$(sed -n 3p "$out/MANIFEST" | sed 's/^# //'); libraries: $(ls "$stage/lib" | grep -v IMAGE-LIBS | tr '\n' ' ')"
