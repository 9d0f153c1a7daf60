#!/bin/sh
# The GPU bundle cannot rot: wherever nvcc exists, `make gpu-bundle`'s build is
# staged (build-gpu/bundle) and every binary in it must resolve its libraries
# from the bundle and the written list of what the bare GPU image provides
# (tests/gpu/image-libs.txt), and run its CPU smoke in a root holding only
# those (tests/gpu/bundle-check.sh). A library planted missing must fail the
# check, naming it. Then tests/gpu/run.sh is rehearsed from the packed bundle
# (`make gpu-rehearsal`): paths, phases, budgets, the summary parser.
. "$(dirname "$0")/lib.sh"
cd "$TOP" || exit 1
command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] || {
  skip gpu_bundle "skipped: no nvcc (the bundle is built where the CUDA toolkit is)"; exit 0; }
case "${SKPO_BUILD:-build}" in
  build) ;;
  *) skip gpu_bundle "skipped under ${SKPO_BUILD} (checked by make test)"; exit 0;;
esac

built() { sh scripts/gpu-bundle.sh >"$TMP/bundle.log" 2>&1 || { cat "$TMP/bundle.log"; return 1; }; }
t "make gpu-bundle builds the device run's binaries (sm_90 + PTX, no MPI) and packs them" built
stage=build-gpu/bundle

size_ok() {
  kib=$(du -k .gpu-bundle/bundle.tar.xz | cut -f1)
  [ "$kib" -le 30720 ] || { echo "bundle.tar.xz is $kib KiB, over 30 MiB"; return 1; }
  for f in libskpo.so libzstd.so.1 libopenblas.so.0 libflint.so.17; do
    [ -e "$stage/lib/$f" ] || { echo "lib/$f missing"; ls "$stage/lib"; return 1; }
  done
  # one fatbin for sm_90 with its PTX, carried once in libskpo.so
  cuobj=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
  if [ -x "$cuobj" ]; then
    "$cuobj" --list-elf "$stage/lib/libskpo.so" | grep -q sm_90 || { echo "no sm_90 code in libskpo.so"; return 1; }
    "$cuobj" --list-ptx "$stage/lib/libskpo.so" | grep -q sm_90 || { echo "no PTX in libskpo.so"; return 1; }
  fi
  readelf -d "$stage/bin/skpo-update" | grep -q 'libmpi' && { echo "skpo-update links MPI"; return 1; }
  return 0
}
t "the packed bundle stays under 30 MiB with libskpo.so (sm_90 + PTX) and the Debian libraries the image lacks" size_ok

check_ok() { sh tests/gpu/bundle-check.sh "$stage" >"$TMP/check.out" 2>&1; rc=$?; cat "$TMP/check.out"
  [ "$rc" = 0 ] && grep -q '^PASS bundle libraries' "$TMP/check.out"; }
t "every bundled binary resolves its libraries from the bundle and the image's list, and runs in a bare root" check_ok

# a copy with one library planted missing: the check fails and names it
planted() {
  cp -a "$stage" "$TMP/planted" && rm "$TMP/planted/lib/libzstd.so.1"
  sh tests/gpu/bundle-check.sh "$TMP/planted" >"$TMP/p.out" 2>&1 && { echo "check passed without libzstd"; return 1; }
  grep -q '^FAIL bundle libraries: .*needs libzstd.so.1' "$TMP/p.out" || { cat "$TMP/p.out"; return 1; }
}
t "a library missing from the bundle fails the check, naming the binary and the library" planted

# the image list is the other half: a library it does not provide is not assumed
unlisted() {
  grep -v 'libnccl' tests/gpu/image-libs.txt >"$TMP/image-libs.txt"
  SKPO_IMAGE_LIBS=$TMP/image-libs.txt sh tests/gpu/bundle-check.sh "$stage" >"$TMP/u.out" 2>&1 &&
    { echo "check passed with NCCL unlisted"; return 1; }
  grep -q 'needs libnccl.so.2' "$TMP/u.out" || { cat "$TMP/u.out"; return 1; }
}
t "a library neither bundled nor in the image's list fails the check" unlisted

rehearse() { sh tests/gpu/rehearsal.sh; }
t "tests/gpu/run.sh runs end to end from the bundle here (make gpu-rehearsal: phases, paths, budget, parser)" rehearse
