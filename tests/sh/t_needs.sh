#!/bin/sh
# t_needs.sh - every tool refuses a record it consumes that lacks a field it
# needs. Generated from the table skpo_needs[] (core/record/needs.c, printed by
# `skpo-cat --needs`): for every row (tool, options, kinds, fields), every kind
# and every field, the first record of that kind in a complete step
# (tests/fixtures/needs/base.txt) loses the field, has it nil, or (fields marked
# `+`) has it empty. The tool must exit 1 with one line
#   skpo-TOOL: KIND record 'UID' has no 'FIELD' (in 'STREAM' at record N)
# and the undamaged step must pass (so the refusal is the damage's doing). A
# row added to the table, or a field added to a row, is tested here without
# anyone writing its case; a tool this file cannot run fails until run_tool
# learns it.
. "$(dirname "$0")/lib.sh"
need_tools "needs" skpo-cat skpo-sample skpo-splice skpo-score skpo-reward skpo-advantage skpo-update skpo-eval \
  skpo-critique skpo-cut skpo-analyze
export SKPO_DEVICE=cpu OMP_NUM_THREADS=1
BASE="$FIX/needs/base.txt"
M=$UPD_MODEL                  # trains and scores (no tokenizer of its own)
Q="$FIX/sample/tiny-qwen2"     # samples (with a tokenizer)
TOK="$FIX/demo/tokenizer"

# lines KIND FIELDS HOW: base.txt as JSON lines, the first KIND record's FIELDS
# ("a|b": both) dropped (HOW=drop), null (nil), emptied (empty) or set to the
# JSON value V (HOW is =V); its position (from 1, after the meta record
# skpo-cat --pack writes first) into $TMP/at.
lines() {
  awk -v kind="$1" -v fields="$2" -v how="$3" -v at="$TMP/at" '
    BEGIN { nf = split(fields, f, "|"); for (i = 1; i <= nf; i++) want[f[i]] = 1 }
    function flush() {
      if (dmg && how ~ /^=/ && !set) body = body ",\"" fields "\":" substr(how, 2) # a value the record did not have
      if (body != "") { print "{" body "}"; n++ }; if (dmg) { done = 1; print n + 1 > at }; body = ""; dmg = 0; set = 0 }
    /^#/ { next }
    /^$/ { flush(); next }
    { k = $0; sub(/^"/, "", k); sub(/".*/, "", k); v = $0; sub(/^"[^"]*": /, "", v)
      if (k == "kind" && v == "\"" kind "\"" && !done) dmg = 1
      if (dmg && (k in want)) {
        set = 1
        if (how == "drop") next
        v = how ~ /^=/ ? substr(how, 2) : how == "nil" ? "null" : v ~ /^\[/ ? "[]" : "\"\""
      }
      body = body (body == "" ? "" : ",") "\"" k "\":" v }
    END { flush() }' "$BASE"
}
# stream KIND FIELDS HOW: that damage packed into $TMP/in.zst.
stream() { lines "$@" | skpo-cat --pack >"$TMP/in.zst"; }

# run_tool TOOL WHEN FILE: TOOL on FILE in a plain run with WHEN's options.
run_tool() {
  rt_tool=$1 rt_when=$2 rt_f=$3
  [ "$rt_when" = - ] && rt_when=
  # shellcheck disable=SC2086
  case $rt_tool in
    skpo-sample) skpo-sample --model "$Q" --prompts "$rt_f" --n 1 --max-tokens 2 $rt_when;;
    skpo-splice) skpo-splice --model "$Q" --group 1 --max-tokens 2 $rt_when <"$rt_f";;
    skpo-score) skpo-score --model "$M" $rt_when "$rt_f";;
    skpo-reward) skpo-reward $rt_when "$rt_f";;
    skpo-advantage) rm -rf "$TMP/st"; skpo-advantage --group 2 --state "$TMP/st" $rt_when "$rt_f";;
    skpo-update) rm -rf "$TMP/o"; skpo-update --model "$M" --out "$TMP/o" $UPD_FLAGS $rt_when "$rt_f";;
    skpo-eval) skpo-eval $rt_when "$rt_f";;
    skpo-critique)
      case $rt_when in
        critique*) skpo-critique $rt_when --tokenizer "$TOK" "$rt_f";;
        refine*) skpo-critique $rt_when --tokenizer "$TOK" --direct "$TMP/base.zst" "$rt_f";;
        *) skpo-critique $rt_when --direct "$TMP/base.zst" "$rt_f";;
      esac;;
    skpo-cut) skpo-cut --at 0.5 $rt_when "$rt_f";;
    skpo-analyze) skpo-analyze shortcut $rt_when "$rt_f";;
    *) echo "t_needs.sh cannot run $rt_tool: teach run_tool its plain command line" >&2; return 3;;
  esac
}

