#!/usr/bin/env bash
# htrun on a cluster of separate hosts (tests/cluster/testbed.sh: network
# namespaces, each with its own address, hostname, /dev/shm and sshd): a
# head node h0 runs htrun over a hostfile of h1, h2 (active) and h3 (spare);
# the run directory is shared, as on FSx/Lustre. One scenario per call:
#
#   testbed     the test bed itself: hostnames, private /dev/shm, ssh between
#               hosts, a cut link unreachable and healed, a crash ends every
#               process of the host and its memory, a host slowed by a cgroup
#   clean       the fault-free run (the others compare their weights with it)
#   crash       h2 crashes (every process, its memory gone) mid-run: htrun
#               names h2 from the launcher's report, cordons it, brings in
#               h3, resumes from memory (h1 holds h2's replica), and ends on
#               the clean run's weights
#   partition   h2's link is cut mid-run: htrun names h2 (not the healthy h1),
#               cordons it, resumes on h1 + h3, ends on the clean weights; the
#               ranks left on h2 fence themselves (a newer launch's epoch),
#               so nothing of theirs remains once the link is back
#   slow-link   h2's link limited to 1 Mbit/s both ways mid-run (a gray
#               failure: h2 answers, its health check alone passes): htrun
#               sees the steps crawl, tests every host's link through its
#               agent, cordons h2 as a straggler and brings in h3, and the
#               run ends on the clean run's weights within the clean run's
#               time plus 30 s
#   chaos       a fault-free run, then the same run with a host crash or a
#               cut link every CHAOS_EVERY s (default 20, or a third of the
#               fault-free run's time when that is shorter; crashes and cuts
#               in turn, on a host the job runs on), each host brought back
#               (booted, healed) CHAOS_REPAIR s later (default 8) so that
#               htrun readmits it as a spare (--readmit-after); CHAOS_STEPS
#               steps (default 8000, about a minute of training). The chaos
#               run must end on the fault-free run's weights, blame only
#               hosts that were hit, and cordon no other
#   slurm-crash, slurm-partition
#               the same faults under Slurm (tests/cluster/slurm_testbed.sh:
#               slurmctld on h0, a slurmd on each host), htrun inside
#               `salloc -N3 --no-kill`: the job finishes on the spare, the
#               allocation lives on, h2 is drained and h1 and h3 never are
#
#   cluster_scenarios.sh HTRUN GPT_TRAIN WORK SCENARIO
#
# Each scenario prints a "# measured" line (failure to detection, detection
# to the first step after recovery, the tier resumed from): the figures of
# docs/benchmarks.md, never asserted here (the machine is shared).
set -euo pipefail
htrun=$(realpath "$1") gpt=$(realpath "$2") work=$(realpath -m "$3") scenario=$4
here=$(cd "$(dirname "$0")" && pwd)
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail() { echo "FAIL ($scenario): $*"; exit 1; }
rm -rf "$work"
mkdir -p "$work"
shared_clean="$(dirname "$work")/cluster_clean"
. "$here/testbed.sh"
. "$here/slurm_testbed.sh"
# Namespaces need root (CAP_SYS_ADMIN): without them the scenarios skip, saying why.
if ! ip netns add "htcprobe$$" 2> /dev/null; then
  echo "SKIP ($scenario): cannot make network namespaces here (needs root and CAP_SYS_ADMIN)"
  exit 77
fi
ip netns del "htcprobe$$"
tb_up "$work/testbed" 4

steps=240
text="$work/text.txt"
for i in $(seq 300); do echo "pack my box with five dozen liquor jugs $i"; done > "$text"
printf "h1 slots=1\nh2 slots=1\nh3 slots=1\n" > "$work/hosts"
train=(--text "$text" --layers 2 --heads 2 --embd 32 --context 32 --seq-len 16 --micro-batch 2 --eval-every 0
       --eval-samples 4 --sample-tokens 0 --heartbeat 0.1 --steps "$steps" --ckpt-every 100 --mem-ckpt-every 10
       --zero 2)

