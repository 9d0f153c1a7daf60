# t_reward.sh - skpo-reward as a black box on tests/fixtures/verify/rollouts.msgpack.zst
# (built by make_reward_fixtures.py, which lists the records and their expected
# rewards). Rewards are read back from the raw stream as msgpack float64 after
# the key "reward" (hex), in record order; correctness per record is in
# tests/unit/test_verify.c.
. "$(dirname "$0")/lib.sh"
R="$FIX/verify/rollouts.msgpack.zst"
P1=3ff0000000000000 M1=bff0000000000000 Z=0000000000000000
has_rewards() { # FILE, expected list: the reward values of a stream, in order, as hex words
  got=$(zstd -dc "$1" | od -An -v -tx1 | tr -d ' \n' | grep -o 'a6726577617264cb[0-9a-f]\{16\}' | cut -c17- | tr '\n' ' ')
  [ "$got" = "$2" ] || { echo "got  $got" >&2; echo "want $2" >&2; return 1; }
}
check() { # title, expected rewards, skpo-reward args...
  title=$1 want=$2; shift 2
  t "$title" sh -c 'out=$0 fn=$1 want=$2; shift 2; skpo-reward "$@" >"$out" && . "$fn" && has_rewards "$out" "$want"' \
    "$TMP/out.zst" "$TMP/fn.sh" "$want" "$@"
}
# the helper, for the sh -c subshells
sed -n '/^has_rewards() {/,/^}/p' "$0" >"$TMP/fn.sh"

check "math: truncated response is wrong, a different value wrong, equal forms right" \
  "$P1 $M1 $P1 $M1 $P1 $M1 $P1 $P1 $M1 $P1 " "$R"
check "--truncated keep keeps the verdict of a response cut at the length limit" \
  "$P1 $M1 $P1 $P1 $P1 $M1 $P1 $P1 $M1 $P1 " --truncated keep "$R"
check "--reward 01 gives 1/0" "$P1 $Z $P1 $Z $P1 $Z $P1 $P1 $Z $P1 " --reward 01 "$R"
check "dapo verifier needs an Answer: line and an exact string" "$M1 $M1 $P1 $M1 $M1 $M1 $M1 $M1 $M1 $M1 " --verifier dapo "$R"
check "boxed verifier ignores Answer: lines" "$P1 $M1 $M1 $M1 $P1 $M1 $P1 $P1 $M1 $M1 " --verifier boxed "$R"
# --overlong 8192:4096: 5000 tokens -> 1 + (4096-5000)/4096 = 0.779296875; 9000 tokens -> 1 - 1 = 0
check "--overlong adds DAPO's soft length penalty on len(tokens)" \
  "3fe8f00000000000 $M1 $P1 $M1 $Z $M1 $P1 $P1 $M1 $P1 " --overlong 8192:4096 "$R"
check "--overlong-max/--overlong-cache are the same penalty (pipelines/dapo.sh spelling)" \
  "3fe8f00000000000 $M1 $P1 $M1 $Z $M1 $P1 $P1 $M1 $P1 " --overlong-max 8192 --overlong-cache 4096 "$R"

t "other kinds, unknown fields and the input meta record pass through untouched" sh -c '
  skpo-reward "$0" >"$1/p" && zstd -dc "$1/p" >"$1/p.raw" &&
  grep -a -q "keep me" "$1/p.raw" && grep -a -q untouched "$1/p.raw" && grep -a -q "passes through" "$1/p.raw" &&
  grep -a -q make_reward_fixtures.py "$1/p.raw" && grep -a -q "What is 30 + 4?" "$1/p.raw" &&
  [ "$(grep -a -o "correct" "$1/p.raw" | wc -l)" = 10 ]' "$R" "$TMP"

t "a rollout with no answer found gets no pred" sh -c '
  skpo-reward "$0" | zstd -dc | od -An -v -tx1 | tr -d " \n" >"$1/hex" &&
  [ "$(grep -o a470726564 "$1/hex" | wc -l)" = 9 ]' "$R" "$TMP"

t "rewarded full records feed skpo-eval: 3 of 4 right for p2" sh -c '
  command -v skpo-eval >/dev/null || exit 0
  skpo-reward "$0" | skpo-eval --table --by pid | grep -q "^p2 .* 75.00 "' "$R"

t "a rollout without a gold answer is an error naming its uid" sh -c '
  ! skpo-reward "$0/verify/missing_answer.msgpack.zst" >/dev/null 2>"$1/err" &&
  grep -q "skpo-reward: down record .d-x. has no .answer. (in .*missing_answer.msgpack.zst. at record [0-9]*)" "$1/err" && [ "$(wc -l <"$1/err")" = 1 ]' "$FIX" "$TMP"

t "bad flags are usage errors (exit 2)" sh -c '
  expect_exit() { want=$1; shift; "$@" >/dev/null 2>&1; [ "$?" = "$want" ]; }
  expect_exit 2 skpo-reward --verifier sympy && expect_exit 2 skpo-reward --reward 2 &&
  expect_exit 2 skpo-reward --overlong 10:20 && expect_exit 2 skpo-reward --overlong 10 &&
  expect_exit 2 skpo-reward --truncated drop && expect_exit 2 skpo-reward a b &&
  expect_exit 2 skpo-reward --overlong-max 10 && expect_exit 2 skpo-reward --overlong-max 10 --overlong-cache 20'

t "a group is written before the input ends (streaming)" sh -c '
  ( cat "$0"; sleep 2 ) | skpo-reward >"$1/s" & pid=$!
  sleep 1; zstd -dc "$1/s" 2>/dev/null | grep -a -q d-p1-5; ok=$?; wait $pid; [ $ok = 0 ]' "$R" "$TMP"

t "truncated input stream fails with exit 1" sh -c '
  head -c 3000 "$0" | skpo-reward >/dev/null 2>"$1/terr"; [ $? = 1 ] && grep -q "^skpo-reward: " "$1/terr"' "$R" "$TMP"

t "--verify-cases reports every kind and no false positive on the case set" sh -c '
  skpo-reward --verify-cases "$0/verify/cases.jsonl" --repeat 1 >"$1/vc" &&
  [ "$(grep -c "^kind " "$1/vc")" = 35 ] && grep -q "false_positives 0" "$1/vc"' "$FIX" "$TMP"

if command -v skpo-cat >/dev/null 2>&1 && command -v jq >/dev/null 2>&1; then
  # verdicts of the exact-match example: only d-p1-0 and d-p1-3 have a brace-free \boxed{34}
  t "the jq example replacement works as the reward stage of a pipeline" sh -c '
    "$0/pipelines/examples/reward_boxed_jq.sh" "$1" >"$2/ex" &&
    got=$(zstd -dc "$2/ex" | od -An -v -tx1 | tr -d " \n" | grep -o "a7636f7272656374c[23]" | cut -c17- | tr "\n" " ") &&
    [ "$got" = "c3 c2 c2 c3 c2 c2 c2 c2 c2 c2 " ]' "$TOP" "$R" "$TMP"
else
  skip "the jq example replacement works as the reward stage of a pipeline" "needs skpo-cat and jq"
fi
