#!/usr/bin/env bash
# pipelines/overhead.sh RUN_DIR [STEP] - SKPO's cost per training step against
# GRPO's, stage by stage, from the same checkpoint and tracker state.
#
# RUN_DIR is a run folder of pipelines/train.sh (its config, ckpt/STEP and
# state/STEP; STEP defaults to the newest step that kept both). REPEATS times
# (default 3; repeat r plays step STEP + 1 with the seed SEED + 1000 r, so every
# repeat draws new prompts and samples) it runs one SKPO step and one GRPO step with the run's config, each
# stage alone, reading the previous stage's file (the training pipeline streams
# them; here each stage's wall time is its own):
#   SKPO: sample --segment | splice | reward | advantage skpo | update
#   GRPO: draw | sample --n G | reward | advantage grpo | update
# and records per stage its wall seconds and peak resident memory (GNU time),
# the tokens the samplers generated and prefilled (--stats), and the tokens the
# update trained on (loss tokens: upstream segments + downstream responses for
# SKPO, responses for GRPO) and forwarded (prompt + response). The update is a
# one-shot skpo-update on one rank (no server, no offload); every stage runs on
# the run's device (GPUS=0: CPU), so on a GPU run the memory column is host
# memory and the samplers' peak KV (MiB) is the device-side figure.
#
# Writes OUT (default RUN_DIR/overhead)/overhead.txt (the table: SKPO, GRPO, ratio,
# means over the repeats), overhead.tsv and overhead.png (wall time per stage and
# tokens per step, SKPO next to GRPO) when gnuplot is installed.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname "$0")/common.sh"
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: pipelines/overhead.sh RUN_DIR [STEP]   (env: REPEATS, OUT)" >&2; exit 2; }
RUN=$(cd "$1" && pwd) || die "overhead: no run folder '$1'"
load_config "$RUN"
[ "$ALGO" = skpo ] || die "overhead: '$RUN' is an ALGO=$ALGO run; give an SKPO run folder (its tracker state sets L_q)"
BASE=${2:-$(durable_step "$RUN")}
[ -f "$RUN/ckpt/$BASE/config.json" ] && [ -f "$RUN/state/$BASE/CURRENT" ] ||
  die "overhead: step $BASE of '$RUN' has no checkpoint and tracker state (pick a step that kept both: ls $RUN/state)"
REPEATS=${REPEATS:-3}
case "$REPEATS" in ''|*[!0-9]*|0) die "overhead: REPEATS='$REPEATS' is not a whole number >= 1";; esac
OUTD=${OUT:-$RUN/overhead}
mkdir -p "$OUTD" && OUTD=$(cd "$OUTD" && pwd)
command -v /usr/bin/time >/dev/null 2>&1 || [ -x /usr/bin/time ] || die "overhead: GNU time (/usr/bin/time) is needed for the peak memory (apt-get install time)"
# one rank, one-shot update, the run's own device
RANKS=1 NODES=1 SERVE= OFFLOAD= SHARE_WEIGHTS=
unset SKPO_SERVE_DIR
# A shim in front of the tools: each tool runs under GNU time (wall seconds, peak RSS in
# KiB appended to $SKPO_OVERHEAD_LOG); the samplers also print their --stats line.
SHIM=$OUTD/.shim
mkdir -p "$SHIM"
for t in skpo-sample skpo-splice skpo-reward skpo-advantage skpo-update; do
  real=$(command -v "$t") || die "overhead: '$t' is not built (make tools)"
  extra=; case "$t" in skpo-sample|skpo-splice) extra=--stats;; esac
  printf '#!/bin/sh\nexec /usr/bin/time -a -o "$SKPO_OVERHEAD_LOG" -f "%s %%e %%M" %s "$@" %s\n' "$t" "$real" "$extra" >"$SHIM/$t"
  chmod +x "$SHIM/$t"
done
PATH="$SHIM:$PATH"

