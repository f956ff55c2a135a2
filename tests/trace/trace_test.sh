#!/usr/bin/env bash
# --trace end to end: gpt_train on pp 2 x dp 2 (4 ranks, 1F1B, 4 micro-batches,
# small gradient buckets) traces steps 2-3; every rank writes its file, and
# ht-trace merges them into one Chrome trace-event file whose content is
# checked: a process per rank, the engine's phases, a forward and a backward
# of every micro-batch on every rank in both steps, pipeline transfers, and
# data-parallel all-reduces issued during the backward (the overlap), on one
# time axis; its HTML page draws every span. Then bad input: a truncated rank
# file, a path with no files, two files of one rank, files of two worlds, bad
# --trace-steps, each a clear error; a trace
# that cannot be written is reported and the run goes on.
#   trace_test.sh MPIEXEC GPT_TRAIN HT_TRACE WORK
set -euo pipefail
mpiexec="$1"; gpt="$2"; tool="$3"; work="$4"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work"; mkdir -p "$work"
for i in $(seq 300); do echo "pack my box with five dozen liquor jugs $i"; done > "$work/text.txt"
train=(--text "$work/text.txt" --layers 2 --heads 2 --embd 32 --context 32 --seq-len 16 --micro-batch 2
       --eval-every 0 --eval-samples 4 --sample-tokens 0)

"$mpiexec" -np 4 --oversubscribe --bind-to none "$gpt" "${train[@]}" --run-dir "$work/run" --pp 2 --grad-accum 4 \
  --bucket-mb 0.01 --steps 4 --trace "$work/trace.json" --trace-steps 2-3 > "$work/train.txt" 2>&1 \
  || { tail -20 "$work/train.txt"; fail "the traced run failed"; }
for r in 0 1 2 3; do [ -s "$work/trace.rank$r.json" ] || fail "rank $r wrote no trace.rank$r.json"; done
"$tool" "$work/trace.json" -o "$work/merged.json" --html "$work/timeline.html" > "$work/merge.txt" 2>&1 \
  || { cat "$work/merge.txt"; fail "ht-trace failed"; }
# The page: a box per span of the merged file, nothing fetched.
[ "$(grep -o '<rect ' "$work/timeline.html" | wc -l)" = "$(python3 -c "import json,sys; print(sum(e['ph']=='X' for e in json.load(open(sys.argv[1]))['traceEvents']))" "$work/merged.json")" ] \
  || fail "the page does not draw every span"
grep -Eo '(src|href)="[^"]*"' "$work/timeline.html" && fail "the page refers to another resource"
cat "$work/merge.txt"
grep -q "^ht-trace: 4 rank(s), [0-9]* events, steps 2-3 -> $work/merged.json" "$work/merge.txt" || fail "no merge line"
grep -q "comm dp.0: running .* ms of it during a backward" "$work/merge.txt" || fail "no data-parallel summary"
python3 - "$work/merged.json" <<'PY' || fail "the merged trace is not as expected"
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
spans = [e for e in events if e["ph"] == "X"]
names = {(e["pid"], e["args"]["name"]) for e in events if e["ph"] == "M" and e["name"] == "process_name"}
assert {p for p, _ in names} == {0, 1, 2, 3}, names
rows = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
def on(pid, row): return [e for e in spans if e["pid"] == pid and rows[(pid, e["tid"])] == row]
for pid in range(4):
    compute = on(pid, "compute")
    for step in (2, 3):
        for mb in range(4):
            for what in ("forward", "backward"):
                got = [e for e in compute if e["name"] == f"{what} {mb}" and e["args"]["step"] == step]
                assert len(got) == 1, (pid, step, what, mb, len(got))
                assert got[0]["cat"] == "compute"
    assert all(e["ts"] >= 0 and e["dur"] >= 0 for e in spans if e["pid"] == pid), "a span before time 0"
    phases = {e["name"] for e in on(pid, "step")}
    assert {"forward-backward", "gradient-reduction", "optimizer", "loss-reduction"} <= phases, phases
    # Step 3's work after step 2's.
    f2 = max(e["ts"] for e in compute if e["args"]["step"] == 2)
    f3 = min(e["ts"] for e in compute if e["args"]["step"] == 3)
    assert f2 < f3, (f2, f3)
    # Pipeline transfers on the pp row; a stage waits for them on its compute row.
    pp = [e for r, name in rows.items() if r[0] == pid and name.startswith("comm pp.") for e in on(pid, name)]
    assert any(e["name"] in ("send", "recv", "send_recv") for e in pp), "no pipeline transfer"
    assert any(e["cat"] == "wait" for e in compute), "no pipeline wait"
    # Data-parallel all-reduces of gradient buckets issued while a backward ran.
    dp = [e for r, name in rows.items() if r[0] == pid and name.startswith("comm dp.") for e in on(pid, name)]
    queued = [e for e in dp if e["cat"] == "comm-queued"]
    backward = [e for e in compute if e["name"].startswith("backward")]
    inside = [q for q in queued if any(b["ts"] <= q["ts"] <= b["ts"] + b["dur"] for b in backward)]
    assert inside, f"rank {pid}: no gradient all-reduce issued during a backward"
    assert any(e["cat"] == "comm" and e["name"] == "all_reduce" for e in dp), "no all-reduce ran"
