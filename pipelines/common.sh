# pipelines/common.sh - shared by step.sh, grpo.sh, spo.sh, dapo.sh, train.sh (sourced, bash).
#
# A training step N+1 reads the committed step N (RUN/ckpt/N, RUN/state/N) and
# builds everything in RUN/tmp/N+1; only when every stage of the pipeline exited
# 0 is it committed: ckpt, state, rollouts and metrics are renamed into place and
# RUN/last is rewritten atomically (the commit marker). A failed or killed step
# leaves RUN/last, the previous checkpoint and the previous state untouched, and
# its RUN/tmp/N+1 (with one stderr log per stage) for inspection; the next run
# removes it and redoes the step.
#
# Run folder:
#   config                     KEY=VALUE (pipelines/config/defaults.conf + overrides)
#   last                       number of the last committed step (commit marker)
#   ckpt/N/                    checkpoint after step N (ckpt/0 = the initial model)
#   state/N/                   tracker state folder after step N (skpo-advantage --state)
#   rollouts/N.msgpack.zst     what step N sampled, with rewards (teed after the reward stage)
#   metrics/N.msgpack.zst      metrics records of step N (skpo-update) and evals
#   eval/N.msgpack.zst         rewarded eval samples at step N
#   logs/                      per-stage stderr of the committed steps
#   prm/N/, prm-metrics/N...   PRIME only: the implicit PRM after step N and its update's metrics
set -o pipefail
PIPE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TOP=$(cd "$PIPE/.." && pwd)
PATH="$TOP/bin:$PATH"
SKPO_SHARED=${SKPO_SHARED:-$TOP/../shared}

die() { echo "skpo-pipeline: $*" >&2; exit 1; }

# One file per concern, in pipelines/lib/:
#   run.sh      the run folder, one step's life (begin, check, commit), durable checkpoints
#   stages.sh   the stage commands (the only place tool flags appear), prompts, group filters
#   ranks.sh    ranks, devices, the sampler's shards, the update server
#   timing.sh   timed stages and logs/N.time
# shellcheck disable=SC1091
. "$PIPE/lib/run.sh" && . "$PIPE/lib/stages.sh" && . "$PIPE/lib/ranks.sh" && . "$PIPE/lib/timing.sh"

# conf_default KEY: KEY's value in defaults.conf, the one place a default is written.
conf_default() { sed -n "s/^$1=\([^ #]*\).*/\1/p" "$PIPE/config/defaults.conf"; }
# The helpers of lib/ranks.sh also serve scripts and tests that source this file
# without a run's config (load_config sets every key again from defaults.conf).
for _k in RANKS GPUS NODES LAUNCHER; do eval ": \"\${$_k:=\$(conf_default $_k)}\""; done; unset _k
