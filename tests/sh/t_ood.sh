# t_ood.sh - the out-of-domain benchmarks end to end on rows written in the
# official formats (tests/fixtures/ood, made by tests/ref/make_ood_fixtures.py):
# skpo-prep renders MMLU-Pro / LiveCodeBench prompts, skpo-reward judges
# choice and code rollouts (code in the bubblewrap sandbox), skpo-eval reports
# accuracy per category and pass@1 per difficulty.
. "$(dirname "$0")/lib.sh"
O="$FIX/ood"
TOK="$FIX/tokenizer/qwen2.5"
field() { skpo-cat --fields "$2" "$1" | grep -v '^{}$'; }

t "MMLU-Pro rows get MMLU-Pro's CoT prompt, options lettered without N/A, task choice" sh -c '
  skpo-prep --tokenizer "$0" --template qwen2.5 --source mmlu_pro --out "$1/m.zst" "$2/mmlu_pro.jsonl" 2>/dev/null &&
  skpo-cat --where pid=70 "$1/m.zst" >"$1/m.json" &&
  grep -q "about math. Think step by step and then finish your answer with \\\\\"the answer is (X)\\\\\"" "$1/m.json" &&
  grep -q "Question:\\\\nWhich of the following is a prime number?\\\\nOptions:\\\\nA. 21\\\\nB. 27\\\\nC. 29\\\\nD. 33\\\\nE. 35\\\\nF. 39\\\\nG. 45\\\\nH. 49\\\\nI. 51\\\\nAnswer: Let.s think step by step.<|im_end|>" "$1/m.json" &&
  grep -q "\"answer\":\"C\"" "$1/m.json" && grep -q "\"task\":\"choice\"" "$1/m.json" && grep -q "\"category\":\"math\"" "$1/m.json" &&
  ! grep -q "N/A" "$1/m.json" && [ "$(skpo-cat --count "$1/m.zst")" = 5 ]' "$TOK" "$TMP" "$O"

t "LiveCodeBench rows: --after keeps the window, compressed private tests are decoded, functional gets fn_name" sh -c '
  skpo-prep --tokenizer "$0" --template qwen2.5 --source livecodebench --after 2024-01-01 --out "$1/l.zst" "$2/livecodebench.jsonl" 2>"$1/err" &&
  grep -q "skipped 1 LiveCodeBench problems outside" "$1/err" &&
  skpo-cat --where pid=abc999_a --fields tests,task,difficulty "$1/l.zst" | grep -q "{\"tests\":\"{\\\\\"inputs\\\\\":\[\\\\\"3\\\\\\\\n\\\\\",\\\\\"10\\\\\\\\n\\\\\",\\\\\"-4\\\\\\\\n\\\\\"\],\\\\\"outputs\\\\\":\[\\\\\"6\\\\\\\\n\\\\\",\\\\\"20\\\\\\\\n\\\\\",\\\\\"-8\\\\\\\\n\\\\\"\]}\",\"task\":\"code\",\"difficulty\":\"easy\"}" &&
  skpo-cat --where pid=9001 "$1/l.zst" | grep -q "fn_name.....twoSum" &&
  skpo-cat --where pid=9001 "$1/l.zst" | grep -q "You will use the following starter code" &&
  skpo-cat --where pid=abc999_a "$1/l.zst" | grep -q "Read the inputs from stdin solve the problem" &&
  ! skpo-cat "$1/l.zst" | grep -q "private_test_cases" &&
  skpo-prep --tokenizer "$0" --template qwen2.5 --before 2024-01-01 "$2/livecodebench.jsonl" 2>/dev/null | skpo-cat --count | grep -qx 2' "$TOK" "$TMP" "$O"

t "a bad --after date is a usage error" expect_exit 2 skpo-prep --tokenizer "$TOK" --template qwen2.5 --after 2024-1-1 "$O/livecodebench.jsonl"

t "choice: the committed letter is judged, hedged and several letters are wrong, with reasons" sh -c '
  skpo-cat --pack "$0/choice_full.jsonl" | skpo-reward >"$1/c.zst" &&
  got=$(skpo-cat --fields correct "$1/c.zst" | grep -o "true\|false" | tr "\n" " ") &&
  [ "$got" = "true false false true false true true true false true false false " ] || { echo "$got"; exit 1; }
  skpo-cat --where uid=m70-2 "$1/c.zst" | grep -q "\"pred\":\"B,C\".*hedged: several letters" &&
  skpo-cat --where uid=b2-1 "$1/c.zst" | grep -q "cut at the length limit"' "$O" "$TMP"

