#!/usr/bin/env bash
# Context parallelism side by side: gpt_train on one long sequence a step,
# one process with OMP_NUM_THREADS=NP against NP ranks with --cp NP and one
# thread each (the same cores, the same work), ROUNDS rounds in alternating
# order. Prints each round's median step time (steps after the first) and
# the ratio cp / one process, and the median ratio: the figure to quote.
#   bench/context_parallel.sh GPT_TRAIN NP [ROUNDS] [SEQ] [STEPS]
set -euo pipefail
gpt="$1"; np="$2"; rounds="${3:-3}"; seq="${4:-4096}"; steps="${5:-4}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Text long enough for windows of SEQ tokens (bytes) in both splits (the
# validation split is a twentieth).
python3 -c "
import sys
words = 'pack my box with five dozen liquor jugs sphinx of black quartz judge my vow'.split()
print(' '.join(words[(i * 7) % len(words)] for i in range(${seq} * 6)))" > "$work/text.txt"
common=(--text "$work/text.txt" --layers 2 --heads 4 --embd 128 --context "$seq" --seq-len "$seq" --micro-batch 1
        --steps "$steps" --warmup 1 --eval-every 0 --eval-samples 0 --sample-tokens 0 --mem-ckpt-every 0)
median_step() {  # the median step_ms of metrics.jsonl, the first step left out
  python3 - "$1" <<'PY'
import json, statistics, sys
ms = [r["step_ms"] for r in map(json.loads, open(sys.argv[1])) if r.get("type") == "step" and r["step"] > 1]
print(f"{statistics.median(ms):.1f}")
PY
}
fail() { echo "FAIL: $1 exited: $(tail -3 "$work/$1.log")"; exit 1; }
one_run() { OMP_NUM_THREADS="$np" "$gpt" "${common[@]}" --run-dir "$work/one_$1" > "$work/one_$1.log" 2>&1 || fail "one_$1"; }
cp_run() {
  OMP_NUM_THREADS=1 mpirun -np "$np" --oversubscribe --bind-to none "$gpt" "${common[@]}" --cp "$np" \
    --run-dir "$work/cp_$1" > "$work/cp_$1.log" 2>&1 || fail "cp_$1"
}
ratios=()
for r in $(seq "$rounds"); do
  if (( r % 2 )); then one_run "$r"; cp_run "$r"; else cp_run "$r"; one_run "$r"; fi
  one=$(median_step "$work/one_$r/metrics.jsonl"); cpm=$(median_step "$work/cp_$r/metrics.jsonl")
  ratio=$(python3 -c "print(f'{$cpm / $one:.3f}')")
  ratios+=("$ratio")
  echo "round $r: one process ${one} ms, cp${np} ${cpm} ms a step: cp / one ${ratio}"
done
python3 - "$np" "$rounds" "$seq" "${ratios[@]}" <<'PY'
import statistics, sys
np_, rounds, seq, *ratios = sys.argv[1:]
print(f"median cp{np_} / one process over {rounds} rounds (T {seq}): {statistics.median(map(float, ratios)):.3f}")
PY
