#!/usr/bin/env bash
# ht-health as the supervisor runs it: exit codes (0 healthy, 1 unhealthy,
# 2 usage), the JSON it prints, fault injection through HT_FAULTS, and the
# collectives check across the ranks of an mpirun. Each case is its own
# ctest entry.
#
# Usage: health_tool_test.sh HT_HEALTH PYTHON WORK_DIR CASE [LAUNCHER...]
#   CASE: healthy | table | thresholds | bad_ckpt | fault_node1 | fault_node0 | usage | mpi | mpi_fault
#   PYTHON: any python3 (only its json module is used)
#   LAUNCHER: for the mpi cases, the mpiexec command line up to the program
#             ("mpiexec -n 2 --oversubscribe --bind-to none")
set -euo pipefail
exe="$1"
python="$2"
work="$3/$4"
case="$4"
shift 4
launcher=("$@")
rm -rf "$work"
mkdir -p "$work"

fail() { echo "FAIL ($case): $*"; for f in "$work"/out "$work"/err; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done; exit 1; }

# run EXPECTED_RC ARGS...: runs the tool (or the launcher), output in $work/out
# and $work/err; fails unless it exits with EXPECTED_RC. Prints the time taken.
run() {
  local want="$1"; shift
  local t0 rc=0
  t0=$(date +%s%N)
  "$@" > "$work/out" 2> "$work/err" || rc=$?
  elapsed_ms=$((($(date +%s%N) - t0) / 1000000))
  echo "ran in ${elapsed_ms} ms, exit ${rc}: $*"
  [ "$rc" -eq "$want" ] || fail "exit status $rc, want $want"
}

# check PYTHON_EXPR: evaluates EXPR with j = the JSON printed; fails unless true.
check() {
  "$python" -c '
import json, sys
j = json.load(open(sys.argv[1]))
checks = {c["name"]: c for c in j.get("checks", [])}
ok = eval(sys.argv[2])
sys.exit(0 if ok else 1)' "$work/out" "$1" || fail "JSON does not satisfy: $1"
}

ckpt="$work/ckpt"
case "$case" in
healthy)
  run 0 "$exe" --node 0 --ckpt-dir "$ckpt" --json
  check 'j["ok"] is True and j["node"] == 0 and j["host"] and all(c["ok"] for c in j["checks"])'
  check 'set(checks) == {"compute","memory","disk","disk_write","collectives","gpu_devices","gpu_ecc","gpu_gemm"}'
  check 'all(set(c) == {"name","ok","skipped","reason","value","unit","threshold","ms"} for c in j["checks"])'
  check 'checks["compute"]["value"] >= 2 and checks["disk_write"]["value"] >= 20 and checks["disk"]["value"] >= 1'
  check 'checks["collectives"]["skipped"]'
  [ "$elapsed_ms" -lt 10000 ] || fail "took ${elapsed_ms} ms; the checks should take a few seconds at most"
  ;;
table)
  run 0 "$exe" --node 4 --ckpt-dir "$ckpt"
  grep -q '^# ht-health: node 4 (host .*, rank 0): HEALTHY$' "$work/out" || fail "no HEALTHY header"
  grep -q '^compute  *ok ' "$work/out" || fail "no compute row"
  ;;
thresholds)
  run 1 "$exe" --ckpt-dir "$ckpt" --json --min-gemm-gflops 1e9 --min-disk-write-mbps 1e9 --min-free-disk-gib 1e9
  check 'j["ok"] is False and not checks["compute"]["ok"] and not checks["disk"]["ok"] and not checks["disk_write"]["ok"]'
  check 'all("below the minimum 1e+09" in checks[n]["reason"] and checks[n]["threshold"] == 1e9 for n in ("compute","disk","disk_write"))'
  check 'checks["memory"]["ok"]'
  ;;
bad_ckpt)
  touch "$work/a_file"
  run 1 "$exe" --ckpt-dir "$work/a_file/ckpt" --json
  check 'not checks["disk"]["ok"] and "cannot be created" in checks["disk"]["reason"] and not checks["disk_write"]["ok"]'
  check 'checks["compute"]["ok"] and checks["memory"]["ok"]'
  ;;
fault_node1)
  HT_FAULTS=crash:rank=0:step=5,node-unhealthy:node=1 run 1 "$exe" --node 1 --ckpt-dir "$ckpt" --json
  check 'j["ok"] is False and checks["compute"]["reason"] == "fault injected: node-unhealthy"'
  check '[n for n, c in checks.items() if not c["ok"]] == ["compute"]'
  ;;
fault_node0)
  HT_FAULTS=crash:rank=0:step=5,node-unhealthy:node=1 run 0 "$exe" --node 0 --ckpt-dir "$ckpt" --json
  check 'j["ok"] is True'
  ;;
usage)
  run 2 "$exe" --no-such-flag
  run 2 "$exe" --checks compute,network
  grep -q "unknown health check 'network'" "$work/err" || fail "no message naming the bad check"
  run 2 "$exe" --min-gemm-gflops -1
  HT_FAULTS=node-unhealthy:node=x run 2 "$exe" --node 1
  grep -q "HT_FAULTS entry 'node-unhealthy:node=x'" "$work/err" || fail "no message naming the bad HT_FAULTS entry"
  run 0 "$exe" --help
  ;;
mpi)
  run 0 "${launcher[@]}" "$exe" --mpi --json --node 0 --ckpt-dir "$ckpt"
  check 'j["ok"] is True and j["world_size"] == 2 and [r["rank"] for r in j["reports"]] == [0, 1]'
  check 'all(c["name"] != "collectives" or (c["ok"] and not c["skipped"] and c["value"] > 0) for r in j["reports"] for c in r["checks"])'
  check 'all(all(c["ok"] for c in r["checks"]) for r in j["reports"])'
  ;;
mpi_fault)
  # Both ranks are asked about node 1, which HT_FAULTS marks unhealthy: the
  # merged report fails, and so does the job.
  HT_FAULTS=node-unhealthy:node=1 run 1 "${launcher[@]}" "$exe" --mpi --json --node 1 --checks compute,collectives
  check 'j["ok"] is False and j["world_size"] == 2'
  check 'all(r["checks"][0]["reason"] == "fault injected: node-unhealthy" and r["checks"][1]["ok"] for r in j["reports"])'
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "health tool check passed: $case"
