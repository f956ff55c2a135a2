#!/usr/bin/env bash
# End-to-end resilience: gpt_train under htrun on 2 simulated nodes, one
# scenario per invocation. Each run must finish by itself; where the layout
# is kept, the final checkpoint must hold the same bits as a fault-free run
# (every piece's checksum in its manifest equal).
#   htrun_scenarios.sh HTRUN GPT_TRAIN WORK SCENARIO
# The fault-free run is scenario "clean", run once into WORK's sibling
# htrun_clean (a ctest fixture) and compared with by the others.
set -euo pipefail
htrun="$1"; gpt="$2"; work="$3"; scenario="$4"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail() { echo "FAIL ($scenario): $*"; exit 1; }
rm -rf "$work"  # never compare with a run of another build
mkdir -p "$work"
shared_clean="$(dirname "$work")/htrun_clean"  # the fault-free run's work directory (scenario clean)
text="$work/text.txt"
[ -f "$text" ] || for i in $(seq 300); do echo "pack my box with five dozen liquor jugs $i"; done > "$text"
steps=24
nodes=2
[ "$scenario" = chaos ] && steps=40 && nodes=3
nodeset=(--local --nodes "$nodes" --slots 1)  # the htrun node set of run() (simulated even under Slurm)
program="$gpt"                        # the program run() launches
train=(--text "$text" --layers 2 --heads 2 --embd 32 --context 32 --seq-len 16 --micro-batch 2 --eval-every 0
       --eval-samples 4 --sample-tokens 0 --heartbeat 0.1 --steps "$steps" --ckpt-every 4)

run() {  # run NAME [htrun flags] -- [extra gpt_train flags]; output in $work/NAME.log
  local name="$1"; shift
  local hflags=() extra=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do hflags+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  extra=("$@")
  rm -rf "$work/$name"
  set +e
  "$htrun" "${nodeset[@]}" --run-dir "$work/$name" --backoff 0.2 --hang-timeout 4 --grace 2 "${hflags[@]}" \
    -- "$program" "${train[@]}" "${extra[@]}" > "$work/$name.log" 2>&1
  echo $? > "$work/$name.rc"
  set -e
}
checksums() {  # the final checkpoint's pieces and checksums
  python3 "$(dirname "$0")/../scripts/checkpoint_checksums.py" "$1/checkpoints/step_$(printf %08d "$steps")"
}
same_as_fault_free() {
  local clean="$shared_clean"
  if [ "$scenario" = chaos ]; then  # 3 nodes and more steps: a fault-free run of its own
    clean="$work"
    [ -d "$work/clean" ] || HT_FAULTS= run clean
  fi
  [ "$(cat "$clean/clean.rc" 2>/dev/null)" = 0 ] \
    || fail "no finished fault-free run in $clean (scenario clean makes it; ctest runs it first, as fixture htrun_clean)"
  diff <(checksums "$clean/clean") <(checksums "$work/$1") > /dev/null || fail "final weights differ from the fault-free run"
}
expect() {  # expect NAME PATTERN: the log holds PATTERN
  grep -q -- "$2" "$work/$1.log" || { tail -30 "$work/$1.log"; fail "no '$2' in the log"; }
}
exact_accounting() {  # exact_accounting NAME [INCIDENTS]: the report's goodput and recoveries, as docs/htrun.md says
  python3 - "$work/$1/htrun_report.json" "$work/$1.log" "${2:--1}" "$steps" <<'PY' || fail "goodput or recovery not as computed from the ranks' records"
import json, re, sys
report, incidents, steps = json.load(open(sys.argv[1])), int(sys.argv[3]), int(sys.argv[4])
# Productive time: each step's time, the last time it completed (rank 0's
# step lines, rounded to ms, every launch's in the order printed).
last = {}
for line in open(sys.argv[2]):
    m = re.match(r"^step (\d+)/\d+ \|.*? \| (\d+) ms \|", line)
    if m: last[int(m[1])] = int(m[2]) / 1000
expected, wall = sum(last.values()), report["wall_s"]
ok = sorted(last) == list(range(1, steps + 1))
ok &= abs(report["productive_s"] - expected) <= 0.0006 * steps + 0.02 * expected
ok &= 0 < report["goodput"] < 1 and abs(report["goodput"] - report["productive_s"] / wall) < 1e-6
ok &= incidents < 0 or len(report["incidents"]) == incidents
ok &= all(0 < i.get("recovery_s", -1) < wall for i in report["incidents"])
if not ok:
    print(f"steps {sorted(last)}; productive {report['productive_s']:.3f} s, expected {expected:.3f} s; "
          f"goodput {report['goodput']:.4f}, wall {wall:.2f} s; incidents {report['incidents']}")
sys.exit(0 if ok else 1)
PY
  grep -q "recovered in -" "$work/$1.log" && fail "an incident reported without its recovery time"
  return 0
}
finished() {
  [ "$(cat "$work/$1.rc")" = 0 ] || { tail -30 "$work/$1.log"; fail "htrun exited $(cat "$work/$1.rc")"; }
  expect "$1" "htrun report: the job finished"
  [ -f "$work/$1/htrun_report.json" ] || fail "no htrun_report.json"
}

