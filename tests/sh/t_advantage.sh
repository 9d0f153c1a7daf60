# t_advantage.sh - skpo-advantage as a black box: whole steps through the tool,
# the state folder (CURRENT, last two kept, untouched on failure, re-runs give
# identical state), and the errors it must report. Fixtures: tests/fixtures/adv
# (built by make_fixtures.py; step 1 has prompts p1 6/8, p2 3/8, p3 0/8 correct,
# step 2 has p1 3/8 and p4 8/8). Per-record numbers are checked in
# tests/unit/test_advantage.c; here the metrics summary line is.
. "$(dirname "$0")/lib.sh"
A="$FIX/adv"

mkdir -p "$TMP/a"
t "skpo step saves the state of the next step and names it in CURRENT" sh -c '
  skpo-advantage --mode skpo --state "$0/s" "$1/skpo_step1.msgpack.zst" >"$0/o" &&
  [ -s "$0/o" ] && [ "$(cat "$0/s/CURRENT")" = state-000001.msgpack.zst ] && [ -f "$0/s/state-000001.msgpack.zst" ]' "$TMP/a" "$A"

mkdir -p "$TMP/b"
t "metrics of a skpo step: reward mean, accuracy, degenerate groups, adv spread" sh -c '
  skpo-advantage --mode skpo --state "$0/s" --summary "$1/skpo_step1.msgpack.zst" 2>"$0/err" >/dev/null &&
  grep -q " reward_mean=-0.25 accuracy=0.375 groups=3 degenerate_frac=0.333333 " "$0/err" &&
  grep -q " adv_up_std=0.816497 " "$0/err" && grep -q " len_up_mean=4 len_down_mean=20 " "$0/err"' "$TMP/b" "$A"

t "second step sees one revisit at rho_max without a model" sh -c '
  skpo-advantage --mode skpo --state "$0/s" --summary "$1/skpo_step2.msgpack.zst" 2>"$0/err" >/dev/null &&
  grep -q " step=1 " "$0/err" && grep -q " rho_mean=0.96 " "$0/err" && grep -q " revisits=1 rho_clip_frac=1 tracker_prompts=4" "$0/err" &&
  [ "$(cat "$0/s/CURRENT")" = state-000002.msgpack.zst ] && [ -f "$0/s/state-000001.msgpack.zst" ]' "$TMP/b" "$A"

t "re-running step 1 from its kept state reproduces the state of step 2 byte for byte" sh -c '
  cp "$0/s/state-000002.msgpack.zst" "$0/first" &&
  skpo-advantage --mode skpo --state "$0/s" --step 1 "$1/skpo_step2.msgpack.zst" >/dev/null &&
  cmp "$0/first" "$0/s/state-000002.msgpack.zst" && [ "$(cat "$0/s/CURRENT")" = state-000002.msgpack.zst ]' "$TMP/b" "$A"

t "a step whose state is no longer kept is an error" sh -c '
  ! skpo-advantage --mode skpo --state "$0/s" --step 0 "$1/skpo_step2.msgpack.zst" >/dev/null 2>"$0/err" &&
  grep -q "no state for step 0" "$0/err"' "$TMP/b" "$A"

mkdir -p "$TMP/c"
skpo-advantage --mode skpo --state "$TMP/c/s" "$A/skpo_step1.msgpack.zst" >/dev/null 2>&1
cp "$TMP/c/s/state-000001.msgpack.zst" "$TMP/c/keep"
# fails with exit 1, the message matching $2, and the state of step 1 untouched
fails_keeping_state() {
  in=$1 want=$2; shift 2
  skpo-advantage --state "$TMP/c/s" "$@" "$in" >"$TMP/c/out" 2>"$TMP/c/err"; rc=$?
  [ "$rc" = 1 ] || { echo "exit $rc, want 1" >&2; return 1; }
  grep -q "$want" "$TMP/c/err" || { cat "$TMP/c/err" >&2; return 1; }
  [ "$(cat "$TMP/c/s/CURRENT")" = state-000001.msgpack.zst ] && cmp "$TMP/c/keep" "$TMP/c/s/state-000001.msgpack.zst" &&
    [ ! -e "$TMP/c/s/state-000002.msgpack.zst" ]
}
t "missing downstream record fails naming the group and keeps the state" \
  fails_keeping_state "$A/skpo_missing.msgpack.zst" "group 'u-p2' (prompt 'p2') has 7 downstream records, expected 8" --mode skpo
t "NaN reward fails naming the record and keeps the state" \
  fails_keeping_state "$A/skpo_nan.msgpack.zst" "'d-p1-3' has a non-finite reward" --mode skpo
t "record without a reward fails and keeps the state" \
  fails_keeping_state "$A/skpo_noreward.msgpack.zst" "'d-p3-0' has no 'reward' .*run skpo-reward first" --mode skpo
