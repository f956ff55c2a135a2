#!/usr/bin/env bash
# Recovery from memory against recovery from disk, for the same fault: the
# GPT under htrun on 2 simulated nodes of one rank, a disk checkpoint every
# 100 steps, rank 1 killed at step 150. Run twice, side by side: without
# memory snapshots (--mem-ckpt-every 0: the relaunch resumes from disk, step
# 100) and with them (the default, auto interval: from memory). Health checks
# and back-off are off, so recovery is the relaunch, the load and the first
# step. Prints, per run, htrun's incident line and the figures of its report.
#   bench/memory_recovery.sh HTRUN GPT_TRAIN WORK [STEPS]
set -euo pipefail
htrun="$1"; gpt="$2"; work="$3"; steps="${4:-200}"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$work"; mkdir -p "$work"
for i in $(seq 2000); do echo "pack my box with five dozen liquor jugs $i"; done > "$work/text.txt"
for tier in disk memory; do
  mem=0; [ "$tier" = memory ] && mem=auto
  HT_FAULTS="crash:rank=1:step=$((steps * 3 / 4))" "$htrun" --nodes 2 --slots 1 --run-dir "$work/$tier" \
    --no-health --backoff 0 --hang-timeout 30 \
    -- "$gpt" --text "$work/text.txt" --layers 4 --heads 4 --embd 128 --context 128 --seq-len 128 \
       --micro-batch 4 --steps "$steps" --eval-every 0 --eval-samples 4 --sample-tokens 0 --heartbeat 0.5 \
       --ckpt-every 100 --mem-ckpt-every "$mem" > "$work/$tier.log" 2>&1 || true
  python3 - "$work/$tier/htrun_report.json" "$tier" <<'PY'
import json, sys
r, tier = json.load(open(sys.argv[1])), sys.argv[2]
for i in r["incidents"]:
    print(f"{tier:6}  recovery {i.get('recovery_s', float('nan')):.2f} s  resumed from {i['resume_tier'] or '-'} "
          f"step {i['resumed_from']}  steps lost {i['steps_lost']}  goodput {r['goodput']:.3f} "
          f"({r['productive_s']:.1f} s of {r['wall_s']:.1f} s)")
PY
  grep -E "^# memory snapshots|recovered in" "$work/$tier.log" | sed "s/^/$tier: /"
done
