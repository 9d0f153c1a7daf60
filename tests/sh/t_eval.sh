# t_eval.sh - skpo-eval against a hand computation on fixed records
# (tests/fixtures/adv/eval_full.msgpack.zst, built by make_fixtures.py):
#   aime P1 correct 0,1,1,0 preds 3,7,7,5   P2 all wrong, preds 1,2,2,(none)
#   math M1 3/3 preds 4,4,4   M2 0,1,0 preds 9,8,9   M3 rewards -1,1,-1 (no `correct`) preds 2,5,5
# aime (K=4): mean 0.25; pass@1 .25, pass@2 (5/6 + 0)/2 = .416667, pass@4 .5;
#   maj@1 (3, 1) 0, maj@2 (ties -> 3, 1) 0, maj@4 (7, 2) .5
# math (K=3): mean (1 + 1/3 + 1/3)/3 = .555556; pass@2 (1 + 2/3 + 2/3)/3 = .777778;
#   pass@3 1; maj@1 1/3, maj@2 1/3 (ties -> 9, 2), maj@3 (4, 9, 5) 2/3
# all (K=3 over 5 problems): mean .433333, pass@2 .633333, pass@3 .8, maj@3 (7,2,4,9,5) .6
. "$(dirname "$0")/lib.sh"
E="$FIX/adv/eval_full.msgpack.zst"

t "per-source table matches the hand computation" sh -c '
  skpo-eval --table "$0" >"$1/t" &&
  grep -Eq "^aime +2 +4 +25.00 +25.00 +41.67 +50.00 +0.00 +0.00 +50.00$" "$1/t" &&
  grep -Eq "^math +3 +3 +55.56 +55.56 +77.78 +100.00 +33.33 +33.33 +66.67$" "$1/t" &&
  grep -Eq "^all +5 +3 +43.33 +43.33 +63.33 +80.00 +20.00 +20.00 +60.00 " "$1/t"' "$E" "$TMP"
t "per-problem rows with --by pid" sh -c '
  skpo-eval --by pid --table "$0" >"$1/p" &&
  grep -Eq "^P1 +1 +4 +50.00 +50.00 +83.33 +100.00 +0.00 +0.00 +100.00$" "$1/p" &&
  grep -Eq "^M3 +1 +3 +33.33 +33.33 +66.67 +100.00 +0.00 +0.00 +100.00$" "$1/p" && ! grep -q "^all" "$1/p"' "$E" "$TMP"
t "table goes to stderr and metrics records to stdout" sh -c '
  skpo-eval "$0" >"$1/m" 2>"$1/e" && grep -q "^aime " "$1/e" && zstd -t -q "$1/m" &&
  [ "$(zstd -dc "$1/m" | grep -a -o "skpo-eval" | wc -l)" -ge 4 ] &&
  zstd -dc "$1/m" | grep -a -q "pass@4" && zstd -dc "$1/m" | grep -a -q "maj@3"' "$E" "$TMP"
t "records without a source are grouped as unknown" sh -c '
  skpo-eval --table "$0" | grep -Eq "^unknown +3 +8 "' "$FIX/adv/grpo_full.msgpack.zst"
t "input without full records is an error" sh -c '
  ! skpo-eval "$0" >/dev/null 2>"$1/e2" && grep -q "no full records" "$1/e2"' "$FIX/adv/skpo_step1.msgpack.zst" "$TMP"
t "truncated input is an error" sh -c '
  head -c 100 "$0" >"$1/tr" && ! skpo-eval "$1/tr" >/dev/null 2>&1' "$E" "$TMP"
t "unknown --by is a usage error" expect_exit 2 skpo-eval --by step "$E"
