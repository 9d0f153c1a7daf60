#!/bin/sh
# b_advantage.sh - skpo-advantage on one SKPO-sized step, scaled up (P prompts x
# 8 downstream responses of T tokens), against the peer: verl's
# compute_grpo_outcome_advantage loop (torch, in memory, per-token broadcast)
# plus SPO batch normalisation, run on the same rewards. Ours includes reading,
# decompressing, parsing, writing and compressing every record and saving the
# tracker state; the peer does the arithmetic only. Needs python3 with torch.
top=${SKPO_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
P=${P:-2048} T=${T:-512}
PATH="$top/bin:$PATH"
cd "$top" || exit 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp/step.zst" "$P" "$T" <<'PY' || exit 1
import random, subprocess, sys
sys.path.insert(0, "tests/fixtures/adv")
from make_fixtures import pack, i32s
out, P, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(0)
parts = [pack({"kind": "meta", "schema": 1, "tool": "b_advantage"})]
for p in range(P):
    pid = "p%d" % p
    parts.append(pack({"kind": "up", "uid": "u" + pid, "pid": pid, "prompt": i32s([1] * 64),
                       "tokens": i32s([2] * (T // 4))}))
    for i in range(8):
        r = 1.0 if rng.random() < 0.4 else -1.0
        parts.append(pack({"kind": "down", "uid": "d%s-%d" % (pid, i), "pid": pid, "gid": "u" + pid,
                           "tokens": i32s([3] * T), "reward": r, "correct": r > 0}))
subprocess.run(["zstd", "-q", "-f", "-3", "-o", out], input=b"".join(parts), check=True)
PY
start=$(date +%s.%N)
skpo-advantage --mode skpo --state "$tmp/state" "$tmp/step.zst" >"$tmp/out.zst" || exit 1
end=$(date +%s.%N)
ours=$(printf "%.4f" "$(echo "$end - $start" | bc -l)")
peer=$(python3 - "$P" "$T" <<'PY'
import random, sys, time
from collections import defaultdict
import torch
P, T = int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(0)
scores, index = [], []
for p in range(P):
    for i in range(8):
        scores.append(1.0 if rng.random() < 0.4 else -1.0); index.append(p)
torch.set_num_threads(2)
t0 = time.perf_counter()
# verl core_algos.compute_grpo_outcome_advantage (norm_adv_by_std_in_grpo=True, eps 1e-6)
rewards = torch.zeros(len(scores), T); rewards[:, -1] = torch.tensor(scores)
mask = torch.ones(len(scores), T)
s = rewards.sum(dim=-1)
id2score, id2mean, id2std = defaultdict(list), {}, {}
with torch.no_grad():
    for i in range(len(s)): id2score[index[i]].append(s[i])
    for k in id2score:
        if len(id2score[k]) == 1: id2mean[k], id2std[k] = torch.tensor(0.0), torch.tensor(1.0)
        else:
            x = torch.stack(id2score[k]); id2mean[k], id2std[k] = torch.mean(x), torch.std(x)
    for i in range(len(s)): s[i] = (s[i] - id2mean[index[i]]) / (id2std[index[i]] + 1e-6)
    adv = s.unsqueeze(-1) * mask
    # SPO upstream: R_I - V (V = 0 on first visits), batch-normalised with torch.std + 1e-8
    up = torch.tensor(scores).view(P, 8).mean(1)
    up = (up - up.mean()) / (up.std() + 1e-8)
print("%.4f" % (time.perf_counter() - t0))
PY
) || exit 1
echo "skpo-advantage --mode skpo, $P prompts x 8 downs x $T tokens: ours ${ours}s (whole tool incl. record I/O), peer ${peer}s (verl GRPO loop in torch, arithmetic only)"
printf "ratio ours/peer: %.3f (below 1: ours is faster)\n" "$(echo "$ours / $peer" | bc -l)"
