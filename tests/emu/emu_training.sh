#!/usr/bin/env bash
# Training on the emulated device (HT_CUDA_EMULATION) equals training on the
# CPU: gpt_train and llama_train, one rank and under mpirun with dp2 ZeRO-3
# (fp32 and bf16), tp2, pp2 and cp2 (each sequence split over 2 ranks), and
# llama_train with mixture-of-experts blocks (one rank, fp32 and bf16, and
# 4 ranks of dp4 with the experts split over ep2, in fp32), every
# step's loss within 1e-5 (fp32) or 1e-2 (bf16) of the CPU run's; and a checkpoint written on one device resumes on the other to
# the uninterrupted run's losses, bit for bit in fp32.
# Usage: emu_training.sh GPT_TRAIN LLAMA_TRAIN MPIEXEC WORK_DIR
set -euo pipefail
gpt="$1" llama="$2" mpiexec="$3" work="$4"
rm -rf "$work"
mkdir -p "$work"
for i in $(seq 200); do echo "the quick brown fox jumps over the lazy dog $i"; done > "$work/text.txt"
common=(--text "$work/text.txt" --layers 2 --heads 2 --embd 32 --context 32 --seq-len 16 --micro-batch 4
        --eval-every 0 --eval-samples 0 --sample-tokens 0 --mem-ckpt-every 0)
np2=("$mpiexec" -n 2 --oversubscribe --bind-to none)
np4=("$mpiexec" -n 4 --oversubscribe --bind-to none)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

fail() { echo "FAIL: $*"; exit 1; }

# compare NAME RTOL: the per-step losses of $work/NAME_cpu and $work/NAME_cuda.
compare() {
  python3 - "$work/$1_cpu/metrics.jsonl" "$work/$1_cuda/metrics.jsonl" "$2" "$1" <<'EOF'
import json, sys
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if r.get("type") == "step"}
cpu, dev, rtol, name = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
if not cpu or sorted(cpu) != sorted(dev):
    sys.exit(f"FAIL: {name}: steps differ: cpu {sorted(cpu)}, cuda {sorted(dev)}")
worst = max(abs(dev[s] - cpu[s]) / abs(cpu[s]) for s in cpu)
print(f"# measured: {name}: {len(cpu)} steps, largest relative loss difference cuda vs cpu {worst:.2e} (limit {rtol:g})")
if worst > rtol:
    sys.exit(f"FAIL: {name}: cuda and cpu losses differ by {worst:.2e}, more than {rtol:g}")
EOF
}

# pair NAME RTOL LAUNCHER... -- ARGS...: the same run on the CPU and the emulated device.
pair() {
  local name="$1" rtol="$2"
  shift 2
  for dev in cpu cuda; do
    "$@" "${common[@]}" --steps 6 --device "$dev" --run-dir "$work/${name}_$dev" > "$work/${name}_$dev.log" 2>&1 \
      || fail "$name on $dev exited $?: $(tail -3 "$work/${name}_$dev.log")"
  done
  compare "$name" "$rtol"
}

for model in gpt llama; do
  exe=$([ "$model" = gpt ] && echo "$gpt" || echo "$llama")
  pair ${model}_fp32 1e-5 "$exe"
  pair ${model}_bf16 1e-2 "$exe" --precision bf16
  pair ${model}_dp2_zero3 1e-5 "${np2[@]}" "$exe" --zero 3
  pair ${model}_dp2_zero3_bf16 1e-2 "${np2[@]}" "$exe" --zero 3 --precision bf16
  pair ${model}_tp2 1e-5 "${np2[@]}" "$exe" --tp 2
  pair ${model}_pp2 1e-5 "${np2[@]}" "$exe" --pp 2
  pair ${model}_cp2 1e-5 "${np2[@]}" "$exe" --cp 2
done

# Mixture of experts: 4 experts, top 2, routed on the host and run on the
# device; under ep2 the rows travel between ranks by NCCL all-to-all.
moe=(--experts 4 --top-k 2 --shared-experts 1)
pair llama_moe_fp32 1e-5 "$llama" "${moe[@]}"
pair llama_moe_bf16 1e-2 "$llama" "${moe[@]}" --precision bf16
pair llama_moe_dp4_ep2 1e-5 "${np4[@]}" "$llama" "${moe[@]}" --ep 2 --zero 1

# A checkpoint at step 3 on one device (the run then crashes at step 4)
# resumes on the other to the uninterrupted CPU run's losses, bit for bit.
for from in cuda cpu; do
  to=$([ "$from" = cuda ] && echo cpu || echo cuda)
  dir="$work/resume_${from}_to_$to"
  (HT_FAULTS="crash:rank=0:step=4" exec "$gpt" "${common[@]}" --steps 6 --ckpt-every 3 --device "$from" \
    --run-dir "$dir") > "$dir.first.log" 2>&1 && fail "the run on $from did not crash at step 4"
  "$gpt" "${common[@]}" --steps 6 --ckpt-every 3 --resume auto --device "$to" --run-dir "$dir" > "$dir.second.log" 2>&1 \
    || fail "the resume on $to exited $?: $(tail -3 "$dir.second.log")"
  grep -q "^step 4/6" "$dir.second.log" || fail "the resume on $to did not start at step 4: $(grep '^step' "$dir.second.log" | head -1)"
  python3 - "$work/gpt_fp32_cpu/metrics.jsonl" "$dir/metrics.jsonl" "$from" "$to" <<'EOF'
import json, sys
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if r.get("type") == "step"}
want, got = losses(sys.argv[1]), losses(sys.argv[2])
bad = [s for s in (4, 5, 6) if got.get(s) != want[s]]
if bad:
    sys.exit(f"FAIL: resumed {sys.argv[3]} -> {sys.argv[4]}: steps {bad} differ: {[(got.get(s), want[s]) for s in bad]}")
print(f"# measured: checkpoint {sys.argv[3]} -> {sys.argv[4]}: steps 4-6 equal the uninterrupted run's bit for bit")
EOF
done
echo "PASS"
