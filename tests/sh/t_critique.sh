#!/bin/sh
# t_critique.sh - Critique-GRPO's self-critique step (pipelines/critique.sh,
# skpo-critique, skpo-update's shaped refinement loss): one ALGO=critique step on
# the tiny demo model commits G records per prompt, G - 1 direct and one
# refinement of the best direct response trained under the problem's prompt;
# skpo-critique's records and errors; skpo-update gives refine records the
# shaped loss (no mismatch weight: their rollout logp does not matter).
. "$(dirname "$0")/lib.sh"
# $PARITY: +1 when the first response token is even (a random model can satisfy it)
tiny_rl_fixture critique skpo-synth skpo-init skpo-sample skpo-reward skpo-advantage skpo-update skpo-cat skpo-critique
P="$TOP/pipelines"
D="$FIX/demo"
REWARD_CMD=$PARITY bash "$P/train.sh" "$TMP/c" MODEL="$TMP/model" TRAIN_DATA="$TMP/train.msgpack.zst" STEPS=1 PROMPTS=4 \
  MINIBATCH=2 G=4 MAX_TOKENS=6 LR=1e-3 WARMUP=0 KEEP=2 THREADS=1 EVAL_DATA= ALGO=critique >"$TMP/c.out" 2>&1
R="$TMP/c/rollouts/1.msgpack.zst"
export R

t "one ALGO=critique step commits and moves the weights" sh -c '
  [ "$(cat "$0/c/last" 2>/dev/null)" = 1 ] && ! cmp -s "$0/c/ckpt/1/model.safetensors" "$0/model/model.safetensors" ||
    { cat "$0/c.out"; exit 1; }' "$TMP"
t "each prompt has G = 4 records: 3 direct and 1 refinement of its group" sh -c '
  [ "$(skpo-cat --count --where kind=full "$R")" = 16 ] && [ "$(skpo-cat --count --where refine=true "$R")" = 4 ] &&
  for p in $(skpo-cat --where refine=true --fields pid "$R" | sed "s/.*\"pid\":\"\([^\"]*\)\".*/\1/"); do
    [ "$(skpo-cat --count --where kind=full --where pid=$p "$R")" = 4 ] || { echo "pid $p"; exit 1; }
    [ "$(skpo-cat --where pid=$p --where refine=true --fields uid "$R")" = "{\"uid\":\"$p:1:refine\"}" ] || exit 1
  done'
t "a refinement is trained under the problem prompt of its group, not its refinement prompt" sh -c '
  skpo-cat --where kind=full --fields pid,prompt "$R" | sort -u | wc -l | grep -qx 4'
