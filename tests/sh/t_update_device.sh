#!/bin/sh
# t_update_device.sh - skpo-update's --device handling that runs anywhere:
# asking for cuda where it cannot work fails with one clear line (exit 1) and
# writes nothing; bad values are usage errors. The GPU path itself is tested
# by build/tests/test_cuda_train (tests/gpu/run.sh).
. "$(dirname "$0")/lib.sh"
M="$FIX/update/model"
R="$M/records.msgpack.zst"
A="--minibatch 2 --lr 1e-2 --warmup-steps 2 --adam-eps 1e-4 --micro-tokens 24"

if [ ! -x "$TOP/bin/skpo-update" ]; then
  skip "skpo-update --device" "bin/skpo-update not built"
  exit 0
fi

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then
  skip "--device cuda without a GPU fails with one line" "a GPU is visible here"
else
  t "--device cuda without a GPU fails with one line, exit 1, nothing written" sh -c "
    expect_exit() { want=\$1; shift; \"\$@\"; rc=\$?; [ \"\$rc\" = \"\$want\" ]; }
    expect_exit 1 skpo-update --model '$M' --out '$TMP/x' --device cuda $A <'$R' 2>'$TMP/err' &&
    [ \$(wc -l <'$TMP/err') -eq 1 ] && grep -q '^skpo-update: device cuda: ' '$TMP/err' && [ ! -e '$TMP/x' ]"
  t "SKPO_DEVICE=cuda is the same as --device cuda" sh -c "
    SKPO_DEVICE=cuda skpo-update --model '$M' --out '$TMP/y' $A <'$R' 2>'$TMP/err2'; [ \$? -eq 1 ] &&
    grep -q '^skpo-update: device cuda: ' '$TMP/err2' && [ ! -e '$TMP/y' ]"
fi

t "--device with an unknown name is a usage error (exit 2)" sh -c "
  skpo-update --model '$M' --out '$TMP/z' --device tpu <'$R' 2>'$TMP/err3'; [ \$? -eq 2 ] && grep -q 'tpu' '$TMP/err3'"
t "--recompute on the cpu is refused (exit 1)" sh -c "
  skpo-update --model '$M' --out '$TMP/w' --device cpu --recompute <'$R' 2>'$TMP/err4'; [ \$? -eq 1 ] &&
  grep -q 'need --device cuda' '$TMP/err4' && [ ! -e '$TMP/w' ]"
t "--device cpu trains as before" sh -c "
  skpo-update --model '$M' --out '$TMP/ok' --device cpu $A <'$R' 2>/dev/null && [ -f '$TMP/ok/model.safetensors' ]"
t "--offload without --serve is a usage error (exit 2)" sh -c "
  skpo-update --model '$M' --out '$TMP/o1' --offload $A <'$R' 2>'$TMP/err5'; [ \$? -eq 2 ] && grep -q 'offload is a --serve option' '$TMP/err5' && [ ! -e '$TMP/o1' ]"
t "--serve --offload on the cpu fails with one line before loading anything" sh -c "
  skpo-update --serve '$TMP/srv' --model '$M' --device cpu --offload 2>'$TMP/err6'; [ \$? -eq 1 ] &&
  [ \$(wc -l <'$TMP/err6') -eq 1 ] && grep -q 'offload needs --device cuda' '$TMP/err6' && [ ! -e '$TMP/srv/ready' ]"