htrun_args=(--hang-timeout 15)
start_run() {  # start_run NAME: htrun on h0, in the background ($run_pid); under Slurm for slurm-* scenarios
  rm -rf "$work/$1"
  local nodes=(--hostfile "$work/hosts") launcher=()
  if [ "${scenario#slurm-}" != "$scenario" ]; then
    nodes=()
    launcher=(env SLURM_CONF="$SLURM_CONF" salloc -N3 --ntasks-per-node=1 --no-kill)
  fi
  tb_exec h0 "${launcher[@]}" "$htrun" "${nodes[@]}" --spares 1 --run-dir "$work/$1" --backoff 0.2 "${htrun_args[@]}" \
    --grace 2 --connect-timeout 2 -- "$gpt" "${train[@]}" > "$work/$1.log" 2>&1 &
  run_pid=$!
}
finish_run() {  # finish_run NAME: waits; the run must finish by itself
  local rc=0
  wait "$run_pid" || rc=$?
  [ "$rc" = 0 ] || { tail -30 "$work/$1.log"; fail "htrun exited $rc"; }
}
wait_for_step() {  # wait_for_step NAME STEP: until rank 0 completed STEP
  local i
  for i in $(seq 1200); do
    grep -q "\"step\":$2," "$work/$1/metrics.jsonl" 2>/dev/null && return 0
    sleep 0.05
  done
  fail "the run never reached step $2"
}
checksums() { python3 "$here/../scripts/checkpoint_checksums.py" "$1/checkpoints/step_$(printf %08d "$steps")"; }
same_as_clean() {
  [ -f "$shared_clean/clean/htrun_report.json" ] || fail "no clean run in $shared_clean (scenario clean makes it first)"
  diff <(checksums "$shared_clean/clean") <(checksums "$work/$1") > /dev/null || fail "final weights differ from the clean run"
}
report() {  # report NAME EXPR: a Python expression over the report (r) and its first incident (i)
  python3 - "$work/$1/htrun_report.json" "$2" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
i = r["incidents"][0] if r["incidents"] else {}
print(eval(sys.argv[2]))
PY
}
expect_report() {  # expect_report NAME EXPR: EXPR holds
  [ "$(report "$1" "$2")" = True ] || { cat "$work/$1/htrun_report.json"; fail "the report does not satisfy: $2"; }
}
measured() {  # measured NAME FAULT_TIME: the figures, from the report and the fault's own time (also in WORK/measured.txt)
  report "$1" "'# measured: {} of {} at step {}: detected {:.2f} s after the fault, training again {:.2f} s after detection (from {}, step {}), {} step(s) lost'.format(i['kind'], i['host'], i['step_reached'], i['detected_at'] - $2, i.get('recovery_s', -1), i['resume_tier'], i['resumed_from'], i['steps_lost'])" | tee "$work/measured.txt"
}

