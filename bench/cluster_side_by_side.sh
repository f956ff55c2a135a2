#!/usr/bin/env bash
# The namespace cluster's fault scenarios (tests/cluster/cluster_scenarios.sh)
# with two builds of hypertrain side by side on one machine, alternating, so
# that a change's recovery figures are judged against the build before it on
# the same machine at the same hour (start-up times drift by a third over a
# day here). Each tree runs its own scenario script with its own binaries.
#
#   bench/cluster_side_by_side.sh BEFORE_TREE BEFORE_BUILD AFTER_TREE AFTER_BUILD [ROUNDS (3)] [SCENARIO ...]
#
# (default scenarios: crash partition). A build needs only htrun and
# gpt_train (and ht-agent where the tree has one), for example:
#   git worktree add /tmp/before 03ecb84
#   cmake -S /tmp/before -B /tmp/before/build -G Ninja -DCMAKE_BUILD_TYPE=Release \
#     -DHT_BUILD_TESTS=OFF -DHT_BUILD_BENCHMARKS=OFF
#   cmake --build /tmp/before/build --target htrun gpt_train
# Needs root (network namespaces) and the machine to itself. Prints one line
# per run, the scenario's "# measured" line, and keeps each run's log under
# $WORK (default /tmp/ht_side_by_side).
set -uo pipefail
[ $# -ge 4 ] || { sed -n 2,17p "$0"; exit 2; }
before_tree=$(realpath "$1") before_build=$(realpath "$2") after_tree=$(realpath "$3") after_build=$(realpath "$4")
rounds=${5:-3}
shift $(( $# >= 5 ? 5 : 4 ))
scenarios=("$@")
[ ${#scenarios[@]} -eq 0 ] && scenarios=(crash partition)
work=${WORK:-/tmp/ht_side_by_side}
mkdir -p "$work/before" "$work/after"
status=0

run() {  # label tree build scenario round
  local label=$1 tree=$2 build=$3 scenario=$4 round=$5
  local log="$work/$label.$scenario.$round.log"
  bash "$tree/tests/cluster/cluster_scenarios.sh" "$build/src/tools/htrun" "$build/examples/gpt/gpt_train" \
    "$work/$label/cluster_$scenario" "$scenario" > "$log" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || status=1
  echo "$label $scenario round $round: rc $rc $(grep -h '# measured' "$log" | head -1)"
}

# Each tree's fault-free run first: the scenarios compare their weights with it.
run before "$before_tree" "$before_build" clean 0
run after "$after_tree" "$after_build" clean 0
for round in $(seq 1 "$rounds"); do
  for scenario in "${scenarios[@]}"; do
    run before "$before_tree" "$before_build" "$scenario" "$round"
    run after "$after_tree" "$after_build" "$scenario" "$round"
  done
done
exit $status
