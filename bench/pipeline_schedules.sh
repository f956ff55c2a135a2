#!/usr/bin/env bash
# Step time of the pipeline schedules side by side: ht-parallel-bench --mode
# bubble on NP ranks (pp = NP), ROUNDS runs with the schedule order rotated
# each round (so that a change in the machine's load does not fall on one
# schedule), m = 4 and 8. Prints each round's median step per schedule and
# m, the median over rounds, each round's ratio to that round's 1F1B step,
# and the median of those ratios (the figure to quote: a round's schedules
# ran minutes apart at most).
#   bench/pipeline_schedules.sh PARALLEL_BENCH NP [ROUNDS] [STEPS]
set -euo pipefail
bench="$1"; np="$2"; rounds="${3:-3}"; steps="${4:-3}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
orders=("1f1b,interleaved,zb-h1" "interleaved,zb-h1,1f1b" "zb-h1,1f1b,interleaved")
out=$(mktemp)
for r in $(seq "$rounds"); do
  order="${orders[$(( (r - 1) % 3 ))]}"
  mpirun -np "$np" --oversubscribe "$bench" --mode bubble --schedules "$order" --micro-batches 4,8 \
    --steps "$steps" --json 2>/dev/null | grep '"type":"bubble"' | sed "s/^/$r /" >> "$out"
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    r, js = line.split(" ", 1)
    e = json.loads(js)
    if e["stage"] != 0:
        continue  # every stage reports the same step
    rows.setdefault((e["micro_batches"], e["schedule"]), {})[int(r)] = e["step_ms"]
for m in sorted({k[0] for k in rows}):
    base = rows[(m, "1f1b")]
    for s in ("1f1b", "interleaved", "zb-h1"):
        v = rows.get((m, s), {})
        if not v:
            continue
        ratios = [v[r] / base[r] for r in sorted(v) if r in base]
        print(f"m {m} {s:12s} rounds {' '.join(f'{v[r]:.0f}' for r in sorted(v))} ms (median {statistics.median(v.values()):.0f}); "
              f"/ 1f1b {' '.join(f'{x:.3f}' for x in ratios)}: median {statistics.median(ratios):.3f}")
PY
rm -f "$out"
