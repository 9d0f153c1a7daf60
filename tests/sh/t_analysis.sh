#!/bin/sh
# t_analysis.sh - the analysis tools (skpo-signsim, skpo-cut, skpo-analyze) and
# the pipelines/analysis scripts. The model-driven pipelines run only with
# SKPO_TEST_LONG=1 (make test-long); otherwise they print a visible SKIP.
. "$(dirname "$0")/lib.sh"
AFIX="$FIX/analysis"
export TMP TOP FIX AFIX # the sh -c bodies below need them

# --- skpo-signsim ---------------------------------------------------------------
t "signsim --help goes to stdout with an empty stderr" sh -c '
  skpo-signsim --help >"$TMP/h.out" 2>"$TMP/h.err" && grep -q "usage: skpo-signsim" "$TMP/h.out" && [ ! -s "$TMP/h.err" ]'
t "signsim prints one row per N plus the GRPO reference" sh -c '
  skpo-signsim --trials 2000 --n 8,64,512 >"$TMP/s.txt" && [ "$(grep -c " mc$" "$TMP/s.txt")" = 3 ] &&
  [ "$(grep -c " grpo$" "$TMP/s.txt")" = 1 ]'
t "signsim is reproducible for a seed and changes with it" sh -c '
  skpo-signsim --trials 3000 --seed 5 >"$TMP/a" && skpo-signsim --trials 3000 --seed 5 >"$TMP/b" &&
  skpo-signsim --trials 3000 --seed 6 >"$TMP/c" && cmp -s "$TMP/a" "$TMP/b" && ! cmp -s "$TMP/a" "$TMP/c"'
t "signsim small spread stays below half at N=512" sh -c '
  f=$(skpo-signsim --trials 4000 --n 512 --dist band --centre 0.5 --spread 0.1 | awk "\$1 == 512 { print \$2 }") &&
  awk -v f="$f" "BEGIN { exit !(f < 0.5) }"'
t "signsim --records writes metrics records and the table to stderr" sh -c '
  skpo-signsim --trials 500 --n 8,16 --records >"$TMP/r.zst" 2>"$TMP/r.err" && grep -q "grpo" "$TMP/r.err" &&
  [ "$(zstd -dc "$TMP/r.zst" | grep -ac correct_frac)" -ge 1 ] && zstd -t -q "$TMP/r.zst"'
t "signsim rejects a band outside [0,1] with exit 2" expect_exit 2 skpo-signsim --dist band --centre 0.95 --spread 0.2
t "signsim rejects a junk N list with exit 2" expect_exit 2 skpo-signsim --n 8,zero
t "signsim rejects an unknown distribution with exit 2" expect_exit 2 skpo-signsim --dist cauchy
t "signsim.sh writes the table, tsv and plot" sh -c '
  sh "$TOP/pipelines/analysis/signsim.sh" --out "$TMP/ss" --trials 300 --spreads 0.1,uniform --n 8,64 >/dev/null 2>&1 &&
  [ "$(cut -f7 "$TMP/ss/signsim.tsv" | grep -c "^mc$")" = 4 ] && [ "$(cut -f7 "$TMP/ss/signsim.tsv" | grep -c "^grpo$")" = 2 ] &&
  { ! command -v gnuplot >/dev/null || [ -s "$TMP/ss/signsim.png" ]; }'

# --- skpo-cut ---------------------------------------------------------------------
# Expected segments (cut*.expected.jsonl, checked by hand): responses of 12, 7
# and 4 tokens cut at 0.25, 0.5, 1 keep floor(r * len) = 3,6,12 / 1,3,7 / 1,2,4
# tokens; text, reward, correct, pred and finish are gone; the source outcome
# moves to src_correct / src_reward (p1:0:2 has only a reward of +1).
CUTF=kind,uid,gid,pid,rel,seg,tokens,logp,src,src_gid,src_len,src_correct,src_reward,label,text,reward,correct,pred,finish
export CUTF
t "cut makes one up record per response and position, floor(r * length) tokens each" sh -c '
  skpo-cut --at 0.25,0.5,1 "$AFIX/full.msgpack.zst" | skpo-cat --where kind=up --fields "$CUTF" >"$TMP/c.jsonl" &&
  diff "$AFIX/cut.expected.jsonl" "$TMP/c.jsonl"'
t "cut --empty gives zero-token segments with the position and label kept" sh -c '
  skpo-cut --at 0.5 --empty --label uncond "$AFIX/full.msgpack.zst" | skpo-cat --where kind=up --fields "$CUTF" >"$TMP/c.jsonl" &&
  diff "$AFIX/cut-empty.expected.jsonl" "$TMP/c.jsonl"'
