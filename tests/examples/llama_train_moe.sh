#!/usr/bin/env bash
# llama_train with mixtures of experts: --experts 4 --top-k 2 --shared-experts 1
# --moe-every 2 trains (the model line names the mixture, the loss falls,
# the parameter count is the config's, metrics.jsonl and the progress line
# carry the experts' load), and the flags that make no sense
# are refused with a clear message: a mixture's shape without --experts,
# more chosen experts than there are, experts split over more ranks than
# there are data-parallel ones.
set -euo pipefail
exe="$1"
work="$2"
rm -rf "$work"
mkdir -p "$work"
for i in $(seq 200); do echo "the quick brown fox jumps over the lazy dog $i"; done > "$work/text.txt"
fail() { echo "FAIL: $*"; exit 1; }

small=(--text "$work/text.txt" --layers 2 --heads 2 --kv-heads 1 --embd 32 --ffn 48 --context 32 --seq-len 16
       --micro-batch 4 --eval-every 0 --sample-tokens 0 --peak-tflops 1)
"$exe" "${small[@]}" --run-dir "$work/run" --steps 30 --experts 4 --top-k 2 --shared-experts 1 --moe-every 2 \
  > "$work/out.txt"
# 50,464: block 1 a mixture of 4 experts of 3 x 32 x 48, one shared and a
# router; block 0 a dense MLP; the embedding, head and norms.
grep -q "^# model Llama L2 H2 KV1 C32 F48 V256 T32 theta10000 E4k2 S1 every2 aux0.01 z0, 50.5k parameters" \
  "$work/out.txt" || fail "the model line does not name the mixture: $(grep '^# model' "$work/out.txt")"
python3 - "$work/run/metrics.jsonl" <<'PY' || fail "the loss did not fall, or the experts' load is not in metrics.jsonl"
import json, sys
steps = [r for r in map(json.loads, open(sys.argv[1])) if r.get("type") == "step"]
losses = [r["loss"] for r in steps]
# The mixture's layer: each expert's tokens, adding up to 4 x 16 tokens x top 2.
load = [list(map(int, r["experts.layers.1.mlp"].split())) for r in steps]
ok = (len(losses) == 30 and losses[-1] < losses[0] - 0.5 and all(len(l) == 4 and sum(l) == 128 for l in load)
      and all(r["moe_aux_loss"] > 0 and r["experts.layers.1.mlp.max_over_mean"] >= 1 and r["moe_dropped"] == 0
              for r in steps)
      and not any(k.startswith("experts.layers.0") for r in steps for k in r))
print(losses[0], losses[-1], load[-1], steps[-1].get("moe_aux_loss")) if not ok else None
sys.exit(0 if ok else 1)
PY
grep -q "^step 30/30 | .* | experts max/mean [0-9.]*$" "$work/out.txt" || fail "the progress line lacks the experts' balance"

expect_error() {  # expect_error PATTERN ARGS...: must exit non-zero and print PATTERN
  local pattern="$1"; shift
  if "$exe" "${small[@]}" --steps 1 "$@" > "$work/err.txt" 2>&1; then fail "succeeded with bad input: $*"; fi
  grep -q -- "$pattern" "$work/err.txt" || { cat "$work/err.txt"; fail "message lacks '$pattern' for: $*"; }
}
expect_error "top-k shapes a mixture of experts: give --experts" --run-dir "$work/e1" --top-k 2
expect_error "top-k 5 must lie in \[1, --experts 4\]" --run-dir "$work/e2" --experts 4 --top-k 5
expect_error "moe-every 3 leaves none of the 2 layers" --run-dir "$work/e3" --experts 4 --moe-every 3
expect_error "expert parallelism over 2 ranks does not divide the 1 data-parallel ranks" --run-dir "$work/e4" --experts 4 --ep 2
expect_error "moe-capacity -1 and .* must be >= 0" --run-dir "$work/e5" --experts 4 --moe-capacity -1
expect_error "moe-bias-update -1 must be >= 0" --run-dir "$work/e6" --experts 4 --moe-bias-update -1
echo "llama_train with experts: all checks passed"
