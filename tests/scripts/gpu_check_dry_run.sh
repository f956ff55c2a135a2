#!/usr/bin/env bash
# scripts/gpu_check.sh without a GPU: --dry-run names every check and its
# command and exits 0; a real run on a machine with no GPU refuses at once
# with a message that points to --dry-run (exit 2), building nothing.
set -uo pipefail
script="$1"
work="$2"
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }

OUT="$work/dry" bash "$script" --dry-run --build "$work/never-built" > "$work/dry.txt" 2>&1 || \
  { cat "$work/dry.txt"; fail "--dry-run exited non-zero"; }
for check in probe build gpu-tests gpt-fp32 gpt-bf16 llama-fp32 llama-bf16 throughput nccl-bench memcheck racecheck kernels nsys; do
  grep -q "^\[$check\] (at most [0-9]* s) " "$work/dry.txt" || { cat "$work/dry.txt"; fail "no command for $check"; }
  grep -q "^$check  *- " "$work/dry.txt" || { cat "$work/dry.txt"; fail "no summary row for $check"; }
done
[ ! -e "$work/never-built" ] || fail "--dry-run created the build directory"

if ! nvidia-smi -L > /dev/null 2>&1; then
  OUT="$work/real" bash "$script" --build "$work/never-built" > "$work/real.txt" 2>&1
  rc=$?
  [ "$rc" = 2 ] || { cat "$work/real.txt"; fail "without a GPU the check exited $rc, not 2"; }
  grep -q "no GPU visible.*--dry-run" "$work/real.txt" || { cat "$work/real.txt"; fail "no clear message"; }
  [ ! -e "$work/never-built" ] || fail "a run without a GPU started building"
fi
echo "gpu_check.sh dry run: all checks passed"
