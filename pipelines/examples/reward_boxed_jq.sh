#!/bin/sh
# reward_boxed_jq.sh - an example replacement for skpo-reward, written as a jq
# filter over `skpo-cat` JSON lines: a rollout is correct when the content of
# its last \boxed{...} (no nested braces), with spaces removed, equals its gold
# `answer` with spaces removed. It honours the reward-stage contract of
# docs/reward.md: every record and field passes through, each `down`/`full`
# record with `text` and `answer` gets `pred`, `correct` and `reward` (+1/-1),
# a rollout without `answer` stops the stream with an error naming its uid.
#
#   skpo-splice ... | pipelines/examples/reward_boxed_jq.sh | skpo-advantage ...
#
# Needs skpo-cat (JSON lines in and --pack out) and jq on the PATH.
set -eu
skpo-cat "${1:--}" | jq -c --unbuffered '
  if (.kind == "down" or .kind == "full") then
    if (.answer | type) != "string" then
      error("rollout \(.uid) has no gold answer")
    else
      ([(.text // "") | match("\\\\boxed\\{([^{}]*)\\}"; "g") | .captures[0].string] | last) as $p
      | (if $p == null then del(.pred) else .pred = $p end)
      | .correct = ($p != null and ($p | gsub(" "; "")) == (.answer | gsub(" "; "")))
      | .reward = (if .correct then 1.0 else -1.0 end)
    end
  else . end' | skpo-cat --pack
