#!/usr/bin/env bash
# Goodput of a chaos run: gpt_train under htrun on 3 simulated nodes of one
# rank with a spare, a checkpoint every 30 s and five random faults
# (tests/resilience/chaos_faults.sh), spread over the run. Prints htrun's
# report; goodput = productive training time / wall time, both from the
# same run.
#   bench/chaos_goodput.sh HTRUN GPT_TRAIN WORK [SEED] [STEPS] [MEM]
# STEPS (default 3000) sets the length: about 0.2 s a step on 2 cores, so a
# fault-free run of some 10 minutes. MEM is gpt_train's --mem-ckpt-every
# (default auto: memory snapshots as often as 2% of a step allows; 0: none,
# every relaunch resumes from disk).
set -euo pipefail
htrun="$1"; gpt="$2"; work="$3"; seed="${4:-1}"; steps="${5:-3000}"; mem="${6:-auto}"
here="$(cd "$(dirname "$0")" && pwd)"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$work"; mkdir -p "$work"
# Faults from 5% of the run to 95%, at least 2 steps apart.
plan="$(bash "$here/../tests/resilience/chaos_faults.sh" "$seed" 5 $((steps / 20)) $((steps * 19 / 20)) 3 3 0)"
echo "chaos seed $seed, $steps steps, --mem-ckpt-every $mem: HT_FAULTS=$plan"
HT_FAULTS="$plan" "$htrun" --nodes 3 --slots 1 --spares 1 --run-dir "$work/run" --hang-timeout 10 --backoff 1 \
  -- "$gpt" --layers 4 --heads 4 --embd 128 --context 128 --seq-len 128 --micro-batch 4 --steps "$steps" \
     --eval-every 0 --eval-samples 4 --sample-tokens 0 --heartbeat 0.5 --ckpt-every-s 30 --sdc-every 10 \
     --divergence-steps 2 --mem-ckpt-every "$mem" > "$work/chaos.log" 2>&1 || true
grep -E "^htrun|^  [a-z]" "$work/chaos.log"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(f'goodput {r[\"goodput\"]:.3f} ({r[\"productive_s\"]:.0f} s of {r[\"wall_s\"]:.0f} s), {len(r[\"incidents\"])} incidents, {r[\"restarts\"]} restarts: {r[\"verdict\"]}')" "$work/run/htrun_report.json"
