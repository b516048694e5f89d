#!/usr/bin/env bash
# All benchmarks: the pure core (Google Benchmark), then pmrun beside mpirun and hydra, on one
# host and across fake hosts (tests/multihost).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build}
echo "# Core: mapping and env (Google Benchmark)"
"$build/bench/model_bench" --benchmark_counters_tabular=true
echo "# Simulator: one failing rank aborting 1k..100k hosts x 8 (docs/simulator.md)"
"$build/bench/sim_bench" 1000 10000 100000
if [ -x "$build/bench/pmix_launch_bench" ]; then
  echo "# Embedded PMIx server: MPI_Init under it beside mpirun (docs/pmix.md)"
  "$build/bench/pmix_launch_bench" --reps 5 --lean
fi
/usr/bin/python3 tests/bench/peers_bench.py "$build" "$@"
# Several hosts needs root and the fake-host fixture (network namespaces, sshd): skipped elsewhere.
if reason=$(tests/multihost/hosts.sh probe 2>&1); then
  /usr/bin/python3 tests/bench/multihost_bench.py "$build/bin/pmrun" --rounds 3
  # DDP training through a killed host beside torchrun (python3-torch; docs/resilience.md)
  if /usr/bin/python3 -c 'import torch.distributed' 2>/dev/null; then
    /usr/bin/python3 tests/bench/ddp_recovery_bench.py "$build/bin/pmrun" --rounds 3
  else
    echo "# DDP recovery (ddp_recovery_bench.py): skipped: no python3-torch"
  fi
else
  echo "# Several hosts (multihost_bench.py): skipped: $reason"
fi
