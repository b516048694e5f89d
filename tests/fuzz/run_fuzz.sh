#!/usr/bin/env bash
# Runs libpm's fuzz targets (docs/fuzzing.md): each first replays its seed corpus
# (tests/fuzz/corpus/TARGET), then fuzzes for SECONDS with its format's dictionary.
#   tests/fuzz/run_fuzz.sh BUILD_DIR SECONDS [TARGET...]     (no TARGET: every one built)
#   tests/fuzz/run_fuzz.sh BUILD_DIR gate [TARGET...]        what ctest (and so CI) runs
# The gate depends on the commit, not on luck: it replays the seeds and then makes a fixed number
# of inputs from a fixed seed (PM_FUZZ_GATE_RUNS, 20000) into a fresh work corpus, so the same
# commit always runs the same inputs. Timed runs explore apart from the gate; what they find comes
# back as seeds and regression tests.
# New inputs go to BUILD_DIR/fuzz-work/TARGET/corpus (the checked-in seeds are never written);
# a crash, a sanitizer report, a leak, a slow input (10 s), 2 GB of memory or a single allocation of
# more than 1 GB stops the run and leaves the input in BUILD_DIR/fuzz-work/TARGET/artifacts.
# Extra libFuzzer flags come from PM_FUZZ_FLAGS (e.g. PM_FUZZ_FLAGS="-jobs=2 -workers=2").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" && pwd)
seconds=$2
shift 2
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for bin in "$build"/fuzz/fuzz_*; do targets+=("$(basename "$bin")"); done
fi

dictionary() {
  case "$1" in
    fuzz_link_*) echo link ;;
    fuzz_slurm_*) echo slurm ;;
    *) echo "${1#fuzz_}" ;;
  esac
}

for t in "${targets[@]}"; do
  if [ "$seconds" = gate ]; then
    work="$build/fuzz-gate/$t"
    rm -rf "$work/corpus"  # a fresh corpus: earlier runs' finds would change what the seed makes
    limit=(-seed=1 -runs="${PM_FUZZ_GATE_RUNS:-20000}")
    echo "== $t: seeds, then ${limit[1]#-runs=} inputs from seed 1"
  else
    work="$build/fuzz-work/$t"
    limit=(-max_total_time="$seconds")
    echo "== $t: ${seconds}s"
  fi
  mkdir -p "$work/corpus" "$work/artifacts"
  # shellcheck disable=SC2086
  "$build/fuzz/$t" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 \
    -malloc_limit_mb=1024 -print_final_stats=1 -dict="$here/dict/$(dictionary "$t").dict" \
    -artifact_prefix="$work/artifacts/" ${PM_FUZZ_FLAGS:-} "$work/corpus" "$here/corpus/$t"
done
