#!/usr/bin/env bash
# Sets up the machine, builds hypertrain and runs the main job: gpt_train on
# the fortunes corpus with the default (about 10M-parameter) configuration.
# Extra arguments go to gpt_train (try --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
build_dir="${HT_BUILD_DIR:-build}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}"
"$build_dir/examples/gpt/gpt_train" --run-dir runs/gpt "$@"
