#!/usr/bin/env bash
# Fault tests of gpt_train's checkpoints, one process and a tiny model: a
# kill -9 during a background save, a flipped byte in a committed shard, a
# full disk during a save, an unusable checkpoint directory, and a resume
# with another model. Each case is its own ctest entry (label fault).
#
# Usage: checkpoint_faults.sh GPT_TRAIN WORK_DIR PYTHON CASE
#   CASE: kill | corrupt | disk_full | unwritable | model_mismatch
#   PYTHON: an interpreter with h5py (the corrupt case finds a dataset's bytes).
# Prints "SKIPPED: ..." and exits 0 when the machine cannot stage the fault
# (disk_full without permission to mount a tmpfs).
set -euo pipefail
exe="$1"
work="$2/$4"
python="$3"
case="$4"
rm -rf "$work"
mkdir -p "$work"

fail() { echo "FAIL ($case): $*"; exit 1; }
show() { for f in "$@"; do echo "--- $f"; tail -n 20 "$f"; done; }

for i in $(seq 300); do echo "pack my box with five dozen liquor jugs $i"; done > "$work/text.txt"
"$exe" --text "$work/text.txt" --run-dir "$work/data" --prepare-only > /dev/null
# Disk checkpoints only: memory snapshots (tests/ckpt/snapshot_kill.sh) would
# be resumed from first, and a run that ends without its final save on disk
# keeps them in /dev/shm.
tiny=(--heads 2 --embd 32 --context 32 --seq-len 16 --micro-batch 2 --eval-every 0 --eval-samples 4
      --sample-tokens 0 --warmup 2 --data "$work/data/tokens.h5" --mem-ckpt-every 0)
# train NAME ARGS...: gpt_train with the tiny model (2 layers unless ARGS say otherwise).
train() { local name="$1"; shift; "$exe" "${tiny[@]}" --run-dir "$work/$name" "$@"; }
committed() { (cd "$1" && ls -d step_[0-9]* 2>/dev/null | grep -v '\.tmp$' | tr '\n' ' '); }

