# pipelines/analysis/common.sh - helpers the analysis scripts source: tool
# PATH, messages, position lists, and gnuplot panels from skpo-analyze tables.
# The scripts are POSIX sh without pipefail: a stage that dies mid-pipe still
# fails the pipe, because the next tool reads a truncated or empty record
# stream and exits 1 (set -e then stops the script).
TOP=$(cd "$(dirname "$0")/../.." && pwd)
PATH="$TOP/bin:$PATH"
export PATH

die() { echo "$(basename "$0"): $*" >&2; exit 1; }
usage_die() { echo "$(basename "$0"): $*" >&2; echo "usage: $USAGE" >&2; exit 2; }
need_tools() { for t in "$@"; do command -v "$t" >/dev/null 2>&1 || die "'$t' not found (make tools)"; done; }
log() { echo "$(basename "$0"): $*" >&2; }

# linspace A B K: K evenly spaced positions from A to B, comma-separated
linspace() { awk -v a="$1" -v b="$2" -v k="$3" 'BEGIN { for (i = 0; i < k; i++) { x = k > 1 ? a + (b - a) * i / (k - 1) : a; printf "%s%.6f", i ? "," : "", x } }'; }
# centres K: the centres (i - 1/2) / K of K equal relative segments
centres() { awk -v k="$1" 'BEGIN { for (i = 1; i <= k; i++) printf "%s%.6f", (i > 1 ? "," : ""), (i - 0.5) / k }'; }

# series TABLE COL FILTER OUT: split an skpo-analyze table into one gnuplot data
# block per (label, group) whose group matches the awk regex FILTER (x = rel,
# y = column COL); prints the series titles, one word each.
series() {
  awk -v col="$2" -v flt="$3" -v out="$4" '
    /^#/ { next }
    $2 ~ flt { key = $1 == "-" ? $2 : $2 == "all" ? $1 : $1 "/" $2; if (!(key in seen)) { seen[key] = ++n; name[n] = key }
               data[seen[key]] = data[seen[key]] $3 " " $col "\n" }
    END { for (i = 1; i <= n; i++) { printf "%s\n\n", data[i] > out; printf "%s ", name[i] } }' "$1"
}

# panel TABLE COL FILTER YLABEL [KEYPOS]: gnuplot commands for one plot of
# column COL, legend at KEYPOS (default "top right")
panel() {
  _dat=$(mktemp "${TMPDIR:-/tmp}/skpo-plot.XXXXXX")
  _titles=$(series "$1" "$2" "$3" "$_dat")
  PLOT_FILES="$PLOT_FILES $_dat"
  printf "set key inside %s font ',9'\nset ylabel '%s'\ntitles = '%s'\nplot for [i=1:words(titles)] '%s' index (i-1) using 1:2 with linespoints title word(titles, i)\n" \
    "${5:-top right}" "$4" "$_titles" "$_dat"
}

# plot PNG TITLE LAYOUT < gnuplot panel commands: writes PNG atomically, or
# says why not (no gnuplot)
plot() {
  if ! command -v gnuplot >/dev/null 2>&1; then log "gnuplot not found: no $1"; cat >/dev/null; return 0; fi
  { printf "set terminal pngcairo size 1100,800 noenhanced\nset output '%s.tmp'\nset multiplot layout %s title '%s'\n" "$1" "$3" "$2"
    printf "set xlabel 'relative position of the cut'\nset grid\nset format x '%%.2f'\n"
    cat; printf "unset multiplot\n"; } | gnuplot && mv "$1.tmp" "$1"
  rm -f $PLOT_FILES
  PLOT_FILES=
  log "wrote $1"
}
PLOT_FILES=
