#!/usr/bin/env bash
# A private, throw-away Slurm cluster on this one machine, for tests.
#
#   slurm_local.sh start <dir>   # configure + start daemons, wait until nodes are idle
#   slurm_local.sh stop  <dir>   # kill the daemons started from <dir>, remove their state
#   slurm_local.sh status <dir>  # sinfo of that cluster (exit 1 if not running)
#
# Design: `start` prints ONLY `export VAR=...` lines on stdout (progress and
# errors go to stderr), and writes the same lines to <dir>/env. Use it as
#
#   eval "$(tests/resilience/slurm_local.sh start "$dir")"    # or: . "$dir/env"
#   srun -N2 -n4 hostname
#   tests/resilience/slurm_local.sh stop "$dir"
#
# The cluster has $SLURM_LOCAL_NODES nodes (default 4) named n0..n<N-1>, all on
# 127.0.0.1: one slurmd per node (`slurmd -N nX`; Debian's slurmd is built with
# multiple-slurmd support), each with its own port, spool dir, log and pid file.
# Each node declares $SLURM_LOCAL_CPUS CPUs (default 4) whatever the hardware has
# (SlurmdParameters=config_overrides), so 4 tasks per node fit on a 2-core box.
# Partition `local` (default) holds all nodes.
#
# Everything (config, state, logs, pids, spool) lives under <dir>; nothing in
# /etc is read or written, and default Slurm ports are not used. Ports:
# slurmctld $SLURM_LOCAL_PORT (default 17817), slurmd nX on SLURM_LOCAL_PORT+1+X.
# Authentication is auth/none + cred/none (still present in Slurm 22.05), so no
# munged is needed. Only the pids recorded in <dir> are ever killed. `start` on
# a <dir> whose cluster is still running stops it first, so it can be rerun.
# Requires: slurm-wlm, libpmix-dev (scripts/setup.sh); run as root (SlurmUser=root).
# Knobs (env): SLURM_LOCAL_NODES, SLURM_LOCAL_CPUS, SLURM_LOCAL_PORT,
# SLURM_LOCAL_TIMEOUT (seconds to wait for idle nodes, default 30).
#
# Open MPI programs: `srun --mpi=pmix -N4 -n8 prog` (pmi2/none do not work with
# Debian's Open MPI), or `mpirun prog` inside salloc/sbatch; as root both need
# OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 in the environment.
# Add -K (--kill-on-bad-exit=1) to srun, or the surviving ranks of a step whose
# rank died wait in MPI forever.
set -euo pipefail

die() { echo "slurm_local: $*" >&2; exit 1; }
log() { echo "slurm_local: $*" >&2; }

