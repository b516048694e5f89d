#!/usr/bin/env bash
# Measures the fixture (figures in README.md): hosts.sh up for 3 and 8 hosts, one ssh hop, and
# Open MPI's mpirun across 3 fake hosts x 2 slots. Medians of REPEAT runs (default 5).
#   tests/multihost/measure.sh [REPEAT]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repeat=${1:-5}
state=""
cleanup() { [ -z "$state" ] || "$here/hosts.sh" down --state "$state"; }
trap cleanup EXIT

now() { date +%s.%N; }
# median of the numbers on stdin, in seconds with 3 decimals
median() { sort -g | awk '{v[NR] = $1} END {m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.3f", m}'; }
# time_of CMD...: wall seconds of one run of CMD (its output dropped)
time_of() {
  local t0 t1
  t0=$(now)
  "$@" >/dev/null
  t1=$(now)
  awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.4f\n", b - a}'
}

for n in 3 8; do
  for ((i = 0; i < repeat; i++)); do
    state=$(mktemp -d /tmp/pm-multihost-measure-XXXXXX)
    time_of "$here/hosts.sh" up --hosts "$n" --state "$state"
    "$here/hosts.sh" down --state "$state"
    state=""
  done | median | xargs printf 'hosts.sh up, %d hosts: %s s\n' "$n"
done

state=$(mktemp -d /tmp/pm-multihost-measure-XXXXXX)
"$here/hosts.sh" up --hosts 3 --state "$state" >/dev/null
# shellcheck disable=SC1091
. "$state/hosts.env"
for ((i = 0; i < 2 * repeat; i++)); do time_of ssh -F "$PM_MH_SSH_CONFIG" node1 true; done |
  median | xargs printf 'ssh -F cfg node1 true: %s s\n'
if command -v mpirun.openmpi >/dev/null; then
  for ((i = 0; i < repeat; i++)); do
    time_of mpirun.openmpi --allow-run-as-root -np 6 -H node1:2,node2:2,node3:2 \
      -mca plm_rsh_agent "ssh -F $PM_MH_SSH_CONFIG" -mca btl self,tcp \
      -mca btl_tcp_if_include "$PM_MH_SUBNET" -mca oob_tcp_if_include "$PM_MH_SUBNET" /bin/true
  done | median | xargs printf 'mpirun.openmpi -np 6 -H node1:2,node2:2,node3:2 /bin/true: %s s\n'
fi
