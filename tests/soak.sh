#!/usr/bin/env bash
# The soak (docs/soak.md): runs ctest labels again and again while a CPU hog per core keeps the
# machine busy, and after every round looks for what a hang or a race leaves behind.
#   tests/soak.sh [--build DIR] [--rounds N] [--labels "mpi multihost"] [--hogs N] [--hog-nice N]
#                 [--ctest-j N]
# A hang is a test ctest killed at its timeout; a leftover is, after a round, a process running a
# program of the build tree, a fake host's network namespace or record whose owner is dead, a PMIx
# directory whose pmd is dead, or a test user (pmt*), that was not there before the soak and is
# still there 20 s after the round. Prints one line per round and a closing line
# "N passed, N failed"; exits 1 if any test failed, hung or left something behind.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build="$here/../build"
rounds=10
labels="mpi multihost"
hogs=$(nproc)
hog_nice=0 # as busy as another build: the hogs compete with the tests on equal terms
ctest_j=1
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --labels) labels=$2; shift 2 ;;
    --hogs) hogs=$2; shift 2 ;;
    --hog-nice) hog_nice=$2; shift 2 ;;
    --ctest-j) ctest_j=$2; shift 2 ;;
    *) sed -n '2,9p' "$0"; exit 2 ;;
  esac
done
build=$(cd "$build" && pwd)
PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH

# The hogs: busy loops, ended by the pids started here.
hog_pids=()
stop_hogs() {
  for p in "${hog_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${hog_pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap stop_hogs EXIT
for _ in $(seq 1 "$hogs"); do
  nice -n "$hog_nice" sh -c 'while :; do :; done' &
  hog_pids+=($!)
done

# What was left behind, one thing a line, sorted: only what nothing alive owns any more, so that
# another test run beside the soak (CI on the same machine) is not taken for a leftover.
alive_pid() { [ -n "$1" ] && [ -d "/proc/$1" ]; }
inventory() {
  local p exe f id owner d pid
  for p in /proc/[0-9]*; do # the soak runs nothing else from this build tree
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    case "$exe" in "$build"/*) echo "process ${p#/proc/} $exe" ;; esac
  done
  declare -A live_runs=()
  for f in /run/pmt-fixture/*.env; do # a fake-hosts run whose owner died and was not torn down
    [ -e "$f" ] || continue
    id=$(basename "$f" .env)
    owner=$(sed -n 's/^PM_MH_OWNER_PID="\(.*\)"$/\1/p' "$f" 2>/dev/null | head -n 1)
    if alive_pid "$owner"; then live_runs[$id]=1; else echo "fixture record $f"; fi
  done
  for d in $(ip netns list 2>/dev/null | awk '$1 ~ /^pmt-/ {print $1}'); do
    id=${d#pmt-}
    id=${id%-n*}
    [ -n "${live_runs[$id]:-}" ] || echo "netns $d"
  done
  for d in "${TMPDIR:-/tmp}"/pm-pmix.* /dev/shm/pm-pmix.*; do # named after the pmd that made it
    [ -e "$d" ] || continue
    pid=${d##*/pm-pmix.}
    pid=${pid%%.*}
    alive_pid "$pid" || echo "pmix dir $d"
  done
  getent passwd | awk -F: '$1 ~ /^pmt[0-9a-f]{8}$/ {print "user " $1}'
}

# What is new since the soak began and still there after up to 20 s (a test user of a test that is
# still running elsewhere goes in that time).
new_leftovers() {
  local new now i
  for i in $(seq 1 10); do
    now=$(inventory | sort || true)
    new=$(comm -13 <(echo "$before") <(echo "$now") | grep -v '^$' || true)
    [ -n "$new" ] || break
    sleep 2
  done
  echo "$new"
}

before=$(inventory | sort || true)
total=0 failed=0 hangs=0 leftovers=0
log=$(mktemp)
for round in $(seq 1 "$rounds"); do
  for label in $labels; do
    rc=0
    ctest --test-dir "$build" -L "$label" -j "$ctest_j" --output-on-failure >"$log" 2>&1 || rc=$?
    line=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n 1 || true)
    if [[ $line =~ ([0-9]+)\ tests?\ failed\ out\ of\ ([0-9]+) ]]; then
      failed=$((failed + BASH_REMATCH[1]))
      total=$((total + BASH_REMATCH[2]))
    else
      failed=$((failed + 1))
      total=$((total + 1))
    fi
    timeouts=$(grep -c '\*\*\*Timeout' "$log" || true)
    hangs=$((hangs + timeouts))
    new=$(new_leftovers)
    n_new=0
    [ -z "$new" ] || n_new=$(echo "$new" | wc -l)
    leftovers=$((leftovers + n_new))
    before=$(printf '%s\n%s\n' "$before" "$new" | grep -v '^$' | sort -u || true) # counted once
    echo "soak: round $round $label: ${line:-ctest ran no test (exit $rc)}; hangs $timeouts; leftovers $n_new"
    if [ "$rc" -ne 0 ]; then grep -E '^\s*[0-9]+ - |\*\*\*|Failed|\(Timeout\)' "$log" | tail -n 20 || true; fi
    [ -z "$new" ] || echo "$new" | sed 's/^/  left: /'
  done
done
rm -f "$log"
echo "soak: $rounds rounds of [$labels] with $hogs hogs: $total test runs, $failed failed, $hangs hangs, $leftovers leftovers"
echo "$((total - failed)) passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$hangs" -eq 0 ] && [ "$leftovers" -eq 0 ]
