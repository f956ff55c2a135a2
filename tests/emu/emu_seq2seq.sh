#!/usr/bin/env bash
# The encoder-decoder (examples/seq2seq) on the emulated device equals its
# run on the CPU: one rank, pp2 (two tensors between stages, through the
# device communicator) and dp2 ZeRO-3, every step's loss within 1e-5; its
# CUDA path runs the slices, cross-attention, the ignore index and the
# token-normalised loss.
# Usage: emu_seq2seq.sh SEQ2SEQ_TRAIN MPIEXEC WORK_DIR
set -euo pipefail
exe="$1" mpiexec="$2" work="$3"
rm -rf "$work"
mkdir -p "$work"
common=(--enc-layers 2 --dec-layers 2 --heads 2 --embd 32 --src-len 8 --micro-batch 4 --grad-accum 2 --steps 5
        --eval-every 0 --eval-samples 0 --mem-ckpt-every 0)
np2=("$mpiexec" -n 2 --oversubscribe --bind-to none)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

fail() { echo "FAIL: $*"; exit 1; }

for case in one pp2 dp2_zero3; do
  launcher=() flags=()
  [ "$case" = pp2 ] && launcher=("${np2[@]}") flags=(--pp 2)
  [ "$case" = dp2_zero3 ] && launcher=("${np2[@]}") flags=(--zero 3)
  for dev in cpu cuda; do
    "${launcher[@]}" "$exe" "${common[@]}" "${flags[@]}" --device "$dev" --run-dir "$work/${case}_$dev" \
      > "$work/${case}_$dev.log" 2>&1 || fail "$case on $dev exited $?: $(tail -3 "$work/${case}_$dev.log")"
  done
  python3 - "$work/${case}_cpu/metrics.jsonl" "$work/${case}_cuda/metrics.jsonl" "$case" <<'PY'
import json, sys
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if r.get("type") == "step"}
cpu, dev, name = losses(sys.argv[1]), losses(sys.argv[2]), sys.argv[3]
if not cpu or sorted(cpu) != sorted(dev):
    sys.exit(f"FAIL: {name}: steps differ: cpu {sorted(cpu)}, cuda {sorted(dev)}")
worst = max(abs(dev[s] - cpu[s]) / abs(cpu[s]) for s in cpu)
print(f"# measured: seq2seq {name}: {len(cpu)} steps, largest relative loss difference cuda vs cpu {worst:.2e} (limit 1e-05)")
if worst > 1e-5:
    sys.exit(f"FAIL: seq2seq {name}: cuda and cpu losses differ by {worst:.2e}")
PY
done
echo "PASS: seq2seq on the emulated device equals the CPU (one rank, pp2, dp2 ZeRO-3)"
