# pipelines/report.sh - evaluation and per-step numbers of a run folder (sourced
# after common.sh): run_eval, print_step, print_eval, and the TSV tables that
# plot.sh and compare.sh draw. Numbers come from the metrics records through
# skpo-cat's JSON lines; awk does the arithmetic.

# jnum: awk helper text extracting a numeric field from a JSON line: jnum(line, "key").
JNUM='function jnum(l, k,   m) { if (match(l, "\"" k "\":-?[0-9.eE+-]+")) { m = substr(l, RSTART + length(k) + 3, RLENGTH - length(k) - 3); return m + 0 } return "" }
function jstr(l, k) { if (match(l, "\"" k "\":\"[^\"]*\"")) return substr(l, RSTART + length(k) + 4, RLENGTH - length(k) - 5); return "" }'

# run_eval RUN N: sample EVAL_K responses for every EVAL_DATA prompt with ckpt/N,
# reward them, keep them in eval/N.msgpack.zst and skpo-eval's metrics in
# metrics/eval-N.msgpack.zst (table in logs/eval-N.txt). The same draw at every
# step (--seed-step 0: the seeds do not hash the step; the records still say
# step N), so differences between checkpoints are not sampling luck of the seed.
run_eval() {
  local run=$1 n=$2 ck="$1/ckpt/$2" tmp="$1/tmp/eval-$2"
  rm -rf "$tmp"; mkdir -p "$tmp" "$run/eval" "$run/metrics" "$run/logs"
  skpo-sample --model "$ck" --prompts "$EVAL_DATA" --n "$EVAL_K" --temperature "$EVAL_TEMPERATURE" \
      --top-p "$EVAL_TOP_P" --max-tokens "$MAX_TOKENS" --seed "$SEED" --step "$n" --seed-step 0 \
      ${THREADS:+--threads "$THREADS"} 2>"$tmp/sample.err" \
    | eval "$REWARD_CMD" 2>"$tmp/reward.err" \
    | tee "$tmp/eval.msgpack.zst" \
    | skpo-eval --max-reward-failures "${MAX_REWARD_FAILURES:-0.05}" 2>"$tmp/table.txt" >"$tmp/metrics.msgpack.zst"
  local st=("${PIPESTATUS[@]}")
  if [ "${st[0]}${st[1]}${st[2]}${st[3]}" != 0000 ]; then
    echo "skpo-pipeline: evaluation of step $n failed (sample=${st[0]} reward=${st[1]} tee=${st[2]} eval=${st[3]})" >&2
    cat "$tmp"/*.err >&2
    return 1
  fi
  mv "$tmp/eval.msgpack.zst" "$run/eval/$n.msgpack.zst"
  mv "$tmp/table.txt" "$run/logs/eval-$n.txt"
  mv "$tmp/metrics.msgpack.zst" "$run/metrics/eval-$n.msgpack.zst"
  rm -rf "$tmp"
}

# eval_line RUN N: "mean@k pass@k problems k" of the eval at step N (group all or the only one).
eval_line() {
  skpo-cat --where kind=metrics "$1/metrics/eval-$2.msgpack.zst" 2>/dev/null | awk "$JNUM"'
    { g = jstr($0, "group"); k = jnum($0, "samples"); m = jnum($0, "mean@" k); p = jnum($0, "pass@" k)
      if (g == "all" || !have) { out = m " " p " " jnum($0, "problems") " " k; have = 1 } }
    END { if (have) print out }'
}

print_eval() {
  local l; l=$(eval_line "$1" "$2")
  [ -n "$l" ] || { echo "eval step $2: no metrics" >&2; return; }
  echo "$l" | awk -v s="$2" '{ printf "eval step %-4s mean@%d %.3f  pass@%d %.3f  (%d problems)\n", s, $4, $1, $4, $2, $3 }'
}

# step_row RUN N: one TSV row of step N:
# step reward acc len len_up kl entropy clip_frac grad_norm tokens seconds tok_per_s
# mismatch_k3 mismatch_dlogp_mean mismatch_dlogp_max mismatch_trunc_masked (rollout vs pi_old; nan when not measured)
# reward_timeouts reward_errors (rewards the verifier gave no verdict, skpo-advantage's count)
step_row() {
  local t; t=$(head -n 1 "$1/logs/$2.time" 2>/dev/null); t=${t:-0}
  skpo-cat --where kind=metrics "$1/metrics/$2.msgpack.zst" 2>/dev/null | awk -v step="$2" -v secs="$t" "$JNUM"'
    function add(k, v) { if (v != "") { s[k] += v; c[k]++ } }
    function mean(k) { return c[k] ? s[k] / c[k] : "nan" }
    /"tool":"skpo-advantage"/ { rew = jnum($0, "reward_mean"); acc = jnum($0, "accuracy"); rto = jnum($0, "reward_timeouts"); rer = jnum($0, "reward_errors")
      len = jnum($0, "len_down_mean"); if (len == "") len = jnum($0, "len_full_mean"); lup = jnum($0, "len_up_mean") }
    /"tool":"(skpo-)?update"/ { for (i = 0; i < 3; i++) { ph = i == 0 ? "_down" : i == 1 ? "_full" : "_up"
        add("kl", jnum($0, "approx_kl" ph)); add("ent", jnum($0, "entropy" ph))
        add("clip", jnum($0, "clip_low" ph) + jnum($0, "clip_high" ph)) }
      add("gn", jnum($0, "grad_norm")); tok += jnum($0, "n_tokens")
      add("mk3", jnum($0, "mismatch_k3")); add("mdm", jnum($0, "mismatch_dlogp_mean"))
      v = jnum($0, "mismatch_dlogp_max"); if (v != "" && (mdx == "" || v > mdx)) mdx = v
      v = jnum($0, "mismatch_truncated"); if (v != "") add("mtm", v + jnum($0, "mismatch_masked")) }
    END { printf "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%.2f\t%.0f\t%s\t%s\t%s\t%s\t%d\t%d\n", step, rew == "" ? "nan" : rew,
      acc == "" ? "nan" : acc, len == "" ? "nan" : len, lup == "" ? "nan" : lup, mean("kl"), mean("ent"),
      mean("clip"), mean("gn"), tok, secs, (secs > 0 ? tok / secs : 0), mean("mk3"), mean("mdm"),
      mdx == "" ? "nan" : mdx, mean("mtm"), rto, rer }'
}

print_step() {
  step_row "$1" "$2" | awk -v total="$STEPS" -v sp="$(time_split "$1" "$2")" -F'\t' '{
    printf "step %s/%s  reward %+.3f (t/o %d, err %d)  acc %.3f  len %.1f", $1, total, $2, $17, $18, $3, $4
    if ($5 != "nan") printf " (up %.1f)", $5
    printf "  kl %.4f  ent %.3f  clip %.3f", $6, $7, $8
    if ($13 != "nan" && $13 != "") printf "  mismatch k3 %.2g max|dlogp| %.3g", $13, $15
    if ($10 == 0) printf "  NOTHING TRAINED (0 tokens)"
    printf "  %.1fs  %d tok/s", $11, $12
    if (sp != "") printf "  [%s]", sp
    printf "\n" }'
}
# time_split RUN N: logs/N.time in short form: seconds per stage (the update as
# load/compute/save when a server ran it) and the bytes the step wrote.
time_split() {
  awk 'NR > 1 { v[$1] = $2 }
    END { n = split("sample splice reward advantage", st, " ")
      for (i = 1; i <= n; i++) if (("seconds." st[i]) in v) {
        printf "%s%s %.1fs", sep, st[i] == "advantage" ? "adv" : st[i], v["seconds." st[i]]; sep = " " }
      if ("seconds.update.compute" in v) printf "%supd %.1f/%.1f/%.1fs", sep, v["seconds.update.load"], v["seconds.update.compute"], v["seconds.update.save"]
      else if ("seconds.update" in v) printf "%supd %.1fs", sep, v["seconds.update"]
      if ("bytes.total" in v) { b = v["bytes.total"]
        if (b >= 1e9) printf "  %.2f GB", b / 1e9; else if (b >= 1e6) printf "  %.1f MB", b / 1e6; else printf "  %.0f kB", b / 1e3 } }' \
    "$1/logs/$2.time" 2>/dev/null
}

# steps_tsv RUN: every committed step's row (header first); evals_tsv RUN: step mean pass.
steps_tsv() {
  printf 'step\treward\taccuracy\tlength\tlength_up\tkl\tentropy\tclip_frac\tgrad_norm\ttokens\tseconds\ttok_per_s'
  printf '\tmismatch_k3\tmismatch_dlogp_mean\tmismatch_dlogp_max\tmismatch_trunc_masked\treward_timeouts\treward_errors\n'
  local n last; last=$(last_step "$1")
  for ((n = 1; n <= last; n++)); do [ -f "$1/metrics/$n.msgpack.zst" ] && step_row "$1" "$n"; done
}
evals_tsv() {
  printf 'step\tmean\tpass\n'
  for f in "$1"/metrics/eval-*.msgpack.zst; do
    [ -f "$f" ] || continue
    local n=${f##*/eval-}; n=${n%.msgpack.zst}
    eval_line "$1" "$n" | awk -v s="$n" '{ printf "%d\t%s\t%s\n", s, $1, $2 }'
  done | sort -n
}
