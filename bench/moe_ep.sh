#!/usr/bin/env bash
# Expert parallelism side by side: llama_train with mixture-of-experts
# blocks on NP data-parallel ranks, every expert on every rank (--ep 1)
# against the experts split over NP ranks (--ep NP), the same model, batch
# and steps, ROUNDS rounds in alternating order. Prints each round's median
# step time (steps after the first) and the ratio ep / ep1, then the median
# ratio: the figure to quote. Each rank runs one thread.
#   bench/moe_ep.sh LLAMA_TRAIN [NP] [ROUNDS] [STEPS]
set -euo pipefail
llama="$1"; np="${2:-2}"; rounds="${3:-3}"; steps="${4:-6}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for i in $(seq 2000); do echo "the quick brown fox jumps over the lazy dog $i"; done > "$work/text.txt"
# 8 experts of hidden 512, top 2, in every block: the experts are most of
# the model, so splitting them moves most of the parameters, gradients and
# optimizer state off each rank, and every token's rows travel.
common=(--text "$work/text.txt" --layers 2 --heads 4 --kv-heads 4 --embd 256 --ffn 512 --context 128 --seq-len 128
        --micro-batch 4 --experts 8 --top-k 2 --steps "$steps" --warmup 1 --eval-every 0 --eval-samples 0
        --sample-tokens 0 --mem-ckpt-every 0 --peak-tflops 1)
median_step() {  # the median step_ms of metrics.jsonl, the first step left out
  python3 - "$1" <<'PY'
import json, statistics, sys
ms = [r["step_ms"] for r in map(json.loads, open(sys.argv[1])) if r.get("type") == "step" and r["step"] > 1]
print(f"{statistics.median(ms):.1f}")
PY
}
run() {  # run EP ROUND
  mpirun -np "$np" --oversubscribe --bind-to none "$llama" "${common[@]}" --ep "$1" --run-dir "$work/ep$1_$2" \
    > "$work/ep$1_$2.log" 2>&1 || { echo "FAIL: ep$1 exited: $(tail -3 "$work/ep$1_$2.log")"; exit 1; }
}
ratios=()
for r in $(seq "$rounds"); do
  if (( r % 2 )); then run 1 "$r"; run "$np" "$r"; else run "$np" "$r"; run 1 "$r"; fi
  one=$(median_step "$work/ep1_$r/metrics.jsonl"); split=$(median_step "$work/ep${np}_$r/metrics.jsonl")
  ratio=$(python3 -c "print(f'{$split / $one:.3f}')")
  ratios+=("$ratio")
  echo "round $r: ep1 ${one} ms, ep${np} ${split} ms a step: ep${np} / ep1 ${ratio}"
done
grep "^# model\|^# mesh" "$work/ep${np}_1.log"
echo "median ep${np} / ep1: $(printf '%s\n' "${ratios[@]}" | sort -n | sed -n "$(( (rounds + 1) / 2 ))p")"