[ "${1:-}" = "-h" ] && { sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0; }
[ $# -eq 2 ] || die "usage: $0 start|stop|status <dir>"
cmd=$1
[ "$cmd" = start ] && mkdir -p "$2"
[ -d "$2" ] || { [ "$cmd" = stop ] && exit 0; die "no such directory: $2"; }
dir=$(cd "$2" && pwd)

nodes=${SLURM_LOCAL_NODES:-4}
cpus=${SLURM_LOCAL_CPUS:-4}
port=${SLURM_LOCAL_PORT:-17817}
timeout=${SLURM_LOCAL_TIMEOUT:-30}
last=$((nodes - 1))
conf="$dir/slurm.conf"

# Pid in file $1 if that process is alive and is a slurm daemon, else nothing.
live_pid() {
  local pid
  pid=$(cat "$1" 2>/dev/null || true)
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -q slurm "/proc/$pid/cmdline" 2>/dev/null &&
    echo "$pid"
  return 0
}

# slurmstepd processes of this cluster: their environment holds our SLURM_CONF.
# (Plain /proc walks: procps/pgrep is not on a minimal Debian.)
our_stepds() {
  local d
  for d in /proc/[0-9]*; do
    [ "$(cat "$d/comm" 2>/dev/null)" = slurmstepd ] || continue
    { tr '\0' '\n' <"$d/environ"; } 2>/dev/null | grep -qx "SLURM_CONF=$conf" && echo "${d#/proc/}"
  done
  return 0
}

children() {
  local d
  for d in /proc/[0-9]*; do
    [ "$(cut -d' ' -f4 "$d/stat" 2>/dev/null)" = "$1" ] && echo "${d#/proc/}"
  done
  return 0
}

stop() {
  [ -d "$dir/run" ] || return 0
  local f p pids="" i
  # Cancel running jobs first, so that their tasks end with them.
  if [ -n "$(live_pid "$dir/run/slurmctld.pid")" ]; then
    local jobs
    jobs=$(SLURM_CONF="$conf" timeout 5 squeue -h -o %i 2>/dev/null || true)
    if [ -n "$jobs" ]; then
      # shellcheck disable=SC2086
      SLURM_CONF="$conf" timeout 5 scancel $jobs 2>/dev/null || true
      for i in $(seq 30); do [ -z "$(our_stepds)" ] && break; sleep 0.2; done
    fi
  fi
  # Throw-away state: no need for an orderly shutdown (SIGTERM takes ~2 s each).
  for f in "$dir"/run/*.pid; do
    [ -e "$f" ] || continue
    p=$(live_pid "$f"); [ -n "$p" ] && pids="$pids $p"
  done
  # shellcheck disable=SC2086
  [ -n "$pids" ] && kill -KILL $pids 2>/dev/null || true
  # Steps left over: kill their tasks (each in its own process group), then them.
  for p in $(our_stepds); do
    for i in $(children "$p"); do kill -KILL -- "-$i" "$i" 2>/dev/null || true; done
    kill -KILL "$p" 2>/dev/null || true
  done
  for p in $pids; do  # gone, or a zombie waiting for init to reap it
    for i in $(seq 50); do
      [ "$(cut -d' ' -f3 "/proc/$p/stat" 2>/dev/null || echo Z)" = Z ] && break; sleep 0.1
    done
  done
  rm -rf "$dir/state" "$dir/spool" "$dir/tmp" "$dir/run"
}

show_logs() {
  local f
  for f in "$dir"/log/*.log; do
    [ -e "$f" ] || continue
    echo "----- $f (last 30 lines)" >&2
    tail -n 30 "$f" >&2
  done
}

port_busy() {  # something accepts connections on 127.0.0.1:$1
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

write_conf() {
  local host i
  host=$(uname -n); host=${host%%.*}
  cat >"$conf" <<EOF
# Written by tests/resilience/slurm_local.sh; a private one-machine cluster.
ClusterName=htlocal
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
SchedulerType=sched/backfill
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
# Per-node TmpFS: the mpi/pmix plugin makes <TmpFS>/spmix_appdir_<job>.<step>
# on every node; with one shared /tmp the 2nd node's step fails ("File exists").
TmpFS=$dir/tmp/%n
# Gives each task a per-node Open MPI shared-memory dir (see write_task_prolog).
TaskProlog=$dir/task_prolog.sh
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=10
InactiveLimit=0
MinJobAge=30
KillWait=5
Waittime=0
EOF
  for i in $(seq 0 "$last"); do
    echo "NodeName=n$i NodeHostname=$host NodeAddr=127.0.0.1 Port=$((port + 1 + i)) CPUs=$cpus RealMemory=1000 State=UNKNOWN" >>"$conf"
  done
  echo "PartitionName=local Nodes=n[0-$last] Default=YES MaxTime=INFINITE State=UP" >>"$conf"
}

# All "nodes" share one hostname, and Open MPI 4.1 keys node-local files by
# hostname: vader (shared memory) segments <backing dir>/vader_segment.<hostname>
# .<jobid>.<local rank>, session dirs <TMPDIR>/ompi.<hostname>.<uid>/... So local
# rank 0 on n0 and on n1 would share files and crash (SIGSEGV in
# mca_btl_vader_poll_handle_frag). The task prolog gives every task of a job
# step a per-node TMPDIR and vader backing dir, <dir>/tmp/<node>, as separate
# machines would have. Lines "export X=Y" it prints go into the task's env.
write_task_prolog() {
  cat >"$dir/task_prolog.sh" <<EOF
#!/bin/sh
# Not for the batch script itself (no SLURM_STEP_ID): what it exported would
# reach every node through srun/mpirun.
[ -n "\${SLURM_STEP_ID:-}" ] && [ -n "\${SLURMD_NODENAME:-}" ] || exit 0
echo "export TMPDIR=$dir/tmp/\$SLURMD_NODENAME"
case "\${OMPI_MCA_btl_vader_backing_directory:-}" in
  ""|"$dir/tmp/"*) echo "export OMPI_MCA_btl_vader_backing_directory=$dir/tmp/\$SLURMD_NODENAME" ;;
esac
EOF
  chmod +x "$dir/task_prolog.sh"
}

start() {
  command -v slurmctld >/dev/null || die "slurmctld not found; run scripts/setup.sh (needs slurm-wlm)"
  [ "$(id -u)" -eq 0 ] || die "must run as root (SlurmUser=root)"
  stop
  local p i t0 elapsed
  for p in $(seq "$port" $((port + nodes))); do
    port_busy "$p" && die "port $p is in use; set SLURM_LOCAL_PORT to another base"
  done
  mkdir -p "$dir/state" "$dir/run" "$dir/log"
  for i in $(seq 0 "$last"); do mkdir -p "$dir/spool/n$i" "$dir/tmp/n$i"; done
  rm -f "$dir"/log/*.log
  write_conf
  write_task_prolog
  t0=$(date +%s%N)
  # From here on any way out but success (a daemon that fails, nodes that do
  # not come up, an interrupt) stops what was started.
  trap 'stop' EXIT
  trap 'exit 130' INT TERM
  # -i: ignore/clear any saved state. Daemons fork into the background and write pid files.
  slurmctld -f "$conf" -i || { show_logs; die "slurmctld failed to start"; }
  for i in $(seq 0 "$last"); do
    slurmd -f "$conf" -N "n$i" || { show_logs; die "slurmd n$i failed to start"; }
  done
  export SLURM_CONF="$conf"
  local deadline=$(( $(date +%s) + timeout )) idle=0
  while [ "$(date +%s)" -lt "$deadline" ]; do
    idle=$(sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | grep -c . || true)
    [ "$idle" -ge "$nodes" ] && break
    sleep 0.2
  done
  if [ "$idle" -lt "$nodes" ]; then
    sinfo -N -l >&2 || true
    show_logs
    die "only $idle of $nodes nodes idle after ${timeout}s (logs above)"
  fi
  elapsed=$(( ($(date +%s%N) - t0) / 1000000 ))
  log "$nodes nodes idle after ${elapsed} ms (conf $conf)"
  printf 'export SLURM_CONF=%q\n' "$conf" | tee "$dir/env"
  trap - EXIT INT TERM
}

case "$cmd" in
  start) start ;;
  stop) stop; log "stopped ($dir)" ;;
  status)
    pid=$(cat "$dir/run/slurmctld.pid" 2>/dev/null || true)
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || die "not running ($dir)"
    SLURM_CONF="$conf" sinfo -N ;;
  *) die "unknown command '$cmd' (start|stop|status)" ;;
esac
