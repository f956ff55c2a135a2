#!/usr/bin/env bash
# examples/custom_program, built against the installed package
# (tests/install/build_custom_program.sh), trained as a user would:
#   one          one process: the validation loss halves, metrics.jsonl has a loss per step
#   zero3        mpirun -np 2 --zero 3 matches one process on the same global batch
#                (losses within 1e-5 relative in fp32; 5e-3 in bf16 against one bf16 process)
#   kill_resume  kill -9 of a 2-rank ZeRO-3 run mid-way, then --resume auto: the same
#                final weights (checksum) as the uninterrupted run
#   htrun        a crash under htrun: detected, resumed, the same final weights
#
#   custom_program_test.sh EXE MPIEXEC HTRUN WORK CASE
set -euo pipefail
exe="$1"; mpiexec="$2"; htrun="$3"; work="$4/$5"; case="$5"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail() { echo "FAIL ($case): $*"; exit 1; }
show() { for f in "$@"; do echo "--- $f"; tail -n 20 "$f"; done; }
rm -rf "$work"
mkdir -p "$work"
np2=("$mpiexec" -np 2 --oversubscribe --bind-to none)
common=(--eval-every 0 --heartbeat 0.1)

# run NAME [launcher...] -- [flags]: output in $work/NAME.out, status checked
run() {
  local name="$1"; shift
  local launcher=()
  while [ "$1" != "--" ]; do launcher+=("$1"); shift; done
  shift
  local status=0
  "${launcher[@]}" "$exe" --run-dir "$work/$name" "${common[@]}" "$@" > "$work/$name.out" 2>&1 || status=$?
  [ "$status" = 0 ] || { show "$work/$name.out"; fail "$name exited $status"; }
}
weights() { sed -n 's/^# weights \([0-9a-f]*\)$/\1/p' "$work/$1.out"; }
losses_match() {  # losses_match A B TOLERANCE: step losses of two runs' metrics.jsonl
  python3 - "$work/$1/metrics.jsonl" "$work/$2/metrics.jsonl" "$3" <<'PY'
import json, sys
def losses(p): return [json.loads(l)["loss"] for l in open(p) if json.loads(l)["type"] == "step"]
a, b, tol = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
assert len(a) == len(b) == 40, f"{len(a)} and {len(b)} step lines, want 40"
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f"largest relative loss difference {worst:.3g} (tolerance {tol:g})")
sys.exit(0 if worst <= tol else 1)
PY
}

case "$case" in
  one)
    run one -- --steps 150
    grep -q "^# val loss .* -> " "$work/one.out" || fail "no validation summary"
    [ "$(grep -c '"type":"step"' "$work/one/metrics.jsonl")" = 150 ] || fail "metrics.jsonl lacks 150 step lines"
    grep -m1 '"type":"step"' "$work/one/metrics.jsonl" | grep -q '"loss":' || fail "step lines lack loss"
    grep -q '"model":"MLP 16-64-4"' "$work/one/metrics.jsonl" || fail "the run line does not name the model"
    # The planner sizes the program's own model from its spec, without training.
    run dry -- --dry-run --micro-batch 256
    grep -q "^# dry run: MLP 16-64-4 | [0-9]* parameters | 1 ranks as tp1 pp1 dp1 zero0 mb256x1" "$work/dry.out" || fail "no dry-run line"
    grep -q "^step " "$work/dry.out" && fail "--dry-run trained" ;;
  zero3)
    run one -- --steps 40 --micro-batch 64
    run two "${np2[@]}" -- --steps 40 --micro-batch 32 --zero 3
    grep -q "^# mesh pp1 x dp2 x tp1, zero 3" "$work/two.out" || fail "no ZeRO-3 mesh line"
    losses_match one two 1e-5 || fail "fp32: 2 ranks under ZeRO-3 differ from one process"
    run one_bf16 -- --steps 40 --micro-batch 64 --precision bf16
    run two_bf16 "${np2[@]}" -- --steps 40 --micro-batch 32 --zero 3 --precision bf16
    losses_match one_bf16 two_bf16 5e-3 || fail "bf16: 2 ranks under ZeRO-3 differ from one process" ;;
  kill_resume)
    run clean "${np2[@]}" -- --steps 40 --zero 3 --ckpt-every 10
    # The same run, killed (-9, every rank) mid-way, then resumed. Rank 0 is
    # made to stop at step 25 (a rehearsed hang), so the kill lands after
    # the checkpoint of step 20 however fast the steps are.
    HT_FAULTS="hang:rank=0:step=25" "${np2[@]}" "$exe" --run-dir "$work/killed" "${common[@]}" --steps 40 --zero 3 \
      --ckpt-every 10 --ckpt-dir "$work/ckpt" > "$work/killed.out" 2>&1 &
    launcher=$!
    for _ in $(seq 600); do
      grep -q "^step 24/" "$work/killed.out" 2>/dev/null && break
      sleep 0.1
    done
    pkill -9 -f -- "--run-dir $work/killed " || true
    wait "$launcher" || true
    grep -q "^step 24/" "$work/killed.out" || { show "$work/killed.out"; fail "the run never reached step 24"; }
    grep -q "^step 40/" "$work/killed.out" && fail "the run finished before it was killed"
    run resumed "${np2[@]}" -- --steps 40 --zero 3 --ckpt-every 10 --ckpt-dir "$work/ckpt" --resume auto
    # From disk (step 10 or 20), or from a memory snapshot of steps 20-24
    # (auto snapshots from step 10 on, as often as a cost of 2% of a step allows).
    grep -Eq "^# resumed from step ([12]0 |2[0-4] \(memory)" "$work/resumed.out" ||
      { show "$work/resumed.out"; fail "did not resume from step 10 or 20 on disk, or 20-24 in memory"; }
    [ -n "$(weights clean)" ] || fail "no weights checksum"
    [ "$(weights resumed)" = "$(weights clean)" ] || fail "resumed weights $(weights resumed) differ from $(weights clean)" ;;
  htrun)
    run clean "${np2[@]}" -- --steps 40 --ckpt-every 10
    set +e
    HT_FAULTS="crash:rank=1:step=15" "$htrun" --local --nodes 2 --slots 1 --run-dir "$work/supervised" --backoff 0.2 \
      --hang-timeout 10 --grace 2 -- "$exe" "${common[@]}" --steps 40 --ckpt-every 10 > "$work/supervised.out" 2>&1
    status=$?
    set -e
    [ "$status" = 0 ] || { show "$work/supervised.out"; fail "htrun exited $status"; }
    grep -q "crash of rank 1 (node 1) detected" "$work/supervised.out" || { show "$work/supervised.out"; fail "no crash detected"; }
    grep -q "htrun report: the job finished" "$work/supervised.out" || fail "no finished report"
    got=$(sed -n 's/^# weights \([0-9a-f]*\)$/\1/p' "$work/supervised.out" | tail -1)
    [ "$got" = "$(weights clean)" ] || fail "weights after the crash $got differ from the fault-free $(weights clean)" ;;
  *)
    fail "unknown case '$case': one, zero3, kill_resume or htrun" ;;
esac
echo "PASS ($case)"
