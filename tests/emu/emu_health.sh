#!/usr/bin/env bash
# ht-health's GPU checks on the emulated device: a healthy device passes
# (one device, its GEMM matches the host's), and a failing one is caught:
# a device whose work fails (HT_EMU_FAULTS=device-lost) and a GEMM that is
# silently wrong (HT_EMU_FAULTS=gemm-wrong) each make the node unhealthy,
# naming the check and the device.
# Usage: emu_health.sh HT_HEALTH WORK_DIR
set -euo pipefail
exe="$1" work="$2"
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*"; cat "$work/out" "$work/err" 2>/dev/null; exit 1; }

# run FAULTS EXPECTED_RC: ht-health's GPU checks with HT_EMU_FAULTS=FAULTS.
run() {
  local rc=0
  HT_EMU_FAULTS="$1" "$exe" --node 0 --checks gpu --expect-gpus 1 --min-gpu-gemm-gflops 0 --json \
    > "$work/out" 2> "$work/err" || rc=$?
  [ "$rc" -eq "$2" ] || fail "HT_EMU_FAULTS='$1': exit $rc, want $2"
}
# check PYTHON_EXPR: true of the printed JSON (j; checks by name).
check() {
  python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
checks = {c["name"]: c for c in j["checks"]}
sys.exit(0 if eval(sys.argv[2]) else 1)' "$work/out" "$1" || fail "JSON does not satisfy: $1"
}

run "" 0
check 'checks["gpu_devices"]["value"] == 1 and "emulated" in checks["gpu_devices"]["reason"]'
check 'checks["gpu_gemm"]["ok"] and not checks["gpu_gemm"]["skipped"] and "matches the host" in checks["gpu_gemm"]["reason"]'

run gemm-wrong 1
check 'not j["ok"] and not checks["gpu_gemm"]["ok"] and "cuda:0" in checks["gpu_gemm"]["reason"]'
echo "gemm-wrong: $(python3 -c 'import json,sys; print([c["reason"] for c in json.load(open(sys.argv[1]))["checks"] if c["name"] == "gpu_gemm"][0])' "$work/out")"

run device-lost 1
check 'not j["ok"] and not checks["gpu_gemm"]["ok"] and "injected device failure" in checks["gpu_gemm"]["reason"]'
echo "device-lost: $(python3 -c 'import json,sys; print([c["reason"] for c in json.load(open(sys.argv[1]))["checks"] if c["name"] == "gpu_gemm"][0])' "$work/out")"
echo PASS
