#!/bin/sh
# The layering of core/ (docs/architecture.md, "Layers"), checked over the
# #include "..." lines of every source file:
#   - a file in core/L/ includes only headers of L itself or of a layer that
#     L may use (the table below, the same as the one in the docs): no upward
#     and no sideways include;
#   - core includes name the layer: "base/common.h", not "common.h" (CUDA
#     device headers *.cuh inside core/cuda/ are the one exception);
#   - a private header is named *_impl.h (or *.cuh for the CUDA kernels), each
#     folder has at most one *_impl.h, and only its own folder (and white-box
#     unit tests, tests/unit/) includes it;
#   - tools/ and bench/ include only public core headers, never a .c file;
#   - the check itself fails on a planted upward include (so it can fail).
. "$(dirname "$0")/lib.sh"
cd "$TOP" || exit 1

# layer: the layers it may include (besides itself)
RULES='
base:
record: base
tokenizer: base
cpu: base
cuda: base
verify: base record
model: base cpu cuda
gen: base record tokenizer model cuda
train: base record model cuda
rl: base record model
'

allowed() { # layer -> the layers it may include
  printf '%s\n' "$RULES" | sed -n "s/^$1:[ ]*//p"
}

# check_tree ROOT: prints one line per violation under ROOT/core, ROOT/tools
# and ROOT/bench; returns 1 when there is any.
check_tree() {
  root=$1 bad=0
  for dir in "$root"/core/*/; do
    L=$(basename "$dir")
    if ! printf '%s\n' "$RULES" | grep -q "^$L:"; then
      echo "core/$L: a folder with no row in the layer table"; bad=1; continue
    fi
    n=$(ls "$dir" | grep -c '_impl\.h$')
    [ "$n" -le 1 ] || { echo "core/$L: $n private headers (*_impl.h), at most one"; bad=1; }
    ok=" $L $(allowed "$L") "
    for f in "$dir"*; do
      case "$f" in *.c|*.h|*.cu|*.cuh) ;; *) continue;; esac
      rel=${f#"$root"/}
      for inc in $(sed -n 's/^[ \t]*#[ \t]*include[ \t]*"\([^"]*\)".*/\1/p' "$f"); do
        case "$inc" in
          */*) to=${inc%%/*}
               case "$ok" in *" $to "*) ;; *) echo "$rel: includes $inc (layer $L may use:$(allowed "$L" | sed 's/^/ /'))"; bad=1;; esac
               case "$inc" in *_impl.h) [ "$to" = "$L" ] || { echo "$rel: includes $inc, private to core/$to"; bad=1; };; esac ;;
          *.cuh) [ "$L" = cuda ] && [ -f "$dir$inc" ] || { echo "$rel: includes $inc (CUDA headers stay in core/cuda)"; bad=1; } ;;
          *) echo "$rel: includes \"$inc\" without its layer (write \"layer/$inc\")"; bad=1 ;;
        esac
      done
    done
  done
  for f in $(find "$root/tools" "$root/bench" -name '*.[ch]' 2>/dev/null); do
    rel=${f#"$root"/}
    for inc in $(sed -n 's/^[ \t]*#[ \t]*include[ \t]*"\([^"]*\)".*/\1/p' "$f"); do
      case "$inc" in
        *.c|*/*.c) echo "$rel: includes a source file $inc"; bad=1 ;;
        *_impl.h|*.cuh) echo "$rel: includes the private header $inc"; bad=1 ;;
      esac
    done
  done
  return $bad
}

t "every #include in core/, tools/ and bench/ follows the layer table" check_tree "$TOP"

planted() { # a copy of core/ with one upward include must fail the check
  mkdir -p "$TMP/p/core" "$TMP/p/tools" && cp -r core/. "$TMP/p/core/" || return 1
  check_tree "$TMP/p" >/dev/null || { echo "the clean copy fails"; return 1; }
  printf '#include "train/update.h"\n' >>"$TMP/p/core/base/common.h"
  out=$(check_tree "$TMP/p") && { echo "an upward include base -> train passed"; return 1; }
  echo "$out" | grep -q 'core/base/common.h: includes train/update.h' || { echo "wrong message: $out"; return 1; }
  cp core/base/common.h "$TMP/p/core/base/common.h"
  printf '#include "verify/verify_impl.h"\n' >"$TMP/p/tools/x.c"
  check_tree "$TMP/p" >/dev/null && { echo "a tool including a private header passed"; return 1; }
  rm "$TMP/p/tools/x.c"
  printf '#include "gen/sampler.h"\n' >>"$TMP/p/core/train/loss.h"
  check_tree "$TMP/p" >/dev/null && { echo "a sideways include train -> gen passed"; return 1; }
  return 0
}
t "the layer check fails on a planted upward, sideways or private include" planted
