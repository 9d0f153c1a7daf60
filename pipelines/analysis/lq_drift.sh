#!/bin/sh
# lq_drift.sh - does the tracked length L_q follow the policy's real response
# length? (docs/algorithm.md Q6; issue 32: counting |s| again under the skip
# layout made L_q drift to ~1.5x the real length.)
#
# For an SKPO run folder (pipelines/train.sh), over steps FROM (default: the last
# quarter of the run) to the last committed step:
#   L_q      mean tracked length the sampler cut with, from the up records' planned
#            cut t_q (E[t_q] = L_q / 3 for CUT=adaptive and fixed, t_q = F L_q for CUT=F;
#            train.sh prunes the per-step tracker states, the records keep the cut)
#   |o|      mean length of the downstream responses (skip: each a whole solution)
#   |s|      mean length of the upstream segments
#   eval     mean response length of the last held-out evaluation (q alone, no s)
#   L/|o|    and L/eval: 1 when L_q tracks the response length
#   final    mean L_q over every prompt of the final tracker state
# Prints one line "run L_q |o| |s| eval L/|o| L/eval final" (header with --header).
set -eu
USAGE="$0 [--header] [--from N] RUN_DIR..."
. "$(dirname "$0")/common.sh"
need_tools skpo-cat
header= from=
while [ $# -gt 0 ]; do
  case $1 in
    --header) header=1; shift;;
    --from) [ $# -ge 2 ] || usage_die "--from needs a step"; from=$2; shift 2;;
    -h|--help) echo "usage: $USAGE"; exit 0;;
    -*) usage_die "unknown option '$1'";;
    *) break;;
  esac
done
[ $# -ge 1 ] || usage_die "give at least one run folder"
[ -n "$header" ] && printf '%-40s %8s %8s %8s %8s %7s %7s %8s\n' run L_q "|o|" "|s|" eval "L/|o|" L/eval final
for run in "$@"; do
  [ -f "$run/last" ] || die "'$run' is not a run folder (no last step)"
  last=$(cat "$run/last")
  f=${from:-$((last - last / 4 + 1))}
  cut=$(sed -n 's/^CUT=\([^ #]*\).*/\1/p' "$run/config" | tail -n 1)
  tmp=$(mktemp "${TMPDIR:-/tmp}/lq.XXXXXX")
  n=$f
  while [ "$n" -le "$last" ]; do
    roll="$run/rollouts/$n.msgpack.zst"
    if [ -f "$roll" ]; then
      skpo-cat --where kind=up --fields cut,tokens "$roll" | sed 's/^/U /'
      skpo-cat --where kind=down --fields tokens "$roll" | sed 's/^/D /'
    fi
    n=$((n + 1))
  done >"$tmp"
  ev=$(ls "$run"/eval/ 2>/dev/null | sed -n 's/\.msgpack\.zst$//p' | sort -n | tail -n 1)
  [ -n "$ev" ] && skpo-cat --where kind=full --fields tokens "$run/eval/$ev.msgpack.zst" | sed 's/^/E /' >>"$tmp"
  st="$run/state/$last"
  [ -f "$st/CURRENT" ] && skpo-cat --where kind=state --fields len "$st/$(cat "$st/CURRENT")" | sed 's/^/S /' >>"$tmp"
  awk -v run="$run" -v cut="${cut:-adaptive}" '
    function ntok(l) { if (l !~ /"tokens":\[/) return 0; sub(/.*"tokens":\[/, "", l); sub(/\].*/, "", l); return l == "" ? 0 : split(l, x, ",") }
    function num(l, k) { sub(".*\"" k "\":", "", l); sub(/[,}].*/, "", l); return l + 0 }
    BEGIN { n = split(cut, q, "/"); frac = cut ~ /^[0-9.\/]+$/ ? (n == 2 ? q[1] / q[2] : cut + 0) : 1 / 3 }
    /^U / { nu++; sc += num($0, "cut"); su += ntok($0); next }
    /^D / { nd++; sd += ntok($0); next }
    /^E / { ne++; se += ntok($0); next }
    /^S / { ns++; sl += num($0, "len"); next }
    END { if (!nu || !nd) { print run ": no SKPO steps to measure" > "/dev/stderr"; exit 1 }
      lq = sc / nu / frac; o = sd / nd; e = ne ? se / ne : 0
      printf "%-40s %8.2f %8.2f %8.2f %8.2f %7.3f %7.3f %8.2f\n", run, lq, o, su / nu, e, lq / o, (e > 0 ? lq / e : 0), (ns ? sl / ns : 0) }' "$tmp"
  rc=$?
  rm -f "$tmp"
  [ "$rc" = 0 ] || exit 1
done
