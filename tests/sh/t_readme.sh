#!/bin/sh
# README.md's SKPO step is the pipeline pipelines/step.sh runs: the same stages in
# the same order (step.sh's check_pipe list of the unsharded branch), and every
# flag it shows is an option of its tool (--help).
. "$(dirname "$0")/lib.sh"
# block: the first ```sh block after "One SKPO step is literally", without its fences.
block() {
  awk '/^One SKPO step is literally/ { f = 1 } f && /^```sh$/ { b = 1; next } b && /^```$/ { exit } b' "$TOP/README.md"
}
readme_stages() {
  block | sed 's/^ *| *//' | awk '$1 ~ /^(skpo-|tee$)/ { sub(/^skpo-/, "", $1); printf "%s ", $1 }'
}
step_stages() {
  sed -n 's/^ *check_pipe \(sample splice.*\) -- .*/\1/p' "$TOP/pipelines/step.sh"
}
same_order() {
  r=$(readme_stages) s=$(step_stages)
  [ -n "$s" ] || { echo "no check_pipe list in step.sh"; return 1; }
  [ "$r" = "$s " ] || { echo "README: '$r'"; echo "step.sh: '$s'"; return 1; }
}
t "README's SKPO step has step.sh's stages in step.sh's order" same_order
flags_exist() {
  [ -x "$TOP/bin/skpo-sample" ] || { echo "not built"; return 1; }
  block | tr '\\' ' ' | tr '|' '\n' | while read -r tool rest; do
    case "$tool" in skpo-*) ;; *) continue;; esac
    for f in $(printf '%s\n' $rest | grep '^--'); do
      "$tool" --help | grep -q -- "^ *\(-., \)\{0,1\}$f\b" || { echo "$tool has no $f"; exit 1; }
    done
  done
}
t "every flag README's step shows is an option of its tool" flags_exist
