#!/usr/bin/env bash
# A Slurm cluster over the test bed's hosts (source testbed.sh first, then
# this): slurmctld on h0, one slurmd on each other host, in that host's
# namespaces (so a host's crash takes its slurmd with it, and a cut link
# cuts it off from the controller). Authentication is auth/none (Slurm
# 22.05), so no munge daemon is needed; everything lives under
# $TB_DIR/slurm.
#
#   tb_slurm_up        writes the configuration, starts the daemons, waits
#                      until every compute host is idle; exports SLURM_CONF
#   tb_slurm_boot H    starts H's slurmd again (after tb_boot H)
#   tb_sinfo           each host's state, "h1 idle" lines
# The daemons die with the test bed (tb_down kills every process of every
# host's namespaces).

tb_slurm_up() {
  local sd="$TB_DIR/slurm" i host nodes=() last=$((${#TB_HOSTS[@]} - 1))
  mkdir -p "$sd/state" "$sd/log" "$sd/run"
  export SLURM_CONF="$sd/slurm.conf"
  for i in $(seq 1 "$last"); do nodes+=("h$i"); done
  cat > "$SLURM_CONF" <<CONF
ClusterName=httestbed
SlurmctldHost=h0($(tb_addr h0))
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
StateSaveLocation=$sd/state
SlurmdSpoolDir=$sd/spool/%n
TmpFS=$sd/tmp/%n
SlurmctldPidFile=$sd/run/slurmctld.pid
SlurmdPidFile=$sd/run/slurmd-%n.pid
SlurmctldLogFile=$sd/log/slurmctld.log
SlurmdLogFile=$sd/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmctldTimeout=10
SlurmdTimeout=5
MessageTimeout=3
InactiveLimit=0
MinJobAge=10
KillWait=2
Waittime=0
CONF
  for host in "${nodes[@]}"; do
    mkdir -p "$sd/spool/$host" "$sd/tmp/$host"
    echo "NodeName=$host NodeAddr=$(tb_addr "$host") CPUs=2 RealMemory=1000 State=UNKNOWN" >> "$SLURM_CONF"
  done
  echo "PartitionName=tb Nodes=$(IFS=,; echo "${nodes[*]}") Default=YES MaxTime=INFINITE State=UP" >> "$SLURM_CONF"
  tb_exec h0 env SLURM_CONF="$SLURM_CONF" slurmctld -D -c -i > "$sd/log/slurmctld.out" 2>&1 &
  disown $!
  for host in "${nodes[@]}"; do tb_slurm_boot "$host"; done
  for i in $(seq 100); do
    [ "$(tb_sinfo | grep -c ' idle$')" = "${#nodes[@]}" ] && { tb_log "slurm up: ${nodes[*]} idle"; return 0; }
    sleep 0.2
  done
  tb_sinfo >&2
  tail -20 "$sd/log/slurmctld.log" >&2
  tb_log "slurm did not come up"
  return 1
}

tb_slurm_boot() {
  tb_exec "$1" env SLURM_CONF="$SLURM_CONF" slurmd -D -N "$1" > "$TB_DIR/slurm/log/slurmd-$1.out" 2>&1 &
  disown $!
}

tb_sinfo() { tb_exec h0 env SLURM_CONF="$SLURM_CONF" sinfo -h -N -o "%N %t" 2>/dev/null; }