case "$scenario" in
  testbed)
    [ "$(tb_exec h1 hostname)" = h1 ] && [ "$(tb_exec h2 hostname)" = h2 ] || fail "hosts do not have their own names"
    tb_exec h1 sh -c 'echo x > /dev/shm/ht_testbed_probe'
    tb_exec h2 test ! -e /dev/shm/ht_testbed_probe || fail "/dev/shm is shared between hosts"
    [ ! -e /dev/shm/ht_testbed_probe ] || fail "a host's /dev/shm is this machine's"
    tb_exec h1 grep -qx "pml = ob1" "$TB_MCA_PARAMS" || fail "h1's Open MPI is not set up for Ethernet alone"
    [ "$(tb_exec h0 ssh h2 hostname)" = h2 ] || fail "ssh from h0 to h2 does not reach h2"
    tb_cut h2
    if tb_exec h0 ssh -o ConnectTimeout=1 h2 true 2> /dev/null; then fail "h2 answers with its link cut"; fi
    tb_heal h2
    [ "$(tb_exec h0 ssh h2 hostname)" = h2 ] || fail "h2 does not answer once its link is back"
    tb_exec h2 sh -c 'sleep 600 > /dev/null 2>&1 &'
    tb_crash h2
    [ -z "$(ip netns pids "$TB_ID-h2")" ] || fail "processes of h2 outlived its crash"
    tb_boot h2
    tb_exec h2 test ! -e /dev/shm/ht_testbed_probe || fail "h2's memory survived its crash"
    tb_exec h1 test -e /dev/shm/ht_testbed_probe || fail "h1's memory went with h2's crash"
    if tb_slow h3 20; then
      # The same work on h3 (a fifth of a core) and h1, started as ranks are (ssh).
      t0=$(date +%s.%N)
      tb_exec h0 ssh h3 "timeout 20 sh -c 'i=0; while [ \$i -lt 300000 ]; do i=\$((i+1)); done'"
      t1=$(date +%s.%N)
      tb_exec h0 ssh h1 "timeout 20 sh -c 'i=0; while [ \$i -lt 300000 ]; do i=\$((i+1)); done'"
      t2=$(date +%s.%N)
      awk -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN { exit !(b - a > 2 * (c - b)) }' ||
        fail "the slowed h3 was not slower than h1"
    fi
    echo "test bed: hosts, memory, ssh, cut and heal, crash, slow: all checks passed" ;;
  clean)
    start_run clean
    finish_run clean
    expect_report clean "r['incidents'] == [] and r['exit_code'] == 0"
    if [ "$work" != "$shared_clean" ]; then
      mkdir -p "$shared_clean"
      rm -rf "$shared_clean/clean"
      cp -r "$work/clean" "$shared_clean/clean"
    fi ;;
  crash)
    start_run crash
    wait_for_step crash 125
    fault=$(date +%s.%N)
    tb_crash h2
    finish_run crash
    expect_report crash "i['kind'] == 'host-lost' and i['host'] == 'h2' and i['node'] == 1"
    expect_report crash "r['cordoned_nodes'] == [1] and r['active_nodes'] == [0, 2] and len(r['incidents']) == 1"
    expect_report crash "i['resume_tier'] == 'memory+peer' and i['resumed_from'] > 100"
    grep -q "host-lost of rank 1 (node 1 (h2)) detected after" "$work/crash.log" || fail "htrun did not say it lost h2"
    same_as_clean crash
    measured crash "$fault" ;;
  partition)
    start_run partition
    wait_for_step partition 125
    fault=$(date +%s.%N)
    tb_cut h2
    finish_run partition
    expect_report partition "i['host'] == 'h2' and i['node'] == 1 and i['kind'] in ('host-lost', 'comm-failure')"
    expect_report partition "r['cordoned_nodes'] == [1] and r['active_nodes'] == [0, 2]"
    expect_report partition "all(h['host'] != 'h1' or h['healthy'] for h in i['health'])"
    same_as_clean partition
    # The ranks left on h2 were given up: with the link back, none is there.
    tb_heal h2
    sleep 1
    if tb_exec h2 pgrep -f gpt_train > /dev/null; then fail "a rank of the given-up launch still runs on h2"; fi
    measured partition "$fault" ;;
  slow-link)
    start_run slow-link
    wait_for_step slow-link 125
    fault=$(date +%s.%N)
    tb_slow_link h2 1mbit || fail "cannot limit h2's link (tc tbf)"
    finish_run slow-link
    expect_report slow-link "i['host'] == 'h2' and i['node'] == 1 and i['kind'] == 'straggler' and 'link' in i['message']"
    expect_report slow-link "r['cordoned_nodes'] == [1] and r['active_nodes'] == [0, 2]"
    same_as_clean slow-link
    clean_wall=$(python3 -c "import json; print(json.load(open('$shared_clean/clean/htrun_report.json'))['wall_s'])")
    expect_report slow-link "r['wall_s'] <= $clean_wall + 30"
    measured slow-link "$fault"
    report slow-link "'# measured: slow link: wall {:.1f} s against the clean run\'s {:.1f} s; goodput {:.1%}'.format(r['wall_s'], $clean_wall, r['goodput'])" | tee -a "$work/measured.txt" ;;
  chaos)
    steps=${CHAOS_STEPS:-8000} every=${CHAOS_EVERY:-20} repair=${CHAOS_REPAIR:-8}
    for i in "${!train[@]}"; do
      case "${train[$i]}" in
        --steps) train[i + 1]=$steps ;;
        --ckpt-every) train[i + 1]=2000 ;;
      esac
    done
    # A cut host is seen by its agent's silence within --unreachable-after;
    # failing that, a partition is a named communication failure within
    # seconds (the ranks' timeout is two thirds of the hang timeout). The hosts
    # share this machine's two cores, so a readmission check beside
    # training measures a fraction of a host's memory bandwidth.
    htrun_args=(--hang-timeout 6 --readmit-after 5 --max-restarts 100 --unreachable-after 1
                --health-arg=--min-memory-gbps=0.05)
    start_run fault_free
    finish_run fault_free
    # At least three faults must fall in the run however fast this machine
    # steps: no more than a third of the fault-free run's time apart.
    if [ -z "${CHAOS_EVERY:-}" ]; then
      every=$(report fault_free "'%.1f' % min($every, r['wall_s'] / 3)")
      repair=$(awk -v e="$every" -v r="$repair" 'BEGIN { printf "%.1f", (r < e / 2 ? r : e / 2) }')
    fi
    start_run chaos
    : > "$work/faults"
    n=0
    next=$(date +%s.%N)
    while kill -0 "$run_pid" 2> /dev/null; do
      next=$(awk -v t="$next" -v e="$every" 'BEGIN { printf "%.3f", t + e }')
      sleep "$(awk -v t="$next" -v now="$(date +%s.%N)" 'BEGIN { d = t - now; printf "%.3f", (d > 0 ? d : 0) }')"
      # A host the current launch runs on, once it trains (its ranks beat
      # with the newest epoch past start-up).
      host=
      for i in $(seq 200); do
        kill -0 "$run_pid" 2> /dev/null || break
        host=$(python3 - "$work/chaos" "$work/chaos.log" "$n" <<'PY'
import json, re, sys
run, log, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
try:
    epoch = int(open(run + "/launch_epoch").read())
    launches = re.findall(r"htrun: launch \d+: \d+ node\(s\) \[([0-9,]+)\]", open(log).read())
    steps = [r for r in map(json.loads, open(run + "/metrics.jsonl")) if r.get("type") == "step"]
except (OSError, ValueError):
    sys.exit()
# The newest launch trains once rank 0 recorded a step of its epoch; its
# nodes are htrun's launch line's (node i is host h<i+1>).
if launches and steps and steps[-1].get("epoch") == epoch:
    hosts = sorted("h%d" % (int(i) + 1) for i in launches[-1].split(","))
    if len(hosts) == 2:
        print(hosts[n % 2])
PY
)
        [ -n "$host" ] && break
        sleep 0.1
      done
      [ -n "$host" ] || break
      at=$(date +%s.%N)
      if [ $((n % 2)) = 0 ]; then kind=crash; tb_crash "$host"; else kind=cut; tb_cut "$host"; fi
      echo "$at $kind $host" >> "$work/faults"
      n=$((n + 1))
      sleep "$repair"
      if [ "$kind" = crash ]; then tb_boot "$host"; else tb_heal "$host"; fi
    done
    finish_run chaos
    [ "$n" -ge 2 ] || fail "only $n fault(s) fell in the run: give it more steps (CHAOS_STEPS)"
    diff <(checksums "$work/fault_free") <(checksums "$work/chaos") > /dev/null ||
      fail "the chaos run's final weights differ from the fault-free run's"
    hit=$(awk '{print $3}' "$work/faults" | sort -u | tr '\n' ' ')
    expect_report chaos "all(x['host'] in '$hit'.split() for x in r['incidents']) and len(r['incidents']) >= 1"
    python3 - "$work" "$n" "$every" <<'PY' > "$work/measured.txt" || fail "a host that was not hit was cordoned, or an incident blamed one"
