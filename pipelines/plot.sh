#!/usr/bin/env bash
# pipelines/plot.sh RUN_DIR [RUN_DIR...] - PNGs of a run's curves with gnuplot:
# RUN_DIR/plots/{reward,accuracy,length,entropy,clip,kl,mismatch*,heldout}.png, plus the
# tables they are drawn from (steps.tsv, evals.tsv). With several runs, the
# curves of all of them share each plot (written into the first run's plots/).
# Also writes a TensorBoard event file when skpo-tb is built (RUN_DIR/tb).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"  # `sh demo.sh` (make) re-runs under bash
. "$(dirname "$0")/common.sh"
. "$PIPE/report.sh"
[ $# -ge 1 ] || { echo "usage: pipelines/plot.sh RUN_DIR [RUN_DIR...]" >&2; exit 2; }
command -v gnuplot >/dev/null || die "gnuplot is not installed (apt-get install gnuplot-nox)"
OUTD="$1/plots"
mkdir -p "$OUTD"
for r in "$@"; do
  [ -f "$r/config" ] || die "'$r' is not a run folder"
  mkdir -p "$r/plots"
  steps_tsv "$r" >"$r/plots/steps.tsv"
  evals_tsv "$r" >"$r/plots/evals.tsv"
  if command -v skpo-tb >/dev/null; then
    # Step order (1, 2, ..., 10), not name order (1, 10, 11, ..., 2): the events follow the steps.
    mf=$(ls "$r"/metrics/*.msgpack.zst 2>/dev/null | awk -F/ '{ b = $NF; sub(/\.msgpack\.zst$/, "", b)
      e = sub(/^eval-/, "", b); print b "\t" e "\t" $0 }' | sort -t"$(printf '\t')" -k1,1n -k2,2n | cut -f3)
    [ -n "$mf" ] && printf '%s\n' "$mf" | tr '\n' '\0' | xargs -0 skpo-tb --logdir "$r/tb" 2>/dev/null
  fi
done
# plot NAME COLUMN YLABEL [FILE]: one PNG, one line per run.
plot() {
  local name=$1 col=$2 label=$3 file=${4:-steps.tsv} cmd="" r
  for r in "${RUNS[@]}"; do
    awk -F'\t' -v c="$col" 'NR > 1 && $c != "nan" && $c != "" { ok = 1 } END { exit !ok }' "$r/plots/$file" || continue
    [ -n "$cmd" ] && cmd="$cmd, "
    cmd="$cmd'$r/plots/$file' using 1:(column($col)) with linespoints title '$(basename "$r")'"
  done
  [ -n "$cmd" ] || { echo "plot.sh: no data for $name" >&2; return 0; }
  gnuplot <<GP || echo "plot.sh: gnuplot failed for $name" >&2
set terminal pngcairo size 800,500 noenhanced
set output '$OUTD/$name.png'
set datafile separator tab
set datafile missing 'nan'
set key autotitle columnhead
set grid
set xlabel 'step'
set ylabel '$label'
set title '$label per step'
plot $cmd
GP
}
RUNS=("$@")
plot reward 2 "mean reward (train rollouts)"
plot accuracy 3 "accuracy (train rollouts)"
plot length 4 "response length, tokens"
plot entropy 7 "entropy (update)"
plot clip 8 "clipped token fraction"
plot kl 6 "approx KL old-new (update)"
plot mismatch 13 "K3 KL rollout vs pi_old (update)"
plot mismatch_dlogp 15 "max |logp pi_old - logp rollout| (update)"
plot mismatch_masked 16 "tokens truncated or masked by the mismatch correction"
plot heldout 2 "held-out mean@k" evals.tsv
ls "$OUTD"/*.png