case "$scenario" in
  clean)
    HT_FAULTS= run clean
    finished clean; expect clean "htrun report: the job finished; 0 restart(s), 0 incident(s)"
    # Each node's ranks' communication wait, through its agent: every node
    # named once, and with two ranks in lockstep one of them waited.
    python3 - "$work/clean/htrun_report.json" <<'PY' || fail "the report lacks the nodes' communication wait"
import json, sys
r = json.load(open(sys.argv[1]))
waits = r["launches"][0]["comm_wait"]
assert sorted(w["node"] for w in waits) == sorted(r["active_nodes"]), waits
assert all(w["comm_wait_s"] >= 0 for w in waits) and max(w["comm_wait_s"] for w in waits) > 0, waits
PY
    ;;
  crash)
    HT_FAULTS="crash:rank=1:step=10" run crash
    finished crash; expect crash "crash of rank 1 (node 1) detected"
    # The relaunch resumes from the newest checkpoint committed when rank 1
    # died: step 8's, or step 4's when step 8's save was still being written
    # (saves are asynchronous; two 5 ms steps can beat a sync to disk on a
    # loaded machine). The program must resume from the step htrun names.
    resumed=$(sed -n 's/^htrun: launch 2: .*resuming after step \([0-9]*\)$/\1/p' "$work/crash.log")
    case "$resumed" in 4|8) ;; *) tail -30 "$work/crash.log"; fail "launch 2 resumed after step '$resumed', not 4 or 8" ;; esac
    expect crash "# resumed from step $resumed "
    # The relaunch takes the MFU peak launch 1 measured (HT_MFU_PEAK) rather
    # than measuring it again.
    python3 - "$work/crash.log" "$work/crash/metrics.jsonl" <<'PY' || fail "the relaunch did not take launch 1's MFU peak"
import json, re, sys
lines = re.findall(r"^# MFU against (\S+) TFLOP/s a rank \((.*)\)$", open(sys.argv[1]).read(), re.M)
run = [r for r in map(json.loads, open(sys.argv[2])) if r.get("type") == "run"][-1]
ok = (len(lines) == 2 and lines[0][1].startswith("f32 GEMM 1024^3 measured on cpu") and lines[1][0] == lines[0][0]
      and lines[1][1] == lines[0][1] + ", at an earlier launch of the job" and run["peak_source"] == lines[1][1])
print(lines, run["peak_source"]) if not ok else None
sys.exit(0 if ok else 1)
PY
    exact_accounting crash 1; same_as_fault_free crash ;;
  memory)
    # Memory snapshots every step (steps slowed to ~100 ms: a snapshot's
    # write and exchange, some 50 ms on this loaded machine, then ends
    # within its step; a faster step would skip the steps it overlaps),
    # disk checkpoints every 4: rank 1 crashes at step 10 and its node fails
    # its health check. The spare has none of node 1's memory, so rank 1
    # pulls its copy from its peer's replica on node 0, and the run resumes
    # from memory at step 8 or 9, at least as new as the disk's 8, losing at
    # most 2 steps; the final weights are the fault-free run's.
    HT_FAULTS="slow:rank=0:factor=20,crash:rank=1:step=10,node-unhealthy:node=1" run memory --spares 1 -- \
      --mem-ckpt-every 1
    finished memory; expect memory "spare node 2 brought in"
    expect memory "# resumed from step [89] (memory, in [0-9]* ms; 1 rank(s) pulled their copy from a peer)"
    python3 - "$work/memory/htrun_report.json" <<'PY' || fail "the relaunch did not resume from memory and its peer"
