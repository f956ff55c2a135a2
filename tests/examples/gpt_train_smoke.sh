#!/usr/bin/env bash
# End-to-end check of gpt_train: a tiny model on a small text file trains,
# writes metrics.jsonl with step and loss, prints a sample; --recompute full
# is named in the preamble and run record; bad flags and
# missing files fail with a clear message and a non-zero status.
set -euo pipefail
exe="$1"
work="$2"
rm -rf "$work"
mkdir -p "$work"
for i in $(seq 200); do echo "the quick brown fox jumps over the lazy dog $i"; done > "$work/text.txt"

fail() { echo "FAIL: $*"; exit 1; }

"$exe" --text "$work/text.txt" --run-dir "$work/run" --layers 1 --heads 2 --embd 32 --context 32 \
  --seq-len 16 --micro-batch 4 --steps 12 --eval-every 6 --eval-batches 2 --sample-tokens 16 > "$work/out.txt"
grep -q "^step 12/12 | loss" "$work/out.txt" || fail "no progress line for the last step"
grep -q "^# sample" "$work/out.txt" || fail "no sample printed"
[ "$(grep -c '"type":"step"' "$work/run/metrics.jsonl")" = 12 ] || fail "metrics.jsonl lacks 12 step lines"
grep -m1 '"type":"step"' "$work/run/metrics.jsonl" | grep -q '"loss":' || fail "step lines lack loss"
grep -q '"val_loss"' "$work/run/metrics.jsonl" || fail "no validation lines"
# --recompute reaches the engine: named in the preamble and the run record.
"$exe" --data "$work/run/tokens.h5" --run-dir "$work/run_rc" --layers 1 --heads 2 --embd 32 --context 32 \
  --seq-len 16 --micro-batch 4 --steps 2 --eval-batches 0 --sample-tokens 0 --recompute full > "$work/out_rc.txt"
grep -q "^# mesh .*, recompute full;" "$work/out_rc.txt" || fail "the preamble does not name --recompute full"
grep -q '"recompute":"full"' "$work/run_rc/metrics.jsonl" || fail "the run record lacks recompute full"

expect_error() {  # expect_error PATTERN ARGS...: must exit non-zero and print PATTERN
  local pattern="$1"; shift
  if "$exe" "$@" > "$work/err.txt" 2>&1; then fail "succeeded with bad input: $*"; fi
  grep -q -- "$pattern" "$work/err.txt" || { cat "$work/err.txt"; fail "message lacks '$pattern' for: $*"; }
}
expect_error "does not exist" --data "$work/no_such_tokens.h5" --run-dir "$work/r2"
expect_error "does not exist" --text "$work/no_such_text.txt" --run-dir "$work/r3"
expect_error "n_head=5 does not divide n_embd=32" --data "$work/run/tokens.h5" --run-dir "$work/r4" --embd 32 --heads 5
expect_error "--seq-len 64" --data "$work/run/tokens.h5" --run-dir "$work/r5" --context 32 --seq-len 64
expect_error "vocabulary (256) is larger than the model's vocab_size (100)" --data "$work/run/tokens.h5" \
  --run-dir "$work/r7" --vocab 100
expect_error "--steps" --steps -3
expect_error "recomputation 'attention' is not known" --data "$work/run/tokens.h5" --run-dir "$work/r9" --recompute attention
expect_error "unknown device" --data "$work/run/tokens.h5" --run-dir "$work/r6" --device tpu
expect_error "bogus" --bogus-flag
if ! nvidia-smi -L > /dev/null 2>&1; then  # without a GPU, --device cuda says so before any work
  expect_error "no CUDA device is visible\|has no CUDA backend" --data "$work/run/tokens.h5" --run-dir "$work/r8" \
    --device cuda
fi
echo "gpt_train smoke: all checks passed"