import json, sys
work, n = sys.argv[1], int(sys.argv[2])
r = json.load(open(work + "/chaos/htrun_report.json"))
clean = json.load(open(work + "/fault_free/htrun_report.json"))
hosts = {0: "h1", 1: "h2", 2: "h3"}
hit = {line.split()[2] for line in open(work + "/faults")}
assert all(hosts[c] in hit for c in r["cordoned_nodes"]), r["cordoned_nodes"]
kinds = [i["kind"] for i in r["incidents"]]
faults = sorted(float(line.split()[0]) for line in open(work + "/faults"))
# Each incident from the fault before its detection (the real fault time).
detect = [i["detected_at"] - max(t for t in faults if t <= i["detected_at"]) for i in r["incidents"]]
print("# measured: chaos: {} faults in {:.0f} s, every {} s ({}), {} incident(s) ({}), {} restart(s), readmitted {}; goodput {:.1f}% "
      "against the fault-free run's {:.1f}%: {:.1f}% of it; mean detection {:.2f} s, mean recovery {:.2f} s; "
      "final weights equal".format(
          n, r["wall_s"], sys.argv[3], ", ".join(l.split()[1] + " " + l.split()[2] for l in open(work + "/faults")),
          len(kinds), ", ".join(kinds), r["restarts"], r.get("readmitted_nodes"), 100 * r["goodput"],
          100 * clean["goodput"], 100 * r["goodput"] / clean["goodput"],
          sum(detect) / len(detect),
          sum(i.get("recovery_s", 0) for i in r["incidents"]) / len(kinds)))
