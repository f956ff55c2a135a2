#!/usr/bin/env bash
# ht-plan, and gpt_train / llama_train --dry-run and --auto, as a user runs them:
#   table     ht-plan on a probe of this machine: a table, the reasons, JSON that parses
#   cluster   a 70B-class Llama on 1024 GPUs of 80 GB from a profile file: memory per
#             stage under 80 GB, and tp never crossing a node of 8
#   errors    a bad preset, a missing or broken profile, nothing fitting: exit 2 and a message saying what
#   dry-run   gpt_train --dry-run alone and under mpirun (pp 2): the per-stage table, no training;
#             llama_train --dry-run
#   presets   every preset (ht-plan --list-presets): ht-plan and gpt_train / llama_train
#             --preset P --dry-run describe the same model, with the same parameter count
#             and the same heaviest-stage memory for one layout; a preset of the other
#             architecture and a Llama size for a GPT are refused by name
#   moe       Mixtral 8x7B on 64 H100s (8 a node) from the profile file: the plan
#             splits the experts (ep > 1) and prints its memory by category
#   auto      mpirun -np 2 gpt_train --auto: the plan printed, the mesh it chose, training runs;
#             ranks whose profiles plan different layouts, and --auto on cuda without a
#             profile, each refused with what to give
#
#   plan_tool_test.sh HT_PLAN GPT_TRAIN LLAMA_TRAIN MPIEXEC PROFILE WORK CASE
set -euo pipefail
plan="$1"; gpt="$2"; llama="$3"; mpiexec="$4"; profile="$5"; work="$6/$7"; case="$7"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail() { echo "FAIL ($case): $*"; exit 1; }
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
np2=("$mpiexec" -np 2 --oversubscribe --bind-to none)

expect_usage() {  # expect_usage PATTERN CMD...: exit 2 and PATTERN in the output
  local pattern="$1"; shift
  local status=0
  "$@" > "$work/err.txt" 2>&1 || status=$?
  cat "$work/err.txt"
  [ "$status" = 2 ] || fail "$* exited $status, want 2"
  grep -q -- "$pattern" "$work/err.txt" || fail "$* did not say '$pattern'"
}

case "$case" in
  table)
    "$plan" --preset gpt2-124m --world 4 --global-batch 16 --seq 256 --top 5 --json "$work/plans.json" > "$work/out.txt"
    cat "$work/out.txt"
    grep -q "^# ht-plan GPT L12 H12 C768 V50257 Vp50304" "$work/out.txt" || fail "no header"
    grep -q "^  1 tp" "$work/out.txt" || fail "no first plan"
    grep -q "wins:" "$work/out.txt" || fail "no reason the best plan wins"
    python3 - "$work/plans.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["world"] == 4 and j["global_batch"] == 16, j
plans = j["plans"]
assert 1 <= len(plans) <= 5
for p in plans:
    l = p["layout"]
    assert l["tp"] * l["pp"] * l["dp"] * l["cp"] == 4, l
    assert l["micro_batch"] * l["grad_accum"] * l["dp"] == 16, l
    assert sum(l["stage_layers"]) == 12 and len(l["stage_layers"]) == l["pp"], l
    assert p["peak_bytes"] <= j["budget_gib"] * 2**30
    assert len(p["stages"]) == l["pp"]
times = [p["step_ms"] for p in plans]
assert times == sorted(times), times
print("json ok:", plans[0]["layout"]["name"])
PY
    ;;
  cluster)
    "$plan" --preset llama2-70b --world 1024 --global-batch 1024 --precision bf16 --profile "$profile" --top 3 \
      --json "$work/plans.json" > "$work/out.txt"
    cat "$work/out.txt"
    python3 - "$work/plans.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
for p in j["plans"]:
    l = p["layout"]
    assert l["tp"] <= 8, l  # tensor parallelism inside a node of 8
    for s in p["stages"]:
        assert s["total_bytes"] < 80 * 2**30 * 0.9, s
