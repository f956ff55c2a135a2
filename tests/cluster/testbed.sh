#!/usr/bin/env bash
# A cluster of hosts on this machine for tests: each host is a set of Linux
# namespaces of its own (network: its own address on a private bridge; UTS:
# its own hostname; mount: its own /dev/shm, /etc/hosts, ~/.ssh, ~/.bashrc; PID: its
# processes die with it) running its own sshd, so Open MPI and Slurm start
# ranks on it as on a real host. Traffic flows only between the namespaces
# made here: the bridge lives in a namespace of its own and nothing connects
# it to the machine's network.
#
# Source it, then:
#   tb_up DIR N        hosts h0..h<N-1> (h0 the head node where htrun runs);
#                      state, keys and logs under DIR; sets an EXIT trap
#                      that tears everything down, pass or fail
#   tb_exec H CMD...   runs CMD on host H (its namespaces), in the foreground
#   tb_crash H         kills every process of H at once (its memory, /dev/shm
#                      included, goes with them); tb_boot H starts it again
#   tb_cut H / tb_heal H   takes H's link down / up (a network partition)
#   tb_slow H PERCENT  limits H's processes to PERCENT of one core (a cpu cgroup)
#   tb_slow_link H RATE   limits H's link to RATE both ways (tc tbf: "1mbit")
#   tb_down            tears everything down (idempotent)
#
# Requires root, iproute2, util-linux (unshare, nsenter) and openssh-server
# (scripts/setup.sh). Addresses are 10.213.<net>.<10+i>/24 with <net> drawn
# per test bed, names are "<id>-h<i>", so test beds running at once do not
# meet. Stale test beds whose creating shell is gone are removed by tb_up.

TB_PREFIX=htc
# Open MPI's system-wide settings (Debian's path), which each host mounts its own of.
TB_MCA_PARAMS=/etc/openmpi/openmpi-mca-params.conf

tb_log() { echo "testbed: $*" >&2; }

# The init pid of host $1 (PID 1 of its namespaces, as the root namespace sees it).
tb_pid() { cat "$TB_DIR/$1/init.pid" 2>/dev/null; }

tb_exec() {
  local host=$1
  shift
  local pid
  pid=$(tb_pid "$host")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || { tb_log "host $host is down"; return 125; }
  nsenter -t "$pid" -n -u -m -p --wd=/ -- env HOME=/root "$@"
}