sandbox_ok() { bwrap --unshare-all --ro-bind /usr /usr --symlink usr/lib /lib --symlink usr/lib64 /lib64 /usr/bin/true 2>/dev/null; }

# refuses TOOL WHEN KIND FIELD HOW: the damaged step is refused in one line naming
# the record, the field and where it is.
refuses() {
  tool=$1 when=$2 kind=$3 field=$4 how=$5
  stream "$kind" "$field" "$how" || return 1
  n=$(cat "$TMP/at")
  run_tool "$tool" "$when" "$TMP/in.zst" >"$TMP/out" 2>"$TMP/err"; rc=$?
  case $field in
    *'|'*) a=${field%%|*} b=${field#*|}; what="has neither '$a' nor '$b'";;
    *) case $how in drop) what="has no '$field'";; nil) what=": field '$field' is nil";; *) what=": field '$field' is empty";; esac;;
  esac
  src="$TMP/in.zst"; [ "$tool" = skpo-splice ] && src=stdin
  want="$tool: $kind record( '[^']*')? ?$what \\(in '$src' at record $n(; [^)]*)?\\)"
  if [ "$rc" != 1 ] || [ "$(wc -l <"$TMP/err")" != 1 ] || ! grep -Eq "^$want\$" "$TMP/err"; then
    echo "$tool ${when#-} on a $kind record, '$field' $how: exit $rc, want 1 and one line matching"
    echo "  $want"; echo "got:"; sed 's/^/  /' "$TMP/err" | head -n 5
    return 1
  fi
}

# row TOOL WHEN KINDS FIELDS: the undamaged step passes, every damage is refused.
row() {
  tool=$1 when=$2 kinds=$3 fields=$4
  if [ "$tool $when" = "skpo-reward --task code" ] && ! sandbox_ok; then
    echo "(the undamaged run needs bubblewrap: not checked)" >&2
  else
    run_tool "$tool" "$when" "$TMP/base.zst" >"$TMP/out" 2>"$TMP/err" ||
      { echo "$tool ${when#-} fails on the undamaged step:"; cat "$TMP/err"; return 1; }
  fi
  cases=0
  for kind in $kinds; do
    for field in $fields; do
      hows="drop nil"
      case $field in *+) field=${field%+}; hows="drop nil empty";; esac
      for how in $hows; do
        refuses "$tool" "$when" "$kind" "$field" "$how" || return 1
        cases=$((cases + 1))
      done
    done
  done
  echo "$cases cases" >&2
}

lines - - drop | skpo-cat --pack >"$TMP/base.zst" || { echo "FAIL needs: cannot pack $BASE"; exit 1; }
skpo-cat --needs >"$TMP/needs" || { echo "FAIL needs: skpo-cat --needs"; exit 1; }
[ -s "$TMP/needs" ] || { echo "FAIL needs: the table is empty"; exit 1; }
tab=$(printf '\t')
while IFS=$tab read -r tool when kinds fields cond note; do
  w=; [ "$when" = - ] || w=" $when"
  t "$tool$w refuses $(echo "$kinds" | sed 's/ /, /g') records without $(echo "$fields" | sed 's/ /, /g')" \
    row "$tool" "$when" "$kinds" "$fields"
done <"$TMP/needs"

# The table in docs/reliability.md is the table the tools use.
docs_table() {
  while IFS=$tab read -r tool when kinds fields cond note; do
    if [ "$cond" = - ]; then w="(always)"; elif [ "$when" = - ]; then w="(defaults)"; else w="\`$when\`"; fi
    line="| $tool | $w | $kinds | $(echo "$fields" | sed 's/|/\\|/g') |"
    grep -qF "$line" "$TOP/docs/reliability.md" || { echo "not in docs/reliability.md: $line"; return 1; }
  done <"$TMP/needs"
  [ "$(grep -c '^| skpo-[a-z]* | ' "$TOP/docs/reliability.md")" = "$(wc -l <"$TMP/needs")" ] ||
    { echo "docs/reliability.md lists rows the table does not have"; return 1; }
}
t "docs/reliability.md lists every row of the needs table, and no other" docs_table

