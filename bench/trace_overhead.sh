#!/usr/bin/env bash
# What --trace costs: gpt_train on 2 ranks (pp 2, 4 micro-batches, small
# gradient buckets: many spans and collectives per step), ROUNDS runs
# alternating without and with every step traced; prints each run's median
# step time (rank 0's metrics.jsonl, steps 3 on) and the ratio of the medians.
#   bench/trace_overhead.sh GPT_TRAIN WORK [ROUNDS] [STEPS]
set -euo pipefail
gpt="$1"; work="$2"; rounds="${3:-3}"; steps="${4:-40}"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$work"; mkdir -p "$work"
for i in $(seq 300); do echo "pack my box with five dozen liquor jugs $i"; done > "$work/text.txt"
median() {  # median step_ms of steps 3.. in a run directory's metrics.jsonl
  python3 -c "import json,statistics,sys; print(statistics.median(json.loads(l)['step_ms'] for l in open(sys.argv[1]) if '\"type\":\"step\"' in l and json.loads(l)['step']>=3))" "$1/metrics.jsonl"
}
off=(); on=()
for r in $(seq "$rounds"); do
  for mode in off on; do
    extra=(); [ "$mode" = on ] && extra=(--trace "$work/$mode$r/trace.json" --trace-steps "1-$steps")
    mpirun -np 2 --oversubscribe --bind-to none "$gpt" --text "$work/text.txt" --run-dir "$work/$mode$r" --layers 4 \
      --heads 4 --embd 128 --context 64 --seq-len 64 --micro-batch 2 --pp 2 --grad-accum 4 --bucket-mb 0.05 \
      --steps "$steps" --eval-every 0 --eval-samples 0 --sample-tokens 0 --mem-ckpt-every 0 "${extra[@]}" > /dev/null
    m=$(median "$work/$mode$r")
    echo "round $r, trace $mode: median step $m ms"
    if [ "$mode" = on ]; then on+=("$m"); else off+=("$m"); fi
  done
done
python3 -c "import statistics,sys; a=[float(x) for x in sys.argv[1].split()]; b=[float(x) for x in sys.argv[2].split()]; print(f'median of medians: off {statistics.median(a):.2f} ms, on {statistics.median(b):.2f} ms, on/off {statistics.median(b)/statistics.median(a):.3f}')" "${off[*]}" "${on[*]}"
