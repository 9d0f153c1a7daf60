#!/bin/sh
# skpo-synth: deterministic, disjoint splits, answers that follow from the problem text.
. "$(dirname "$0")/lib.sh"
command -v skpo-synth >/dev/null || { skip "skpo-synth" "not built"; exit 0; }

# Recompute each answer from the problem's words (has/gets/loses/doubles/triples).
check_answers() {
  awk '{
    p = $0; sub(/.*"problem":"/, "", p); sub(/".*/, "", p)
    a = $0; sub(/.*"answer":"/, "", a); sub(/".*/, "", a)
    n = split(p, w, /[ ,.]+/); v = 0
    for (i = 1; i <= n; i++) {
      if (w[i] == "has") v = w[i+1] + 0
      else if (w[i] == "gets") v += w[i+1]
      else if (w[i] == "loses") v -= w[i+1]
      else if (w[i] == "doubles") v *= 2
      else if (w[i] == "triples") v *= 3
      if (v < 0) { print "negative intermediate: " $0; bad = 1 }
    }
    if (v != a + 0) { print "wrong answer: " $0; bad = 1 }
  } END { exit bad }' "$1"
}

t "same seed gives the same problems" sh -c '
  skpo-synth --count 50 --seed 7 >"$0/a" && skpo-synth --count 50 --seed 7 >"$0/b" && cmp "$0/a" "$0/b"' "$TMP"
t "different seeds give different problems" sh -c '
  skpo-synth --count 50 --seed 7 >"$0/a" && skpo-synth --count 50 --seed 8 >"$0/b" && ! cmp -s "$0/a" "$0/b"' "$TMP"
t "count lines, all with id problem answer solution" sh -c '
  skpo-synth --count 200 --kinds "+-*" --ops 3 >"$0/c" && [ "$(wc -l <"$0/c")" = 200 ] &&
  [ "$(grep -c "\"id\":\"synth-train-.*\"problem\":.*\"answer\":\"[0-9]*\",\"solution\":\".*Answer: [0-9]*\"" "$0/c")" = 200 ]' "$TMP"
skpo-synth --count 300 --kinds "+-*" --ops 3 --min-ops 1 --seed 3 >"$TMP/mix"
t "answers follow from the problem text" check_answers "$TMP/mix"
t "ids are unique within an output" sh -c '[ "$(grep -o "\"id\":\"[^\"]*\"" "$0/mix" | sort -u | wc -l)" = 300 ]' "$TMP"
t "solutions end with the answer line" sh -c '
  sed "s/.*\"answer\":\"\([0-9]*\)\",\"solution\":\".*Answer: \([0-9]*\)\".*/\1 \2/" "$0/mix" | awk "\$1 != \$2 { exit 1 }"' "$TMP"
t "train and test share no problem skeleton" sh -c '
  skpo-synth --count 1500 --max-operand 9 --seed 1 | grep -o "synth-train-[0-9a-f]*" | sed s/train-// | sort >"$0/tr" &&
  skpo-synth --count 200 --max-operand 9 --seed 1 --split test | grep -o "synth-test-[0-9a-f]*" | sed s/test-// | sort >"$0/te" &&
  [ "$(wc -l <"$0/te")" = 200 ] && [ -z "$(comm -12 "$0/tr" "$0/te")" ]' "$TMP"
t "--direct keeps the problems and drops worked steps for about that share" sh -c '
  skpo-synth --count 400 --seed 4 >"$0/w" && skpo-synth --count 400 --seed 4 --direct 0.5 >"$0/d" &&
  [ "$(cut -d, -f1-2 "$0/w" | md5sum)" = "$(cut -d, -f1-2 "$0/d" | md5sum)" ] &&
  n=$(grep -c "\"solution\":\"Answer: " "$0/d") && [ "$n" -gt 160 ] && [ "$n" -lt 240 ] &&
  [ "$(grep -c "\"solution\":\"Answer: " "$0/w")" = 0 ]' "$TMP"
t "asking for more problems than exist fails with a message" sh -c '
  ! skpo-synth --count 1000 --ops 1 --max-operand 3 >/dev/null 2>"$0/e" && grep -q "distinct train problems exist" "$0/e"' "$TMP"
t "bad flags are usage errors (exit 2)" sh -c '
  . "$0"; expect_exit 2 skpo-synth --split dev && expect_exit 2 skpo-synth --kinds "+/" &&
  expect_exit 2 skpo-synth --count 0 && expect_exit 2 skpo-synth --ops 2 --min-ops 3' "$TOP/tests/sh/lib.sh"
t "--help prints usage on stdout and exits 0" sh -c 'skpo-synth --help | grep -q "^usage: skpo-synth"'