# --- beyond missing fields: values a tool must not take ------------------------------
# TOOL|WHEN|KIND|FIELD|VALUE|what the one line must say. Each must be refused;
# weight -1, a blank answer, an unknown task or finish, a cut logp of the wrong
# length, rel 5 and a NaN reward in skpo-critique were taken silently before
# issue 36.
battery() {
  bad=0 n=0
  while IFS='|' read -r tool when kind field val want; do
    [ -n "$tool" ] || continue
    n=$((n + 1))
    lines "$kind" "$field" "=$val" | skpo-cat --pack >"$TMP/in.zst" || { echo "cannot pack $kind.$field=$val"; return 1; }
    run_tool "$tool" "$when" "$TMP/in.zst" >"$TMP/out" 2>"$TMP/err"; rc=$?
    if [ "$rc" != 1 ] || [ "$(wc -l <"$TMP/err")" != 1 ] || ! grep -q "^$tool: " "$TMP/err" || ! grep -qF -- "$want" "$TMP/err"; then
      echo "$tool ${when#-}: $kind.$field = $val: exit $rc, want 1 and one line with '$want':"; sed 's/^/  /' "$TMP/err" | head -n 3
      bad=$((bad + 1))
    fi
  done <<'LIST'
skpo-score|-|down|tokens|[6, 7, 999]|token id 999 outside the vocabulary
skpo-score|-|down|tokens|[6, -1, 8]|token id -1 outside the vocabulary
skpo-score|-|down|prompt|[4, 5, 999]|token id 999 outside the vocabulary
skpo-update|-|down|tokens|[6, 7, 999]|token id 999 outside the vocabulary
skpo-update|-|down|logp|[-0.5]|'logp' length differs from 'tokens'
skpo-update|-|down|logp|[-0.5, "NaN", -0.2]|rollout log-prob of token 1 is nan
skpo-update|--kl-coef 0.1|down|ref_logp|[-0.5]|'ref_logp' length differs
skpo-update|-|down|adv|"NaN"|advantage is not finite
skpo-update|-|up|adv|"Infinity"|advantage is not finite
skpo-update|-|down|weight|"NaN"|'weight' is not a finite number
skpo-update|-|down|weight|-1.0|'weight' is negative
skpo-update|-|down|tokens|[]|'logp' length differs from 'tokens'
skpo-splice|-|up|tokens|[4, 999]|outside the vocabulary
skpo-splice|-|up|prompt|[1, 2, 9999]|outside the vocabulary
skpo-sample|-|prompt|prompt|[1, 2, 999]|outside the vocabulary
skpo-advantage|--mode skpo|down|reward|"NaN"|non-finite reward
skpo-advantage|--mode skpo|down|reward|"Infinity"|non-finite reward
skpo-advantage|--mode skpo|down|gid|"nosuchup"|no up record has that uid
skpo-advantage|--mode skpo|up|uid|"p0:1:up:0"|no up record has that uid
skpo-advantage|--mode grpo|full|pid|"p9"|expected 2
skpo-advantage|--mode prime|full|prm_logp|[-0.4]|one per token
skpo-advantage|--mode prime|full|ref_logp|[-0.4, "NaN"]|reference nan
skpo-reward|-|down|answer|"   "|the gold 'answer' is blank
skpo-reward|-|down|task|"sql"|task 'sql' is not math, choice or code
skpo-reward|-|down|finish|"banana"|finish 'banana' is not stop or length
skpo-reward|--task code|down|tests|"not json"|not a JSON object
skpo-reward|--task code|down|tests|"{}"|need non-empty 'inputs' and 'outputs'
skpo-eval|-|full|reward|"NaN"|reward is nan, not a finite number
skpo-cut|-|full|logp|[-1.0]|'logp' has 1 values for 2 tokens
skpo-analyze|-|down|rel|5.0|not a cut position in [0, 1]
skpo-analyze|-|down|rel|"x"|has no 'rel'
skpo-critique|critique|full|reward|"NaN"|not a finite number
skpo-critique|attach|full|critique_of|"nosuch"|which is not a full record of --direct
LIST
  echo "$n damaged values" >&2
  [ "$bad" = 0 ]
}
t "every tool refuses values it must not take (out-of-vocabulary ids, lengths, non-finite and negative numbers, dangling ids, blank golds, unknown task and finish), in one line" battery

# The stream itself damaged, for every tool in the table: cut in the middle of
# a record, not a stream at all, or empty.
streams() {
  bad=0
  lines - - drop | skpo-cat --pack | head -c 300 >"$TMP/cut.zst"
  printf 'this is not a record stream\n' >"$TMP/garbage.zst"
  : >"$TMP/empty.zst"
  for tool in $(cut -f1 "$TMP/needs" | sort -u); do
    when=$(awk -F'\t' -v t="$tool" '$1 == t { print $2; exit }' "$TMP/needs")
    for f in cut garbage empty; do
      run_tool "$tool" "$when" "$TMP/$f.zst" >"$TMP/out" 2>"$TMP/err"; rc=$?
      if [ "$rc" != 1 ] || [ "$(wc -l <"$TMP/err")" != 1 ] || ! grep -q "^$tool: " "$TMP/err"; then
        echo "$tool ${when#-} on a $f stream: exit $rc, want 1 and one line:"; sed 's/^/  /' "$TMP/err" | head -n 3
        bad=$((bad + 1))
      fi
    done
  done
  [ "$bad" = 0 ]
}
t "every tool refuses a stream that is cut, garbage or empty, in one line" streams