case "$case" in
kill)
  # The save of step 8 is held 3 s before its commit; kill -9 in that window.
  ck="$work/kill/ckpt"
  # (gpt_train itself in the background, not through train(): $! must be its pid.)
  "$exe" "${tiny[@]}" --run-dir "$work/kill" --layers 2 --ckpt-dir "$ck" --ckpt-every 4 --steps 40 \
    --ckpt-commit-delay-ms 3000 > "$work/first.out" 2> "$work/first.err" &
  pid=$!
  deadline=$((SECONDS + 40))
  until [ -f "$ck/step_00000004/manifest.json" ] && [ -d "$ck/step_00000008.tmp" ]; do
    kill -0 "$pid" 2> /dev/null || { show "$work/first.out" "$work/first.err"; fail "the run ended before step 8's save"; }
    [ "$SECONDS" -lt "$deadline" ] || { kill -9 "$pid"; fail "no step_00000008.tmp after 40 s: $(ls "$ck")"; }
    sleep 0.05
  done
  kill -9 "$pid"
  status=0
  wait "$pid" 2> /dev/null || status=$?
  [ "$status" = 137 ] || fail "the run ended with status $status, not by the kill (137)"
  [ ! -e "$ck/step_00000008" ] || fail "step 8 was committed although the run died before its commit"
  [ -d "$ck/step_00000008.tmp" ] || fail "the interrupted save left no step_00000008.tmp to clean up"

  train kill --layers 2 --ckpt-dir "$ck" --resume auto --steps 10 > "$work/resume.out" 2> "$work/resume.err" ||
    { show "$work/resume.out" "$work/resume.err"; fail "the resumed run failed"; }
  grep -q "^# resumed from step 4 " "$work/resume.out" || { show "$work/resume.out"; fail "did not resume from step 4"; }
  grep -q "^step 5/10 | loss" "$work/resume.out" || { show "$work/resume.out"; fail "the resumed run did not continue at step 5"; }
  grep -q "^step 10/10 | loss" "$work/resume.out" || fail "the resumed run did not finish"
  leftovers=$(cd "$ck" && ls -d ./*.tmp 2> /dev/null || true)
  [ -z "$leftovers" ] || fail "leftovers of the interrupted save remain: $leftovers"
  [ -f "$ck/step_00000010/manifest.json" ] || fail "no checkpoint of step 10 after the resumed run: $(committed "$ck")"
  ;;

corrupt)
  # Checkpoints of steps 4, 8 and 10 (the one at exit); one flipped byte in
  # step 10's shard must make the resume fall back to step 8.
  ck="$work/corrupt/ckpt"
  train corrupt --layers 2 --ckpt-dir "$ck" --ckpt-every 4 --steps 10 > "$work/first.out" 2> "$work/first.err" ||
    { show "$work/first.out" "$work/first.err"; fail "the first run failed"; }
  [ "$(committed "$ck")" = "step_00000004 step_00000008 step_00000010 " ] ||
    fail "expected checkpoints of steps 4, 8 and 10, found: $(committed "$ck")"
  "$python" "$(dirname "$0")/flip_dataset_byte.py" "$ck/step_00000010/rank_00000.h5" ||
    fail "could not flip a byte (does $python have h5py? see scripts/setup.sh)"
  train corrupt --layers 2 --ckpt-dir "$ck" --resume auto --steps 12 > "$work/resume.out" 2> "$work/resume.err" ||
    { show "$work/resume.out" "$work/resume.err"; fail "the resumed run failed"; }
  grep -q "checkpoint .*step_00000010 is corrupt" "$work/resume.err" ||
    { show "$work/resume.err"; fail "no warning that step 10 is corrupt"; }
  grep -q "fails its checksum" "$work/resume.err" || { show "$work/resume.err"; fail "the warning does not name the checksum"; }
  grep -q "^# resumed from step 8 " "$work/resume.out" || { show "$work/resume.out"; fail "did not fall back to step 8"; }
  grep -q "^step 9/12 | loss" "$work/resume.out" || fail "the resumed run did not continue at step 9"
  ;;

disk_full)
  # A tmpfs that holds one checkpoint and a half: step 4 commits, step 8 finds the disk full.
  ck="$work/full/ckpt"
  train probe --layers 2 --ckpt-dir "$work/probe/ckpt" --steps 4 > "$work/probe.out" 2>&1 ||
    { show "$work/probe.out"; fail "the sizing run failed"; }
  one_kb=$(du -sk --apparent-size "$work/probe/ckpt/step_00000004" | cut -f1)
  size_kb=$((one_kb * 3 / 2 + 16))
  mkdir -p "$ck"
  if ! mount -t tmpfs -o "size=${size_kb}k" tmpfs "$ck" 2> "$work/mount.err"; then
    echo "SKIPPED: checkpoint disk-full test: cannot mount a tmpfs ($(cat "$work/mount.err")); needs root"
    exit 0
  fi
  trap 'umount "$ck" || umount -l "$ck"' EXIT
  echo "# tmpfs of ${size_kb} KiB at $ck for checkpoints of ${one_kb} KiB"
  status=0
  train full --layers 2 --ckpt-dir "$ck" --ckpt-every 4 --steps 12 > "$work/full.out" 2> "$work/full.err" || status=$?
  [ "$status" = 0 ] || { show "$work/full.out" "$work/full.err"; fail "the run with a full disk exited with $status"; }
  grep -q "^step 12/12 | loss" "$work/full.out" || { show "$work/full.out"; fail "training did not run to the end"; }
  grep -q "checkpoint of step 8 not saved" "$work/full.err" ||
    { show "$work/full.err"; fail "stderr does not report the failed save of step 8"; }
  [ "$(committed "$ck")" = "step_00000004 " ] || fail "expected only step 4 committed, found: $(committed "$ck")"
  # The committed checkpoint still verifies: a resume loads it without a warning.
  train full --layers 2 --ckpt-dir "$ck" --resume auto --steps 6 > "$work/resume.out" 2> "$work/resume.err" ||
    { show "$work/resume.out" "$work/resume.err"; fail "the resume from the committed checkpoint failed"; }
  grep -q "^# resumed from step 4 " "$work/resume.out" || { show "$work/resume.out" "$work/resume.err"; fail "did not resume from step 4"; }
  if grep -q "corrupt\|unusable" "$work/resume.err"; then show "$work/resume.err"; fail "the committed checkpoint does not verify"; fi
  ;;

unwritable)
  # A directory below a regular file cannot be created, root or not.
  touch "$work/a_file"
  bad="$work/a_file/ckpt"
  status=0
  train unwritable --layers 2 --ckpt-dir "$bad" --ckpt-every 4 --steps 8 > "$work/out.txt" 2> "$work/err.txt" || status=$?
  [ "$status" = 2 ] || { show "$work/out.txt" "$work/err.txt"; fail "exit status $status, want 2"; }
  grep -qF "checkpoint directory '$bad'" "$work/err.txt" || { show "$work/err.txt"; fail "the message does not name '$bad'"; }
  if grep -q "^step " "$work/out.txt"; then fail "training started before the checkpoint directory was checked"; fi
  ;;

model_mismatch)
  # A checkpoint of a 2-layer model; a 3-layer run must refuse it, naming both.
  ck="$work/mismatch/ckpt"
  train mismatch --layers 2 --ckpt-dir "$ck" --steps 4 > "$work/first.out" 2> "$work/first.err" ||
    { show "$work/first.out" "$work/first.err"; fail "the first run failed"; }
  status=0
  train mismatch --layers 3 --ckpt-dir "$ck" --resume auto --steps 8 > "$work/out.txt" 2> "$work/err.txt" || status=$?
  [ "$status" = 2 ] || { show "$work/out.txt" "$work/err.txt"; fail "exit status $status, want 2"; }
  grep -qF "L2 H2 C32 V256 T32" "$work/err.txt" || { show "$work/err.txt"; fail "the message does not name the saved model"; }
  grep -qF "L3 H2 C32 V256 T32" "$work/err.txt" || { show "$work/err.txt"; fail "the message does not name this run's model"; }
  if grep -q "^step " "$work/out.txt"; then fail "the mismatched run trained"; fi
  [ -f "$ck/step_00000004/manifest.json" ] || fail "the refused checkpoint was touched: $(committed "$ck")"
  ;;

*)
  fail "unknown case '$case': kill, corrupt, disk_full, unwritable or model_mismatch"
  ;;
esac
echo "checkpoint fault '$case': all checks passed"