head -c 200 "$A/skpo_step2.msgpack.zst" >"$TMP/c/trunc.zst"
t "truncated input fails and keeps the state" fails_keeping_state "$TMP/c/trunc.zst" "." --mode skpo
t "stdout that cannot be written fails before the state is saved" sh -c '
  ! skpo-advantage --mode skpo --state "$0/s" "$1/skpo_step2.msgpack.zst" >/dev/full 2>/dev/null &&
  [ "$(cat "$0/s/CURRENT")" = state-000001.msgpack.zst ] && [ ! -e "$0/s/state-000002.msgpack.zst" ]' "$TMP/c" "$A"
t "a step with no records of the mode fails" \
  fails_keeping_state "$A/skpo_step1.msgpack.zst" "no full records in the input (is --mode spo right?)" --mode spo
t "group of the wrong size fails in grpo mode" \
  fails_keeping_state "$A/grpo_full.msgpack.zst" "has 8 full records, expected 4" --mode grpo --group 4

mkdir -p "$TMP/d"
t "dapo drops groups whose rewards are all equal and says how many" sh -c '
  skpo-advantage --mode dapo --state "$0/s" --summary "$1/grpo_full.msgpack.zst" >"$0/o" 2>"$0/err" &&
  grep -q "dropped 1 groups" "$0/err" && grep -q " dropped_groups=1 " "$0/err" && grep -q " adv_full_std=0.935413 " "$0/err"' "$TMP/d" "$A"
t "dapo output is smaller than grpo output by the dropped group" sh -c '
  skpo-advantage --mode grpo --state "$0/g" "$1/grpo_full.msgpack.zst" >"$0/og" 2>/dev/null &&
  skpo-advantage --mode grpo --state "$0/g2" --summary "$1/grpo_full.msgpack.zst" 2>&1 >/dev/null | grep -q " dropped_groups=0 " &&
  [ "$(zstd -dc "$0/o" | wc -c)" -lt "$(zstd -dc "$0/og" | wc -c)" ]' "$TMP/d" "$A"
t "drgrpo leaves advantages unscaled" sh -c '
  skpo-advantage --mode drgrpo --state "$0/dr" --summary "$1/grpo_full.msgpack.zst" 2>&1 >/dev/null | grep -q " adv_full_mean=0 adv_full_std=0.692219 "' "$TMP/d" "$A"
t "spo normalises one response per prompt over the batch" sh -c '
  skpo-advantage --mode spo --state "$0/spo" --summary "$1/spo_full.msgpack.zst" 2>&1 >/dev/null |
  grep -q " groups=4 adv_full_mean=0 adv_full_std=0.866025 "' "$TMP/d" "$A"
t "unknown mode is a usage error" expect_exit 2 skpo-advantage --mode ppo --state "$TMP/d/x" "$A/spo_full.msgpack.zst"
t "missing --state is a usage error" expect_exit 2 skpo-advantage --mode spo "$A/spo_full.msgpack.zst"
t "metrics are appended to the --metrics file" sh -c '
  skpo-advantage --mode spo --state "$0/m" --metrics "$0/metrics.zst" "$1/spo_full.msgpack.zst" >/dev/null &&
  skpo-advantage --mode spo --state "$0/m" --metrics "$0/metrics.zst" "$1/spo_full.msgpack.zst" >/dev/null &&
  [ "$(zstd -dc "$0/metrics.zst" | grep -a -o "skpo-advantage" | wc -l)" = 2 ]' "$TMP/d" "$A"
t "a step re-run after a kill before the state was saved does not duplicate its metrics" sh -c '
  mkdir -p "$0/k" && skpo-advantage --mode spo --state "$0/k" --metrics "$0/k.zst" "$1/spo_full.msgpack.zst" >/dev/null &&
  rm -rf "$0/k" && mkdir -p "$0/k" &&
  skpo-advantage --mode spo --state "$0/k" --metrics "$0/k.zst" "$1/spo_full.msgpack.zst" >/dev/null &&
  skpo-advantage --mode spo --state "$0/k" --metrics "$0/k.zst" "$1/spo_full.msgpack.zst" >/dev/null &&
  [ "$(skpo-cat --where tool=skpo-advantage --fields step "$0/k.zst" | tr -d "\n ")" = "{\"step\":1}{\"step\":2}" ] ||
  skpo-cat "$0/k.zst"' "$TMP/d" "$A"