t "the critiqued response is the group's best direct one (first on ties)" sh -c '
  skpo-cat --where kind=full --fields uid,pid,reward,refine,critique_of "$R" | awk "
    /\"refine\":true/ { sub(/.*\"critique_of\":\"/, \"\"); sub(/\".*/, \"\"); of[++n] = \$0; next }
    { u = \$0; sub(/.*\"uid\":\"/, \"\", u); sub(/\".*/, \"\", u); p = \$0; sub(/.*\"pid\":\"/, \"\", p); sub(/\".*/, \"\", p)
      r = \$0; sub(/.*\"reward\":/, \"\", r); sub(/[,}].*/, \"\", r)
      if (!(p in best) || r + 0 > bestr[p]) { best[p] = u; bestr[p] = r + 0 } }
    END { for (i = 1; i <= n; i++) { p = of[i]; sub(/:[^:]*:[^:]*\$/, \"\", p); if (best[p] != of[i]) { print of[i], best[p]; exit 1 } }
          exit n != 4 }"'

# --- skpo-critique's records -------------------------------------------------------
skpo-cat "$R" | grep -v '"refine":true' | sed 's/"kind":"full"/"kind":"full","extra":"kept"/' | skpo-cat --pack >"$TMP/direct.msgpack.zst"
export TMP
t "critique: one prompt per pid, named <pid>#critique, unknown fields kept, response fields gone" sh -c '
  skpo-critique critique --tokenizer "$TMP/model" "$TMP/direct.msgpack.zst" >"$TMP/cp.msgpack.zst" &&
  [ "$(skpo-cat --count --where kind=prompt "$TMP/cp.msgpack.zst")" = 4 ] &&
  [ "$(skpo-cat --count --where kind=prompt --where extra=kept "$TMP/cp.msgpack.zst")" = 4 ] &&
  skpo-cat --where kind=prompt "$TMP/cp.msgpack.zst" | grep -v "\"pid\":\"[^\"]*#critique\"" | grep -q . && exit 1
  skpo-cat --where kind=prompt "$TMP/cp.msgpack.zst" | grep -q "\"tokens\"\|\"reward\"\|\"logp\"" && exit 1
  skpo-cat --where kind=prompt --fields text "$TMP/cp.msgpack.zst" | head -n 1 | grep -q "Conclusion: right"'
t "critique --with-answer shows the gold answer; without it the critic does not see it" sh -c '
  skpo-critique critique --with-answer --tokenizer "$TMP/model" "$TMP/direct.msgpack.zst" | skpo-cat --where kind=prompt --fields text |
    grep -c "Reference answer: " | grep -qx 4 &&
  ! skpo-cat --where kind=prompt --fields text "$TMP/cp.msgpack.zst" | grep -q "Reference answer"'
t "critique refuses unrewarded responses, naming the stage to run" sh -c '
  skpo-cat "$TMP/direct.msgpack.zst" | sed "s/,\"reward\":[-0-9.]*//" | skpo-cat --pack |
    skpo-critique critique --tokenizer "$TMP/model" 2>"$TMP/e1" >/dev/null; rc=$?
  [ "$rc" = 1 ] && grep -q "has no .reward. (in .stdin. at record [0-9]*; run skpo-reward first)" "$TMP/e1" || { cat "$TMP/e1"; exit 1; }'
t "refine and attach refuse a critique_of that --direct does not hold" sh -c '
  skpo-cat --where refine=true "$R" | sed "s/\"critique_of\":\"[^\"]*\"/\"critique_of\":\"nosuch\"/" | skpo-cat --pack >"$TMP/bad.msgpack.zst"
  ! skpo-critique attach --direct "$TMP/direct.msgpack.zst" "$TMP/bad.msgpack.zst" 2>"$TMP/e2" >/dev/null &&
  grep -q "critique_of .nosuch., which is not a full record of --direct" "$TMP/e2" &&
  ! skpo-critique refine --tokenizer "$TMP/model" --direct "$TMP/direct.msgpack.zst" "$TMP/bad.msgpack.zst" 2>/dev/null >/dev/null'
t "skpo-critique usage errors: no mode, unknown mode, missing --direct or --tokenizer" sh -c '
  ! skpo-critique 2>/dev/null && ! skpo-critique nope 2>/dev/null && ! skpo-critique attach 2>/dev/null &&
  ! skpo-critique critique 2>/dev/null && ! skpo-critique critique --tokenizer "$TMP/model" --template nosuch </dev/null 2>/dev/null'

# --- skpo-update: the shaped loss on refine records ------------------------------------
mkdir -p "$TMP/st" && cp -r "$TMP/c/state/1/." "$TMP/st/"
skpo-advantage --mode drgrpo --group 4 --state "$TMP/st" --step 1 <"$R" 2>/dev/null | skpo-cat >"$TMP/adv.jsonl"
U="skpo-update --model $TMP/model --minibatch 2 --lr 1e-3 --warmup-steps 0 --threads 1 --fresh-optimizer"
export U
t "refine records: their rollout logp does not change the update (no mismatch weight)" sh -c '
  awk "/\"refine\":true/ { gsub(/,\"logp\":\[[^]]*\]/, \"\") } { print }" "$TMP/adv.jsonl" | skpo-cat --pack >"$TMP/nolp.msgpack.zst" &&
  skpo-cat --pack <"$TMP/adv.jsonl" >"$TMP/adv.msgpack.zst" &&
  $U --out "$TMP/u1" "$TMP/adv.msgpack.zst" 2>/dev/null && $U --out "$TMP/u2" "$TMP/nolp.msgpack.zst" 2>"$TMP/e3" &&
  cmp "$TMP/u1/model.safetensors" "$TMP/u2/model.safetensors" || { cat "$TMP/e3"; exit 1; }'
t "refine records take the shaped loss: the flag and --refine-gamma change the update" sh -c '
  sed "s/\"refine\":true/\"refine\":false/" "$TMP/adv.jsonl" | skpo-cat --pack >"$TMP/plain.msgpack.zst" &&
  $U --out "$TMP/u3" "$TMP/plain.msgpack.zst" 2>/dev/null && $U --refine-gamma 0.5 --out "$TMP/u4" "$TMP/adv.msgpack.zst" 2>/dev/null &&
  ! cmp -s "$TMP/u1/model.safetensors" "$TMP/u3/model.safetensors" && ! cmp -s "$TMP/u1/model.safetensors" "$TMP/u4/model.safetensors"'
t "skpo-update refuses --full-loss shape (a per-record form) and --refine-gamma 0" sh -c '
  ! $U --out "$TMP/u5" --full-loss shape "$TMP/adv.msgpack.zst" 2>/dev/null &&
  ! $U --out "$TMP/u6" --refine-gamma 0 "$TMP/adv.msgpack.zst" 2>/dev/null'
