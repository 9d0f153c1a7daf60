#!/bin/sh
# t_algodoc.sh - docs/algorithm.md section 2 says what pipelines/config/defaults.conf
# sets: every row that names keys gives their defaults in the same order (numbers
# compare as numbers), the algorithm's keys all have a row, and a key the run does
# not read (MAX_PROMPT: the prompt cap is skpo-prep's) is refused by train.sh.
. "$(dirname "$0")/lib.sh"
DOC="$TOP/docs/algorithm.md"
CONF="$TOP/pipelines/config/defaults.conf"
export DOC CONF

# rows "KEY<TAB>documented value" of the defaults table
awk -F'|' '/^## 2\. Defaults/ { on = 1; next } /^## / { on = 0 }
  on && NF >= 5 && $3 ~ /`[A-Z][A-Z0-9_]*`/ {
    nk = split($3, k, ","); nv = split($4, v, ",")
    if (nk != nv) { print "ROW-MISMATCH\t" $0; next }
    for (i = 1; i <= nk; i++) { key = k[i]; gsub(/[` ]/, "", key); val = v[i]; gsub(/^ +| +$/, "", val); print key "\t" val } }' \
  "$DOC" >"$TMP/rows"

t "every keyed row of docs/algorithm.md's defaults table gives as many values as keys" sh -c '
  ! grep -q "^ROW-MISMATCH" "$0" || { grep "^ROW-MISMATCH" "$0"; exit 1; }' "$TMP/rows"

t "docs/algorithm.md's defaults table gives defaults.conf's value of every key it names" sh -c '
  bad=0
  while IFS="	" read -r key doc; do
    [ "$key" = ROW-MISMATCH ] && continue
    conf=$(sh -c ". \"\$1\"; eval \"printf %s \\\"\\\${$key-UNSET}\\\"\"" _ "$CONF")
    awk -v a="$doc" -v b="$conf" "BEGIN {
      num = \"^-?[0-9]+(\\\\.[0-9]*)?([eE][-+]?[0-9]+)?\$\"
      exit !((a ~ num && b ~ num) ? a + 0 == b + 0 : a == b) }" ||
      { echo "$key: docs/algorithm.md says \"$doc\", defaults.conf says \"$conf\""; bad=1; }
  done <"$0"
  exit $bad' "$TMP/rows"

# The algorithm's knobs: each must have its row (a new key documented nowhere fails here).
t "the defaults table has a row for each of the algorithm's keys" sh -c '
  for k in STEPS PROMPTS MINIBATCH LR WARMUP WEIGHT_DECAY BETA1 BETA2 ADAM_EPS GRAD_CLIP EPOCHS MAX_TOKENS G CUT LQ_INIT \
      RHO_MIN RHO_MAX TAU_HALF RHO_RESCORE PRIO_EPS LAYOUT REWARD_UP SELECT UP_WARMUP W_UP W_DOWN CLIP_LOW CLIP_HIGH \
      CLIP_HIGH_UP UP_DUAL_CLIP FULL_DUAL_CLIP OLD_LOGP MISMATCH KL_BETA ENT_COEF TEMPERATURE TOP_P EVAL_TEMPERATURE \
      EVAL_TOP_P REWARD_CMD; do
    cut -f1 "$0" | grep -qx "$k" || { echo "no row for $k"; exit 1; }
  done' "$TMP/rows"

t "train.sh refuses MAX_PROMPT (no run stage reads it: skpo-prep caps prompts), naming the key" sh -c '
  ! bash "$0/pipelines/train.sh" "$1/r" MAX_PROMPT=512 2>"$1/mp.err" && grep -q "unknown config key .MAX_PROMPT." "$1/mp.err" &&
  [ ! -e "$1/r" ] || { cat "$1/mp.err"; exit 1; }' "$TOP" "$TMP"
