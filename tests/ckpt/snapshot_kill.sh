#!/usr/bin/env bash
# Kill -9 inside a memory snapshot, at each of its phases, and resume: the
# GPT on 2 ranks, two simulated nodes of one, a snapshot every step and no
# disk checkpoint before the end. Rank 1 dies in the snapshot of step 6 at
# the phase named (HT_FAULTS snapshot-crash); the relaunch must resume from
# memory (never a torn copy: step 5 or 6, whichever every rank has
# committed) and end with the final weights of a run never killed. The
# "peer" case also loses node 1's memory, so rank 1 pulls its copy from the
# replica rank 0 holds.
#   snapshot_kill.sh MPIEXEC GPT_TRAIN WORK
set -euo pipefail
mpiexec="$1"; gpt="$2"; work="$3"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export HT_SIMULATED_NODES=1:0,1
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work"; mkdir -p "$work"
for i in $(seq 300); do echo "pack my box with five dozen liquor jugs $i"; done > "$work/text.txt"
steps=10
# Rank 0's steps slowed to ~100 ms, so that each snapshot's write and
# exchange ends within its step and every step has one.
train=(--text "$work/text.txt" --layers 2 --heads 2 --embd 32 --context 32 --seq-len 16 --micro-batch 2
       --eval-every 0 --eval-batches 1 --sample-tokens 0 --steps "$steps" --ckpt-every 0 --mem-ckpt-every 1
       --resume auto)

launch() {  # launch NAME LOG [HT_FAULTS]
  set +e
  HT_FAULTS="${3:-slow:rank=0:factor=20}" timeout 120 "$mpiexec" -np 2 --oversubscribe --bind-to none \
    "$gpt" "${train[@]}" --run-dir "$work/$1" --mem-ckpt-dir "$work/$1/memory" > "$work/$2" 2>&1
  echo $?
  set -e
}
checksums() {  # the final checkpoint's pieces and checksums
  python3 - "$work/$1/checkpoints/step_$(printf %08d "$steps")/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
for p in sorted(m["pieces"], key=lambda p: p["dataset"]):
    print(p["dataset"], p["checksum"])
PY
}

[ "$(launch clean clean.log)" = 0 ] || { tail -20 "$work/clean.log"; fail "the run without a kill failed"; }
[ ! -e "$work/clean/memory" ] || fail "the finished run left its memory snapshots in $work/clean/memory"
for phase in copy write commit replicate replica-commit peer; do
  fault_phase=$phase; [ "$phase" = peer ] && fault_phase=replica-commit
  rc=$(launch "$phase" "$phase.log" "slow:rank=0:factor=20,snapshot-crash:rank=1:step=6:phase=$fault_phase")
  grep -q "fault injected: crash (snapshot-crash:rank=1:step=6:phase=$fault_phase)" "$work/$phase.log" \
    || { tail -20 "$work/$phase.log"; fail "$phase: the kill did not fire (rc $rc)"; }
  # No torn copy under a committed name: every committed snapshot's files are whole.
  for dir in "$work/$phase"/memory/node*/*/step_*; do
    case "$dir" in *.tmp) continue ;; esac
    [ -s "$dir/manifest.json" ] && [ -s "$dir"/rank_*.h5 ] || fail "$phase: $dir is committed but incomplete"
  done
  [ "$phase" = peer ] && rm -rf "$work/$phase/memory/node1"
  rc=$(launch "$phase" "$phase.resumed.log")
  [ "$rc" = 0 ] || { tail -20 "$work/$phase.resumed.log"; fail "$phase: the relaunch exited $rc"; }
  line=$(grep "^# resumed from step" "$work/$phase.resumed.log" || true)
  case "$phase:$line" in
    peer:"# resumed from step "[56]" (memory, in "*" ms; 1 rank(s) pulled their copy from a peer)") ;;
    peer:*) fail "$phase: '$line', not a resume at step 5 or 6 with rank 1's copy from its peer" ;;
    *:"# resumed from step "[56]" (memory, in "*" ms)") ;;
    *) fail "$phase: '$line', not a resume from memory at step 5 or 6" ;;
  esac
  diff <(checksums clean) <(checksums "$phase") > /dev/null || fail "$phase: final weights differ from the run never killed"
  echo "$phase: killed in the snapshot of step 6, ${line#\# }, final weights equal"
done
