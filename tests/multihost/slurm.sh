#!/usr/bin/env bash
# A real Slurm (Debian 12's 22.05: slurmctld, slurmd, munge) on the fake hosts of hosts.sh, for
# libpm's Slurm tests. shared/MULTIHOST.md ("Slurm") has the facts this follows.
#
#   slurm.sh up --state DIR [--cpus N] [--timeout SEC]   start munged, slurmctld (on node1) and a
#                                                         slurmd per host of the hosts.sh run in DIR
#   slurm.sh down --state DIR       stop what up started (by recorded pid), remove DIR/slurm
#   slurm.sh exec --state DIR HOST -- CMD...   run CMD on HOST with SLURM_CONF set (salloc, sbatch)
#   slurm.sh probe                  exit 0 if Slurm's daemons are installed here, else say why
#
# Everything of a run lives in DIR/slurm: slurm.conf, the munge key and socket, spool and state
# dirs, logs, and `pids` (pid and start time of each daemon this script started). One munged serves
# every host (a pathname Unix socket is reachable from every network namespace); it and slurmctld
# run in node1's network namespace (slurmctld in its UTS namespace too), each slurmd in its host's.
# So every daemon dies with the hosts (hosts.sh down or reap-stale), even when the test process
# died first; `down` here kills only the pids it recorded.
set -euo pipefail
PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly HERE HOSTS_SH=$HERE/hosts.sh

say() { echo "slurm.sh: $*" >&2; }
die() {
  say "$*"
  exit 1
}

declare -A E
load_env() {
  E=()
  local line
  while IFS= read -r line; do
    if [[ $line =~ ^([A-Z][A-Z0-9_]*)=\"([^\"]*)\"$ ]]; then
      E[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
    fi
  done <"$1"
}

proc_start() {
  local stat
  { read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
  stat=${stat##*) }
  # shellcheck disable=SC2086
  set -- $stat
  [ "$1" != Z ] || return 1
  echo "${20}"
}

record() { # record NAME PID
  local start
  start=$(proc_start "$2") || start=gone
  echo "$1 $2 $start" >>"$SD/pids"
}

kill_recorded() {
  [ -f "$SD/pids" ] || return 0
  local name pid start now
  while read -r name pid start; do
    now=$(proc_start "$pid") || continue
    [ "$now" = "$start" ] || continue
    kill -KILL "$pid" 2>/dev/null || true
  done <"$SD/pids"
  # Wait until they are gone (munged holds its socket until then).
  local deadline=$((SECONDS + 5))
  while read -r name pid start; do
    while now=$(proc_start "$pid") && [ "$now" = "$start" ] && [ "$SECONDS" -lt "$deadline" ]; do
      sleep 0.02
    done
  done <"$SD/pids"
}

parse() {
  STATE="" HOST="" CPUS=4 TIMEOUT=20 REST=()
  while [ $# -gt 0 ]; do
    case $1 in
    --state) STATE=${2:?} && shift ;;
    --cpus) CPUS=${2:?} && shift ;;
    --timeout) TIMEOUT=${2:?} && shift ;;
    --) shift && REST=("$@") && break ;;
    -*) die "unknown option '$1'" ;;
    *)
      [ -z "$HOST" ] || die "unexpected argument '$1'"
      HOST=$1
      ;;
    esac
    shift
  done
  [ -n "$STATE" ] || die "--state DIR is required"
  STATE=$(realpath -m -- "$STATE")
  SD=$STATE/slurm
}

write_conf() {
  local k
  {
    echo "# libpm Slurm fixture, run ${E[PM_MH_RUN_ID]}"
    echo "ClusterName=pmt${E[PM_MH_RUN_ID]}"
    echo "SlurmctldHost=node1(${E[PM_MH_HOST1_IP]})"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "AuthInfo=socket=$SD/munge/munge.socket"
    echo "CredType=cred/munge"
    echo "StateSaveLocation=$SD/ctld"
    echo "SlurmdSpoolDir=$SD/spool/%n"
    echo "SlurmctldPidFile=$SD/slurmctld.pid"
    echo "SlurmdPidFile=$SD/spool/slurmd.%n.pid"
    echo "SlurmctldLogFile=$SD/slurmctld.log"
    echo "SlurmdLogFile=$SD/slurmd.%n.log"
    echo "TmpFS=$SD/tmp/%n"
    echo "PlugStackConfig=$SD/plugstack.conf"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "JobCompType=jobcomp/none"
    echo "SlurmdParameters=config_overrides"
    echo "SchedulerType=sched/builtin"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "MpiDefault=none"
    echo "ReturnToService=2"
    echo "SlurmdTimeout=30"
    echo "InactiveLimit=0"
    echo "KillWait=2"
    echo "MinJobAge=10"
    echo "MessageTimeout=5"
    for ((k = 1; k <= E[PM_MH_N]; k++)); do
      echo "NodeName=${E[PM_MH_HOST${k}_NAME]} NodeAddr=${E[PM_MH_HOST${k}_IP]} CPUs=$CPUS State=UNKNOWN"
    done
    echo "PartitionName=pmt Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
  } >"$SD/slurm.conf"
  : >"$SD/plugstack.conf"
}

on_up_exit() {
  local rc=$?
  [ "$rc" != 0 ] || return 0
  say "up failed; stopping what it started (logs in $SD)"
  kill_recorded || true
  exit "$rc"
}

