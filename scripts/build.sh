#!/usr/bin/env bash
# Configures and builds hypertrain in ./build (or $HT_BUILD_DIR). CUDA is
# compiled when the toolkit is present (HT_WITH_CUDA=AUTO); extra CMake
# arguments are passed through; HT_BUILD_TARGET builds one target only.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${HT_BUILD_DIR:-build}"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
elif [ $# -gt 0 ]; then
  cmake -S . -B "$build_dir" "$@"
fi
target=()
[ -n "${HT_BUILD_TARGET:-}" ] && target=(--target "$HT_BUILD_TARGET")
cmake --build "$build_dir" --parallel "$(nproc)" "${target[@]}"