assert j["parameters"] > 68e9, j["parameters"]
print("cluster ok:", j["plans"][0]["layout"]["name"])
PY
    ;;
  errors)
    expect_usage "preset 'gpt5' is not known" "$plan" --preset gpt5 --world 2
    expect_usage "cannot read the machine profile" "$plan" --preset gpt2-124m --profile "$work/none.json"
    echo '{"name": "broken", "memory_gib": 80' > "$work/broken.json"
    expect_usage "not valid JSON" "$plan" --preset gpt2-124m --profile "$work/broken.json"
    echo '{"name": "no links", "memory_gib": 80, "ranks_per_node": 8, "memory_gbps": 100, "rates": {"bf16": {"gemm_gflops": 1, "attention_gflops": 1}}}' > "$work/nolinks.json"
    expect_usage "'intra_node' is missing" "$plan" --preset gpt2-124m --profile "$work/nolinks.json"
    expect_usage "the smallest needs" "$plan" --preset llama2-70b --world 8 --global-batch 8 --profile "$profile"
    expect_usage "does not divide the world size 1" "$gpt" --dry-run --tp 3 --run-dir "$work/bad" ;;
  dry-run)
    "$gpt" --dry-run --run-dir "$work/one" --micro-batch 4 > "$work/one.txt" 2>&1
    cat "$work/one.txt"
    grep -q "^# dry run: GPT L6 H6 C384 V256 T256 | [0-9]* parameters | 1 ranks as tp1 pp1 dp1 zero0 mb4x1" "$work/one.txt" || fail "no dry-run header"
    grep -q "nothing was trained" "$work/one.txt" || fail "no closing line"
    grep -q "^step " "$work/one.txt" && fail "it trained"
    [ -e "$work/one/tokens.h5" ] && fail "it prepared data"
    "${np2[@]}" "$gpt" --dry-run --run-dir "$work/two" --pp 2 --grad-accum 4 --plan-memory-gib 2 > "$work/two.txt" 2>&1
    cat "$work/two.txt"
    [ "$(grep -c '^#  *[01]  *3 ' "$work/two.txt")" = 2 ] || fail "not one line per stage of 3 blocks"
    grep -q "of 2.000 GiB per rank: fits" "$work/two.txt" || fail "no verdict against the budget"
    "$llama" --dry-run --run-dir "$work/llama" --recompute full > "$work/llama.txt" 2>&1
    cat "$work/llama.txt"
    grep -q "^# dry run: Llama .* full" "$work/llama.txt" || fail "llama_train: no dry-run header" ;;
  presets)
    "$plan" --list-presets > "$work/presets.txt"
    cat "$work/presets.txt"
    [ "$(wc -l < "$work/presets.txt")" -ge 10 ] || fail "fewer than 10 presets"
    # One rank of plenty of memory, so that every preset's one layout fits.
    python3 -c "import json, sys; p = json.load(open(sys.argv[1])); p['memory_gib'] = 1e6; p['ranks_per_node'] = 1; print(json.dumps(p))" \
      "$profile" > "$work/big.json"
    layout=(--micro-batch 1 --grad-accum 1 --zero 0 --recompute none --schedule 1f1b --precision bf16)
    while read -r name arch _; do
      "$plan" --preset "$name" --world 1 --global-batch 1 --seq 256 --profile "$work/big.json" --tp 1 --pp 1 \
        --zero 0 --recompute none --schedule 1f1b --precision bf16 --top 1 --json - > "$work/$name.json"
      exe="$gpt"
      [ "$arch" = llama ] && exe="$llama"
      "$exe" --preset "$name" --dry-run --seq-len 256 --run-dir "$work/$name" "${layout[@]}" > "$work/$name.txt" 2>&1 \
        || { cat "$work/$name.txt"; fail "$(basename "$exe") --preset $name --dry-run failed"; }
      python3 - "$work/$name.json" "$work/$name.txt" "$name" <<'PY' || fail "$name: ht-plan and the dry run differ"
import json, re, sys
plan, dry, name = json.load(open(sys.argv[1])), open(sys.argv[2]).read(), sys.argv[3]
head = re.search(r"^# dry run: (.*) \| (\d+) parameters \| 1 ranks as (\S+ \S+ \S+ \S+ \S+)", dry, re.M)
peak = re.search(r"^# heaviest stage ([0-9.]+) GiB", dry, re.M)
assert head and peak, dry
best = plan["plans"][0]
assert int(head.group(2)) == plan["parameters"], (head.group(2), plan["parameters"])
assert head.group(1) == plan["model"], (head.group(1), plan["model"])
assert abs(float(peak.group(1)) - best["peak_bytes"] / 2**30) < 0.0005, (peak.group(1), best["peak_bytes"] / 2**30)
print(f"{name}: {head.group(1)}, {plan['parameters']} parameters, {peak.group(1)} GiB at {head.group(3)}: equal")
PY
    done < "$work/presets.txt"
    expect_usage "llama2-7b is a llama model" "$gpt" --preset llama2-7b --dry-run --run-dir "$work/wrong"
    expect_usage "is a Llama size" "$plan" --model gpt --kv-heads 4 --world 1 --profile "$profile"
    expect_usage "--model says gpt" "$plan" --model gpt --preset llama2-7b --world 1 --profile "$profile"
    expect_usage "--model 'bert' is not known" "$plan" --model bert --world 1 --profile "$profile"
    expect_usage "preset 'gpt5' is not known: choose gpt-small" "$llama" --preset gpt5 --dry-run --run-dir "$work/wrong" ;;
  moe)
    "$plan" --preset mixtral-8x7b --world 64 --global-batch 256 --precision bf16 --profile "$profile" --top 5 \
      --json "$work/plans.json" > "$work/out.txt"
    cat "$work/out.txt"
    grep -q "^# ht-plan Llama .* E8k2 .* | 467[0-9]* parameters (128[0-9]* active) | 64 ranks (8 per node)" \
      "$work/out.txt" || fail "no header with the mixture's parameters"
    grep -q "^  1 tp[0-9]* .* ep[2-9]" "$work/out.txt" || fail "the first plan does not split the experts (ep > 1)"
    grep -q "^# memory of plan 1 (tp[0-9]* .* ep[2-9]" "$work/out.txt" || fail "no memory table of the first plan"
    grep -q "^#  *stage  *blocks  *parameters  *gradients  *optimizer  *activations  *comm  *total" "$work/out.txt" \
      || fail "no memory categories"
    grep -q "^#  *0  *[0-9]*  *[0-9.]*  *[0-9.]*  *[0-9.]*  *[0-9.]*  *[0-9.]*  *[0-9.]*$" "$work/out.txt" \
      || fail "no memory row for stage 0"
    python3 - "$work/plans.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