t "choice: self records (REWARD_UP=self) are judged by the choice verifier, as full records are" sh -c '
  sed "s/\"kind\": \"full\"/\"kind\": \"self\"/" "$0/choice_full.jsonl" | skpo-cat --pack | skpo-reward >"$1/cs.zst" &&
  got=$(skpo-cat --where kind=self --fields correct "$1/cs.zst" | grep -o "true\|false" | tr "\n" " ") &&
  [ "$got" = "true false false true false true true true false true false false " ] || { echo "$got"; exit 1; }
  skpo-cat --where uid=m70-2 "$1/cs.zst" | grep -q "\"kind\":\"self\".*\"pred\":\"B,C\".*hedged: several letters"' "$O" "$TMP"

t "skpo-eval prints accuracy per MMLU-Pro category and overall" sh -c '
  skpo-cat --pack "$0/choice_full.jsonl" | skpo-reward | skpo-eval --table >"$1/ct" &&
  grep -Eq "^mmlu_pro +4 +3 +50.00 " "$1/ct" && grep -Eq "^mmlu_pro/math +2 +3 +50.00 " "$1/ct" &&
  grep -Eq "^mmlu_pro/biology +2 +3 +50.00 " "$1/ct"' "$O" "$TMP"

if bwrap --unshare-all --ro-bind /usr /usr --symlink usr/lib /lib --symlink usr/lib64 /lib64 /usr/bin/true 2>/dev/null; then
  t "code: programs run in the sandbox; verdicts, reasons, tests passed; pass@1 per difficulty; nothing left running" sh -c '
    skpo-cat --pack "$0/code_full.jsonl" | skpo-reward --code-timeout 2 >"$1/k.zst" &&
    skpo-cat --fields uid,correct,reason,tests_passed "$1/k.zst" | grep -v "^{}$" >"$1/k.json" &&
    grep -qx "{\"uid\":\"c1-0\",\"correct\":true,\"reason\":\"passed 3/3 tests\",\"tests_passed\":3}" "$1/k.json" &&
    grep -qx "{\"uid\":\"c1-1\",\"correct\":false,\"reason\":\"test 2/3: wrong answer\",\"tests_passed\":1}" "$1/k.json" &&
    grep -qx "{\"uid\":\"c1-2\",\"correct\":false,\"reason\":\"test 1/3: time limit exceeded (2 s)\",\"tests_passed\":0}" "$1/k.json" &&
    grep -qx "{\"uid\":\"c2-0\",\"correct\":true,\"reason\":\"passed 2/2 tests\",\"tests_passed\":2}" "$1/k.json" &&
    grep -qx "{\"uid\":\"c2-1\",\"correct\":false,\"reason\":\"test 1/2: runtime error: ValueError: boom\",\"tests_passed\":0}" "$1/k.json" &&
    grep -qx "{\"uid\":\"c2-2\",\"correct\":false,\"reason\":\"no fenced code block\",\"tests_passed\":0}" "$1/k.json" &&
    skpo-eval --table "$1/k.zst" >"$1/kt" && grep -Eq "^livecodebench/easy +1 +3 +33.33 +33.33 " "$1/kt" &&
    grep -Eq "^livecodebench/medium +1 +3 +33.33 +33.33 " "$1/kt" &&
    [ "$(ps -eo uid= | awk "\$1 >= 1073741824" | wc -l)" = 0 ]' "$O" "$TMP"
  t "code: self records (REWARD_UP=self) are run in the sandbox on their tests, as full records are" sh -c '
    sed "s/\"kind\": \"full\"/\"kind\": \"self\"/" "$0/code_full.jsonl" | skpo-cat --pack | skpo-reward --code-timeout 2 >"$1/ks.zst" &&
    skpo-cat --where kind=self --fields uid,correct,reason "$1/ks.zst" >"$1/ks.json" &&
    grep -qx "{\"uid\":\"c1-0\",\"correct\":true,\"reason\":\"passed 3/3 tests\"}" "$1/ks.json" &&
    grep -qx "{\"uid\":\"c2-1\",\"correct\":false,\"reason\":\"test 1/2: runtime error: ValueError: boom\"}" "$1/ks.json" ||
    { cat "$1/ks.json"; exit 1; }' "$O" "$TMP"
  t "code rollouts are judged in order among other records, which pass through" sh -c '
    ( skpo-cat --pack "$0/code_full.jsonl"; skpo-cat --pack "$0/choice_full.jsonl" ) | skpo-reward --code-batch 4 --code-timeout 2 |
      skpo-cat --fields uid | grep -o "\"uid\":\"[^\"]*\"" | tr "\n" " " >"$1/order" &&
    [ "$(cat "$1/order")" = "$(cat "$0/code_full.jsonl" "$0/choice_full.jsonl" | grep -o "\"uid\": \"[^\"]*\"" | tr -d " " | tr "\n" " ")" ]' "$O" "$TMP"