t "cut passes other records through, meta included" sh -c '
  skpo-cut --at 0.5 "$AFIX/full.msgpack.zst" >"$TMP/c.zst" &&
  [ "$(skpo-cat --where kind=prompt --count "$TMP/c.zst")" = 1 ] && [ "$(skpo-cat --where kind=meta --count "$TMP/c.zst")" = 2 ] &&
  [ "$(skpo-cat --where kind=full --count "$TMP/c.zst")" = 0 ]'
t "cut --cuts-only drops the other records" sh -c '
  skpo-cut --at 0.5 --cuts-only "$AFIX/full.msgpack.zst" >"$TMP/c.zst" &&
  [ "$(skpo-cat --count "$TMP/c.zst")" = 4 ] && [ "$(skpo-cat --where kind=up --count "$TMP/c.zst")" = 3 ]' # + own meta
t "cut --only-correct keeps correct responses (correct, or reward > 0)" sh -c '
  [ "$(skpo-cut --at 0.25,0.5,1 --only-correct "$AFIX/full.msgpack.zst" | skpo-cat --where kind=up --count)" = 6 ] &&
  [ "$(skpo-cut --at 0.5 --only-correct "$AFIX/full.msgpack.zst" | skpo-cat --where src=p1:0:1 --count)" = 0 ]'
t "cut reads stdin" sh -c '
  [ "$(skpo-cut --at 1 <"$AFIX/full.msgpack.zst" | skpo-cat --where kind=up --count)" = 3 ]'
t "cut without --at is a usage error" expect_exit 2 skpo-cut "$AFIX/full.msgpack.zst"
t "cut rejects a position above 1" expect_exit 2 skpo-cut --at 0.5,1.5 "$AFIX/full.msgpack.zst"
t "cut fails on a response without prompt ids" expect_exit 1 skpo-cut --at 0.5 "$AFIX/signs.msgpack.zst"
t "cut fails on a truncated stream" sh -c '
  head -c 100 "$AFIX/full.msgpack.zst" >"$TMP/trunc.zst"; skpo-cut --at 0.5 "$TMP/trunc.zst" >/dev/null 2>"$TMP/e"
  [ $? = 1 ] && grep -q "^skpo-cut: " "$TMP/e"'

# --- skpo-analyze (numbers hand-computed in tests/fixtures/analysis/make_fixtures.py) ---
# val TABLE LABEL GROUP COLUMN: a cell of skpo-analyze's table; near A B: |A - B| <= 1e-5
cat >"$TMP/helpers.sh" <<'LIB'
val() { awk -v l="$2" -v g="$3" -v c="$4" '!/^#/ && $1 == l && $2 == g { print $c }' "$1"; }
near() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5) }'; }
LIB
t "analyze signs: GRPO outcomes vs the all-N reference" sh -c '
  . "$TMP/helpers.sh"; skpo-analyze signs --k 1,2,4 "$AFIX/signs.msgpack.zst" >"$TMP/s" &&
  near "$(val "$TMP/s" - grpo 6)" 1 && near "$(val "$TMP/s" - grpo 7)" 1 && near "$(val "$TMP/s" - grpo 8)" 0.5'
t "analyze signs: k=1 blocks vs leave-out reference" sh -c '
  . "$TMP/helpers.sh"; skpo-analyze signs --k 1,2,4 "$AFIX/signs.msgpack.zst" >"$TMP/s" &&
  near "$(val "$TMP/s" - mc_k=1 5)" 4 && near "$(val "$TMP/s" - mc_k=1 6)" 0.25 &&
  near "$(val "$TMP/s" - mc_k=1 7)" 0.416667 && near "$(val "$TMP/s" - mc_k=1 8)" 0.333333 &&
  near "$(val "$TMP/s" - mc_k=1:c=2/3 6)" 0.25'
t "analyze signs: k=2 and no k above N/2" sh -c '
  . "$TMP/helpers.sh"; skpo-analyze signs --k 1,2,4 "$AFIX/signs.msgpack.zst" >"$TMP/s" &&
  near "$(val "$TMP/s" - mc_k=2 6)" 0 && near "$(val "$TMP/s" - mc_k=2 7)" 0.333333 && ! grep -q "mc_k=4" "$TMP/s"'
