#!/bin/sh
# t_update.sh - skpo-update black-box tests and the data-parallel run of
# test_update_dp under mpirun (2 ranks, oversubscribed on small machines).
. "$(dirname "$0")/lib.sh"
BUILD=${SKPO_BUILD:-build}
UFIX="$FIX/update"

# mpirun as root needs these; --oversubscribe lets 2 ranks share fewer cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
have_mpirun() { command -v mpirun >/dev/null 2>&1; }
# Open MPI keeps process-lifetime allocations that LeakSanitizer reports as
# leaks (not ours): leak checking is off for MPI runs only.
mpi2() { ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" mpirun -np 2 --oversubscribe "$@"; }

if have_mpirun && [ -x "$BUILD/tests/test_update_dp" ]; then
  t "data-parallel step over 2 MPI ranks equals the single-process step" \
    mpi2 "$BUILD/tests/test_update_dp"
else
  skip "data-parallel step over 2 MPI ranks" "no mpirun or no $BUILD/tests/test_update_dp"
fi