# toks FILE KIND...: "sequences loss_tokens forwarded_tokens" of the records of these kinds
toks() {
  local f=$1; shift
  for k in "$@"; do skpo-cat --where kind="$k" --fields prompt,tokens "$f"; done | awk '
    function n(l, k) { if (l !~ "\"" k "\":\\[") return 0; sub(".*\"" k "\":\\[", "", l); sub(/\].*/, "", l); return l == "" ? 0 : split(l, x, ",") }
    { s++; t += n($0, "tokens"); p += n($0, "prompt") } END { printf "%d %d %d\n", s, t, t + p }'
}
# gen LOG: "generated prefill kv_mib" from a sampler's --stats line
gen() { sed -n 's/.*generated \([0-9]*\) tokens.*prefill \([0-9]*\) tokens.*(\([0-9.]*\) MiB).*/\1 \2 \3/p' "$1" | tail -n 1; }

one() { # METHOD REPEAT: one step of METHOD, every stage alone; appends "key value" lines to $OUTD/raw.METHOD
  local m=$1 r=$2 d=$OUTD/work/$1-$2
  rm -rf "$d"; mkdir -p "$d/logs"
  STEP=$((BASE + 1)) SEED=$((RUN_SEED + 1000 * r)) CK=$RUN/ckpt/$BASE TMPD=$d OUT=$d/ckpt ST=$d/state
  # SKPO samples with the run's tracker (its L_q set the cuts); GRPO's tracker only logs
  if [ "$m" = skpo ]; then cp -r "$RUN/state/$BASE" "$ST"; else init_state "$ST" "$STEP"; fi
  export SKPO_OVERHEAD_LOG=$d/time.log
  : >"$SKPO_OVERHEAD_LOG"
  if [ "$m" = skpo ]; then
    stage_sample_segment >"$d/up.zst" 2>"$d/logs/sample.err" &&
    stage_splice <"$d/up.zst" >"$d/sampled.zst" 2>"$d/logs/splice.err" &&
    stage_reward <"$d/sampled.zst" >"$d/rewarded.zst" 2>"$d/logs/reward.err" &&
    stage_advantage skpo --w-up "$W_UP" --w-down "$W_DOWN" <"$d/rewarded.zst" >"$d/adv.zst" 2>"$d/logs/advantage.err" &&
    stage_update --up-clip-low "$CLIP_LOW" --up-clip-high "$CLIP_HIGH_UP" --up-dual-clip "$UP_DUAL_CLIP" \
      --down-clip-low "$CLIP_LOW" --down-clip-high "$CLIP_HIGH" <"$d/adv.zst" 2>"$d/logs/update.err" ||
      { tail -n 5 "$d"/logs/*.err >&2; die "overhead: the SKPO step failed (logs in $d/logs)"; }
    read -r g1 p1 kv1 < <(gen "$d/logs/sample.err"); read -r g2 p2 kv2 < <(gen "$d/logs/splice.err")
    read -r s t f < <(toks "$d/adv.zst" up down)
  else
    draw_prompts "$PROMPTS"
    stage_sample_n "$G" >"$d/sampled.zst" 2>"$d/logs/sample.err" &&
    stage_reward <"$d/sampled.zst" >"$d/rewarded.zst" 2>"$d/logs/reward.err" &&
    stage_advantage grpo <"$d/rewarded.zst" >"$d/adv.zst" 2>"$d/logs/advantage.err" &&
    stage_update --full-dual-clip "$FULL_DUAL_CLIP" --full-clip-low "$CLIP_LOW" --full-clip-high "$GRPO_CLIP_HIGH" \
      <"$d/adv.zst" 2>"$d/logs/update.err" ||
      { tail -n 5 "$d"/logs/*.err >&2; die "overhead: the GRPO step failed (logs in $d/logs)"; }
    read -r g1 p1 kv1 < <(gen "$d/logs/sample.err"); g2=0 p2=0 kv2=0
    read -r s t f < <(toks "$d/adv.zst" full)
  fi
  {
    echo "prompts $(skpo-cat --where kind=metrics --fields groups "$d/adv.zst" | sed -n 's/.*"groups":\([0-9]*\).*/\1/p' | head -n 1)"
    echo "gen_tokens $((g1 + g2))"; echo "gen_tokens.sample $g1"; echo "gen_tokens.splice $g2"
    echo "prefill_tokens $((p1 + p2))"; echo "kv_mib.sample $kv1"; echo "kv_mib.splice $kv2"
    echo "train_sequences $s"; echo "train_tokens $t"; echo "forward_tokens $f"
    awk '{ sub(/^skpo-/, "", $1); printf "seconds.%s %s\nrss_mib.%s %.1f\n", $1, $2, $1, $3 / 1024; w += $2 } END { printf "seconds.total %.3f\n", w }' "$SKPO_OVERHEAD_LOG"
  } >>"$OUTD/raw.$m"
  rm -rf "$d/ckpt"
}

