#!/usr/bin/env bash
# A throw-away single-node Slurm cluster on 127.0.0.1 for the tests (Debian's slurm-wlm + munge).
#   cluster.sh start DIR   writes DIR/slurm.conf, starts munged (unless one answers), slurmctld
#                          and slurmd, waits until the node is idle; prints SLURM_CONF=...
#   cluster.sh stop DIR    stops what start started
# Must run as root (the daemons run as root here).
set -euo pipefail
cmd=$1
dir=$(realpath "$2")
host=$(hostname -s)

stop() {
    for pid in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
        [ -f "$pid" ] && kill "$(cat "$pid")" 2>/dev/null || true
    done
    sleep 1
    for pid in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
        [ -f "$pid" ] && kill -9 "$(cat "$pid")" 2>/dev/null || true
        rm -f "$pid"
    done
}

if [ "$cmd" = stop ]; then
    stop
    exit 0
fi

mkdir -p "$dir"/state "$dir"/spool
if ! (munge -n | unmunge) >/dev/null 2>&1; then
    mkdir -p /etc/munge /var/run/munge /var/lib/munge /var/log/munge
    if [ ! -s /etc/munge/munge.key ]; then
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
    chown -R munge:munge /etc/munge /var/run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
    chmod 400 /etc/munge/munge.key
    munged --force --pid-file="$dir/munged.pid" 2>/dev/null || munged --force
    for _ in $(seq 1 50); do (munge -n | unmunge) >/dev/null 2>&1 && break; sleep 0.1; done
fi
cpus=$(nproc)
mem=$(( $(free -m | awk '/^Mem:/ {print $2}') - 512 ))
cat > "$dir/slurm.conf" <<CONF
ClusterName=loaderlabtest
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=16817
SlurmdPort=16818
AuthType=auth/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for _ in $(seq 1 100); do
    if sinfo -h -o '%t' 2>/dev/null | grep -q idle; then
        echo "SLURM_CONF=$SLURM_CONF"
        exit 0
    fi
    sleep 0.2
done
echo "the Slurm node did not become idle; see $dir/slurmctld.log and $dir/slurmd.log" >&2
stop
exit 1
