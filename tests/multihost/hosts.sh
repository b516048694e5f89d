#!/usr/bin/env bash
# Fake hosts on this machine for libpm's multi-host tests: a network namespace, a UTS hostname and
# an sshd per host, all on a bridge of their own. See README.md next to this file.
#
#   hosts.sh up --hosts N --state DIR [--noise K] [--maxstartups SPEC] [--sshd-option LINE]...
#                [--host-sshd-option K LINE]... [--topology K XML]... [--timeout SEC] [--owner PID]
#                [--keep]
#   hosts.sh down --state DIR [--keep]         tear a run down (idempotent, tolerates half-made runs)
#   hosts.sh reap-stale                        tear down every run whose owner process is dead
#   hosts.sh crash --state DIR HOST            SIGKILL every process in HOST's namespace, sshd too
#   hosts.sh partition --state DIR HOST        cut HOST off the bridge (frames silently dropped)
#   hosts.sh heal --state DIR HOST             undo partition
#   hosts.sh pids --state DIR HOST             pids in HOST's namespace except its sshd, one a line
#   hosts.sh exec --state DIR HOST -- CMD...   run CMD as if on HOST (its network and hostname)
#   hosts.sh probe                             exit 0 if this machine can host a run, else say why
set -euo pipefail
PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH # ip and sshd live in sbin, which a test's PATH may lack

readonly SSHD=/usr/sbin/sshd
# Per-run records (owner, state dir, sshd pids) outside the state dir, so that a run whose state
# dir is gone can still be found and torn down. /run is empty after a reboot, as are namespaces.
readonly REGISTRY=/run/pmt-fixture
readonly LOCK=$REGISTRY/lock
readonly FIRST_HOST_OCTET=10 # nodeK is .(10+K); the main namespace is .1
readonly MAX_HOSTS=200

say() { echo "hosts.sh: $*" >&2; }
die() {
  say "$*"
  exit 1
}

# Object names; every one carries the prefix "pmt" and the run id, so reap-stale finds them.
netns_name() { echo "pmt-$1-n$2"; }
veth_name() { echo "pmt$1v$2"; } # main-namespace end; the host's end is eth0 in its namespace
bridge_name() { echo "pmtb$1"; }
registry_file() { echo "$REGISTRY/$1.env"; }

# --- processes ---------------------------------------------------------------------------------

