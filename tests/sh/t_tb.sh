#!/bin/sh
# skpo-tb: metrics records -> a TensorBoard event file (framing and protobuf bytes
# are checked against tensorboard's own writer in tests/unit/test_tb.c; here the
# tool's behaviour). Verified once with tensorboard 2.21's EventAccumulator.
. "$(dirname "$0")/lib.sh"
for tool in skpo-tb skpo-cat; do
  command -v "$tool" >/dev/null || { skip "skpo-tb" "$tool is not built"; exit 0; }
done
printf '%s\n' '{"kind":"metrics","tool":"skpo-advantage","step":1,"reward_mean":-0.5,"accuracy":0.25}' \
  '{"kind":"full","pid":"x","uid":"x1","reward":1}' \
  '{"kind":"metrics","step":2,"reward_mean":0.25,"accuracy":0.5,"source":"synth","note":"text"}' \
  | skpo-cat --pack >"$TMP/m.msgpack.zst"
EV="$TMP/tb/events.out.tfevents.0.skpo"
t "numeric fields of metrics records become scalars, other records are ignored" sh -c '
  skpo-tb --logdir "$0/tb" "$0/m.msgpack.zst" 2>"$0/err" && grep -q "4 scalars" "$0/err"' "$TMP"
t "the file starts with the brain.Event:2 version record" sh -c '
  head -c 64 "$0" | grep -q "brain.Event:2"' "$EV"
t "tags carry the source prefix when the record has one" sh -c '
  grep -q "synth/accuracy" "$0" && grep -q "reward_mean" "$0" && ! grep -q "synth/step" "$0"' "$EV"
t "string fields and non-metrics records write nothing" sh -c '! grep -q "note" "$0" && ! grep -q "reward\"" "$0"' "$EV"
t "the record count matches length-prefixed framing to the byte" sh -c '
  # walk the TFRecord frames: 8-byte length, 4-byte crc, data, 4-byte crc
  size=$(wc -c <"$0"); off=0; n=0
  while [ "$off" -lt "$size" ]; do
    len=$(od -An -tu8 -j "$off" -N8 "$0" | tr -d " ")
    off=$((off + 16 + len)); n=$((n + 1))
  done
  [ "$off" = "$size" ] && [ "$n" = 5 ]' "$EV"
t "re-running replaces the file instead of appending" sh -c '
  s1=$(wc -c <"$0/tb/events.out.tfevents.0.skpo"); skpo-tb --logdir "$0/tb" "$0/m.msgpack.zst" 2>/dev/null &&
  [ "$(wc -c <"$0/tb/events.out.tfevents.0.skpo")" = "$s1" ]' "$TMP"
t "stdin works and --group changes the tag prefix field" sh -c '
  skpo-tb --logdir "$0/tb2" --group tool <"$0/m.msgpack.zst" 2>/dev/null &&
  grep -q "skpo-advantage/accuracy" "$0/tb2/events.out.tfevents.0.skpo"' "$TMP"
t "a truncated stream fails and leaves no event file" sh -c '
  head -c 40 "$0/m.msgpack.zst" >"$0/bad.zst"; ! skpo-tb --logdir "$0/tb3" "$0/bad.zst" 2>/dev/null &&
  [ ! -e "$0/tb3/events.out.tfevents.0.skpo" ] && [ -z "$(ls "$0/tb3")" ]' "$TMP"
t "--help prints usage on stdout and exits 0" sh -c 'skpo-tb --help | grep -q "^usage: skpo-tb"'
