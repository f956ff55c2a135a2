#!/usr/bin/env bash
# Kill -9 inside a memory snapshot, at each of its phases, and resume: the
# GPT on 2 ranks, two simulated nodes of one, a snapshot every step and no
# disk checkpoint before the end. One run, relaunched after each kill: rank
# 1 dies in the snapshot of step 3 at the host copy, of step 5 in its write,
# of step 7 at its commit, of step 9 before replicating it and of step 11
# while storing its peer's replica (HT_FAULTS snapshot-crash; a fault that
# fired does not fire again). Every relaunch must resume from memory at the
# step before the kill or at the killed step itself (never a torn copy), the
# last one with node 1's memory lost, so rank 1 pulls its copy from the
# replica rank 0 holds; the final weights must be those of a run never killed.
#   snapshot_kill.sh MPIEXEC GPT_TRAIN WORK
set -euo pipefail
mpiexec="$1"; gpt="$2"; work="$3"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export HT_SIMULATED_NODES=1:0,1
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work"; mkdir -p "$work"
for i in $(seq 300); do echo "pack my box with five dozen liquor jugs $i"; done > "$work/text.txt"
steps=14
# Rank 0's steps slowed to ~100 ms, so that each snapshot's write and
# exchange ends within its step and every step has one.
train=(--text "$work/text.txt" --layers 2 --heads 2 --embd 32 --context 32 --seq-len 16 --micro-batch 2
       --eval-every 0 --eval-samples 4 --sample-tokens 0 --steps "$steps" --ckpt-every 0 --mem-ckpt-every 1
       --resume auto)
slow=slow:rank=0:factor=20
kills=(3:copy 5:write 7:commit 9:replicate 11:replica-commit)

launch() {  # launch NAME LOG HT_FAULTS: prints the exit status
  set +e
  HT_FAULTS="$3" timeout 120 "$mpiexec" -np 2 --oversubscribe --bind-to none \
    "$gpt" "${train[@]}" --run-dir "$work/$1" --mem-ckpt-dir "$work/$1/memory" > "$work/$2" 2>&1
  echo $?
  set -e
}
checksums() {  # the final checkpoint's pieces and checksums
  python3 "$(dirname "$0")/../scripts/checkpoint_checksums.py" "$work/$1/checkpoints/step_$(printf %08d "$steps")"
}

[ "$(launch clean clean.log "$slow")" = 0 ] || { tail -20 "$work/clean.log"; fail "the run without a kill failed"; }
[ ! -e "$work/clean/memory" ] || fail "the finished run left its memory snapshots in $work/clean/memory"
plan="$slow"
for k in "${kills[@]}"; do plan="$plan,snapshot-crash:rank=1:step=${k%%:*}:phase=${k#*:}"; done
killed=""  # the previous launch's kill, "step:phase"
for launch_no in 0 1 2 3 4 5; do
  log="launch$launch_no.log"
  [ "$launch_no" = 5 ] && rm -rf "$work/killed/memory/node1"  # node 1 lost: rank 1's copy comes from its peer
  rc=$(launch killed "$log" "$plan")
  if [ -n "$killed" ]; then
    step=${killed%%:*}
    line=$(grep "^# resumed from step" "$work/$log" || true)
    peer=""; [ "$launch_no" = 5 ] && peer="; 1 rank(s) pulled their copy from a peer"
    case "$line" in
      "# resumed from step $((step - 1)) (memory, in "*" ms$peer)" | "# resumed from step $step (memory, in "*" ms$peer)") ;;
      *) tail -20 "$work/$log"; fail "after the kill at ${killed#*:} of step $step: '$line', not a resume from memory at step $((step - 1)) or $step${peer:+, rank 1 pulling its copy from its peer}" ;;
    esac
    echo "killed at ${killed#*:} of step $step: ${line#\# }"
  fi
  # No torn copy under a committed name: every committed snapshot's files are whole.
  for dir in "$work"/killed/memory/node*/*/step_*; do
    case "$dir" in *.tmp | *"*"*) continue ;; esac
    [ -s "$dir/manifest.json" ] && [ -s "$dir"/rank_*.snap ] || fail "$dir is committed but incomplete"
  done
  if [ "$launch_no" -lt 5 ]; then
    k=${kills[$launch_no]}
    grep -q "fault injected: crash (snapshot-crash:rank=1:step=${k%%:*}:phase=${k#*:})" "$work/$log" \
      || { tail -20 "$work/$log"; fail "launch $launch_no: the kill at ${k#*:} of step ${k%%:*} did not fire (exit $rc)"; }
    killed=$k
  else
    [ "$rc" = 0 ] || { tail -20 "$work/$log"; fail "the last relaunch exited $rc"; }
  fi
done
diff <(checksums clean) <(checksums killed) > /dev/null || fail "final weights differ from the run never killed"
echo "final weights equal to the run never killed"