cmd_up() {
  parse "$@"
  [ -f "$STATE/hosts.env" ] || die "no hosts.sh run in $STATE (no hosts.env)"
  load_env "$STATE/hosts.env"
  [ ! -e "$SD" ] || die "$SD exists already (slurm.sh down first)"
  cmd_probe
  trap on_up_exit EXIT
  local n=${E[PM_MH_N]} k
  # munged checks that the socket's directory is reachable; the state dir is mkdtemp's 0700.
  chmod 755 "$STATE"
  mkdir -p "$SD/munge" "$SD/ctld"
  chmod 755 "$SD" "$SD/munge"
  for ((k = 1; k <= n; k++)); do mkdir -p "$SD/spool/${E[PM_MH_HOST${k}_NAME]}" "$SD/tmp/${E[PM_MH_HOST${k}_NAME]}"; done
  (umask 077 && head -c 1024 /dev/urandom >"$SD/munge/munge.key")
  write_conf
  export SLURM_CONF=$SD/slurm.conf

  # In node1's network namespace: its socket is a pathname one, reachable from every namespace,
  # and hosts.sh's teardown (also reap-stale, after a test process that died) kills it there.
  setsid nsenter --net="/run/netns/${E[PM_MH_HOST1_NETNS]}" \
    munged -F --force --socket="$SD/munge/munge.socket" --key-file="$SD/munge/munge.key" \
    --pid-file="$SD/munge/munged.pid" --log-file="$SD/munge/munged.log" \
    --seed-file="$SD/munge/munged.seed" </dev/null >"$SD/munge/start.log" 2>&1 &
  record munged $!
  disown $!
  local deadline=$((SECONDS + TIMEOUT))
  until [ -S "$SD/munge/munge.socket" ]; do
    [ "$SECONDS" -lt "$deadline" ] || die "munged did not start: $(tail -n 3 "$SD/munge/munged.log" "$SD/munge/start.log" 2>/dev/null | tr '\n' ' ')"
    sleep 0.02
  done

  # shellcheck disable=SC2016
  setsid ip netns exec "${E[PM_MH_HOST1_NETNS]}" unshare --uts \
    sh -c 'hostname "$1" && exec slurmctld -D -i -f "$2"' sh node1 "$SLURM_CONF" \
    </dev/null >"$SD/slurmctld.start.log" 2>&1 &
  record slurmctld $!
  disown $!
  for ((k = 1; k <= n; k++)); do
    local name=${E[PM_MH_HOST${k}_NAME]}
    # nsenter, not `ip netns exec`: that one mounts a fresh /sys without the cgroup hierarchies,
    # and slurmd's cgroup plugin refuses to start there (proctrack/linuxproc never uses them).
    # shellcheck disable=SC2016
    setsid nsenter --net="/run/netns/${E[PM_MH_HOST${k}_NETNS]}" unshare --uts \
      sh -c 'hostname "$1" && exec slurmd -D -f "$2" -N "$1"' sh "$name" "$SLURM_CONF" \
      </dev/null >"$SD/slurmd.$name.start.log" 2>&1 &
    record "slurmd-$name" $!
    disown $!
  done

  # Up when every node is idle (sinfo from node1, as a client on the cluster's network).
  local states=""
  while :; do
    states=$(ip netns exec "${E[PM_MH_HOST1_NETNS]}" sinfo -h -N -o '%N %T' 2>/dev/null | sort -u | tr '\n' ' ') || true
    if [ -n "$states" ] && [ "$(echo "$states" | grep -o idle | wc -l)" = "$n" ]; then break; fi
    local name pid start
    while read -r name pid start; do
      [ "$(proc_start "$pid" || echo gone)" = "$start" ] ||
        die "$name exited at start: $(tail -n 3 "$SD/$name.log" "$SD/slurmd.${name#slurmd-}.log" "$SD"/*.start.log 2>/dev/null | tr '\n' ' ')"
    done <"$SD/pids"
    [ "$SECONDS" -lt "$deadline" ] || die "the nodes are not idle after ${TIMEOUT} s (sinfo: ${states:-nothing}); see $SD/*.log"
    sleep 0.05
  done
  {
    echo "# libpm Slurm fixture: SLURM_CONF for every client (salloc, srun, sbatch, scancel)"
    echo "PM_SLURM_CONF=\"$SLURM_CONF\""
    echo "PM_SLURM_DIR=\"$SD\""
  } >"$SD/slurm.env"
  trap - EXIT
  echo "$SD/slurm.env"
}

cmd_down() {
  parse "$@"
  [ -d "$SD" ] || return 0
  kill_recorded
  rm -rf "$SD"
}

cmd_exec() {
  parse "$@"
  [ -f "$SD/slurm.conf" ] || die "no Slurm run in $STATE"
  [ -n "$HOST" ] || die "exec: which host?"
  [ ${#REST[@]} -gt 0 ] || die "exec: nothing to run"
  export SLURM_CONF=$SD/slurm.conf
  exec "$HOSTS_SH" exec --state "$STATE" "$HOST" -- "${REST[@]}"
}

cmd_probe() {
  local tool
  for tool in munged slurmctld slurmd srun salloc sbatch scancel sinfo; do
    command -v "$tool" >/dev/null || die "$tool is missing (install slurmctld, slurmd, slurm-client, munge)"
  done
}

case ${1:-} in
up) shift && cmd_up "$@" ;;
down) shift && cmd_down "$@" ;;
exec) shift && cmd_exec "$@" ;;
probe) shift && cmd_probe ;;
*)
  sed -n 's/^#   \( *slurm.sh\| \)/  \1/p' "${BASH_SOURCE[0]}" >&2
  exit 2
  ;;
esac
