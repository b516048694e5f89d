#!/usr/bin/env bash
# All benchmarks: the pure core (Google Benchmark), then pmrun beside mpirun and hydra.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build}
echo "# Core: mapping and env (Google Benchmark)"
"$build/bench/model_bench" --benchmark_counters_tabular=true
/usr/bin/python3 tests/bench/peers_bench.py "$build" "$@"
