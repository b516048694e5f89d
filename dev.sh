#!/usr/bin/env bash
# libpm's one set-up script: installs what is missing (Debian 12 packages), builds, runs.
#   ./dev.sh run    install, build, run a local pmrun job (the main job)
#   ./dev.sh test   install, build, run the whole test suite
#   ./dev.sh deps   only install what is missing
#   ./dev.sh build  only build (preset "release" into build/)
#   ./dev.sh bench  install the peers (mpich for mpiexec.hydra), build, run tests/bench
set -euo pipefail
cd "$(dirname "$0")"

# Packages the build and the tests need. mpich is only for the side-by-side benchmarks.
PACKAGES=(cmake g++ make pkg-config clang-format
  libboost1.81-dev libboost-filesystem1.81-dev libpmix-dev openmpi-bin libopenmpi-dev python3-mpi4py
  libgtest-dev libgmock-dev librapidcheck-dev libcli11-dev nlohmann-json3-dev libbenchmark-dev
  openssh-server openssh-client iproute2 procps python3
  slurmctld slurmd slurm-client munge)
BENCH_PACKAGES=(mpich)

install_missing() {
  local missing=()
  for p in "$@"; do
    [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) == *"install ok installed"* ]] || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "dev.sh: installing ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

build() {
  cmake --preset release >/dev/null
  cmake --build --preset release -j "$(nproc)"
}

case "${1:-}" in
  deps) install_missing "${PACKAGES[@]}" ;;
  build) build ;;
  run)
    install_missing "${PACKAGES[@]}"
    build
    # The main job: 4 ranks on this machine, each printing its place in the job.
    exec build/bin/pmrun --allow-run-as-root -np 4 --tag-output \
      sh -c 'echo "rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE on $(hostname), NODE_RANK=$NODE_RANK LOCAL_RANK=$LOCAL_RANK"'
    ;;
  test)
    install_missing "${PACKAGES[@]}"
    build
    ctest --preset release --output-on-failure
    ;;
  bench)
    install_missing "${PACKAGES[@]}" "${BENCH_PACKAGES[@]}"
    build
    exec tests/bench/run_all.sh
    ;;
  *)
    sed -n '2,8p' "$0"
    exit 2
    ;;
esac