# Start time of a live (non-zombie) process, to tell it from a later process with the same pid.
proc_start() {
  local stat
  { read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
  stat=${stat##*) }
  # shellcheck disable=SC2086
  set -- $stat
  [ "$1" != Z ] || return 1
  echo "${20}"
}

# alive PID START: the process that was recorded is still running.
alive() {
  [ -n "${1:-}" ] && [ -n "${2:-}" ] || return 1
  local now
  now=$(proc_start "$1") || return 1
  [ "$now" = "$2" ]
}

# SIGKILL every process in a namespace until none is left (a dying shell may still fork).
kill_netns_processes() {
  local ns=$1 deadline=$((SECONDS + 10)) pids
  while pids=$(ip netns pids "$ns" 2>/dev/null) && [ -n "$pids" ]; do
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    [ "$SECONDS" -lt "$deadline" ] || die "processes in namespace $ns survive SIGKILL: $pids"
    sleep 0.01
  done
}

# --- files -------------------------------------------------------------------------------------

# Reads KEY="value" lines into the associative array E (no eval: the files are data).
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

# Serializes what concurrent runs share: the choice of run id and subnet, and /etc/netns.
# Re-entrant, since a failure under the lock runs the teardown, which takes it too.
LOCK_HELD=0
with_lock() {
  if [ "$LOCK_HELD" = 1 ]; then
    "$@"
    return
  fi
  mkdir -p "$REGISTRY"
  {
    flock 9
    LOCK_HELD=1
    "$@"
    LOCK_HELD=0
  } 9>"$LOCK"
}

# --- addresses ---------------------------------------------------------------------------------

ip2int() {
  local IFS=.
  # shellcheck disable=SC2086
  set -- $1
  echo $((($1 << 24) | ($2 << 16) | ($3 << 8) | $4))
}

# overlaps A/LEN B/LEN: the two prefixes share an address.
overlaps() {
  local a=${1%/*} al=${1#*/} b=${2%/*} bl=${2#*/}
  [[ $1 == */* ]] || al=32
  [[ $2 == */* ]] || bl=32
  local len=$((al < bl ? al : bl))
  local mask=$(((0xffffffff << (32 - len)) & 0xffffffff))
  ((($(ip2int "$a") & mask) == ($(ip2int "$b") & mask)))
}

# Every IPv4 prefix this machine routes or owns, and every subnet another run has reserved.
prefixes_in_use() {
  local line f
  ip -4 -o addr show | awk '{print $4}'
  ip -4 route show table all | while read -r line; do
    # shellcheck disable=SC2086
    set -- $line
    case ${1:-} in
    unicast | local | broadcast | multicast | anycast | unreachable | blackhole | prohibit | throw | nat) shift ;;
    esac
    [ "${1:-default}" = default ] || echo "$1"
  done
  for f in "$REGISTRY"/*.env; do
    [ -f "$f" ] || continue
    sed -n 's/^PM_MH_SUBNET="\(.*\)"$/\1/p' "$f"
  done
}

random_hex() { od -An -tx1 -N"$1" /dev/urandom | tr -d ' \n'; }

# Under the lock: picks a fresh run id and a free 10.X.Y.0/24, and writes the run's record
# before any object exists, so that an object without a record is always a leftover.
reserve_run() {
  local used candidate i id
  used=$(prefixes_in_use | sort -u)
  for ((i = 0; i < 200; i++)); do
    id=$(random_hex 3)
    [ ! -e "$(registry_file "$id")" ] || continue
    ! ip netns list | grep -q "^pmt-$id-" || continue
    ! ip link show "$(bridge_name "$id")" >/dev/null 2>&1 || continue
    case $((i % 3)) in # 10.200-254.x.0/24 first, other private ranges if those are taken
    0 | 1) candidate="10.$((200 + RANDOM % 55)).$((RANDOM % 256)).0/24" ;;
    2) candidate="172.$((16 + RANDOM % 16)).$((RANDOM % 256)).0/24" ;;
    esac
    local clash=0 p
    for p in $used; do
      if overlaps "$candidate" "$p"; then
        clash=1
        break
      fi
    done
    [ "$clash" = 0 ] || continue
    RUN_ID=$id
    SUBNET=$candidate
    {
      echo "PM_MH_RUN_ID=\"$id\""
      echo "PM_MH_STATE_DIR=\"$STATE\""
      echo "PM_MH_SUBNET=\"$SUBNET\""
      echo "PM_MH_N=\"$N\""
      echo "PM_MH_OWNER_PID=\"$OWNER\""
      echo "PM_MH_OWNER_START=\"$(proc_start "$OWNER")\""
      echo "PM_MH_UP_PID=\"$$\""
      echo "PM_MH_UP_START=\"$(proc_start $$)\""
    } >"$(registry_file "$id")"
    return 0
  done
  die "found no private /24 that no route or address on this machine overlaps"
}

make_etc_netns() {
  local k ns
  for ((k = 1; k <= N; k++)); do
    ns=$(netns_name "$RUN_ID" "$k")
    mkdir -p "/etc/netns/$ns"
    printf '%s\n' "${ETC_HOSTS[@]}" >"/etc/netns/$ns/hosts"
  done
}

remove_etc_netns() {
  rm -rf "/etc/netns/pmt-$1-n"*
  rmdir /etc/netns 2>/dev/null || true
}

# --- teardown ----------------------------------------------------------------------------------

# Removes everything of run ID, found by recorded pids and by names, whatever is left of it.
teardown() {
  local id=$1 keep=${2:-0} reg ns link k state=""
  reg=$(registry_file "$id")
  if [ -f "$reg" ]; then
    load_env "$reg"
    state=${E[PM_MH_STATE_DIR]:-}
    for ((k = 1; k <= ${E[PM_MH_N]:-0}; k++)); do
      if alive "${E[PM_MH_HOST${k}_SSHD_PID]:-}" "${E[PM_MH_HOST${k}_SSHD_START]:-}"; then
        kill -KILL "${E[PM_MH_HOST${k}_SSHD_PID]}" 2>/dev/null || true
      fi
    done
  fi
  for ns in $(ip netns list | awk -v p="^pmt-$id-n[0-9]+$" '$1 ~ p {print $1}'); do
    kill_netns_processes "$ns"
  done
  for link in $(ip -o link show | awk -F': ' -v p="^pmt${id}v[0-9]+$" '{sub(/@.*/, "", $2)} $2 ~ p {print $2}'); do
    ip link del "$link" 2>/dev/null || true
  done
  for ns in $(ip netns list | awk -v p="^pmt-$id-n[0-9]+$" '$1 ~ p {print $1}'); do
    ip netns del "$ns" 2>/dev/null || true
  done
  ip link del "$(bridge_name "$id")" 2>/dev/null || true
  with_lock remove_etc_netns "$id"
  if [ -n "$state" ] && [ "$keep" = 0 ] && [ "$(cat "$state/.pmt-fixture" 2>/dev/null)" = "$id" ]; then
    rm -rf "$state"
  fi
  rm -f "$reg"
}

