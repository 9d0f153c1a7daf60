#!/bin/sh
# b_torch.sh - skpo's CPU trainer against PyTorch 2.x on the same checkpoints
# and token ids: scoring (skpo-score), the update step (skpo-update) and
# sampling (skpo-sample) for a tiny model (the demo's config) and a 125M one
# (Qwen2-shaped: 12 layers, hidden 768, 12 heads / 4 KV heads, FFN 2048,
# vocab 32000 untied, stored in bf16).
#
# The peer is bench/torch_peer.py: the same model written plainly in eager
# torch (F.linear, scaled_dot_product_attention, log_softmax on the scored
# rows, AdamW), the same work as each skpo tool (the update recomputes pi_old
# first, as skpo-update does by default; a second update row lets skpo take
# pi_old from the rollout, exact on the CPU, against torch's recompute). PyTorch comes from PyPI into a venv
# this script makes once ($SKPO_TORCH_VENV, default ~/.cache/skpo/torch-venv;
# PyPI's Linux wheel is the CUDA build, several GB, and runs on the CPU;
# SKPO_TORCH_INDEX_URL=... installs from another index, e.g. the CPU-only one,
# and SKPO_TORCH_PYTHON=/path/python uses a python that already has torch 2.x).
# Where it cannot be installed the bench says so and is skipped.
#
# Printed per workload: each side's compute phase, timed inside its own
# process (skpo: SKPO_TIMING=1, the work between loading and writing; torch:
# after loading and an untimed 8-token warm-up), skpo's whole process (start,
# checkpoint load, weight packing, the work, writing the output or the next
# checkpoint) and torch's, and the ratios torch/skpo (> 1: skpo is faster).
# Sides alternate, SKPO_BENCH_REPEAT rounds (default 3); medians are printed,
# with the load average seen. Threads: SKPO_BENCH_THREADS (default 2).
# Both sides run with OMP_WAIT_POLICY=passive (see b_sample.sh: spinning
# threads on a shared machine make every number noise).
set -u
top=${SKPO_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$top" || exit 1
PATH="$top/bin:$PATH"
T=${SKPO_BENCH_THREADS:-2}
R=${SKPO_BENCH_REPEAT:-3}
export OMP_NUM_THREADS=$T OMP_WAIT_POLICY=passive
PY=${SKPO_TORCH_PYTHON:-}
if [ -z "$PY" ]; then
  VENV=${SKPO_TORCH_VENV:-$HOME/.cache/skpo/torch-venv}
  if ! "$VENV/bin/python" -c 'import torch' 2>/dev/null; then
    echo "b_torch: installing PyTorch 2.x from PyPI into $VENV (once; several GB)"
    { python3 -m venv "$VENV" &&
      "$VENV/bin/pip" install -q ${SKPO_TORCH_INDEX_URL:+--index-url "$SKPO_TORCH_INDEX_URL"} 'torch>=2,<3'; } >"${TMPDIR:-/tmp}/b_torch_pip.log" 2>&1 ||
      { echo "b_torch: skipped (PyTorch 2.x could not be installed from PyPI into $VENV: $(tail -n 1 "${TMPDIR:-/tmp}/b_torch_pip.log"))"; exit 0; }
  fi
  PY=$VENV/bin/python
fi
"$PY" -c 'import sys, torch; sys.exit(torch.__version__[:2] != "2.")' 2>/dev/null ||
  { echo "b_torch: skipped ($PY has no PyTorch 2.x)"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
peer="$top/bench/torch_peer.py"

# Models: the demo's tiny config (float32) and the 125M one (bf16), EOS off so
# that sampling makes exactly the tokens asked for on both sides.
python3 - "$top/tests/fixtures/demo/config.json" "$tmp" <<'EOF' || exit 1
import json, sys
c = json.load(open(sys.argv[1]))
c.pop("eos_token_id", None)
c["max_position_embeddings"] = 1024
json.dump(c, open(sys.argv[2] + "/tiny.json", "w"))
b = dict(c, vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
         num_attention_heads=12, num_key_value_heads=4, tie_word_embeddings=False, torch_dtype="bfloat16")
json.dump(b, open(sys.argv[2] + "/base.json", "w"))
EOF
skpo-init --config "$tmp/tiny.json" --out "$tmp/tiny" --std 0.08 2>/dev/null &&
  skpo-init --config "$tmp/base.json" --out "$tmp/base" --dtype bf16 2>/dev/null || { echo "b_torch: skpo-init failed" >&2; exit 1; }
mk() { mkdir -p "$tmp/$1" && python3 "$peer" make "$tmp/$1" "$2" "$3" "$4" "$5" "$6" 1 || exit 1; }
mk tiny_in score 16 64 192 336; mk tiny_in update 16 64 192 336; mk tiny_in prompts 8 32 0 336
mk base_in score 4 128 384 32000; mk base_in update 4 128 384 32000; mk base_in prompts 4 64 0 32000

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else printf "%.3f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
# timed OUT ERR CMD...: run CMD (argv) with stdout to OUT and stderr to ERR,
# print its wall seconds. The clock is read in the parent right around the
# child, so forking `date` and a shell is not counted (that was ~10 ms, a
# third of the tiny model's whole scoring process).
timed() {
  python3 -c 'import subprocess, sys, time
a = time.perf_counter()
r = subprocess.run(sys.argv[3:], stdout=open(sys.argv[1], "w"), stderr=open(sys.argv[2], "w"))
print("%.4f" % (time.perf_counter() - a))
sys.exit(r.returncode)' "$@"
}
load() { cut -d" " -f1 /proc/loadavg; }
# run_pair NAME MODEL SKPO-COMMAND TORCH-ARGS...: R alternating rounds.
run_pair() {
  name=$1 model=$2 cmd=$3; shift 3
  : >"$tmp/sc"; : >"$tmp/sw"; : >"$tmp/tc"; : >"$tmp/tw"; : >"$tmp/ld"
  i=0
  while [ "$i" -lt "$R" ]; do
    load >>"$tmp/ld"
    SKPO_TIMING=1 timed /dev/null "$tmp/err" /bin/sh -c "exec $cmd" >>"$tmp/sw" ||
      { echo "b_torch: $name: skpo failed: $(tail -n 3 "$tmp/err")" >&2; return 1; }
    sed -n 's/.*: compute \([0-9.]*\) s.*/\1/p' "$tmp/err" | tail -n 1 >>"$tmp/sc"
    timed "$tmp/pout" "$tmp/perr" "$PY" "$peer" "$@" >>"$tmp/tw" ||
      { echo "b_torch: $name: torch failed: $(tail -n 3 "$tmp/perr")" >&2; return 1; }
    sed -n 's/^torch_compute \([0-9.]*\) .*/\1/p' "$tmp/pout" >>"$tmp/tc"
    i=$((i + 1))
  done
  sc=$(median <"$tmp/sc") sw=$(median <"$tmp/sw") tc=$(median <"$tmp/tc") tw=$(median <"$tmp/tw")
  printf '%-22s compute: skpo %7.3f s, torch %7.3f s, torch/skpo %5sx | whole process: skpo %7.3f s, torch %7.3f s | torch compute / skpo whole %5sx | load %s\n' \
    "$name" "$sc" "$tc" "$(ratio "$tc" "$sc")" "$sw" "$tw" "$(ratio "$tc" "$sw")" "$(tr '\n' ' ' <"$tmp/ld" | sed 's/ $//')"
}

echo "threads $T, $R rounds each (medians), torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null), $(nproc) CPUs, load before: $(cut -d" " -f1-3 /proc/loadavg)"
for m in tiny base; do
  [ $m = tiny ] && { shape=16x256; ushape=16x256; mb=8; G=8; NEW=64; } || { shape=4x512; ushape=4x512; mb=2; G=4; NEW=32; }
  label=$m; [ $m = base ] && label=125M
  run_pair "score $label $shape" "$tmp/$m" \
    "skpo-score --model '$tmp/$m' '$tmp/${m}_in/score.msgpack.zst'" score "$tmp/$m" "$tmp/${m}_in/score.json" "$T"
  run_pair "update $label $ushape" "$tmp/$m" \
    "skpo-update --model '$tmp/$m' --out '$tmp/out' --minibatch $mb '$tmp/${m}_in/update.msgpack.zst'" \
    update "$tmp/$m" "$tmp/${m}_in/update.json" "$T" "$mb"
  # The same step with pi_old taken from the rollout's log-probs instead of a
  # recompute: on the CPU the sampler's log-probs equal pi_old bit for bit
  # (docs/update.md), so skpo may skip that forward; torch's side still
  # recomputes, as a trainer must whose rollout engine is another program.
  # The records get real log-probs from skpo-score first (untimed).
  skpo-score --model "$tmp/$m" --field logp "$tmp/${m}_in/update.msgpack.zst" >"$tmp/${m}_in/update_lp.msgpack.zst" ||
    { echo "b_torch: skpo-score --field logp failed" >&2; exit 1; }
  run_pair "update $label $ushape rollout-old" "$tmp/$m" \
    "skpo-update --model '$tmp/$m' --out '$tmp/out' --minibatch $mb --old-logp rollout '$tmp/${m}_in/update_lp.msgpack.zst'" \
    update "$tmp/$m" "$tmp/${m}_in/update.json" "$T" "$mb"
  np=$(python3 -c "import json; print(len(json.load(open('$tmp/${m}_in/prompts.json'))))")
  run_pair "sample $label ${np}x$G+$NEW" "$tmp/$m" \
    "skpo-sample --model '$tmp/$m' --prompts '$tmp/${m}_in/prompts.msgpack.zst' --n $G --max-tokens $NEW --batch $((np * G)) --no-text" \
    sample "$tmp/$m" "$tmp/${m}_in/prompts.json" "$T" "$G" "$NEW"
done