RUN_SEED=$SEED
rm -f "$OUTD"/raw.skpo "$OUTD"/raw.grpo
for ((r = 1; r <= REPEATS; r++)); do
  echo "overhead: repeat $r of $REPEATS (step $((BASE + 1)) from ckpt/$BASE, seed $((RUN_SEED + 1000 * r)))" >&2
  one skpo "$r"
  one grpo "$r"
done
rm -rf "$OUTD/work" "$SHIM"
# table: metric, SKPO mean, GRPO mean, ratio
awk '{ m = FILENAME; sub(/.*raw\./, "", m); s[m, $1] += $2; n[m, $1]++; if (!($1 in o)) { o[$1] = ++k; name[k] = $1 } }
  END { printf "%-24s %12s %12s %8s\n", "per step (mean)", "skpo", "grpo", "ratio"
    for (i = 1; i <= k; i++) { x = name[i]; a = n["skpo", x] ? s["skpo", x] / n["skpo", x] : 0; b = n["grpo", x] ? s["grpo", x] / n["grpo", x] : 0
      printf "%-24s %12.3f %12.3f %8s\n", x, a, b, (b > 0 ? sprintf("%.2f", a / b) : "-") } }' "$OUTD/raw.skpo" "$OUTD/raw.grpo" >"$OUTD/overhead.tsv.tmp"
{
  echo "overhead of SKPO against GRPO per training step: run $RUN, ckpt/$BASE, $REPEATS repeats" \
    "(PROMPTS=$PROMPTS G=$G MAX_TOKENS=$MAX_TOKENS, device: $([ "$GPUS" -gt 0 ] && echo "GPU" || echo "CPU, ${THREADS:-all} threads"))"
  echo "stages run one at a time (seconds are each stage alone; the training pipeline overlaps sample | splice | reward)"
  cat "$OUTD/overhead.tsv.tmp"
} | tee "$OUTD/overhead.txt"
awk 'NR > 1 { print $1 "\t" $2 "\t" $3 }' "$OUTD/overhead.tsv.tmp" >"$OUTD/overhead.tsv"
rm -f "$OUTD/overhead.tsv.tmp"
if command -v gnuplot >/dev/null; then
  grep -E '^seconds\.(sample|splice|reward|advantage|update)	' "$OUTD/overhead.tsv" | sed 's/^seconds\.//' >"$OUTD/.sec"
  grep -E '^(gen_tokens|prefill_tokens|train_tokens|forward_tokens)	' "$OUTD/overhead.tsv" >"$OUTD/.tok"
  grep -E '^rss_mib\.(sample|splice|reward|advantage|update)	' "$OUTD/overhead.tsv" | sed 's/^rss_mib\.//' >"$OUTD/.mem"
  gnuplot <<GP && echo "plot: $OUTD/overhead.png"
set terminal pngcairo size 1300,440 noenhanced
set output '$OUTD/overhead.png'
set datafile separator tab
set multiplot layout 1,3 title 'SKPO against GRPO per training step (mean of $REPEATS)'
set key top left
set xtics rotate by -20
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.6
set grid y
set yrange [0:*]
set ylabel 'seconds (each stage alone)'
set title 'wall time per stage'
plot '$OUTD/.sec' using 2:xtic(1) title 'skpo', '' using 3 title 'grpo'
set ylabel 'tokens'
set title 'tokens per step'
plot '$OUTD/.tok' using 2:xtic(1) title 'skpo', '' using 3 title 'grpo'
set ylabel 'MiB'
set title 'peak resident memory per stage'
plot '$OUTD/.mem' using 2:xtic(1) title 'skpo', '' using 3 title 'grpo'
unset multiplot
GP
  rm -f "$OUTD/.sec" "$OUTD/.tok" "$OUTD/.mem"
fi
exit 0