else
  skip "code: programs run in the sandbox" "bubblewrap cannot create namespaces here"
fi

t "without bwrap the code reward stops with a clear error and runs nothing" sh -c '
  skpo-cat --pack "$0/code_full.jsonl" >"$1/in.zst" &&
  PATH=/nonexistent:$PATH; mkdir -p "$1/nob"; for t in skpo-reward skpo-cat; do ln -sf "$(command -v $t)" "$1/nob/$t"; done
  ! env PATH="$1/nob" skpo-reward "$1/in.zst" >"$1/o" 2>"$1/e" && grep -q "^skpo-reward: sandbox: bubblewrap (.bwrap.) not found.*never run unsandboxed" "$1/e" &&
  [ "$(wc -l <"$1/e")" = 1 ]' "$O" "$TMP"

t "a code rollout without tests is an error naming it" sh -c '
  printf "%s\n" "{\"kind\":\"full\",\"uid\":\"x1\",\"pid\":\"p\",\"task\":\"code\",\"text\":\"\`\`\`\nprint(1)\n\`\`\`\"}" | skpo-cat --pack |
    skpo-reward >/dev/null 2>"$0/e2"; [ $? = 1 ] && grep -q "full record .x1. has no .tests. .*skpo-prep" "$0/e2"' "$TMP"

t "bad --task is a usage error" expect_exit 2 skpo-reward --task sql

if bwrap --unshare-all --ro-bind /usr /usr --symlink usr/lib /lib --symlink usr/lib64 /lib64 /usr/bin/true 2>/dev/null; then
  # a tiny model with room for the long prompts; its answers are all wrong, so the
  # reward command marks every MMLU-Pro sample right: the columns are 100 and 0
  t "eval.sh runs mmlu_pro and livecodebench; the summary has one column per benchmark and their mean" sh -c '
    cp -r "$0/sample/tiny-qwen2" "$1/tq" && sed -i "s/\"max_position_embeddings\": 128/\"max_position_embeddings\": 4096/" "$1/tq/config.json" &&
    cp "$0/ood/mmlu_pro.jsonl" "$1/mp.jsonl" &&
    REWARD_CMD="skpo-reward --code-timeout 2 | skpo-cat | sed \"/\\\"source\\\":\\\"mmlu_pro\\\"/s/\\\"correct\\\":false/\\\"correct\\\":true/\" | skpo-cat --pack --no-meta" \
    MMLU_PRO="$1/mp.jsonl" LIVECODEBENCH="$0/ood/livecodebench.jsonl" OMP_NUM_THREADS=1 \
      bash "$2/pipelines/eval.sh" --k 2 --max-tokens 8 --after 2024-01-01 --template qwen2.5 --out "$1/ev" "$1/tq" mmlu_pro livecodebench \
      >"$1/ev.out" 2>&1 || { tail -5 "$1/ev.out"; exit 1; }
    grep -Eq "^model +mmlu_pro +livecodebench +avg$" "$1/ev.out" &&
    grep -Eq "^tq +100.00 +0.00 +50.00$" "$1/ev.out" &&
    grep -Eq "^livecodebench/easy +1 +2 " "$1/ev.out" && grep -Eq "^mmlu_pro/biology +2 +2 +100.00 " "$1/ev.out"' "$FIX" "$TMP" "$TOP"
else
  skip "eval.sh runs mmlu_pro and livecodebench" "bubblewrap cannot create namespaces here"
fi

# written after the extraction rules, as a held-out check (13/14 before the
# "or possibly (D)" hedge was handled; see the report of issue 22)
t "choice: held-out responses get the verdict a grader gives (want)" sh -c '
  skpo-cat --pack "$0/choice_heldout_full.jsonl" | skpo-reward | skpo-cat --fields uid,correct,want | grep -v "^{}$" >"$1/ho" &&
  [ "$(wc -l <"$1/ho")" = 14 ] && ! grep -v "\"correct\":\(true\|false\),\"want\":\1" "$1/ho"' "$O" "$TMP"
