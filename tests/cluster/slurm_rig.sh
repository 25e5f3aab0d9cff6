#!/usr/bin/env bash
# A real SLURM cluster on one machine, for tests/cluster: two compute nodes, each a
# network namespace with its own address on a private bridge, each running its own
# slurmd; slurmctld and munged run in the root namespace. Needs root.
#
#   slurm_rig.sh install      apt-get install slurm-wlm and munge (if missing)
#   slurm_rig.sh up DIR PID   write the config under DIR, make the network, start daemons,
#                             wait until both nodes are idle; PID is the test run that owns
#                             the rig (a rig left up by a run that died first is taken down;
#                             one whose run is alive is not touched: exit 3, busy)
#   slurm_rig.sh down DIR     stop the daemons and remove the network (idempotent)
#
# Node names (drn1, drn2) resolve only inside the nodes: each slurmd runs in a private
# mount namespace where DIR/hosts is bind-mounted over /etc/hosts, and jobs inherit it.
set -euo pipefail

SUBNET=10.215.77
BRIDGE=drbr0
NODES=(drn1 drn2)
CTL_PORT=16817
NODE_PORT=16818
OWNER_FILE=/tmp/distrun-slurm-rig.owner  # "DIR PID" of the rig that is up

install() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
        && command -v munged >/dev/null && command -v sbatch >/dev/null; then
        return 0
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
}

down() {
    local dir=$1
    for pidfile in "$dir"/run/*.pid; do
        [ -f "$pidfile" ] || continue
        kill "$(cat "$pidfile")" 2>/dev/null || true
    done
    sleep 0.5
    for pidfile in "$dir"/run/*.pid; do
        [ -f "$pidfile" ] || continue
        kill -9 "$(cat "$pidfile")" 2>/dev/null || true
        rm -f "$pidfile"
    done
    for i in "${!NODES[@]}"; do
        local ns=${NODES[$i]}
        # anything still running in a node (a job step) goes with it
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
        ip netns del "$ns" 2>/dev/null || true
        ip link del "${ns}h" 2>/dev/null || true
    done
    ip link del "$BRIDGE" 2>/dev/null || true
    if [ -f "$OWNER_FILE" ] && [ "$(cut -d' ' -f1 "$OWNER_FILE")" = "$dir" ]; then
        rm -f "$OWNER_FILE"
    fi
}

claim() {
    # One rig at a time on a machine (fixed names, addresses and ports). A rig whose test
    # run was killed before its `down` (pytest runs no teardown on SIGTERM) is taken down.
    local dir=$1 owner=$2 old_dir="" old_pid=""
    if [ -f "$OWNER_FILE" ]; then
        read -r old_dir old_pid <"$OWNER_FILE" || true
        if [ -n "$old_pid" ] && [ "$old_pid" != "$owner" ] && kill -0 "$old_pid" 2>/dev/null; then
            echo "slurm_rig: busy: test run $old_pid has the rig up in $old_dir" >&2
            return 3
        fi
        if [ -n "$old_dir" ]; then down "$old_dir"; fi
    fi
}

network() {
    ip link add "$BRIDGE" type bridge
    ip addr add "$SUBNET.254/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    for i in "${!NODES[@]}"; do
        local ns=${NODES[$i]} addr="$SUBNET.$((i + 1))"
        ip netns add "$ns"
        ip link add "${ns}h" type veth peer name "${ns}n"
        ip link set "${ns}h" master "$BRIDGE" up
        ip link set "${ns}n" netns "$ns"
        ip -n "$ns" addr add "$addr/24" dev "${ns}n"
        ip -n "$ns" link set "${ns}n" up
        ip -n "$ns" link set lo up
    done
}

config() {
    local dir=$1 host
    host=$(hostname -s)
    mkdir -p "$dir"/{state,log,run,munge} "$dir"/spool/{drn1,drn2}
    chmod 755 "$dir/munge"
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
    chmod 600 "$dir/munge/munge.key"
    {
        cat /etc/hosts
        for i in "${!NODES[@]}"; do echo "$SUBNET.$((i + 1)) ${NODES[$i]}"; done
        echo "$SUBNET.254 drctl"
    } >"$dir/hosts"
    local cpus
    # the machine's cores: nproc alone honours OMP_NUM_THREADS (1 in the test processes)
    cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
    cat >"$dir/slurm.conf" <<EOF
ClusterName=distrun-test
SlurmctldHost=$host($SUBNET.254)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$CTL_PORT
SlurmdPort=$NODE_PORT
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=300
NodeName=drn1 NodeAddr=$SUBNET.1 CPUs=$cpus State=UNKNOWN
NodeName=drn2 NodeAddr=$SUBNET.2 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=drn1,drn2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
}

up() {
    local dir=$1
    claim "$dir" "$2" || return
    down "$dir"
    echo "$dir $2" >"$OWNER_FILE"
    config "$dir"
    network
    munged --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
        --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" \
        --seed-file="$dir/munge/munge.seed"
    export SLURM_CONF=$dir/slurm.conf
    slurmctld -f "$dir/slurm.conf"
    for ns in "${NODES[@]}"; do
        # nsenter, not `ip netns exec`: that one remounts /sys, hiding the cgroup
        # file systems slurmd needs.
        nsenter --net="/run/netns/$ns" unshare --mount --propagation private sh -c \
            "mount --bind '$dir/hosts' /etc/hosts && exec slurmd -f '$dir/slurm.conf' -N $ns"
    done
    for _ in $(seq 1 60); do
        if [ "$(sinfo -h -N -o '%T' 2>/dev/null | grep -c '^idle')" = "${#NODES[@]}" ]; then
            return 0
        fi
        sleep 0.5
    done
    echo "slurm_rig: the nodes did not become idle:" >&2
    sinfo -N >&2 || true
    tail -n 20 "$dir"/log/*.log >&2 || true
    return 1
}

case "${1:-}" in
    install) install ;;
    up) up "$2" "$3" ;;
    down) down "$2" ;;
    *) echo "usage: $0 install | up DIR PID | down DIR" >&2; exit 2 ;;
esac