print("merged trace: 4 ranks, forward and backward of 4 micro-batches in steps 2 and 3, transfers, overlap")
PY

# One process: a file of its own, no merge needed to read it.
"$gpt" "${train[@]}" --run-dir "$work/one" --steps 2 --trace "$work/one/t.json" --trace-steps 2 > /dev/null
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['otherData']['steps']==[2,2]; assert any(e['ph']=='X' for e in d['traceEvents'])" \
  "$work/one/t.rank0.json" || fail "the one-process trace"

# Errors: what is wrong and what to do.
head -c 200 "$work/trace.rank1.json" > "$work/cut.rank1.json"
if "$tool" "$work/cut.rank1.json" -o "$work/x.json" 2> "$work/err.txt"; then fail "a truncated file was merged"; fi
grep -q "cut.rank1.json' is not JSON" "$work/err.txt" || fail "unclear message: $(cat "$work/err.txt")"
if "$tool" "$work/nowhere.json" -o "$work/x.json" 2> "$work/err.txt"; then fail "a missing path was accepted"; fi
grep -q "nowhere.json' does not exist, and no rank files of it" "$work/err.txt" || fail "unclear message: $(cat "$work/err.txt")"
if "$tool" "$work/trace.rank1.json" "$work/trace.rank1.json" -o "$work/x.json" 2> "$work/err.txt"; then
  fail "two files of one rank were merged"
fi
grep -q "two files of rank 1" "$work/err.txt" || fail "unclear message: $(cat "$work/err.txt")"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); d['otherData']['world_size']=8; json.dump(d,open(sys.argv[2],'w'))" \
  "$work/trace.rank2.json" "$work/other.rank2.json"
if "$tool" "$work/trace.rank1.json" "$work/other.rank2.json" -o "$work/x.json" 2> "$work/err.txt"; then
  fail "traces of two worlds were merged"
fi
grep -q "traces of different runs" "$work/err.txt" || fail "unclear message: $(cat "$work/err.txt")"
if "$gpt" "${train[@]}" --run-dir "$work/bad" --trace "$work/b.json" --trace-steps 5-2 2> "$work/err.txt" > /dev/null; then
  fail "--trace-steps 5-2 was accepted"
fi
grep -q "trace-steps" "$work/err.txt" || fail "unclear message: $(cat "$work/err.txt")"
[ ! -e "$work/x.json" ] || fail "a failed merge left an output file"
# A trace that cannot be written: said, and the run trains to its end.
"$gpt" "${train[@]}" --run-dir "$work/unwritable" --steps 2 --trace /proc/no/t.json --trace-steps 1-2 \
  > "$work/unwritable.txt" 2>&1 || { tail "$work/unwritable.txt"; fail "an unwritable trace ended the run"; }
grep -q "warning: the trace of steps 1-2 was not written (.*/proc/no.*); training goes on" "$work/unwritable.txt" \
  || fail "unclear message: $(grep -i trace "$work/unwritable.txt")"
grep -q "^step 2/2 | loss" "$work/unwritable.txt" || fail "the run did not finish"
echo "PASS"