# hand computation (centred advantages, mean |est - ref| over segments): grpo p1 2/9, p2 1/2,
# both 1/3; mc k=1 p1 40/9 over 12 segments, with p2 (4 exact zeros) 40/144; k=2 p1 8/3 over 6
t "analyze signs: adv_mae of MC and GRPO estimates against the reference (Fig. 8)" sh -c '
  . "$TMP/helpers.sh"; skpo-analyze signs --k 1,2,4 "$AFIX/signs.msgpack.zst" >"$TMP/s" &&
  near "$(val "$TMP/s" - grpo 9)" 0.333333 && near "$(val "$TMP/s" - grpo:c=2/3 9)" 0.222222 &&
  near "$(val "$TMP/s" - mc_k=1 9)" 0.277778 && near "$(val "$TMP/s" - mc_k=1:c=2/3 9)" 0.370370 &&
  near "$(val "$TMP/s" - mc_k=1:c=1/2 9)" 0 && near "$(val "$TMP/s" - mc_k=2 9)" 0.444444'
t "analyze shortcut: diversity, all-same, accuracy, length per label" sh -c '
  . "$TMP/helpers.sh"; skpo-analyze shortcut "$AFIX/shortcut.msgpack.zst" >"$TMP/s" &&
  near "$(val "$TMP/s" skip all 4)" 2 && near "$(val "$TMP/s" skip all 5)" 2 && near "$(val "$TMP/s" skip all 6)" 0.5 &&
  near "$(val "$TMP/s" skip all 7)" 0.75 && near "$(val "$TMP/s" skip all 8)" 16.5 && near "$(val "$TMP/s" skip all 9)" 6 &&
  near "$(val "$TMP/s" continual all 5)" 1 && near "$(val "$TMP/s" continual all 6)" 1 &&
  near "$(val "$TMP/s" continual all 7)" 0 && near "$(val "$TMP/s" continual all 8)" 2'
t "analyze implicit: rates normalised across methods per problem" sh -c '
  . "$TMP/helpers.sh"; skpo-analyze implicit "$AFIX/implicit.msgpack.zst" >"$TMP/s" &&
  near "$(val "$TMP/s" A all 4)" 2 && near "$(val "$TMP/s" A all 5)" 0.875 && near "$(val "$TMP/s" A all 6)" 0.125 &&
  near "$(val "$TMP/s" B all 5)" 0.625 && near "$(val "$TMP/s" B all 6)" -0.125 && near "$(val "$TMP/s" B all 7)" -0.499998 &&
  [ "$(grep -c "0.2500" "$TMP/s")" = 0 ]' # q1 at 0.25 has one method only: no row
t "analyze --records writes metrics records, table on stderr" sh -c '
  skpo-analyze shortcut --records "$AFIX/shortcut.msgpack.zst" >"$TMP/r.zst" 2>"$TMP/e" && grep -q "^  skip" "$TMP/e" &&
  [ "$(zstd -dc "$TMP/r.zst" | grep -ac accuracy)" -ge 1 ]'
t "analyze fails on down records that were not cut" sh -c '
  skpo-analyze shortcut "$AFIX/norel.msgpack.zst" 2>"$TMP/e"; [ $? = 1 ] && grep -q skpo-cut "$TMP/e"'
t "analyze fails on continuations without a reward" sh -c '
  skpo-analyze shortcut "$AFIX/noreward.msgpack.zst" 2>"$TMP/e"; [ $? = 1 ] && grep -q skpo-reward "$TMP/e"'
t "analyze rejects an unknown analysis" expect_exit 2 skpo-analyze variance "$AFIX/signs.msgpack.zst"
t "analyze implicit with one method has no rows and says so" expect_exit 1 skpo-analyze implicit "$AFIX/signs.msgpack.zst"

t "sign_empirical.sh fails on a missing checkpoint and leaves no partial stream" sh -c '
  sh "$TOP/pipelines/analysis/sign_empirical.sh" --model "$TMP/nope" --prompts "$AFIX/prompts.msgpack.zst" \
    --out "$TMP/fail" >/dev/null 2>"$TMP/e"; rc=$?
  [ $rc != 0 ] && grep -q "skpo-sample: " "$TMP/e" && [ -z "$(ls "$TMP/fail")" ]'
t "shortcut.sh without --model is a usage error" expect_exit 2 sh "$TOP/pipelines/analysis/shortcut.sh" --prompts x

# --- the pipelines on a real (tiny) model: make test-long only -----------------------
# A tiny Qwen2 fine-tuned on skpo-synth problems (about 20% correct: mixed groups,
# see tests/fixtures/analysis/make_sft_model.sh) and 8 held-out problems.
M="$AFIX/sft-model" P="$AFIX/prompts.msgpack.zst"
export M P OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
A="$TOP/pipelines/analysis"
if [ "${SKPO_TEST_LONG:-0}" != 1 ]; then
  skip "analysis pipelines on a model (sign_empirical, shortcut, implicit_adv)" "set SKPO_TEST_LONG=1 (make test-long)"
