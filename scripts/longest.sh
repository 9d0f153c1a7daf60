#!/bin/sh
# scripts/longest.sh [N] - the N (default 10) longest C/CUDA functions under
# core/ and tools/, as "lines file:line name", longest first. Uses ctags'
# end: field (universal-ctags), so a function is counted from its first to
# its last line, comments inside included.
n=${1:-10}
cd "$(dirname "$0")/.." || exit 1
find core tools -name '*.c' -o -name '*.cu' | sort |
  ctags --language-force=C++ --kinds-C++=f --fields=+ne -L - -x --_xformat='%{line} %{end} %F %N' 2>/dev/null |
  awk '$2 > $1 { printf "%5d %s:%d %s\n", $2 - $1 + 1, $3, $1, $4 }' | sort -rn | head -n "$n"
