#!/usr/bin/env bash
# End-to-end check of gpt_train: a tiny model on a small text file trains,
# writes metrics.jsonl with step and loss, prints a sample with unprintable
# bytes escaped; a rerun with the same --text reuses the token file, a
# changed text is tokenised again; --recompute full is named in the preamble
# and run record;
# under umask 000 the run directory and the checkpoint are created without
# group/world write (0755 directories, 0644 files); bad flags and
# missing files fail with a clear message and a non-zero status.
set -euo pipefail
exe="$1"
work="$2"
rm -rf "$work"
mkdir -p "$work"
for i in $(seq 200); do echo "the quick brown fox jumps over the lazy dog $i"; done > "$work/text.txt"

fail() { echo "FAIL: $*"; exit 1; }

"$exe" --text "$work/text.txt" --run-dir "$work/run" --layers 1 --heads 2 --embd 32 --context 32 \
  --seq-len 16 --micro-batch 4 --steps 12 --eval-every 6 --eval-samples 8 --sample-tokens 16 \
  --prompt $'\x01\x1b[2J\\The ' > "$work/out.txt"
grep -q "^step 12/12 | loss" "$work/out.txt" || fail "no progress line for the last step"
grep -q "^# preparing $work/run/tokens.h5" "$work/out.txt" || fail "the token file was not prepared"
# A relaunch with the same --text reuses the token file; a changed text is tokenised again.
run_again() { "$exe" --text "$work/text.txt" --data "$work/run/tokens.h5" --run-dir "$work/again" --layers 1 --heads 2 --embd 32 --context 32 \
  --seq-len 16 --micro-batch 4 --steps 1 --eval-samples 0 --sample-tokens 0 > "$work/again.txt"; }
run_again
grep -q "^# reusing $work/run/tokens.h5: made from the same 1 text input(s)" "$work/again.txt" \
  || fail "the token file was prepared again from the same text: $(grep '^# ' "$work/again.txt" | head -3)"
echo "one more line" >> "$work/text.txt"
run_again
grep -q "^# preparing $work/run/tokens.h5" "$work/again.txt" || fail "a changed text was not tokenised again"
grep -q "^# sample" "$work/out.txt" || fail "no sample printed"
# The prompt's control bytes and backslash come out escaped; no byte outside
# printable ASCII, '\n' and '\t' reaches the terminal.
sed -n '/^# sample/,$p' "$work/out.txt" | grep -qF '\x01\x1b[2J\\The ' || fail "the sample's bytes are not escaped"
if sed -n '/^# sample/,$p' "$work/out.txt" | LC_ALL=C grep -q $'[^\t -~]'; then fail "a raw byte was printed"; fi
[ "$(grep -c '"type":"step"' "$work/run/metrics.jsonl")" = 12 ] || fail "metrics.jsonl lacks 12 step lines"
grep -m1 '"type":"step"' "$work/run/metrics.jsonl" | grep -q '"loss":' || fail "step lines lack loss"
grep -q '"val_loss"' "$work/run/metrics.jsonl" || fail "no validation lines"
# --recompute reaches the engine: named in the preamble and the run record.
# Run under umask 000: what the run creates is still not group/world writable.
(umask 000 && "$exe" --data "$work/run/tokens.h5" --run-dir "$work/run_rc" --layers 1 --heads 2 --embd 32 \
  --context 32 --seq-len 16 --micro-batch 4 --steps 2 --eval-samples 0 --sample-tokens 0 --recompute full \
  --ckpt-every 2 > "$work/out_rc.txt")
grep -q "^# mesh .*, recompute full;" "$work/out_rc.txt" || fail "the preamble does not name --recompute full"
grep -q '"recompute":"full"' "$work/run_rc/metrics.jsonl" || fail "the run record lacks recompute full"
[ -f "$work/run_rc/checkpoints/step_00000002/rank_00000.h5" ] || fail "no checkpoint of step 2"
for p in run_rc run_rc/heartbeat run_rc/exit run_rc/checkpoints run_rc/checkpoints/step_00000002; do
  [ "$(stat -c %a "$work/$p")" = 755 ] || fail "$p has mode $(stat -c %a "$work/$p"), want 755"
done
for p in run_rc/heartbeat/rank_0.json run_rc/checkpoints/.writer.lock \
  run_rc/checkpoints/step_00000002/rank_00000.h5 run_rc/checkpoints/step_00000002/manifest.json; do
  [ "$(stat -c %a "$work/$p")" = 644 ] || fail "$p has mode $(stat -c %a "$work/$p"), want 644"
done

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
HT_MFU_PEAK=fast expect_error "HT_MFU_PEAK='fast' is not a rate" --data "$work/run/tokens.h5" --run-dir "$work/r10" \
  --steps 1
if ! nvidia-smi -L > /dev/null 2>&1; then  # without a GPU, --device cuda says so before any work
  expect_error "no CUDA device is visible\|has no CUDA backend" --data "$work/run/tokens.h5" --run-dir "$work/r8" \
    --device cuda
fi
echo "gpt_train smoke: all checks passed"