# Removes test beds left by shells that no longer exist (a killed test).
tb_reap_stale() {
  local ns owner
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${TB_PREFIX}[0-9]*-" || true); do
    owner=${ns#"$TB_PREFIX"}
    owner=${owner%%-*}
    if ! kill -0 "$owner" 2>/dev/null; then
      ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
      ip netns del "$ns" 2>/dev/null || true
    fi
  done
}

# Starts host $1's namespaces and its sshd (its PID 1).
tb_boot() {
  local host=$1 hd="$TB_DIR/$1"
  local ns="$TB_ID-$host"
  mkdir -p "$hd/shm"
  # Network: the host's end of its veth pair (made by tb_up) lives in $ns.
  # UTS, mount and PID: unshare inside $ns; PID 1 sets the hostname, mounts
  # a fresh tmpfs on /dev/shm and the test bed's /etc/hosts, ~/.ssh and
  # ~/.bashrc over the machine's (private mounts: nothing leaks out), then
  # becomes sshd.
  # nsenter rather than `ip netns exec`, which mounts a sysfs of its own over
  # /sys and so hides the cgroup file systems (slurmd needs them).
  nsenter --net="/run/netns/$ns" unshare --uts --mount --pid --fork --propagation private -- bash -c "
    hostname $host
    mount -t tmpfs -o size=512m tmpfs /dev/shm
    mount --bind '$TB_DIR/hosts' /etc/hosts
    mkdir -p /root/.ssh && mount --bind '$TB_DIR/ssh' /root/.ssh
    if [ -f /root/.bashrc ]; then mount --bind '$TB_DIR/bashrc' /root/.bashrc; fi
    if [ -f $TB_MCA_PARAMS ]; then mount --bind '$TB_DIR/openmpi-mca-params.conf' $TB_MCA_PARAMS; fi
    mount -t proc proc /proc
    exec /usr/sbin/sshd -D -e -f '$TB_DIR/sshd_config' -o ListenAddress=$(tb_addr "$host") -o PidFile=none
  " > "$hd/sshd.log" 2>&1 &
  local outer=$! pid="" i
  disown "$outer"  # its death (tb_crash) is no news for the shell
  # The init's pid as the root namespace sees it: the child of unshare.
  for i in $(seq 50); do
    pid=$(pgrep -P "$outer" -f sshd 2>/dev/null | head -1 || true)
    [ -z "$pid" ] && pid=$(pgrep -P "$(pgrep -P "$outer" | head -1)" 2>/dev/null | head -1 || true)
    [ -n "$pid" ] && grep -q sshd "/proc/$pid/cmdline" 2>/dev/null && break
    pid=""
    sleep 0.1
  done
  [ -n "$pid" ] || { cat "$hd/sshd.log" >&2; tb_log "host $host did not start"; return 1; }
  echo "$pid" > "$hd/init.pid"
  # Up to 15 s: sshd's start (its keys read) took over 5 s once while the
  # suite ran an MPI test beside the test bed on 2 cores.
  for i in $(seq 150); do
    tb_exec "$host" true 2>/dev/null && ssh_ok "$host" && return 0
    sleep 0.1
  done
  cat "$hd/sshd.log" >&2
  tb_log "host $host: sshd does not answer"
  return 1
}

# Whether host $1's sshd answers from the head node... or from the root namespace: by its socket.
ssh_ok() { tb_exec "$1" bash -c "exec 3<>/dev/tcp/$(tb_addr "$1")/22" 2>/dev/null; }

tb_addr() { echo "10.213.$TB_NET.$((10 + ${1#h}))"; }

tb_up() {
  TB_DIR=$(mkdir -p "$1" && cd "$1" && pwd)
  local n=$2 i host
  [ "$(id -u)" = 0 ] || { tb_log "needs root"; return 1; }
  command -v sshd > /dev/null || [ -x /usr/sbin/sshd ] || { tb_log "sshd missing: run scripts/setup.sh"; return 1; }
  tb_reap_stale
  TB_ID="$TB_PREFIX$$"
  TB_NET=$(( ($$ % 200) + 20 ))
  TB_HOSTS=()
  trap tb_down EXIT
  mkdir -p "$TB_DIR/ssh" /run/sshd
  # Keys: a host key for every sshd, and a client key root uses everywhere.
  [ -f "$TB_DIR/host_key" ] || ssh-keygen -q -t ed25519 -N "" -f "$TB_DIR/host_key"
  [ -f "$TB_DIR/ssh/id_ed25519" ] || ssh-keygen -q -t ed25519 -N "" -f "$TB_DIR/ssh/id_ed25519"
  cp "$TB_DIR/ssh/id_ed25519.pub" "$TB_DIR/ssh/authorized_keys"
  cat > "$TB_DIR/ssh/config" <<CFG
Host *
  IdentityFile /root/.ssh/id_ed25519
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  LogLevel ERROR
  ConnectTimeout 3
  ServerAliveInterval 2
  ServerAliveCountMax 2
CFG
  chmod 700 "$TB_DIR/ssh"
  # The hosts' ~/.bashrc: bash runs it for every ssh command, and this
  # machine's (a pyenv set-up, say) is not theirs (measured: 0.5 s a command).
  echo "# ~/.bashrc of a test bed host: empty" > "$TB_DIR/bashrc"
  # The hosts' Open MPI settings: this machine's, and the PML an admin of a
  # cluster on TCP alone sets. Without it every MPI process start probes
  # the PSM and OFI fabrics Debian's Open MPI carries (measured: 0.2 s of
  # each launch, so of each recovery).
  { cat "$TB_MCA_PARAMS" 2> /dev/null || true
    echo "# test bed hosts: Ethernet only"
    echo "pml = ob1"; } > "$TB_DIR/openmpi-mca-params.conf"
  chmod 600 "$TB_DIR/ssh/"*
  cat > "$TB_DIR/sshd_config" <<CFG
HostKey $TB_DIR/host_key
AuthorizedKeysFile /root/.ssh/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
AcceptEnv HT_* OMP_* OPENBLAS_* OMPI_* PMIX_*
PermitUserEnvironment no
MaxStartups 100:30:200
CFG
  : > "$TB_DIR/hosts"
  echo "127.0.0.1 localhost" >> "$TB_DIR/hosts"
  for i in $(seq 0 $((n - 1))); do echo "$(tb_addr "h$i") h$i" >> "$TB_DIR/hosts"; done
  # The switch: a bridge in a namespace of its own.
  ip netns add "$TB_ID-sw"
  ip -n "$TB_ID-sw" link add br0 type bridge
  ip -n "$TB_ID-sw" link set br0 up
  for i in $(seq 0 $((n - 1))); do
    host=h$i
    TB_HOSTS+=("$host")
    mkdir -p "$TB_DIR/$host"
    ip netns add "$TB_ID-$host"
    ip link add "${TB_ID}h$i" type veth peer name "${TB_ID}p$i"
    ip link set "${TB_ID}h$i" netns "$TB_ID-$host"
    ip link set "${TB_ID}p$i" netns "$TB_ID-sw"
    ip -n "$TB_ID-sw" link set "${TB_ID}p$i" master br0
    ip -n "$TB_ID-sw" link set "${TB_ID}p$i" up
    ip -n "$TB_ID-$host" link set lo up
    ip -n "$TB_ID-$host" link set "${TB_ID}h$i" name eth0
    ip -n "$TB_ID-$host" addr add "$(tb_addr "$host")/24" dev eth0
    ip -n "$TB_ID-$host" link set eth0 up
    tb_boot "$host" || return 1
  done
  tb_log "up: ${TB_HOSTS[*]} in $TB_DIR (namespaces $TB_ID-*)"
}

tb_crash() {
  local pid
  pid=$(tb_pid "$1")
  [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
  rm -f "$TB_DIR/$1/init.pid"
  # PID 1 gone: the kernel kills every process of the namespace; wait for it.
  local i
  for i in $(seq 50); do
    [ -z "$(ip netns pids "$TB_ID-$1" 2>/dev/null)" ] && return 0
    sleep 0.1
  done
  ip netns pids "$TB_ID-$1" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
}

tb_cut() { ip -n "$TB_ID-sw" link set "${TB_ID}p${1#h}" down; }
tb_heal() { ip -n "$TB_ID-sw" link set "${TB_ID}p${1#h}" up; }

tb_slow() {
  # cgroup v2 (cpu.max) or v1 (the cpu controller's CFS quota); the host's
  # PID 1 joins, and every process it starts later inherits the group.
  local pct=$2 pid cg
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    cg=/sys/fs/cgroup/$TB_ID-$1
    mkdir -p "$cg" && echo "$((pct * 1000)) 100000" > "$cg/cpu.max" || return 1
  elif [ -d /sys/fs/cgroup/cpu ]; then
    cg=/sys/fs/cgroup/cpu/$TB_ID-$1
    mkdir -p "$cg" && echo 100000 > "$cg/cpu.cfs_period_us" && echo "$((pct * 1000))" > "$cg/cpu.cfs_quota_us" || return 1
  else
    tb_log "no cpu cgroup controller here: cannot slow $1"
    return 1
  fi
  for pid in $(ip netns pids "$TB_ID-$1"); do echo "$pid" > "$cg/cgroup.procs" 2>/dev/null || true; done
}

tb_slow_link() {
  # Both ways: the host's own end (what it sends) and the switch's end of
  # its cable (what it receives).
  local tbf=(tbf rate "$2" burst 32kbit latency 400ms)
  ip netns exec "$TB_ID-$1" tc qdisc replace dev eth0 root "${tbf[@]}" &&
    ip netns exec "$TB_ID-sw" tc qdisc replace dev "${TB_ID}p${1#h}" root "${tbf[@]}"
}

tb_down() {
  [ -n "${TB_ID:-}" ] || return 0
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$TB_ID-" || true); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
  done
  sleep 0.2
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$TB_ID-" || true); do
    ip netns del "$ns" 2>/dev/null || true
  done
  local cg
  for cg in /sys/fs/cgroup/"$TB_ID"-* /sys/fs/cgroup/cpu/"$TB_ID"-*; do [ -d "$cg" ] && rmdir "$cg" 2>/dev/null; done
  TB_ID=""
}