PY
    cat "$work/measured.txt"
    # The goodput projected from this run's own fault rate and measured costs
    # (docs/benchmarks.md, "Goodput at scale, projected") must be within 3
    # points of the goodput measured.
    plan="$(dirname "$htrun")/ht-plan"
    [ -x "$plan" ] || fail "no ht-plan beside htrun ($plan): build it"
    "$plan" --reliability --from-report "$work/chaos/htrun_report.json" --fault-free "$work/fault_free/htrun_report.json" \
      --backoff-s 0.2 --json "$work/projection.json" > "$work/projection.txt" ||
      { cat "$work/projection.txt"; fail "ht-plan --reliability --from-report failed"; }
    python3 - "$work/projection.json" <<'PY' | tee -a "$work/measured.txt"
import json, sys
p = json.load(open(sys.argv[1]))
print("# projected: chaos: goodput {:.1f}% from the run's fault rate and measured costs (ht-plan --reliability "
      "--from-report), measured {:.1f}%: {:+.1f} points".format(
          100 * p["projected"]["goodput"], 100 * p["measured"]["goodput"], p["difference_points"]))
PY
    python3 -c "import json, sys; sys.exit(abs(json.load(open(sys.argv[1]))['difference_points']) > 3)" \
      "$work/projection.json" || { cat "$work/projection.txt"; fail "the projected goodput is more than 3 points from the measured"; }
    ;;
  slurm-crash | slurm-partition)
    tb_slurm_up
    start_run "$scenario"
    wait_for_step "$scenario" 125
    fault=$(date +%s.%N)
    if [ "$scenario" = slurm-crash ]; then tb_crash h2; else tb_cut h2; fi
    finish_run "$scenario"
    expect_report "$scenario" "i['host'] == 'h2' and i['node'] == 1"
    expect_report "$scenario" "r['cordoned_nodes'] == [1] and r['active_nodes'] == [0, 2]"
    same_as_clean "$scenario"
    # The allocation ends after htrun: Slurm takes a moment to complete it
    # on each node (states "comp", then "drng" to "drain").
    for i in $(seq 100); do
      states=$(tb_sinfo | sort | tr '\n' ' ')
      case "$states" in
        "h1 idle h2 drain"*" h3 idle ") break ;;
        *comp* | *drng*) sleep 0.2 ;;
        *) break ;;
      esac
    done
    case "$states" in
      "h1 idle h2 drain"*" h3 idle ") ;;
      *) fail "after the job, Slurm's nodes are '$states': h2 must be drained, h1 and h3 idle" ;;
    esac
    measured "$scenario" "$fault" ;;
  *) fail "unknown scenario" ;;
esac