import json, sys
i = json.load(open(sys.argv[1]))["incidents"][0]
ok = i["resume_tier"] == "memory+peer" and i["resumed_from"] in (8, 9) and i["steps_lost"] == 9 - i["resumed_from"]
print(i) if not ok else None
sys.exit(0 if ok else 1)
PY
    expect memory "(from memory+peer, step "
    exact_accounting memory 1; same_as_fault_free memory
    # The finished run freed its snapshots (/dev/shm/hypertrain-<FNV-1a of the checkpoint directory>).
    python3 - "$work/memory/checkpoints" <<'PY' || fail "the finished run left its memory snapshots"
import os, sys
h = 0xcbf29ce484222325
for c in os.path.realpath(sys.argv[1]).encode():
    h = ((h ^ c) * 0x100000001b3) % 2**64
d = f"/dev/shm/hypertrain-{h:016x}"
print(f"{d} is left") if os.path.exists(d) else None
sys.exit(1 if os.path.exists(d) else 0)
PY
    ;;
  hang)
    # A crash, then a hang, in steps of a few ms: goodput and both
    # recoveries exact, from the ranks' step records.
    HT_FAULTS="crash:rank=1:step=6,hang:rank=0:step=10" run hang
    finished hang; expect hang "crash of rank 1 (node 1) detected"; expect hang "hang of rank 0 (node 0) detected"
    exact_accounting hang 2; same_as_fault_free hang ;;
  short-launch)
    # Heartbeats every 30 s, so only the first (start-up) is ever written:
    # the launch starts, trains and saves between two beats, and rank 0's
    # slowed steps keep it running past the start timeout. What the ranks
    # recorded says it started: not a start hang.
    for i in "${!train[@]}"; do [ "${train[$i]}" = --heartbeat ] && train[$((i + 1))]=30; done
    export HT_FAULTS="slow:rank=0:factor=40"
    run short-launch --start-timeout 3
    finished short-launch
    grep -q "detected" "$work/short-launch.log" && { tail -20 "$work/short-launch.log"; fail "a short launch was taken for a failure"; }
    # Relaunched at its final step: nothing to train, it ends at once.
    export HT_FAULTS=
    cp -r "$work/short-launch" "$work/final-step"
    set +e
    "$htrun" "${nodeset[@]}" --run-dir "$work/final-step" --start-timeout 3 -- "$program" "${train[@]}" \
      > "$work/final-step.log" 2>&1
    echo $? > "$work/final-step.rc"
    set -e
    finished final-step; expect final-step "resuming after step $steps"
    expect final-step "# nothing left to train: resumed at step $steps of $steps"
    expect final-step "htrun report: the job finished; 0 restart(s), 0 incident(s)"
    grep -Eq "^step [0-9]+/" "$work/final-step.log" && fail "the relaunch at the final step trained or evaluated" ;;
  spare)
    HT_FAULTS="crash:rank=1:step=10,node-unhealthy:node=1" run spare --spares 1
    finished spare; expect spare "node 1 failed its health check: cordoned, spare node 2 brought in"
    expect spare "launch 2: 2 node(s) \[0,2\]"; same_as_fault_free spare ;;
  readmit)
    # Node 1 fails its check after the crash and is cordoned; once the run
    # trains on the spare, node 1 is repaired (its fault's file removed), a
    # check while the job runs finds it well, and it returns as a spare. Rank
    # 0's steps are slowed (about 0.3 s here) so that the run outlasts that.
    broken="$work/node1_broken"
    touch "$broken"
    HT_FAULTS="slow:rank=0:factor=100,crash:rank=1:step=10,node-unhealthy:node=1:while=$broken" \
      run readmit --spares 1 --readmit-after 0.5 &
    for _ in $(seq 600); do
      grep -q "node 1 is not back yet" "$work/readmit.log" 2>/dev/null && break
      sleep 0.1
    done
    rm -f "$broken"
    wait
    finished readmit; expect readmit "node 1 failed its health check: cordoned, spare node 2 brought in"
    expect readmit "node 1 is not back yet (its health check exited 1)"
    expect readmit "node 1 passed its health check again: back as a spare"
    python3 - "$work/readmit/htrun_report.json" <<'PY' || fail "the report does not show node 1 readmitted"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["readmitted_nodes"] == [1] and r["cordoned_nodes"] == [] and r["spares_left"] == [1] and len(r["incidents"]) == 1, r