# --- up ----------------------------------------------------------------------------------------

write_sshd_config() {
  local k=$1 name=$2 ip=$3 dir=$4
  {
    echo "# libpm multi-host fixture, run $RUN_ID, host $name"
    echo "ListenAddress $ip:22"
    echo "HostKey $STATE/ssh_host_ed25519_key"
    echo "PidFile $dir/sshd.pid"
    echo "AuthorizedKeysFile $STATE/authorized_keys"
    echo "UsePAM no"
    echo "PermitRootLogin prohibit-password"
    echo "PubkeyAuthentication yes"
    echo "PasswordAuthentication no"
    echo "KbdInteractiveAuthentication no"
    echo "StrictModes no"
    echo "MaxStartups $MAXSTARTUPS"
    echo "UseDNS no"
    echo "PrintMotd no"
    echo "PrintLastLog no"
    echo "X11Forwarding no"
    if [ ${#SSHD_OPTIONS[@]} -gt 0 ]; then printf '%s\n' "${SSHD_OPTIONS[@]}"; fi
    # This host's own lines (--host-sshd-option, --topology): after the shared ones.
    if [ -n "${HOST_OPTIONS[$k]:-}" ]; then printf '%s' "${HOST_OPTIONS[$k]}"; fi
    if [ "$k" = "$NOISE" ]; then
      echo "ForceCommand /bin/sh $dir/noise.sh"
    fi
  } >"$dir/sshd_config"
  if [ "$k" = "$NOISE" ]; then
    # Like a login rc file that prints: one line on stdout before the command runs.
    cat >"$dir/noise.sh" <<EOF
echo "$NOISE_LINE"
if [ -n "\${SSH_ORIGINAL_COMMAND+set}" ]; then exec sh -c "\$SSH_ORIGINAL_COMMAND"; fi
exec "\${SHELL:-/bin/sh}" -l
EOF
  fi
}

# Waits until every sshd answers with its banner on port 22, or says which one did not.
wait_for_sshds() {
  local deadline=$((SECONDS + TIMEOUT)) pending=("$@") k still
  while [ ${#pending[@]} -gt 0 ]; do
    still=()
    for k in "${pending[@]}"; do
      if ! alive "${SSHD_PID[$k]}" "${SSHD_START[$k]}"; then
        die "sshd of ${NAME[$k]} (${IP[$k]}) exited at start: $(tail -n 3 "$STATE/${NAME[$k]}/sshd.log" 2>/dev/null | tr '\n' ' ')"
      fi
      # shellcheck disable=SC2016
      if [ "$(timeout 2 bash -c 'exec 3<>"/dev/tcp/$0/22" && head -c 4 <&3' "${IP[$k]}" 2>/dev/null)" != SSH- ]; then
        still+=("$k")
      fi
    done
    pending=(${still[@]+"${still[@]}"})
    [ ${#pending[@]} -gt 0 ] || break
    if [ "$SECONDS" -ge "$deadline" ]; then
      k=${pending[0]}
      die "sshd of ${NAME[$k]} (${IP[$k]}:22) did not accept a connection within ${TIMEOUT} s; see $STATE/${NAME[$k]}/sshd.log"
    fi
    sleep 0.02
  done
}

on_up_exit() {
  local rc=$?
  [ "$rc" != 0 ] || return 0
  if [ -n "${RUN_ID:-}" ]; then
    say "up failed; tearing down run $RUN_ID"
    teardown "$RUN_ID" "$KEEP" || true
  fi
  exit "$rc"
}

cmd_up() {
  N="" STATE="" NOISE=0 MAXSTARTUPS=200:30:400 TIMEOUT=10 OWNER=$PPID KEEP=0 RUN_ID=""
  SSHD_OPTIONS=()
  HOST_OPTIONS=() # by host number: sshd_config lines for that host alone, each ending in \n
  TOPOLOGY=()     # by host number: the hwloc XML its sessions see (SetEnv HWLOC_XMLFILE)
  while [ $# -gt 0 ]; do
    case $1 in
    --hosts) N=${2:?} && shift ;;
    --state) STATE=${2:?} && shift ;;
    --noise) NOISE=${2:?} && shift ;;
    --maxstartups) MAXSTARTUPS=${2:?} && shift ;;
    --timeout) TIMEOUT=${2:?} && shift ;;
    --sshd-option) SSHD_OPTIONS+=("${2:?}") && shift ;;
    --host-sshd-option)
      [[ ${2:?} =~ ^[0-9]+$ ]] || die "up: --host-sshd-option K LINE: K is a host number"
      HOST_OPTIONS[$2]+="${3:?}"$'\n' && shift 2
      ;;
    --topology)
      [[ ${2:?} =~ ^[0-9]+$ ]] || die "up: --topology K XML: K is a host number"
      TOPOLOGY[$2]=${3:?} && shift 2
      ;;
    --owner) OWNER=${2:?} && shift ;;
    --keep) KEEP=1 ;;
    *) die "up: unknown argument '$1'" ;;
    esac
    shift
  done
  if ! [[ $N =~ ^[0-9]+$ ]] || [ "$N" -lt 1 ] || [ "$N" -gt $MAX_HOSTS ]; then
    die "up: --hosts N with 1 <= N <= $MAX_HOSTS"
  fi
  if ! [[ $NOISE =~ ^[0-9]+$ ]] || [ "$NOISE" -gt "$N" ]; then die "up: --noise K with 1 <= K <= $N"; fi
  [[ $MAXSTARTUPS =~ ^[0-9]+(:[0-9]+:[0-9]+)?$ ]] || die "up: --maxstartups wants N or START:RATE:FULL"
  [[ $TIMEOUT =~ ^[0-9]+$ ]] || die "up: --timeout wants whole seconds"
  local k xml
  for k in "${!HOST_OPTIONS[@]}" "${!TOPOLOGY[@]}"; do
    if [ "$k" -lt 1 ] || [ "$k" -gt "$N" ]; then die "up: host $k of a per-host option is not 1..$N"; fi
  done
  # A host's shape: hwloc reads HWLOC_XMLFILE in every process of the host's ssh sessions (pmd,
  # its ranks, their PMIx server), as it would on a machine of that shape.
  for k in "${!TOPOLOGY[@]}"; do
    xml=$(realpath -e -- "${TOPOLOGY[$k]}" 2>/dev/null) || die "up: --topology $k: no file ${TOPOLOGY[$k]}"
    [[ $xml =~ ^[A-Za-z0-9._/+-]+$ ]] || die "up: --topology $k: '$xml' has characters other than [A-Za-z0-9._/+-]"
    TOPOLOGY[$k]=$xml
    HOST_OPTIONS[$k]+="SetEnv HWLOC_XMLFILE=$xml"$'\n'
  done
  [ -n "$STATE" ] || die "up: --state DIR is required"
  STATE=$(realpath -m -- "$STATE")
  # The path goes into sshd and ssh config files and into hosts.env unquoted.
  [[ $STATE =~ ^[A-Za-z0-9._/+-]+$ ]] || die "up: state dir '$STATE' has characters other than [A-Za-z0-9._/+-]"
  if [ -e "$STATE" ] && [ -n "$(ls -A "$STATE")" ]; then die "up: state dir $STATE is not empty"; fi
  proc_start "$OWNER" >/dev/null || die "up: owner process $OWNER is not running"
  check_tools

  (cmd_reap_stale) || true
  trap on_up_exit EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  with_lock reserve_run
  mkdir -p "$STATE"
  echo "$RUN_ID" >"$STATE/.pmt-fixture"

  local net=${SUBNET%.0/24} k pids=()
  local bridge bridge_ip=$net.1
  bridge=$(bridge_name "$RUN_ID")
  NOISE_LINE="pm-fixture noise: login rc of node$NOISE prints this line"
  declare -gA NAME IP NS VETH SSHD_PID SSHD_START
  for ((k = 1; k <= N; k++)); do
    NAME[$k]=node$k
    IP[$k]=$net.$((FIRST_HOST_OCTET + k))
    NS[$k]=$(netns_name "$RUN_ID" "$k")
    VETH[$k]=$(veth_name "$RUN_ID" "$k")
  done

  ssh-keygen -q -t ed25519 -N '' -C "pmt-$RUN_ID-host" -f "$STATE/ssh_host_ed25519_key"
  ssh-keygen -q -t ed25519 -N '' -C "pmt-$RUN_ID-client" -f "$STATE/id_ed25519"
  cp "$STATE/id_ed25519.pub" "$STATE/authorized_keys"
  (umask 022 && mkdir -p /run/sshd) # sshd's privilege separation directory

  # Network: a bridge with the main namespace on .1, a veth per host into its namespace.
  {
    echo "link add $bridge type bridge"
    echo "addr add $bridge_ip/24 dev $bridge"
    echo "link set $bridge up"
    for ((k = 1; k <= N; k++)); do
      echo "netns add ${NS[$k]}"
      echo "link add ${VETH[$k]} type veth peer name eth0 netns ${NS[$k]}"
      echo "link set ${VETH[$k]} master $bridge up"
    done
  } | ip -batch -
  for ((k = 1; k <= N; k++)); do
    printf '%s\n' "link set lo up" "addr add ${IP[$k]}/24 dev eth0" "link set eth0 up" |
      ip -n "${NS[$k]}" -batch -
  done

  ETC_HOSTS=("127.0.0.1 localhost" "::1 localhost ip6-localhost ip6-loopback" "$bridge_ip pmt-launcher")
  for ((k = 1; k <= N; k++)); do ETC_HOSTS+=("${IP[$k]} ${NAME[$k]}"); done
  with_lock make_etc_netns

  # sshds, started together. Without job control the background job is no group leader, so
  # setsid does not fork and the exec chain keeps $! as the sshd's pid.
  for ((k = 1; k <= N; k++)); do
    local dir=$STATE/${NAME[$k]}
    mkdir -p "$dir"
    write_sshd_config "$k" "${NAME[$k]}" "${IP[$k]}" "$dir"
    # shellcheck disable=SC2016
    setsid ip netns exec "${NS[$k]}" unshare --uts \
      sh -c 'hostname "$1" && exec "$2" -D -f "$3" -E "$4"' sh \
      "${NAME[$k]}" "$SSHD" "$dir/sshd_config" "$dir/sshd.log" </dev/null >"$dir/start.log" 2>&1 9>&- &
    SSHD_PID[$k]=$!
    disown "${SSHD_PID[$k]}" # teardown kills it; no "Killed" report from this shell
    pids+=("$k")
  done
  for ((k = 1; k <= N; k++)); do
    SSHD_START[$k]=$(proc_start "${SSHD_PID[$k]}") || SSHD_START[$k]=gone
    printf 'PM_MH_HOST%s_SSHD_PID="%s"\nPM_MH_HOST%s_SSHD_START="%s"\n' \
      "$k" "${SSHD_PID[$k]}" "$k" "${SSHD_START[$k]}" >>"$(registry_file "$RUN_ID")"
  done
  wait_for_sshds "${pids[@]}"

  # Client side: one block per host, reachable by name or by address.
  {
    echo "# libpm multi-host fixture, run $RUN_ID: ssh -F $STATE/ssh_config nodeK"
    for ((k = 1; k <= N; k++)); do
      echo "Host ${NAME[$k]} ${IP[$k]}"
      echo "  HostName ${IP[$k]}"
      echo "  User root"
      echo "  IdentityFile $STATE/id_ed25519"
      echo "  IdentitiesOnly yes"
      echo "  StrictHostKeyChecking no"
      echo "  UserKnownHostsFile /dev/null"
      echo "  GlobalKnownHostsFile /dev/null"
      echo "  BatchMode yes"
      echo "  ConnectTimeout 5"
      echo "  LogLevel ERROR"
    done
  } >"$STATE/ssh_config"

  local names=""
  for ((k = 1; k <= N; k++)); do names+="${names:+ }${NAME[$k]}"; done
  {
    echo "# libpm multi-host fixture: source this file, or read its KEY=\"value\" lines."
    echo "PM_MH_RUN_ID=\"$RUN_ID\""
    echo "PM_MH_STATE_DIR=\"$STATE\""
    echo "PM_MH_OWNER_PID=\"$OWNER\""
    echo "PM_MH_N=\"$N\""
    echo "PM_MH_HOSTS=\"$names\""
    echo "PM_MH_SSH_CONFIG=\"$STATE/ssh_config\""
    echo "PM_MH_SSH_KEY=\"$STATE/id_ed25519\""
    echo "PM_MH_BRIDGE=\"$bridge\""
    echo "PM_MH_BRIDGE_IP=\"$bridge_ip\""
    echo "PM_MH_SUBNET=\"$SUBNET\""
    if [ "$NOISE" != 0 ]; then
      echo "PM_MH_NOISE_HOST=\"${NAME[$NOISE]}\""
      echo "PM_MH_NOISE_LINE=\"$NOISE_LINE\""
    else
      echo "PM_MH_NOISE_HOST=\"\""
      echo "PM_MH_NOISE_LINE=\"\""
    fi
    for ((k = 1; k <= N; k++)); do
      echo "PM_MH_HOST${k}_NAME=\"${NAME[$k]}\""
      echo "PM_MH_HOST${k}_IP=\"${IP[$k]}\""
      echo "PM_MH_HOST${k}_NETNS=\"${NS[$k]}\""
      echo "PM_MH_HOST${k}_VETH=\"${VETH[$k]}\""
      echo "PM_MH_HOST${k}_SSHD_PID=\"${SSHD_PID[$k]}\""
      echo "PM_MH_HOST${k}_SSHD_LOG=\"$STATE/${NAME[$k]}/sshd.log\""
      echo "PM_MH_HOST${k}_TOPOLOGY=\"${TOPOLOGY[$k]:-}\""
    done
  } >"$STATE/hosts.env.tmp"
  mv "$STATE/hosts.env.tmp" "$STATE/hosts.env"
  trap - EXIT INT TERM
  echo "$STATE/hosts.env"
}