elif ! command -v skpo-sample >/dev/null || ! command -v skpo-splice >/dev/null || ! command -v skpo-reward >/dev/null; then
  skip "analysis pipelines on a model" "needs skpo-sample, skpo-splice and skpo-reward"
else
  export A
  t "sign_empirical.sh: rows for GRPO and each k at every position" sh -c '
    sh "$A/sign_empirical.sh" --model "$M" --prompts "$P" --out "$TMP/se" --group 4 --n 8 --max-tokens 12 \
      --at 0.25,0.5 --k 1,2,4,8 >/dev/null 2>"$TMP/e" || { cat "$TMP/e"; exit 1; }
    for g in grpo mc_k=1 mc_k=2 mc_k=4; do
      [ "$(awk -v g=$g "\$2 == g" "$TMP/se/signs.txt" | wc -l)" = 2 ] || { echo "no rows for $g"; exit 1; }
    done
    ! grep -q "mc_k=8 " "$TMP/se/signs.txt" && [ -s "$TMP/se/continuations.msgpack.zst" ] &&
    [ "$(awk "!/^#/ && \$2 != \"grpo\"" "$TMP/se/mae.txt" | wc -l)" = 6 ] &&
    [ "$(awk "!/^#/ && \$2 == \"grpo\"" "$TMP/se/mae.txt" | wc -l)" = 2 ] &&
    { ! command -v gnuplot >/dev/null || [ -s "$TMP/se/mae-pos.png" ]; }'
  t "shortcut.sh: three layouts at six positions, same segments for continual and skip" sh -c '
    sh "$A/shortcut.sh" --model "$M" --prompts "$P" --out "$TMP/sc" --group 3 --max-tokens 12 >/dev/null 2>"$TMP/e" ||
      { cat "$TMP/e"; exit 1; }
    T=$TMP/sc/shortcut.txt
    for l in unconditional continual skip; do
      [ "$(awk -v l=$l "\$1 == l && \$2 == \"all\"" "$T" | wc -l)" = 6 ] || { echo "$l: not 6 positions"; exit 1; }
    done
    awk "!/^#/ && \$10 != 3 { exit 1 }" "$T" || { echo "not 3 continuations per segment"; exit 1; }
    awk "!/^#/ && \$1 == \"unconditional\" && \$9 != 0 { exit 1 }" "$T" || { echo "unconditional has a segment"; exit 1; }
    c=$(awk "!/^#/ && \$1 == \"continual\" { printf \"%s %s;\", \$3, \$9 }" "$T")
    s=$(awk "!/^#/ && \$1 == \"skip\" { printf \"%s %s;\", \$3, \$9 }" "$T")
    [ "$c" = "$s" ] || { echo "segment lengths differ: $c / $s"; exit 1; }
    { ! command -v gnuplot >/dev/null || [ -s "$TMP/sc/shortcut.png" ]; }'
  t "implicit_adv.sh: per-position advantages of the methods sum to zero" sh -c '
    sh "$A/implicit_adv.sh" --judge "$M" --prompts "$P" --method one="$M" --method two="$M" --out "$TMP/ia" \
      --k 3 --m 2 --responses 2 --max-tokens 12 --all-responses >/dev/null 2>"$TMP/e" || { cat "$TMP/e"; exit 1; }
    T=$TMP/ia/implicit.txt
    [ "$(awk "!/^#/" "$T" | wc -l)" = 6 ] &&
    awk "!/^#/ { s[\$3] += \$6 } END { for (r in s) if (s[r] > 1e-9 || s[r] < -1e-9) exit 1 }" "$T"'
  t "implicit_adv.sh cuts at the paper's 100 relative positions by default" sh -c '
    sh "$A/implicit_adv.sh" --judge "$M" --prompts "$P" --method one="$M" --method two="$M" --out "$TMP/ia100" \
      --m 1 --responses 1 --max-tokens 12 --all-responses >/dev/null 2>"$TMP/e" || { cat "$TMP/e"; exit 1; }
    [ "$(awk "!/^#/ && \$1 == \"one\" { print \$3 }" "$TMP/ia100/implicit.txt" | sort -u | wc -l)" = 100 ]'
  t "implicit_adv.sh needs two methods" expect_exit 2 sh "$A/implicit_adv.sh" --judge "$M" --prompts "$P" --method one="$M"
fi
