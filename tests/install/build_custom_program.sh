#!/usr/bin/env bash
# Installs hypertrain from a build tree into a fresh prefix, then configures
# and builds examples/custom_program against that prefix alone: the
# installed package (headers, generated config.h, library, CMake config) must
# be enough for an outside project. tests/examples/custom_program_test.sh
# then runs what it built.
#
#   build_custom_program.sh CMAKE BUILD_DIR SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER
set -euo pipefail

if [ $# -ne 6 ]; then
  echo "usage: $0 CMAKE BUILD_DIR SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER" >&2
  exit 2
fi
cmake=$1 build_dir=$2 source_dir=$3 work_dir=$4 generator=$5 cxx=$6

rm -rf "$work_dir"
mkdir -p "$work_dir"
prefix=$work_dir/prefix

echo "== installing $build_dir into $prefix"
"$cmake" --install "$build_dir" --prefix "$prefix"

echo "== configuring examples/custom_program against $prefix"
"$cmake" -S "$source_dir/examples/custom_program" -B "$work_dir/build" -G "$generator" \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF

echo "== building"
"$cmake" --build "$work_dir/build"
[ -x "$work_dir/build/custom_program" ] || { echo "FAIL: no custom_program built"; exit 1; }
echo "built $work_dir/build/custom_program"