PY
    same_as_fault_free readmit ;;
  corrupt)
    HT_FAULTS="ckpt-corrupt:step=8,crash:rank=0:step=10" run corrupt
    finished corrupt; expect corrupt "checkpoint .*step_00000008 is corrupt or incomplete; falling back to step 4"
    same_as_fault_free corrupt ;;
  divergence)
    HT_FAULTS="nan:step=10" run divergence -- --divergence-steps 2
    finished divergence; expect divergence "divergence of rank"; same_as_fault_free divergence ;;
  bitflip)
    HT_FAULTS="bitflip:rank=1:step=9" run bitflip -- --sdc-every 1
    finished bitflip; expect bitflip "silent data corruption after step 9"; expect bitflip "corruption of rank"
    same_as_fault_free bitflip ;;
  shrink)
    HT_FAULTS="crash:rank=1:step=10,node-unhealthy:node=1" run shrink --allow-shrink
    finished shrink; expect shrink "no spare, continuing on 1 node"; expect shrink "launch 2: 1 node(s) \[0\]" ;;
  preempt)
    rm -rf "$work/preempt"
    set +e
    HT_FAULTS="slow:rank=0:factor=40" "$htrun" "${nodeset[@]}" --run-dir "$work/preempt" --grace 2 \
      -- "$gpt" "${train[@]}" > "$work/preempt.log" 2>&1 &
    pid=$!
    for _ in $(seq 300); do grep -q "^step 5/" "$work/preempt.log" 2>/dev/null && break; sleep 0.1; done
    kill -TERM "$pid"; wait "$pid"; echo $? > "$work/preempt.rc"
    set -e
    [ "$(cat "$work/preempt.rc")" = 77 ] || { tail -20 "$work/preempt.log"; fail "htrun exited $(cat "$work/preempt.rc"), not 77"; }
    expect preempt "# preempted at step"
    saved=$(sed -n 's/^# preempted at step \([0-9]*\): checkpoint committed.*/\1/p' "$work/preempt.log" | head -1)
    expect preempt "htrun report: preempted: checkpoint of step $saved saved, stopped"
    # The same command again, without the fault, finishes from that checkpoint.
    HT_FAULTS= "$htrun" "${nodeset[@]}" --run-dir "$work/preempt" -- "$gpt" "${train[@]}" > "$work/preempt2.log" 2>&1 \
      || fail "the rerun after preemption failed"
    grep -q "# resumed from step" "$work/preempt2.log" || fail "the rerun did not resume"
    same_as_fault_free preempt ;;
  bad-flag)
    # A program that fails before training, saying nothing htrun can read
    # (a usage error): stopped after the same failure twice, not retried on.
    run bad-flag -- --no-such-flag
    [ "$(cat "$work/bad-flag.rc")" = 2 ] || { tail -20 "$work/bad-flag.log"; fail "htrun exited $(cat "$work/bad-flag.rc"), not 2"; }
    expect bad-flag "failure of an unknown rank detected .*the launcher exited [0-9]* and no rank said why"
    expect bad-flag "htrun report: the program failed before training twice in a row (exit [0-9]*); see .*htrun_job.log; 1 restart(s)" ;;
  no-heartbeat)
    # A program that keeps no part of the contract (never writes a
    # heartbeat): told so by name at the first start timeout, not retried.
    program="$work/silent.sh"
    printf '#!/bin/sh\nexec sleep 600\n' > "$program"
    chmod +x "$program"
    run no-heartbeat --start-timeout 3
    [ "$(cat "$work/no-heartbeat.rc")" = 2 ] || { tail -20 "$work/no-heartbeat.log"; fail "htrun exited $(cat "$work/no-heartbeat.rc"), not 2"; }
    expect no-heartbeat "no rank sent a heartbeat within the start timeout (3 s): '$program' does not keep htrun's contract"
    expect no-heartbeat "htrun report: the program sent no heartbeat, so htrun cannot watch it"
    [ "$(grep -c "htrun: launch " "$work/no-heartbeat.log")" = 1 ] || fail "htrun relaunched a program that never beat" ;;
  own-run-dir)
    # --run-dir given to the program too: refused at once, naming the flag.
    run own-run-dir -- --run-dir "$work/elsewhere"
    [ "$(cat "$work/own-run-dir.rc")" = 2 ] || fail "htrun exited $(cat "$work/own-run-dir.rc"), not 2"
    expect own-run-dir "the program's arguments hold --run-dir, a flag htrun passes itself"
    grep -q "htrun: launch " "$work/own-run-dir.log" && fail "htrun launched the program" ;;
  give-up)
    # --max-restarts bounds the relaunches: the second crash ends the run,
    # which counts the one relaunch it made.
    HT_FAULTS="crash:rank=1:step=10,crash:rank=0:step=14" run give-up --max-restarts 1
    [ "$(cat "$work/give-up.rc")" = 1 ] || { tail -20 "$work/give-up.log"; fail "htrun exited $(cat "$work/give-up.rc") after too many failures, not 1"; }
    expect give-up "crash of rank 0 (node 0) detected"
    expect give-up "htrun report: gave up after 1 restarts; 1 restart(s), 2 incident(s)" ;;
  watchdog)
    # Inside the rank, without htrun: a hung step ends the rank with 75 and
    # an exit record that says where it was.
    rm -rf "$work/watchdog"
    set +e
    # (No memory snapshots: a rank that ends hung keeps them for a relaunch.)
    HT_FAULTS="hang:rank=0:step=3" timeout 60 "$gpt" "${train[@]}" --watchdog 1 --run-dir "$work/watchdog" --mem-ckpt-every 0 \
      > "$work/watchdog.log" 2>&1
    rc=$?
    set -e
    [ "$rc" = 75 ] || { tail -20 "$work/watchdog.log"; fail "exit status $rc, not 75"; }
    expect watchdog "watchdog: rank 0 made no progress for 1.[0-9] s in step 3"
    grep -q '"kind":"hang"' "$work/watchdog/exit/rank_0.json" || fail "no hang exit record" ;;
  never-starts)
    # A rank that never arrives: in the first launch rank 1 sleeps before
    # it starts, and its peers wait for it in MPI start-up. No heartbeat
    # ever leaves "start", so the start timeout ends the launch.
    program="$work/late_rank.sh"
    cat > "$program" <<WRAPPER