# --- the other commands ------------------------------------------------------------------------

# Parses "--state DIR [HOST]" and loads DIR/hosts.env; sets K to HOST's index.
load_run() {
  STATE="" HOST="" KEEP=0 REST=()
  while [ $# -gt 0 ]; do
    case $1 in
    --state) STATE=${2:?} && shift ;;
    --keep) KEEP=1 ;;
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
}

need_host() {
  [ -f "$STATE/hosts.env" ] || die "no run in $STATE (no hosts.env)"
  load_env "$STATE/hosts.env"
  [ -n "$HOST" ] || die "which host? (one of: ${E[PM_MH_HOSTS]})"
  local k
  for ((k = 1; k <= E[PM_MH_N]; k++)); do
    if [ "${E[PM_MH_HOST${k}_NAME]}" = "$HOST" ]; then
      K=$k
      return 0
    fi
  done
  die "no host '$HOST' in this run (hosts: ${E[PM_MH_HOSTS]})"
}

cmd_down() {
  load_run "$@"
  local id=""
  id=$(cat "$STATE/.pmt-fixture" 2>/dev/null) || true
  [[ $id =~ ^[0-9a-f]{6}$ ]] || return 0 # nothing of ours there (never up, or already down)
  teardown "$id" "$KEEP"
}

