#!/usr/bin/env bash
# The plan layer's validation table in one command: ht-plan-bench over every
# default layout of the small GPT and Llama at each rank count, with repeated
# rounds, one markdown row per run (docs/benchmarks.md, "Automatic
# partitioning"). With more ranks than cores the ranks share cores and the
# ranking measures the scheduler as much as the layouts: the row says so.
#   bench/plan_validation.sh PLAN_BENCH [NPS] [ROUNDS] [STEPS] [PRECISION]
#   bench/plan_validation.sh build/bench/ht-plan-bench "2 4" 5 5 fp32
set -euo pipefail
bench="$1"; nps="${2:-1 2 4}"; rounds="${3:-5}"; steps="${4:-5}"; precision="${5:-fp32}"
cores=$(nproc)  # before OMP_NUM_THREADS, which nproc obeys
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for model in gpt llama; do
  for np in $nps; do
    echo "# $model, $np rank(s), $rounds rounds of $steps steps, $precision" >&2
    llama_sizes=()
    [ "$model" = llama ] && llama_sizes=(--kv-heads 2 --ffn 704)
    mpirun -np "$np" --oversubscribe --bind-to none "$bench" --model "$model" --layers 4 --heads 4 "${llama_sizes[@]}" --context 128 \
      --embd 256 --vocab 512 --seq 128 --global-batch 16 --steps "$steps" --warmup 2 --rounds "$rounds" \
      --precision "$precision" --json 2>/dev/null | grep '"type":"plan_summary"' | sed "s/^/$model $np /" >> "$out"
  done
done
python3 - "$out" "$cores" <<'PY'
import json, sys
cores = int(sys.argv[2])
print("| model | ranks | layouts | round against round | Spearman | model's step-time error | chosen / fastest "
      "| largest memory error: state / activations / total |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for line in open(sys.argv[1]):
    model, np, js = line.split(" ", 2)
    s = json.loads(js)
    rep = s["round_to_round_spearman"]
    low, high = s["time_error_range"]
    ranks = np + (f" (on {cores} cores)" if int(np) > cores else "")
    print(f"| {model} | {ranks} | {s['layouts']} | {'-' if rep is None else f'{rep:.3f}'} | {s['spearman']:.3f} "
          f"| {low * 100:+.1f} % to {high * 100:+.1f} % | {s['chosen_over_fastest']:.3f} "
          f"| {s['worst_state_error'] * 100:.1f} % / {s['worst_activation_error'] * 100:.1f} % / "
          f"{s['worst_total_error'] * 100:.1f} % |")
PY
