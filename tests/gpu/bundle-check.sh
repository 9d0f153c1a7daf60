#!/bin/sh
# tests/gpu/bundle-check.sh - does an unpacked GPU bundle run on a bare GPU image?
#
#   bundle-check.sh DIR            check the bundle unpacked in DIR (exit 1 on any FAIL)
#   bundle-check.sh --provided LIB exit 0 when the image provides LIB (tests/gpu/image-libs.txt)
#
# Two checks, each line PASS/FAIL/SKIP:
#  1. every ELF's needed libraries (readelf), and those of the bundled
#     libraries, resolve from two places only: DIR/lib and the written list of
#     what the image provides. A name found in neither fails, named with the
#     binary that needs it.
#  2. each binary runs its CPU smoke (tools: --help; CUDA tests and GPU
#     benchmarks: their visible "skipped: no GPU") inside a bubblewrap root
#     that holds nothing but the bundle, glibc, the GCC runtime and the CUDA
#     libraries of the list: the bare image, as far as this machine can show it.
#     Skipped with a line where bubblewrap cannot run.
here=$(cd "$(dirname "$0")" && pwd)
list=${SKPO_IMAGE_LIBS:-$here/image-libs.txt}

provided() {
  while read -r pat; do
    case "$pat" in ''|'#'*) continue;; esac
    # shellcheck disable=SC2254
    case "$1" in $pat) return 0;; esac
  done <"$list"
  return 1
}

if [ "${1:-}" = --provided ]; then provided "$2"; exit; fi
[ $# = 1 ] && [ -d "$1" ] || { echo "usage: tests/gpu/bundle-check.sh DIR | --provided LIB" >&2; exit 2; }
dir=$(cd "$1" && pwd)
command -v readelf >/dev/null || { echo "bundle-check: needs readelf (binutils)" >&2; exit 2; }

fail=0
elfs=$(find "$dir/bin" "$dir/tests" "$dir/gpu" "$dir/lib" -type f 2>/dev/null | while read -r f; do
  [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] && echo "$f"; done)
[ -n "$elfs" ] || { echo "FAIL bundle: no binaries in $dir"; exit 1; }
n=0; bad=0
for f in $elfs; do
  n=$((n + 1))
  for lib in $(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    [ -e "$dir/lib/$lib" ] && continue
    provided "$lib" && continue
    echo "FAIL bundle libraries: ${f#"$dir"/} needs $lib, which is neither in lib/ nor in the image's list"
    bad=$((bad + 1))
  done
done
if [ "$bad" = 0 ]; then echo "PASS bundle libraries: $n ELF files resolve from lib/ and the image's list"; else fail=1; fi

# --- 2. the smoke in a bare root -------------------------------------------------
if ! command -v bwrap >/dev/null || ! bwrap --ro-bind / / true 2>/dev/null; then
  echo "SKIP bundle smoke: skipped: bubblewrap cannot run here"
  exit $fail
fi
# the image's libraries as found here: glibc and GCC's into /lib/x86_64-linux-gnu,
# CUDA's into /usr/local/cuda/lib64 (LD_LIBRARY_PATH, as run.sh sets it)
binds=""; seen=" "
for d in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib64 /usr/local/cuda/lib64 /usr/local/cuda/lib; do
  [ -d "$d" ] || continue
  for f in "$d"/*.so*; do
    [ -e "$f" ] || continue
    name=$(basename "$f")
    provided "$name" || continue
    case "$seen" in *" $name "*) continue;; esac
    seen="$seen$name "
    case "$d" in /usr/local/cuda*) to=/usr/local/cuda/lib64/$name;; *) to=/lib/x86_64-linux-gnu/$name;; esac
    binds="$binds --ro-bind $(readlink -f "$f") $to"
  done
done
ldso=$(readlink -f /lib64/ld-linux-x86-64.so.2)
run_bare() { # the command in a root with the bundle at /b and nothing else of this machine
  # shellcheck disable=SC2086
  bwrap --unshare-all --die-with-parent --ro-bind "$dir" /b --ro-bind "$ldso" /lib64/ld-linux-x86-64.so.2 \
    $binds --proc /proc --dev /dev --tmpfs /tmp --chdir /b \
    --clearenv --setenv LD_LIBRARY_PATH /usr/local/cuda/lib64 --setenv OPENBLAS_CORETYPE Haswell "$@"
}
ok=0; bad=0
for f in $elfs; do
  rel=${f#"$dir"/}
  case "$rel" in
    bin/*) out=$(run_bare "/b/$rel" --help 2>&1); rc=$?
           [ "$rc" = 0 ] && echo "$out" | grep -qi usage || { rc=${rc#0}; rc=${rc:-1}; } ;;
    tests/*) out=$(run_bare "/b/$rel" 2>&1); rc=$?
           [ "$rc" = 0 ] && echo "$out" | grep -q 'skipped: no GPU' || { rc=${rc#0}; rc=${rc:-1}; } ;;
    gpu/*) out=$(run_bare "/b/$rel" 0.5b 2>&1); rc=$?
           [ "$rc" = 0 ] && echo "$out" | grep -q 'skipped: no GPU' || { rc=${rc#0}; rc=${rc:-1}; } ;;
    *) continue ;;
  esac
  if [ "$rc" = 0 ]; then ok=$((ok + 1)); else
    bad=$((bad + 1)); echo "FAIL bundle smoke: $rel (exit $rc): $(echo "$out" | tail -n 2 | tr '\n' ' ')"
  fi
done
if [ "$bad" = 0 ]; then echo "PASS bundle smoke: $ok binaries ran in a bare root (tools --help, tests and benchmarks skip: no GPU)"; else fail=1; fi
exit $fail