mkdir -p "$TMP/e"
M="$FIX/model/qwen2_untied"
# with_seg_div STATE MODEL IN OUT: IN's records with `seg_div` on each up record
# whose prompt has a stored segment in STATE, computed here independently of
# skpo-sample --rescore: skpo-score the stored segment under MODEL, D = mean |now - stored|.
with_seg_div() {
  cur="$1/$(cat "$1/CURRENT")"
  skpo-cat --where kind=state "$cur" |
    awk '{ p = $0; sub(/.*"pid":"/, "", p); sub(/".*/, "", p)
           a = $0; sub(/.*"seg_prompt":\[/, "", a); sub(/\].*/, "", a)
           b = $0; sub(/.*"seg_tokens":\[/, "", b); sub(/\].*/, "", b)
           printf "{\"kind\":\"up\",\"pid\":\"%s\",\"prompt\":[%s],\"tokens\":[%s]}\n", p, a, b }' |
    skpo-cat --pack | skpo-score --model "$2" --threads 1 | skpo-cat --where kind=up --fields pid,ref_logp >"$4.now" &&
  skpo-cat --where kind=state --fields pid,seg_logp "$cur" >"$4.old" && skpo-cat "$3" >"$4.in" &&
  awk 'function arr(l, f,   x) { x = l; sub(".*\"" f "\":\\[", "", x); sub(/\].*/, "", x); return x }
       function pid(l,   x) { x = l; sub(/.*"pid":"/, "", x); sub(/".*/, "", x); return x }
       FNR == 1 { file++ }
       file == 1 { now[pid($0)] = arr($0, "ref_logp"); next }
       file == 2 { old[pid($0)] = arr($0, "seg_logp"); next }
       /"kind":"up"/ && (pid($0) in now) { k = pid($0); n = split(now[k], a, ","); split(old[k], b, ","); s = 0
         for (i = 1; i <= n; i++) s += (a[i] > b[i] ? a[i] - b[i] : b[i] - a[i])
         sub(/}$/, sprintf(",\"seg_div\":%.17g}", s / n)) }
       { print }' "$4.now" "$4.old" "$4.in" | skpo-cat --pack --no-meta >"$4"
}
t "step 1 for the rescoring tests" sh -c '
  skpo-advantage --mode skpo --state "$0/s" "$1/skpo_step1.msgpack.zst" >/dev/null' "$TMP/e" "$A"
with_seg_div "$TMP/e/s" "$M" "$A/skpo_step2.msgpack.zst" "$TMP/e/step2.zst"
t "with --rescored a revisit's rho comes from seg_div: the values model-loading rescoring gave (rho 0.9339, D 4.932)" sh -c '
  skpo-advantage --mode skpo --state "$0/s" --rescored --tau 50 --summary "$0/step2.zst" 2>"$0/err" >/dev/null &&
  grep -q " rho_mean=0.9339" "$0/err" && grep -q " kl_d_mean=4.932" "$0/err" && grep -q " rho_clip_frac=0 " "$0/err" ||
  { cat "$0/err"; exit 1; }' "$TMP/e" "$A"
t "with --rescored and the default tau rho sits on rho_min" sh -c '
  skpo-advantage --mode skpo --state "$0/s" --step 1 --tau 8 --rescored --summary "$0/step2.zst" 2>"$0/err" >/dev/null &&
  grep -q " rho_mean=0.875 " "$0/err" && grep -q " rho_clip_frac=1 " "$0/err"' "$TMP/e" "$A"
t "--rescored with a revisit lacking seg_div fails naming the record, nothing written" sh -c '
  ! skpo-advantage --mode skpo --state "$0/s" --step 1 --rescored "$1/skpo_step2.msgpack.zst" >"$0/o" 2>"$0/err" &&
  grep -q "no .seg_div." "$0/err" && [ ! -s "$0/o" ]' "$TMP/e" "$A"
t "--model is refused with a pointer to skpo-sample --rescore (advantage loads no model)" sh -c '
  ! skpo-advantage --mode skpo --state "$0/s2" --model "$1" "$2/skpo_step1.msgpack.zst" >"$0/o" 2>"$0/err" &&
  grep -q "rescore" "$0/err" && [ ! -s "$0/o" ] && [ ! -e "$0/s2/CURRENT" ]' "$TMP/e" "$M" "$A"

# --init-state: the first state of a run, written by the tool that reads it (the
# pipelines used to print its meta record by hand).
init_state_loads() {
  skpo-advantage --init-state --state "$TMP/i" --step 3 --tau 2 --rho-min 0.5 --lq-init 24 >"$TMP/i.out" 2>"$TMP/i.err" || { cat "$TMP/i.err"; return 1; }
  [ ! -s "$TMP/i.out" ] && [ "$(cat "$TMP/i/CURRENT")" = state-000003.msgpack.zst ] || { echo "not state 3 or stdout written"; return 1; }
  skpo-cat "$TMP/i/state-000003.msgpack.zst" >"$TMP/i.json"
  for kv in '"step":3' '"tau":2' '"rho_min":0.5' '"rho_max":0.96' '"eps":0.05' '"len_init":24' '"prompts":0'; do
    grep -q "$kv" "$TMP/i.json" || { echo "no $kv in:"; cat "$TMP/i.json"; return 1; }
  done
  # a step continues from it: the saved state is step 4 with the same parameters
  skpo-advantage --mode spo --state "$TMP/i" "$A/spo_full.msgpack.zst" >/dev/null 2>"$TMP/i.err" || { cat "$TMP/i.err"; return 1; }
  [ "$(cat "$TMP/i/CURRENT")" = state-000004.msgpack.zst ] && skpo-cat "$TMP/i/state-000004.msgpack.zst" | grep -q '"tau":2'
}
t "--init-state writes an empty tracker of step N with the given parameters, and the next step continues it" init_state_loads
t "--init-state takes no --mode and needs --state" sh -c '
  skpo-advantage --init-state --mode grpo --state "$0/j" 2>/dev/null; [ $? = 2 ] || exit 1
  skpo-advantage --init-state 2>/dev/null; [ $? = 2 ] && [ ! -e "$0/j" ]' "$TMP"
