#!/usr/bin/env bash
# Sets up the machine, builds hypertrain and runs the whole test suite.
# Tests that need a GPU skip visibly when there is none in the first build,
# and run on the emulated device in the second (HT_SKIP_EMULATION=1: not).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
build_dir="${HT_BUILD_DIR:-build}"
# Open MPI refuses to run as root unless told; the multi-rank tests run under mpirun.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
status=0
ctest --test-dir "$build_dir" --output-on-failure --parallel "$(nproc)" "$@" || status=$?
# The CUDA code once more, on the emulated device (no GPU needed, emu/): a
# second build tree with only what the tests labelled gpu run, and those tests.
if [ "${HT_SKIP_EMULATION:-0}" != 1 ]; then
  emu_dir="${HT_EMU_BUILD_DIR:-build-emu}"
  HT_BUILD_DIR="$emu_dir" HT_BUILD_TARGET=ht_gpu_tests bash scripts/build.sh -DHT_CUDA_EMULATION=ON \
    -DHT_BUILD_BENCHMARKS=OFF
  ctest --test-dir "$emu_dir" --output-on-failure --parallel "$(nproc)" -L gpu "$@" || status=$?
fi
exit "$status"
