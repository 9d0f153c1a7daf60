#!/bin/sh
# t_prime.sh - PRIME (ALGO=prime, pipelines/prime.sh) end to end on the tiny demo
# model: two steps commit; the implicit PRM is a second checkpoint (prm/N) that
# changes every step and lowers its own cross-entropy on the step's outcomes; the
# records carry ref_logp, prm_logp and per-token advantages; the policy trains; the
# accuracy filter keeps PROMPTS prompts; PRIME's keys are checked before any step.
# The formulas are in tests/unit/test_loss.c and tests/unit/test_advantage.c.
. "$(dirname "$0")/lib.sh"
tiny_rl_fixture prime skpo-synth skpo-init skpo-sample skpo-reward skpo-score skpo-advantage skpo-update skpo-cat
P="$TOP/pipelines"
# run DIR [KEY=VALUE...]: train.sh with the tiny recipe, in a file that the tests' subshells source
cat >"$TMP/run.sh" <<EOF
run() {
  d=\$1; shift
  REWARD_CMD=\$PARITY bash "$P/train.sh" "\$d" MODEL="$TMP/model" TRAIN_DATA="$TMP/train.msgpack.zst" \\
    STEPS=2 PROMPTS=4 MINIBATCH=2 MAX_TOKENS=6 LR=1e-3 WARMUP=0 KEEP=2 THREADS=1 EVAL_DATA= ALGO=prime \\
    PRIME_K=4 PRIME_OVERSAMPLE=2 PRM_LR=1e-4 SAVE_EVERY=1 "\$@"
}
EOF
. "$TMP/run.sh"

t "PRIME's keys are checked before any step (PRIME_K=1, PRIME_NORM=bogus, PRIME_ACC_LOW > HIGH)" sh -c '
  . "$1"; run "$0/k1" PRIME_K=1 2>"$0/k1.err"; [ $? != 0 ] && grep -q "PRIME_K=.1." "$0/k1.err" && [ ! -e "$0/k1/last" ] &&
  ! run "$0/n" PRIME_NORM=bogus 2>"$0/n.err" && grep -q "PRIME_NORM=.bogus. is not one of: batch none" "$0/n.err" &&
  ! run "$0/a" PRIME_ACC_LOW=0.9 2>"$0/a.err" && grep -q "PRIME_ACC_LOW" "$0/a.err" ||
  { cat "$0"/k1.err "$0"/n.err "$0"/a.err; exit 1; }' "$TMP" "$TMP/run.sh"

run "$TMP/p" >"$TMP/p.out" 2>&1
R=$TMP/p
t "two PRIME steps commit; each writes a new PRM checkpoint prm/N and a new policy" sh -c '
  [ "$(cat "$0/last" 2>/dev/null)" = 2 ] && [ -f "$0/prm/1/config.json" ] && [ -f "$0/prm/2/config.json" ] &&
  ! cmp -s "$0/prm/1/model.safetensors" "$1/model.safetensors" &&
  ! cmp -s "$0/prm/2/model.safetensors" "$0/prm/1/model.safetensors" &&
  ! cmp -s "$0/ckpt/1/model.safetensors" "$1/model.safetensors" &&
  ! cmp -s "$0/ckpt/1/model.safetensors" "$0/prm/1/model.safetensors" || { cat "$2"; exit 1; }' "$R" "$TMP/model" "$TMP/p.out"
t "the accuracy filter keeps PROMPTS prompts of PRIME_K responses out of PROMPTS x PRIME_OVERSAMPLE drawn" sh -c '
  [ "$(skpo-cat --count --where kind=full "$0/rollouts/1.msgpack.zst")" = 16 ] &&
  [ "$(skpo-cat --where kind=full --fields pid "$0/rollouts/1.msgpack.zst" | sort -u | wc -l)" = 4 ]' "$R"
# rollouts are teed before the advantage (as in every step script): skpo-advantage
# --mode prime is rerun on them here, from an empty tracker
t "the step's records carry ref_logp and prm_logp, and skpo-advantage --mode prime gives adv_tok, one per token" sh -c '
  skpo-advantage --mode prime --group 4 --state "$0/st" "$0/rollouts/1.msgpack.zst" >"$0/a.msgpack.zst" &&
  skpo-cat --where kind=full --fields tokens,ref_logp,prm_logp,adv_tok "$0/a.msgpack.zst" >"$0/f.json" &&
  [ "$(wc -l <"$0/f.json")" = 16 ] && grep -c adv_tok "$0/f.json" | grep -q "^16$" &&
  awk -F"\\]" "{ n = split(\$1, a, \",\"); for (i = 2; i <= 4; i++) if (split(\$i, b, \",\") - 1 != n) bad++ } END { exit bad > 0 }" "$0/f.json" &&
  skpo-cat --where tool=skpo-advantage --fields mode "$0/metrics/1.msgpack.zst" | grep -q "\"mode\":\"prime\""' "$R"
# the PRM of step 1 was trained on exactly the records of rollouts/1, whose prm_logp it
# scored afterwards ("update before"): its BCE there is below log 2 (z = 0 at the start,
# where the PRM equals the reference)
t "the PRM update lowers the implicit PRM's cross-entropy on its own step (below log 2)" sh -c '
  skpo-cat --where kind=full --fields correct,ref_logp,prm_logp "$0/rollouts/1.msgpack.zst" | awk "
    { y = \$0 ~ /\"correct\":true/; s = \$0; sub(/.*\"ref_logp\":\\[/, \"\", s); sub(/\\].*/, \"\", s); nr = split(s, r, \",\")
      s = \$0; sub(/.*\"prm_logp\":\\[/, \"\", s); sub(/\\].*/, \"\", s); split(s, p, \",\")
      q = 0; for (i = 1; i <= nr; i++) q += p[i] - r[i]; z = 0.05 * q
      l += (z > 0 ? z : 0) + log(1 + exp(-(z > 0 ? z : -z))) - y * z; n++; if (q != 0) moved++ }
    END { printf \"bce %.9f over %d, moved %d\\n\", l / n, n, moved; exit !(n == 16 && moved > 0 && l / n < log(2)) }"' "$R"
t "the PRM update logged its prm-ce metrics and the policy update its own" sh -c '
  skpo-cat --where kind=metrics --fields loss_full "$0/prm-metrics/1.msgpack.zst" | grep -q loss_full &&
  [ -f "$0/logs/2.prm.err" ] && [ -f "$0/logs/2.update.err" ]' "$R"
t "a PRIME run resumes: a third step continues from prm/2" sh -c '
  . "$1"; run "$0" STEPS=3 >"$0/r3.out" 2>&1 && [ "$(cat "$0/last")" = 3 ] && [ -f "$0/prm/3/config.json" ] ||
  { cat "$0/r3.out"; exit 1; }' "$R" "$TMP/run.sh"
