#!/usr/bin/env bash
# All benchmarks: the pure core (Google Benchmark), then pmrun beside mpirun and hydra.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build}
echo "# Core: mapping and env (Google Benchmark)"
"$build/bench/model_bench" --benchmark_counters_tabular=true
echo "# Simulator: one failing rank aborting 1k..100k hosts x 8 (docs/simulator.md)"
"$build/bench/sim_bench" 1000 10000 100000
/usr/bin/python3 tests/bench/peers_bench.py "$build" "$@"