cmd_crash() {
  load_run "$@"
  need_host
  kill_netns_processes "${E[PM_MH_HOST${K}_NETNS]}"
}

cmd_partition() {
  load_run "$@"
  need_host
  ip link set "${E[PM_MH_HOST${K}_VETH]}" down
}

cmd_heal() {
  load_run "$@"
  need_host
  ip link set "${E[PM_MH_HOST${K}_VETH]}" up
}

# The pids in HOST's namespace, leaving out its sshd and the sshd processes serving connections.
cmd_pids() {
  load_run "$@"
  need_host
  local sshd=${E[PM_MH_HOST${K}_SSHD_PID]} pid stat
  local -A parent
  local all
  all=$(ip netns pids "${E[PM_MH_HOST${K}_NETNS]}")
  for pid in $all; do
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
    stat=${stat##*) }
    # shellcheck disable=SC2086
    set -- $stat
    parent[$pid]=$2
  done
  for pid in $all; do
    [ -n "${parent[$pid]+set}" ] || continue
    if [ "$pid" = "$sshd" ]; then continue; fi
    if [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$SSHD" ]; then
      # An sshd serving a connection descends from the listener.
      local up=${parent[$pid]} serves=0
      while true; do
        if [ "$up" = "$sshd" ]; then
          serves=1
          break
        fi
        [ -n "${parent[$up]+set}" ] || break
        up=${parent[$up]}
      done
      [ "$serves" = 0 ] || continue
    fi
    echo "$pid"
  done | sort -n
}

cmd_exec() {
  load_run "$@"
  need_host
  [ ${#REST[@]} -gt 0 ] || die "exec: nothing to run (hosts.sh exec --state DIR HOST -- CMD...)"
  # shellcheck disable=SC2016
  exec ip netns exec "${E[PM_MH_HOST${K}_NETNS]}" unshare --uts \
    sh -c 'hostname "$0" && exec "$@"' "$HOST" "${REST[@]}"
}

# Tears down runs whose owner (and whose `up`) is gone, then objects no record claims. One reaper
# at a time (ups running side by side each start one).
cmd_reap_stale() {
  mkdir -p "$REGISTRY"
  {
    flock 8
    reap_stale
  } 8>"$REGISTRY/reap.lock"
}

reap_stale() {
  local f id reaped=0
  for f in "$REGISTRY"/*.env; do
    [ -f "$f" ] || continue
    id=$(basename "$f" .env)
    load_env "$f"
    if alive "${E[PM_MH_OWNER_PID]:-}" "${E[PM_MH_OWNER_START]:-}" ||
      alive "${E[PM_MH_UP_PID]:-}" "${E[PM_MH_UP_START]:-}"; then
      continue
    fi
    say "reaping run $id (owner ${E[PM_MH_OWNER_PID]:-?} is gone)"
    teardown "$id"
    reaped=$((reaped + 1))
  done
  # Objects are created after their run's record and the record is removed last, so an object
  # whose id has no record is a leftover.
  local ids
  ids=$({
    ip netns list | awk '{print $1}' | sed -n 's/^pmt-\([0-9a-f]\{6\}\)-n[0-9]\+$/\1/p'
    ip -o link show | awk -F': ' '{sub(/@.*/, "", $2); print $2}' |
      sed -n -e 's/^pmtb\([0-9a-f]\{6\}\)$/\1/p' -e 's/^pmt\([0-9a-f]\{6\}\)v[0-9]\+$/\1/p'
    find /etc/netns -mindepth 1 -maxdepth 1 -printf '%f\n' 2>/dev/null | sed -n 's/^pmt-\([0-9a-f]\{6\}\)-n[0-9]\+$/\1/p'
  } | sort -u)
  for id in $ids; do
    [ ! -e "$(registry_file "$id")" ] || continue
    say "reaping leftovers of run $id (no record)"
    teardown "$id"
    reaped=$((reaped + 1))
  done
  # What a `hosts.sh probe` that died left behind.
  local ns link
  for ns in $(ip netns list | awk '$1 ~ /^pmt-probe-[0-9]+$/ {print $1}'); do
    [ -d "/proc/${ns#pmt-probe-}" ] || ip netns del "$ns" 2>/dev/null || true
  done
  for link in $(ip -o link show | awk -F': ' '$2 ~ /^pmtprobe[0-9]+$/ {print $2}'); do
    [ -d "/proc/${link#pmtprobe}" ] || ip link del "$link" 2>/dev/null || true
  done
  [ "$reaped" = 0 ] || say "reaped $reaped stale run(s)"
}

