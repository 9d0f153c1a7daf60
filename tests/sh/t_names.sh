#!/bin/sh
# Names of an extension point come from one table in the core (base/cli.h
# skpo_enum): for each option that takes such a name, the names its --help line
# lists are exactly the names it accepts. Each candidate list holds every name
# of the kind (those the option must refuse too) and a misspelling; a refused
# name is a usage error (exit 2) whose message lists the accepted names.
# (skpo-update's help once named two loss forms while it accepted five.)
. "$(dirname "$0")/lib.sh"
# help_names TOOL OPT: the a|b|c of OPT's --help line (a long list ends its line), one per line.
help_names() {
  "$1" --help | sed -n "s/^ *--$2 \([a-z0-9|-]*\)\( .*\)\{0,1\}\$/\1/p" | tr '|' '\n'
}
# accepted TOOL OPT NAME: the parser took NAME (any later failure is not about OPT).
accepted() {
  "$1" --"$2" "$3" </dev/null >/dev/null 2>"$TMP/a.err"
  rc=$?
  ! { [ "$rc" = 2 ] && grep -q -- "--$2: '$3' is not" "$TMP/a.err"; }
}
# listed_iff_accepted TOOL OPT CANDIDATES...
listed_iff_accepted() {
  tool=$1 opt=$2; shift 2
  help_names "$tool" "$opt" >"$TMP/h"
  [ -s "$TMP/h" ] || { echo "$tool --help lists no names for --$opt"; return 1; }
  for n in "$@"; do
    if accepted "$tool" "$opt" "$n"; then
      grep -qx -- "$n" "$TMP/h" || { echo "$tool --$opt accepts '$n' but --help does not list it"; return 1; }
    else
      grep -qx -- "$n" "$TMP/h" && { echo "$tool --$opt lists '$n' but refuses it"; cat "$TMP/a.err"; return 1; }
      for h in $(cat "$TMP/h"); do
        grep -q -- "$h" "$TMP/a.err" || { echo "refusing '$n', the message does not list '$h':"; cat "$TMP/a.err"; return 1; }
      done
    fi
  done
}
FORMS="ppo cispo sft gspo sapo shape prm-ce gpso"
need() { for b in "$@"; do [ -x "$TOP/bin/$b" ] || { skip "names from one table" "$b not built"; exit 0; }; done; }
need skpo-update skpo-advantage skpo-reward skpo-sample skpo-splice skpo-score
for o in up-loss down-loss full-loss; do
  t "skpo-update --$o lists in --help exactly the loss forms it accepts" listed_iff_accepted skpo-update $o $FORMS
done
t "skpo-update --loss-agg lists exactly the aggregations it accepts" listed_iff_accepted skpo-update loss-agg \
  token-mean seq-mean-token-mean seq-mean-token-sum-norm seq-sum
t "skpo-update --mismatch lists exactly the modes it accepts" listed_iff_accepted skpo-update mismatch \
  off tis mask-token mask-seq icepop is
t "skpo-advantage --mode lists exactly the estimators it accepts" listed_iff_accepted skpo-advantage mode \
  skpo grpo drgrpo dapo spo prime ppo critique
t "skpo-reward --task lists exactly the tasks it accepts" listed_iff_accepted skpo-reward task auto math choice code prose
for b in skpo-update skpo-sample skpo-splice skpo-score; do
  t "$b --device lists exactly the devices it accepts" listed_iff_accepted $b device cpu cuda tpu
done

# Algorithms: an ALGO is any name with a step script (common.sh step_script), so
# train.sh and compare.sh take a new one with no list to update.
algos() {
  cp -r "$TOP/pipelines" "$TMP/p"
  printf '#!/usr/bin/env bash\n. "$(dirname "$0")/common.sh"\nbegin_step "$1"\n' >"$TMP/p/newalgo.sh"
  # shellcheck disable=SC1091
  bash -c '. "$1/common.sh"
    [ "$(step_script skpo)" = "$1/step.sh" ] || { echo "skpo is not step.sh"; exit 1; }
    [ "$(step_script grpo)" = "$1/grpo.sh" ] || { echo "grpo has no step script"; exit 1; }
    [ "$(step_script newalgo)" = "$1/newalgo.sh" ] || { echo "a new step script is not found"; exit 1; }
    for no in common train compare eval demo step ../pipelines/grpo "" "a b"; do
      step_script "$no" >/dev/null && { echo "'\''$no'\'' taken for a step script"; exit 1; }
    done
    case " $(step_algos) " in *" newalgo "*) ;; *) echo "step_algos misses newalgo: $(step_algos)"; exit 1;; esac
    case " $(step_algos) " in *" common "*|*" step "*) echo "step_algos lists a non-step script"; exit 1;; esac
    exit 0' sh "$TMP/p"
}
t "an ALGO is any name with a step script (begin_step); other pipeline scripts are not" algos
train_refuses() {
  bash "$TOP/pipelines/train.sh" "$TMP/run" MODEL="$FIX/sample/tiny-qwen2" TRAIN_DATA="$FIX/sample/prompts.msgpack.zst" ALGO=nosuch >"$TMP/o" 2>&1 && return 1
  grep -q "ALGO='nosuch' has no step script (one of: skpo .*grpo" "$TMP/o" || { cat "$TMP/o"; return 1; }
}
t "train.sh refuses an ALGO without a step script and names those with one" train_refuses