best = j["plans"][0]
l = best["layout"]
assert l["ep"] > 1 and l["dp"] % l["ep"] == 0 and 8 % l["ep"] == 0, l
assert l["tp"] * l["pp"] * l["dp"] * l["cp"] == 64, l
for s in best["stages"]:
    b = s["bytes"]
    for k in ("parameters", "gradients", "optimizer_state", "activations"):
        assert b[k] > 0, (k, b)
    assert s["total_bytes"] <= j["budget_gib"] * 2**30, s
print("moe ok:", l["name"])
PY
    ;;
  auto)
    "${np2[@]}" "$gpt" --auto --run-dir "$work/auto" --layers 2 --embd 64 --heads 2 --seq-len 32 --context 32 \
      --micro-batch 2 --grad-accum 2 --steps 2 --eval-samples 4 --sample-tokens 4 > "$work/auto.txt" 2>&1 || {
      cat "$work/auto.txt"; fail "gpt_train --auto exited non-zero"; }
    cat "$work/auto.txt"
    chosen=$(sed -n 's/^# auto: \(tp[0-9]* pp[0-9]* dp[0-9]*\).*/\1/p' "$work/auto.txt")
    [ -n "$chosen" ] || fail "no '# auto:' line"
    grep -q "^# plan ht-plan GPT L2 H2 C64" "$work/auto.txt" || fail "no plan table"
    grep -q "global batch 8 rows" "$work/auto.txt" || fail "the global batch (2 x 2 x 2 ranks) was not kept"
    tp=$(echo "$chosen" | sed 's/tp\([0-9]*\).*/\1/'); pp=$(echo "$chosen" | sed 's/.*pp\([0-9]*\).*/\1/')
    grep -q "^# mesh pp$pp x dp[0-9]* x tp$tp" "$work/auto.txt" || fail "the mesh is not the plan's ($chosen)"
    grep -q "^step 2/2 | loss" "$work/auto.txt" || fail "did not train"
    # Rank 1 given a profile of slow links plans pp 2 where rank 0 plans dp 2.
    python3 -c "import json,sys; p=json.load(open(sys.argv[1])); p['intra_node']=p['inter_node']={'latency_us':1e5,'gbps':0.001}; json.dump(p,open(sys.argv[2],'w'))" \
      "$profile" "$work/slow.json"
    cat > "$work/per_rank.sh" <<WRAPPER
#!/bin/sh
p="$profile"; [ "\${OMPI_COMM_WORLD_RANK:-0}" = 1 ] && p="$work/slow.json"
exec "$gpt" "\$@" --plan-profile "\$p"
WRAPPER
    chmod +x "$work/per_rank.sh"
    expect_usage "the ranks planned different layouts (their machine profiles differ); give them one with --plan-profile" \
      "${np2[@]}" "$work/per_rank.sh" --auto --run-dir "$work/disagree" --layers 2 --embd 64 --heads 2 --seq-len 32 \
      --context 32 --micro-batch 2 --grad-accum 2 --steps 1
    expect_usage "--auto on cuda: the probe measures the host only; give the GPUs' figures with --plan-profile" \
      "$gpt" --auto --device cuda --run-dir "$work/cuda" --layers 2 --embd 64 --heads 2 --steps 1 ;;
  *) fail "unknown case" ;;
esac
echo "PASS ($case)"
