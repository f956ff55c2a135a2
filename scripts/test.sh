#!/usr/bin/env bash
# Sets up the machine, builds hypertrain and runs the whole test suite.
# Tests that need a GPU skip visibly when there is none.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
build_dir="${HT_BUILD_DIR:-build}"
# Open MPI refuses to run as root unless told; the multi-rank tests run under mpirun.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir "$build_dir" --output-on-failure --parallel "$(nproc)" "$@"