check_tools() {
  [ "$(id -u)" = 0 ] || die "needs root (network namespaces, bridges, sshd)"
  [ -x "$SSHD" ] || die "$SSHD is missing (install openssh-server)"
  local tool
  for tool in ip ssh ssh-keygen unshare setsid flock timeout realpath; do
    command -v "$tool" >/dev/null || die "$tool is missing"
  done
}

# Says in one line why this machine cannot host a run, or exits 0.
cmd_probe() {
  check_tools
  local ns=pmt-probe-$$
  ip netns add "$ns" 2>/dev/null || die "'ip netns add' fails here (no network namespaces?)"
  if ! ip link add "pmtprobe$$" type bridge 2>/dev/null; then
    ip netns del "$ns" 2>/dev/null || true
    die "'ip link add ... type bridge' fails here"
  fi
  ip link del "pmtprobe$$" 2>/dev/null || true
  ip netns del "$ns"
}

case ${1:-} in
up) shift && cmd_up "$@" ;;
down) shift && cmd_down "$@" ;;
reap-stale) shift && cmd_reap_stale ;;
crash) shift && cmd_crash "$@" ;;
partition) shift && cmd_partition "$@" ;;
heal) shift && cmd_heal "$@" ;;
pids) shift && cmd_pids "$@" ;;
exec) shift && cmd_exec "$@" ;;
probe) shift && cmd_probe ;;
*)
  sed -n 's/^#   \( *hosts.sh\| \)/  \1/p' "${BASH_SOURCE[0]}" >&2
  exit 2
  ;;
esac
