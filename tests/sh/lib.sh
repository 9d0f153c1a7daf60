# tests/sh/lib.sh - helpers for black-box tool tests (sourced).
# Each test: `t "what the behaviour is" cmd...` runs cmd in a subshell and
# prints PASS/FAIL with the title; `skip "title" "why"` prints SKIP.
# $TMP is a fresh directory removed at exit; tools are on PATH (bin/).
set -u
TOP=${SKPO_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}
PATH="$TOP/bin:$PATH"
FIX="$TOP/tests/fixtures"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
t() {
  title=$1; shift
  if ( "$@" ) >"$TMP/.out" 2>&1; then echo "PASS $title"
  else echo "FAIL $title"; sed 's/^/    /' "$TMP/.out" | tail -n 20 >&2; fi
}
skip() { echo "SKIP $1: $2"; }
# fails with a message unless "$1" (a command string) exits with code $2
expect_exit() { want=$1; shift; "$@"; rc=$?; [ "$rc" = "$want" ] || { echo "exit $rc, want $want: $*" >&2; return 1; }; }
# tiny_rl_fixture NAME TOOL...: for the one-step pipeline tests (t_baselines, t_prime):
# skip NAME unless every TOOL is built; else $TMP/train.msgpack.zst (24 synth problems),
# $TMP/model (the demo config, random weights) and $PARITY, a reward command that gives
# +1 (correct) when the first response token is even (a random model can satisfy it).
tiny_rl_fixture() {
  name=$1; shift
  need_tools "$name" "$@"
  export OMP_NUM_THREADS=1
  PARITY=$(parity_reward 'down|full|self')
  export PARITY
  pipeline_fixtures 24 "$name"
}
# same_json_lines A B [RTOL]: the two files of JSON lines are equal as text except
# that each number may differ by RTOL (1e-6 relative; absolute below 1e-6). Pinned
# floats from float32 forwards differ in the last digit between CPUs, because
# OpenBLAS picks its kernels by CPU model; the structure and every integer must not.
same_json_lines() {
  awk -v rtol="${3:-1e-6}" '
    function split_nums(s, nums, txt,   n, m) {
      n = 0; txt[0] = ""
      while (match(s, /-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?/)) {
        txt[n] = txt[n] substr(s, 1, RSTART - 1); nums[++n] = substr(s, RSTART, RLENGTH) + 0; txt[n] = ""
        s = substr(s, RSTART + RLENGTH)
      }
      txt[n] = txt[n] s
      return n
    }
    NR == FNR { a[FNR] = $0; na = FNR; next }
    { nb = FNR
      if (!(FNR in a)) { print "line " FNR ": only in " FILENAME; bad = 1; next }
      n1 = split_nums(a[FNR], x, tx); n2 = split_nums($0, y, ty)
      ok = n1 == n2
      for (i = 0; ok && i <= n1; i++) if (tx[i] != ty[i]) ok = 0
      for (i = 1; ok && i <= n1; i++) {
        d = x[i] - y[i]; if (d < 0) d = -d
        if (d > rtol * (x[i] < 0 ? -x[i] : x[i]) && d > 1e-6) ok = 0
      }
      if (!ok) { print "line " FNR " differs:\n  " a[FNR] "\n  " $0; bad = 1 }
    }
    END { if (na != nb) { print "line counts differ: " na " vs " nb; bad = 1 } exit bad }' "$1" "$2"
}
# need_tools TITLE TOOL...: skip TITLE (and the rest of the file) unless every TOOL is built.
need_tools() {
  nt_title=$1; shift
  for tool in "$@"; do
    command -v "$tool" >/dev/null || { skip "$nt_title" "$tool is not built yet"; exit 0; }
  done
}
# parity_reward KINDS: a REWARD_CMD for pipelines/train.sh. A random model
# answers nothing right, so the reward stage is swapped for a rule it can
# satisfy: +1 when the first response token is even, for the records whose
# kind matches the awk alternation KINDS (e.g. "down|full").
parity_reward() {
  printf '%s' 'skpo-cat | awk '"'"'/"kind":"('"$1"')"/ { t = $0; sub(/.*"tokens":\[/, "", t); r = (t + 0) % 2 ? -1 : 1;
  sub(/}$/, ",\"reward\":" r ",\"correct\":" (r > 0 ? "true" : "false") "}") } { print }'"'"' | skpo-cat --pack'
}
# pipeline_fixtures COUNT WHAT: $TMP/train.msgpack.zst (COUNT synthetic
# prompts) and a random $TMP/model of the demo's config, for train.sh runs.
pipeline_fixtures() {
  skpo-synth --count "$1" --max-operand 9 --tokenizer "$FIX/demo/tokenizer" >"$TMP/train.msgpack.zst" &&
  skpo-init --config "$FIX/demo/config.json" --tokenizer "$FIX/demo/tokenizer" --seed 3 --out "$TMP/model" 2>/dev/null ||
    { echo "FAIL $2 fixtures (synth/init)"; exit 1; }
}
# train_run DIR [KEY=VALUE...]: pipelines/train.sh on pipeline_fixtures' model and
# prompts with the test's $CONF, rewarded by $RCMD (default $PARITY).
train_run() {
  tr_dir=$1; shift
  # shellcheck disable=SC2086
  REWARD_CMD=${RCMD:-$PARITY} bash "$TOP/pipelines/train.sh" "$tr_dir" MODEL="$TMP/model" TRAIN_DATA="$TMP/train.msgpack.zst" $CONF "$@"
}
# The skpo-update fixture (tests/ref/make_update_fixtures.py): model, records,
# and the flags its reference step was computed with.
UPD_MODEL="$FIX/update/model"
UPD_RECORDS="$UPD_MODEL/records.msgpack.zst"
UPD_FLAGS="--minibatch 2 --lr 1e-2 --warmup-steps 2 --adam-eps 1e-4 --micro-tokens 24"
