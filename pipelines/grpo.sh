#!/usr/bin/env bash
# pipelines/grpo.sh RUN_DIR - one GRPO step from the same tools:
#   skpo-sample --n G | $REWARD_CMD | tee rollouts | skpo-advantage --mode grpo | skpo-update
# G whole responses per prompt, group-normalized advantages, clipped update.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"  # `sh demo.sh` (make) re-runs under bash
. "$(dirname "$0")/common.sh"
[ $# = 1 ] || { echo "usage: pipelines/grpo.sh RUN_DIR" >&2; exit 2; }
begin_step "$1"
full_step grpo --full-dual-clip "$FULL_DUAL_CLIP" --full-clip-low "$CLIP_LOW" --full-clip-high "$GRPO_CLIP_HIGH"
