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
#   - tools/ and bench/ include only public core headers, never a .c file, and
#     no tool includes a CUDA header (core/cuda/): devices are the backends';
#   - the check itself fails on a planted upward include (so it can fail);
#   - the same at link level, over the objects of build/core (nm): a symbol an
#     object of layer L uses is defined in L or in a layer L may use, and the
#     graph "object uses a symbol object defines" has no circle. A backend's
#     files (model_cpu + model_train; model_cuda + model_cuda_train +
#     model_cuda_sample + model_cuda_devops + lora_cuda) and the CUDA kernels (core/cuda/*, one C API) count as one
#     unit each: they are split by size and call each other both ways. A
#     planted circle and a planted upward call prove that this check can fail.
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
        cuda/*) case "$rel" in tools/*) echo "$rel: includes the CUDA header $inc (a tool reaches devices through model.h and comm.h)"; bad=1;; esac ;;
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
  printf '#include "cuda/cuda.h"\n' >"$TMP/p/tools/x.c"
  check_tree "$TMP/p" >/dev/null && { echo "a tool including a CUDA header passed"; return 1; }
  rm "$TMP/p/tools/x.c"
  printf '#include "gen/sampler.h"\n' >>"$TMP/p/core/train/loss.h"
  check_tree "$TMP/p" >/dev/null && { echo "a sideways include train -> gen passed"; return 1; }
  return 0
}
t "the layer check fails on a planted upward, sideways, private or tool-to-CUDA include" planted

# --- link level ---------------------------------------------------------------------

# unit_of core/L/F.o: the unit an object belongs to (see the header).
unit_of() {
  case "$1" in
    core/model/model_cpu.o|core/model/model_train.o) echo core/model/backend-cpu ;;
    core/model/model_cuda.o|core/model/model_cuda_train.o|core/model/model_cuda_sample.o|core/model/model_cuda_devops.o|core/model/lora_cuda.o) echo core/model/backend-cuda ;;
    core/cuda/*) echo core/cuda/kernels ;;
    *) echo "$1" ;;
  esac
}

# link_edges OBJROOT: "USER DEFINER SYMBOL" for every undefined symbol of an
# object under OBJROOT/core that another object there defines.
link_edges() {
  for o in $(cd "$1" && find core -name '*.o' | sort); do
    nm -P "$1/$o" 2>/dev/null | awk -v f="$o" '$2 ~ /^[TDBRVWC]$/ { print "D", f, $1 } $2 == "U" { print "U", f, $1 }'
  done | awk '$1 == "D" { def[$3] = $2 } $1 == "U" { u[++n] = $2 " " $3 }
    END { for (i = 1; i <= n; i++) { split(u[i], p, " "); if ((p[2] in def) && def[p[2]] != p[1]) print p[1], def[p[2]], p[2] } }'
}

# check_links OBJROOT: one line per use across layers the table forbids, and
# the circles among units (tsort); returns 1 when there is any.
check_links() {
  bad=0
  link_edges "$1" >"$TMP/edges" || return 1
  [ -s "$TMP/edges" ] || { echo "no link edges under $1/core (not built?)"; return 1; }
  while read -r from to sym; do
    lf=${from#core/}; lf=${lf%%/*}; lt=${to#core/}; lt=${lt%%/*}
    [ "$lf" = "$lt" ] && continue
    case " $(allowed "$lf") " in *" $lt "*) ;; *) echo "$from: uses $sym of $to (layer $lf may use:$(allowed "$lf" | sed 's/^/ /'))"; bad=1;; esac
  done <"$TMP/edges"
  while read -r from to sym; do
    uf=$(unit_of "$from") ut=$(unit_of "$to")
    [ "$uf" = "$ut" ] || echo "$uf $ut"
  done <"$TMP/edges" | sort -u >"$TMP/units"
  if ! tsort "$TMP/units" >/dev/null 2>"$TMP/loop"; then
    echo "a circle among: $(sed -n 's/^tsort: \(core\/.*\)/\1/p' "$TMP/loop" | sort -u | tr '\n' ' ')"
    bad=1
  fi
  return $bad
}

if [ -d "$TOP/build/core" ] && command -v nm >/dev/null && command -v tsort >/dev/null; then
  t "every object of build/core uses only its own layer and the ones it may use, with no circle (nm)" check_links "$TOP/build"
  planted_links() { # build/core plus planted objects: an upward call, then a circle
    CC=${CC:-cc}
    mkdir -p "$TMP/b" && cp -r "$TOP/build/core" "$TMP/b/" || return 1
    find "$TMP/b/core" -name '*.d' -delete
    check_links "$TMP/b" >/dev/null || { echo "the clean copy fails"; return 1; }
    # base calling train: upward
    printf 'int skpo_update_step(void);\nint planted_up(void) { return skpo_update_step(); }\n' >"$TMP/up.c"
    "$CC" -c "$TMP/up.c" -o "$TMP/b/core/base/planted_up.o" || return 1
    out=$(check_links "$TMP/b") && { echo "an upward call base -> train passed"; return 1; }
    echo "$out" | grep -q 'core/base/planted_up.o: uses skpo_update_step of core/train/' || { echo "wrong message: $out"; return 1; }
    rm "$TMP/b/core/base/planted_up.o"
    # the circle of issue 35: the model's generic code -> a backend -> back into model.c
    printf 'int skpo_model_free(void);\nint planted_hook(void) { return skpo_model_free(); }\n' >"$TMP/c.c"
    "$CC" -c "$TMP/c.c" -o "$TMP/b/core/model/planted_hook.o" || return 1
    printf 'int planted_hook(void);\nint planted_be(void) { return planted_hook(); }\n' >"$TMP/d.c"
    "$CC" -c "$TMP/d.c" -o "$TMP/b/core/model/planted_be.o" || return 1
    check_links "$TMP/b" >/dev/null || { echo "a chain without a circle failed"; return 1; }
    # close it: model.o needs a symbol of planted_be.o (a copy of model.o that uses it)
    printf 'int planted_be(void);\nint planted_use(void) { return planted_be(); }\n' >"$TMP/e.c"
    "$CC" -c "$TMP/e.c" -o "$TMP/e.o" && ld -r "$TMP/b/core/model/model.o" "$TMP/e.o" -o "$TMP/m.o" &&
      mv "$TMP/m.o" "$TMP/b/core/model/model.o" || return 1
    out=$(check_links "$TMP/b") && { echo "a circle model.o -> planted_be.o -> planted_hook.o -> model.o passed"; return 1; }
    echo "$out" | grep -q 'a circle among:.*core/model/model.o' || { echo "wrong message: $out"; return 1; }
  }
  t "the link check fails on a planted upward call and on a planted circle through model.o" planted_links
else
  skip "link-level layering" "no build/core objects, nm or tsort"
fi
