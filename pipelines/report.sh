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
    | skpo-eval --max-reward-failures "${MAX_REWARD_FAILURES:-$(conf_default MAX_REWARD_FAILURES)}" 2>"$tmp/table.txt" >"$tmp/metrics.msgpack.zst"
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

# revisit_rate RUN: "share draws_per_prompt" of the run's committed steps, as the
# tracker saw them (skpo-advantage's metrics): the share of drawn prompts that had
# been drawn at an earlier step, and draws per distinct prompt drawn.
revisit_rate() {
  local n last; last=$(last_step "$1")
  for ((n = 1; n <= last; n++)); do [ -f "$1/metrics/$n.msgpack.zst" ] && echo "$1/metrics/$n.msgpack.zst"; done |
    xargs -r skpo-cat --where tool=skpo-advantage --fields groups,revisits,tracker_prompts 2>/dev/null | awk "$JNUM"'
      { g += jnum($0, "groups"); r += jnum($0, "revisits"); p = jnum($0, "tracker_prompts") }
      END { if (g > 0 && p > 0) printf "%.3f %.2f\n", r / g, g / p; else print "nan nan" }'
}

# PAIRED_AWK: paired statistics over seeds. Input lines "method seed value"; awk
# variable pairs = "A:B A:C ..."; prints per pair "A - B: mean M sd S (paired t T,
# p P, N seeds) A ahead on K, B on L" and, into the file named by tsv (if set),
# "A-B<TAB>mean<TAB>half-width of the 95% interval". p is two-sided from Student's t
# with N - 1 degrees of freedom (regularised incomplete beta, Numerical Recipes' betacf).
PAIRED_AWK='
  function abs(x) { return x < 0 ? -x : x }
  function lgam(x,   y, t, s, j, c) { split("76.18009172947146 -86.50532032941677 24.01409824083091 -1.231739572450155 0.001208650973866179 -0.000005395239384953", c, " ")
    y = x; t = x + 5.5; t -= (x + 0.5) * log(t); s = 1.000000000190015
    for (j = 1; j <= 6; j++) s += c[j] / ++y
    return -t + log(2.5066282746310005 * s / x) }
  function betacf(a, b, x,   m, m2, aa, c, d, del, h) { c = 1; d = 1 - (a + b) * x / (a + 1); if (abs(d) < 1e-30) d = 1e-30; d = 1 / d; h = d
    for (m = 1; m <= 300; m++) { m2 = 2 * m
      aa = m * (b - m) * x / ((a - 1 + m2) * (a + m2)); d = 1 + aa * d; if (abs(d) < 1e-30) d = 1e-30
      c = 1 + aa / c; if (abs(c) < 1e-30) c = 1e-30; d = 1 / d; h *= d * c
      aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + 1 + m2)); d = 1 + aa * d; if (abs(d) < 1e-30) d = 1e-30
      c = 1 + aa / c; if (abs(c) < 1e-30) c = 1e-30; d = 1 / d; del = d * c; h *= del; if (abs(del - 1) < 3e-12) break }
    return h }
  function ibeta(a, b, x,   bt) { if (x <= 0) return 0; if (x >= 1) return 1
    bt = exp(lgam(a + b) - lgam(a) - lgam(b) + a * log(x) + b * log(1 - x))
    return x < (a + 1) / (a + b + 2) ? bt * betacf(a, b, x) / a : 1 - bt * betacf(b, a, 1 - x) / b }
  function tp(t, nu) { return ibeta(nu / 2, 0.5, nu / (nu + t * t)) }
  function t975(nu,   lo, hi, mid, i) { lo = 0; hi = 1000; for (i = 0; i < 80; i++) { mid = (lo + hi) / 2; if (tp(mid, nu) > 0.05) lo = mid; else hi = mid } return mid }
  NF == 3 { v[$1 SUBSEP $2] = $3; seeds[$2] = 1 }
  END { np = split(pairs, P, " ")
    for (i = 1; i <= np; i++) { split(P[i], ab, ":"); a = ab[1]; b = ab[2]; n = s = s2 = wa = wb = 0
      for (sd in seeds) if ((a SUBSEP sd) in v && (b SUBSEP sd) in v) { d = v[a SUBSEP sd] - v[b SUBSEP sd]; n++; s += d; s2 += d * d; wa += d > 0; wb += d < 0 }
      if (n < 2) continue
      m = s / n; var = (s2 - s * s / n) / (n - 1); sdv = var > 0 ? sqrt(var) : 0
      t = sdv > 0 ? m / (sdv / sqrt(n)) : 0
      pv = sdv > 0 ? tp(t, n - 1) : 1; hw = t975(n - 1) * sdv / sqrt(n)
      printf "%s - %s: mean %+.3f sd %.3f (paired t %.2f, p %.3f, %d seeds) %s ahead on %d, %s on %d\n", a, b, m, sdv, t, pv, n, a, wa, b, wb
      if (tsv != "") printf("%s-%s\t%.4f\t%.4f\n", a, b, m, hw) > tsv } }'