#!/bin/sh
if [ "\${OMPI_COMM_WORLD_RANK:-0}" = 1 ] && [ ! -e "$work/late_rank.slept" ]; then
  touch "$work/late_rank.slept"; exec sleep 600
fi
exec "$gpt" "\$@"
WRAPPER
    chmod +x "$program"
    run never-starts --start-timeout 5
    finished never-starts
    expect never-starts "hang of rank 1 (node 1) detected after .*: rank 1 did not start within the start timeout (5 s)"
    expect never-starts "launch 2: 2 node(s) \[0,1\]"; same_as_fault_free never-starts ;;
  hostfile)
    # A hostfile node set on this machine: one host of 2 slots, launched
    # with mpirun --host, its health checked through mpirun too.
    printf '# this machine\nlocalhost slots=2\n' > "$work/localhost.hosts"
    nodeset=(--hostfile "$work/localhost.hosts")
    HT_FAULTS="crash:rank=1:step=10" run hostfile
    finished hostfile; expect hostfile "launch 1: 1 node(s) \[0\] x 2 slot(s)"
    expect hostfile "crash of rank 1 (node 0 (localhost)) detected"
    grep -q '"healthy": true' "$work/hostfile/htrun_report.json" || fail "no health check of localhost in the report"
    same_as_fault_free hostfile
    # An agent whose htrun has ended (nothing listens at its port: an agent
    # still starting when htrun said Bye to the others) leaves within
    # seconds, not after --linger (300 s), and without spinning.
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    rc=0
    printf '%064d\n' 0 | timeout 20 "$(dirname "$htrun")/ht-agent" --node 0 --controller "127.0.0.1:$port" \
      --socket-dir "$work/lonely-agent" > "$work/lonely-agent.log" 2>&1 || rc=$?
    [ "$rc" = 0 ] || { cat "$work/lonely-agent.log"; fail "an agent without its htrun did not leave by itself (exit $rc)"; }
    grep -q "refused every connection for" "$work/lonely-agent.log" || fail "the lonely agent did not say why it left"
    # Agents started by one launch on every host each find their own node:
    # by their task index under mpirun, by their host under Slurm (a
    # detached agent's log names its node). One that cannot tell says so.
    agent_of() {  # agent_of NAME [VAR=value]: a lonely agent of --nodes 4,7 --hosts a,b with that environment
      mkdir -p "$work/$1"
      printf '%064d\n' 0 | env -u OMPI_COMM_WORLD_RANK -u SLURMD_NODENAME "${@:2}" "$(dirname "$htrun")/ht-agent" \
        --nodes 4,7 --hosts a,b --controller "127.0.0.1:$port" --socket-dir "$work/$1/sock" --run-dir "$work/$1" \
        --detach > "$work/$1.log" 2>&1
    }
    agent_of by-task OMPI_COMM_WORLD_RANK=1 || fail "an agent of one launch did not start: $(cat "$work/by-task.log")"
    agent_of by-host SLURMD_NODENAME=b || fail "an agent of one launch did not start: $(cat "$work/by-host.log")"
    [ -e "$work/by-task/agent_node7.log" ] && [ -e "$work/by-host/agent_node7.log" ] \
      || fail "an agent of one launch took another node than its own: $(ls "$work/by-task" "$work/by-host")"
    if agent_of no-index; then fail "an agent of one launch started without knowing its node"; fi
    grep -q "needs its task's index" "$work/no-index.log" || fail "unclear error: $(cat "$work/no-index.log")"
    if agent_of unknown-host SLURMD_NODENAME=c; then fail "an agent on a host not in --hosts started"; fi
    grep -q "this host, c (SLURMD_NODENAME), is not among --hosts" "$work/unknown-host.log" \
      || fail "unclear error: $(cat "$work/unknown-host.log")" ;;
  slurm)
    # A real Slurm of 4 nodes on this machine (tests/resilience/slurm_local.sh):
    # htrun inside an allocation of 3 launches with srun, finds node 1
    # unhealthy after its rank crashed, drains it in Slurm and brings in the
    # spare n2.
    cluster="$work/slurm-cluster"
    # Stopped on every way out, pass or fail (set before the start: a start
    # that fails halfway stops its daemons itself, this is the second net).
    trap 'bash "$(dirname "$0")/slurm_local.sh" stop "$cluster"' EXIT
    trap 'exit 130' INT TERM
    env_lines="$(SLURM_LOCAL_NODES=4 bash "$(dirname "$0")/slurm_local.sh" start "$cluster")" \
      || fail "the one-machine Slurm did not start"
    eval "$env_lines"
    # An allocation with different task counts per node is refused, saying what to ask for.
    set +e
    timeout 60 salloc --nodes 2 --ntasks 3 "$htrun" --dry-run -- "$gpt" > "$work/slurm-uneven.log" 2>&1
    echo $? > "$work/slurm-uneven.rc"
    set -e
    [ "$(cat "$work/slurm-uneven.rc")" != 0 ] || fail "an allocation of 2 + 1 tasks was accepted"
    expect slurm-uneven "different task counts per node (SLURM_TASKS_PER_NODE=2,1); ask for the same number on every node"
    nodeset=(--spares 1)
    rm -rf "$work/slurm"
    set +e
    HT_FAULTS="crash:rank=1:step=10,node-unhealthy:node=1" timeout 240 salloc --nodes 3 --ntasks-per-node 1 \
      "$htrun" "${nodeset[@]}" --run-dir "$work/slurm" --backoff 0.2 --hang-timeout 20 --grace 2 \
      -- "$gpt" "${train[@]}" > "$work/slurm.log" 2>&1
    echo $? > "$work/slurm.rc"
    set -e
    finished slurm
    expect slurm "launch 1: 2 node(s) \[0,1\] x 1 slot(s)"
    expect slurm "crash of rank 1 (node 1 (n1)) detected"
    expect slurm "node 1 (n1) failed its health check: cordoned, spare node 2 (n2) brought in"
    expect slurm "launch 2: 2 node(s) \[0,2\]"
    sinfo -h -R -n n1 -o "%N %T %E" > "$work/drained.txt"  # draining while the allocation lasts, then drained
    grep -q "^n1 drain[a-z]* htrun: failed its health check" "$work/drained.txt" \
      || fail "n1 is not drained with htrun's reason: $(cat "$work/drained.txt")"
    same_as_fault_free slurm
    # Preemption (Slurm's --signal=B:TERM to the batch script): htrun passes
    # SIGUSR1 through srun; the ranks save and exit 77; a rerun finishes.
    rm -rf "$work/slurm-preempt"
    set +e
    HT_FAULTS="slow:rank=0:factor=40" timeout 120 salloc --nodes 2 --ntasks-per-node 1 \
      "$htrun" --run-dir "$work/slurm-preempt" --grace 2 -- "$gpt" "${train[@]}" > "$work/slurm-preempt.log" 2>&1 &
    pid=$!
    for _ in $(seq 300); do grep -q "^step 5/" "$work/slurm-preempt.log" 2>/dev/null && break; sleep 0.1; done
    pkill -TERM -f "htrun --run-dir $work/slurm-preempt"; wait "$pid"; echo $? > "$work/slurm-preempt.rc"
    set -e
    [ "$(cat "$work/slurm-preempt.rc")" = 77 ] || { tail -20 "$work/slurm-preempt.log"; fail "htrun under Slurm exited $(cat "$work/slurm-preempt.rc") on TERM, not 77"; }
    expect slurm-preempt "# preempted at step [0-9]*: checkpoint committed"
    HT_FAULTS= timeout 120 salloc --nodes 2 --ntasks-per-node 1 "$htrun" --run-dir "$work/slurm-preempt" \
      -- "$gpt" "${train[@]}" > "$work/slurm-preempt2.log" 2>&1 || fail "the rerun after preemption failed"
    grep -q "# resumed from step" "$work/slurm-preempt2.log" || fail "the rerun did not resume"
    same_as_fault_free slurm-preempt
    # examples/slurm/train_gpt.sbatch on a small model: Slurm's TERM to the
    # batch script reaches the ranks through htrun, they save, htrun exits
    # 77 and the script requeues the job.
    rm -rf "$work/sbatch"
    job=$(RUN_DIR="$work/sbatch" GPT_TRAIN="$gpt" HANG_TIMEOUT=20 GPT_ARGS="--text $text --layers 2 --heads 2 --embd 32 --context 32 --seq-len 16 --micro-batch 2 --eval-every 0 --eval-samples 4 --sample-tokens 0 --steps 100000" \
      PATH="$(dirname "$htrun"):$PATH" sbatch --parsable --nodes 3 --ntasks-per-node 1 --gpus-per-node 0 \
      -o "$work/sbatch.log" "$(dirname "$0")/../../examples/slurm/train_gpt.sbatch")
    for _ in $(seq 600); do grep -q "^step 5/" "$work/sbatch.log" 2>/dev/null && break; sleep 0.1; done
    grep -q "^step 5/" "$work/sbatch.log" 2>/dev/null \
      || { scancel "$job" || true; squeue; fail "the batch job did not train within 60 s"; }
    scancel --signal=TERM --batch "$job"
    for _ in $(seq 300); do [ "$(squeue -h -j "$job" -o %T)" = PENDING ] && break; sleep 0.1; done
    state=$(squeue -h -j "$job" -o "%T %r")
    scancel "$job" || true
    expect sbatch "# preempted at step [0-9]*: checkpoint committed"
    expect sbatch "htrun report: preempted: checkpoint of step [0-9]* saved"
    case "$state" in PENDING*) ;; *) tail -20 "$work/sbatch.log"; fail "the batch job was not requeued (state '$state')" ;; esac ;;
  hostfile-plan)
    # Several machines (not here): the node set, the launch, agent and
    # health commands, spares taken from the end, and a refused uneven hostfile.
    printf 'node-a slots=4\nnode-b slots=4 max_slots=8 # comment\n\nnode-c slots=4\n' > "$work/hosts"
    # mpirun passes hypertrain's and the threading variables to other
    # machines only when told to (-x); the launcher arguments reach the
    # agents too, and ht-health's own (--health-arg) the checks they run.
    env -i PATH="$PATH" OMP_NUM_THREADS=2 HT_COMM_TIMEOUT=30 UNRELATED=1 \
      "$htrun" --hostfile "$work/hosts" --spares 1 --launcher-arg=--mca --launcher-arg=btl_tcp_if_include \
      --launcher-arg=eth0 --health-arg=--min-memory-gbps=0.05 --dry-run -- "$gpt" --steps 3 > "$work/plan.txt"
    grep -q "2 active, 1 spare, 4 slot(s) per node" "$work/plan.txt" || fail "wrong node set: $(cat "$work/plan.txt")"
    grep -qx "agents' summaries every 500 ms" "$work/plan.txt" || fail "no summary interval: $(cat "$work/plan.txt")"
    grep -q "job: mpirun -np 8 --host node-a:4,node-b:4 --map-by slot --mca odls_base_sigkill_timeout 0 -x HT_COMM_TIMEOUT -x OMP_NUM_THREADS --mca btl_tcp_if_include eth0 $gpt --steps 3 --run-dir runs/htrun --resume auto" \
      "$work/plan.txt" || fail "wrong job command: $(cat "$work/plan.txt")"
    grep -q "agents, one launch: mpirun -np 3 --host node-a:1,node-b:1,node-c:1 --mca plm_rsh_args -o ConnectTimeout=10 -o ServerAliveInterval=2 -o ServerAliveCountMax=2 --map-by node --stdin all -x HT_COMM_TIMEOUT -x OMP_NUM_THREADS --mca btl_tcp_if_include eth0 .*ht-agent --nodes 0,1,2 --hosts node-a,node-b,node-c --controller [^ ]*:PORT --socket-dir /tmp/htrun-[0-9]*-[0-9a-f]* --run-dir runs/htrun --detach$" "$work/plan.txt" \
      || fail "wrong command for all agents: $(cat "$work/plan.txt")"
    grep -q "agent of node 2 (node-c), alone: mpirun -np 1 --host node-c:1 --mca plm_rsh_args -o ConnectTimeout=10 -o ServerAliveInterval=2 -o ServerAliveCountMax=2 -x HT_COMM_TIMEOUT -x OMP_NUM_THREADS --mca btl_tcp_if_include eth0 .*ht-agent --node 2 --controller [^ ]*:PORT --socket-dir /tmp/htrun-[0-9]*-[0-9a-f]* --run-dir runs/htrun --detach$" "$work/plan.txt" \
      || fail "wrong agent command: $(cat "$work/plan.txt")"
    grep -q "health checks, run by the agents: .*ht-health --node N \.\.\. --min-memory-gbps=0.05$" "$work/plan.txt" \
      || fail "wrong health command: $(cat "$work/plan.txt")"
    printf 'node-a slots=4\nnode-b slots=2\n' > "$work/uneven"
    if "$htrun" --hostfile "$work/uneven" --dry-run -- "$gpt" > "$work/uneven.log" 2>&1; then fail "an uneven hostfile was accepted"; fi
    grep -q "node-b has 2 slots where earlier hosts have 4" "$work/uneven.log" || fail "unclear error: $(cat "$work/uneven.log")" ;;
  chaos)
    # Five random faults on 3 nodes with a spare: the run must finish by
    # itself with the fault-free run's bits, and every fault that ends a
    # rank must have fired, each an incident. HT_CHAOS_SEED draws another plan.
    seed="${HT_CHAOS_SEED:-4}"
    plan="$(bash "$(dirname "$0")/chaos_faults.sh" "$seed" 5 3 $((steps - 2)) 3 3 4)"
    echo "chaos seed $seed: HT_FAULTS=$plan"
    HT_FAULTS="$plan" run chaos --spares 1 -- --sdc-every 1 --divergence-steps 2
    finished chaos
    grep "^htrun: .* detected\|cordoned" "$work/chaos.log" || true
    ending=0
    for fault in ${plan//,/ }; do
      case "$fault" in crash:*|hang:*|bitflip:*|nan:*)
        ending=$((ending + 1))
        grep -qx "$fault" "$work/chaos/faults_fired.txt" || fail "$fault never fired" ;;
      esac
      case "$fault" in crash:*|hang:*)  # the rank at fault is the one named
        kind="${fault%%:*}"; rank="${fault#*rank=}"; rank="${rank%%:*}"
        expect chaos "^htrun: $kind of rank $rank " ;;
      esac
    done
    incidents=$(grep -c "^htrun: .* detected after" "$work/chaos.log" || true)
    [ "$incidents" -ge "$ending" ] || fail "$incidents incidents for $ending faults that end a rank"
    exact_accounting chaos; same_as_fault_free chaos ;;
  straggler)
    HT_FAULTS="slow:rank=1:factor=4" run straggler -- --straggler-window 2 --straggler-windows 2
    # Detection needs two slow windows of 2 steps: step 4 at the earliest,
    # later when a window of the machine's own noise hides the slow rank.
    finished straggler; expect straggler "straggler at step [0-9]*: rank 1" ;;
  straggler-replaced)
    # Treated as unhealthy: the ranks checkpoint and exit, htrun cordons the
    # straggler's node whatever its health check says and brings in a spare.
    # Factor 8 against a threshold of 4 over 3 windows: under a loaded
    # machine (the suite's other tests) the healthy rank's own work may read
    # up to twice its time, and its sub-millisecond steps once read 3.5x the
    # median for two windows on the spare.
    HT_FAULTS="slow:rank=1:factor=8" run straggler-replaced --spares 1 -- --straggler-window 2 --straggler-windows 3 --straggler-threshold 4 \
      --straggler-action exit
    finished straggler-replaced; expect straggler-replaced "# straggler at step [0-9]*: checkpoint committed"
    saved=$(sed -n 's/^# straggler at step \([0-9]*\): checkpoint committed.*/\1/p' "$work/straggler-replaced.log" | head -1)
    expect straggler-replaced "# resumed from step $saved "
    expect straggler-replaced "straggler of rank 1 (node 1) detected"
    expect straggler-replaced "node 1 a persistent straggler: cordoned, spare node 2 brought in"
    expect straggler-replaced "launch 2: 2 node(s) \[0,2\]"; same_as_fault_free straggler-replaced ;;
  *) fail "unknown scenario" ;;
esac
echo "htrun scenario $scenario: passed"
