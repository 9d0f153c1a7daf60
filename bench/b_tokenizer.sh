#!/bin/sh
# b_tokenizer.sh - encode throughput on one thread: skpo's tokenizer (through
# skpo-tokenize --stats, which times the encode calls only) against Hugging Face
# `tokenizers` (Rust, from Python; RAYON_NUM_THREADS=1) on the same math corpus
# of ~4 MB built from the train sets, one document per call on both sides. The
# peer's best of encode-one-at-a-time and encode_batch counts. Token counts
# must agree. Needs python3 with tokenizers and $SKPO_SHARED/data/train.
top=${SKPO_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
shared=${SKPO_SHARED:-$top/../shared}
MB=${MB:-4}
PATH="$top/bin:$PATH"
cd "$top" || exit 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ls "$shared"/data/train/*.jsonl >/dev/null 2>&1 || { echo "no train sets in $shared/data/train (set SKPO_SHARED)" >&2; exit 1; }
mkdir -p "$tmp/tok" && zstd -q -dc tests/fixtures/tokenizer/qwen2.5/tokenizer.json.zst >"$tmp/tok/tokenizer.json" || exit 1
python3 - "$shared/data/train" "$tmp/corpus.jsonl" "$MB" <<'PY' || exit 1
import glob, json, sys
src, out, mb = sys.argv[1], sys.argv[2], float(sys.argv[3])
docs, size = [], 0
files = sorted(glob.glob(src + "/*.jsonl"))
rows = [[json.loads(l) for l in open(f)] for f in files]
for i in range(max(map(len, rows))):  # interleave the sets so both are in the corpus
    for r in rows:
        if i < len(r) and size < mb * 1e6:
            d = r[i]
            t = (d.get("problem") or d.get("question")) + "\n\n" + (d.get("solution") or d.get("answer"))
            docs.append(t); size += len(t.encode())
with open(out, "w") as f:
    for t in docs: f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
PY
ours=$(skpo-tokenize --tokenizer "$tmp/tok" --no-special --stats "$tmp/corpus.jsonl" 2>&1 >/dev/null) || exit 1
peer=$(RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false python3 - "$tmp/tok/tokenizer.json" "$tmp/corpus.jsonl" <<'PY'
import json, sys, time
import tokenizers
t = tokenizers.Tokenizer.from_file(sys.argv[1])
docs = [json.loads(l)["text"] for l in open(sys.argv[2])]
size = sum(len(d.encode()) for d in docs)
t.encode(docs[0], add_special_tokens=False)
t0 = time.perf_counter(); n = sum(len(t.encode(d, add_special_tokens=False).ids) for d in docs)
one = size / 1e6 / (time.perf_counter() - t0)
t0 = time.perf_counter(); t.encode_batch(docs, add_special_tokens=False)
batch = size / 1e6 / (time.perf_counter() - t0)
print(f"{size} {n} {max(one, batch):.2f} {one:.2f} {batch:.2f} {tokenizers.__version__}")
PY
) || exit 1
set -- $peer
bytes=$1 tokens=$2 best=$3 one=$4 batch=$5 ver=$6
mbs=$(echo "$ours" | sed -n 's/.*(\([0-9.]*\) MB\/s).*/\1/p')
otok=$(echo "$ours" | sed -n 's/.* into \([0-9]*\) tokens.*/\1/p')
[ "$otok" = "$tokens" ] || { echo "token counts differ: ours $otok, tokenizers $tokens" >&2; exit 1; }
echo "corpus: $bytes bytes of math text, $tokens tokens (Qwen2.5 tokenizer), one thread"
echo "skpo tokenizer:            $mbs MB/s"
echo "HF tokenizers $ver:     $best MB/s (encode one by one $one, encode_batch $batch)"
echo "ratio: $(echo "scale=2; $mbs / $best" | bc -l)x"
