#!/usr/bin/env bash
# libpm's one set-up script: installs what is missing (Debian 12 packages), builds, runs.
#   ./dev.sh run    install, build, run a local pmrun job (the main job)
#   ./dev.sh test   install, build, run the whole test suite, then again under the sanitizers
#   ./dev.sh deps   only install what is missing
#   ./dev.sh build  only build (preset "release" into build/)
#   ./dev.sh bench  install the peers (mpich for mpiexec.hydra), build, run tests/bench
set -euo pipefail
cd "$(dirname "$0")"

# Packages the build and the tests need. mpich is only for the side-by-side benchmarks.
PACKAGES=(cmake g++ make pkg-config clang-format lld  # lld: pmrun's and pmd's code order
  libboost1.81-dev libboost-filesystem1.81-dev libpmix-dev openmpi-bin libopenmpi-dev python3-mpi4py
  libgtest-dev libgmock-dev librapidcheck-dev libcli11-dev nlohmann-json3-dev libbenchmark-dev
  openssh-server openssh-client iproute2 procps python3
  slurmctld slurmd slurm-client munge
  clang libclang-rt-14-dev  # the asan build and the fuzz targets (docs/fuzzing.md)
  libhwloc-dev  # each host's topology (libpm/src/topology/read_hwloc.cpp, docs/gpus.md)
  hwloc  # hwloc-calc and lstopo: the topology tests check the reader against them
  python3-torch)  # /usr/bin/python3 and torchrun: DDP training through a lost host (tests/torch)
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

# Builds the given targets of a preset as one goal (PM_BUILD_SET in CMakeLists.txt), so that make
# builds them side by side: given as several goals they would be built one after the other.
build_set() {
  local preset=$1 IFS=';'
  shift
  cmake --preset "$preset" -DPM_BUILD_BENCH=OFF -DPM_BUILD_EXAMPLES=OFF "-DPM_BUILD_SET=$*" >/dev/null
  cmake --build --preset "$preset" -j "$(nproc)" --target pm_build_set
}

# What `./dev.sh test` runs under the sanitizers (docs/fuzzing.md, "Sanitizers in CI"), sized to
# keep CI well under 30 minutes on 2 cores: under ASan+UBSan the code that reads what users and
# peers send (parsers, the agent link, the agent and the controller, the output layer, the
# transports' pure parts) with the fuzz targets' smoke runs, pmrun itself (the integration tests)
# and the C API's tests; under TSan the tests whose code runs threads. The release run has
# everything; the whole suite under ASan is docs/fuzzing.md's one command. Not under ASan:
# TopologyReader.ThisMachineIsReadable, whose hwloc loads its PCI plugin, and libpciaccess in it
# leaks (LSan cannot name it: the plugin is unloaded by then).
ASAN_TARGETS=(fuzz agent_test controller_test controller_state_test fence_table_test
  link_endpoint_test link_messages_test command_line_test hostfile_test host_list_test slurm_test
  pbs_test output_forwarder_test output_forwarder_pushed_test output_forwarder_prompt_test
  line_assembler_test job_runner_test local_agent_test local_agent_link_test local_agent_restart_test
  launcher_restarts_test controller_signals_test link_socket_test srun_transport_test
  fuzz_regressions_test pmd pm_payload
  pmrun pmrun_compat_test pmrun_failure_test pmrun_map_test pmrun_output_test
  pmrun_output_modes_test pmrun_status_test
  c_allocation_test c_basics_test c_binding_test c_launch_test c_map_test c_resolve_test c_sim_test
  c_descriptors_test
  safe_path_test peer_owner_test private_dir_test pmix_handshake_test pmrun_files_test
  pmrun_stdin_test pmd_stdio_test launcher_test relayed_ssh_end_test sys_process_test spawner_test
  topology_reader_test host_binding_test proc_sample_test pmd_relay_test discovery_command_test
  pmrun_dvm_test dvm_parts_test c_dvm_test)
ASAN_TESTS='^(Agent|AgentStall|LauncherStall|ProcSample|Controller|ControllerRecovery|ControllerState|FenceTable|LinkEndpoint|LinkFrame|LinkFuzz|LinkMessages|LinkPreamble|LinkSocket|CommandLine|Hostfile|HostList|SlurmAllocation|SlurmHostlist|SlurmTasksPerNode|ManagedAllocation|Pbs|ReadTextFile|OutputForwarder|ForEachLine|LineAssembler|JobRunner|JobRunnerSetup|Launcher|LauncherDiscovery|LauncherRecovery|LauncherSpares|PmdRelay|DiscoveryCommand|DiscoveredHosts|DvmSlotLedger|DvmJsonLines|RelayedSshEnd|LocalAgent|SafePath|PeerOwner|PrivateDir|PmixHandshake|PmdStdio|CallerGate|ConnectBack|SrunCommand|SrunTransport|SysPidfd|SysStopSequence|SysWatchedProcess|Spawner|Executable|FuzzRegressions|TopologyReader\.(HonoursHwlocXmlFile|AMissingFileIsOneLine)|EveryMachine|Machines|BindingOptions|Pmrun(Compat|Dvm|EarlyAgent|Files|Map|Output|OutputModes|Run|Status|Stdin))\.|^fuzz\.|^c\.c_'
TSAN_TARGETS=(output_forwarder_test output_forwarder_pushed_test output_forwarder_prompt_test
  local_agent_test local_agent_link_test job_runner_test pmix_job_info_test c_launch_test pmd
  pm_payload c_dvm_test)
TSAN_TESTS='^(OutputForwarder|LocalAgent|JobRunner|JobRunnerSetup|PmixJobInfo|PmixCompletion)\.|^c\.c_(launch|dvm)_test$'

# How long each part of `./dev.sh test` took (CI must stay well under 30 minutes on 2 cores).
phase_times=()
phase_start=$SECONDS
phase() {
  phase_times+=("dev.sh: $1 took $((SECONDS - phase_start)) s")
  phase_start=$SECONDS
}

# ctest, whose summary line is kept for the total that closes `./dev.sh test`.
ctest_total=0
ctest_failed=0
ctest_phases=()
ctest_broken=0
run_ctest() {
  local name=$1 log rc=0 line
  shift
  log=$(mktemp)
  ctest "$@" 2>&1 | tee "$log" || rc=$?
  line=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n 1 || true)
  rm -f "$log"
  if [[ $line =~ ([0-9]+)\ tests?\ failed\ out\ of\ ([0-9]+) ]]; then
    ctest_failed=$((ctest_failed + BASH_REMATCH[1]))
    ctest_total=$((ctest_total + BASH_REMATCH[2]))
  fi
  # A failure, or no test at all (a label or name that matches nothing), fails the run.
  [ "$rc" -eq 0 ] && [ -n "$line" ] || ctest_broken=1
  ctest_phases+=("$name: ${line:-ctest ran no test (exit $rc)}")
}

# The three runs' summaries, then one line in ctest's words for all of them; fails if any failed.
close_test_run() {
  echo
  printf '%s\n' "${ctest_phases[@]}"
  local passed=100
  [ "$ctest_total" -eq 0 ] || passed=$(((ctest_total - ctest_failed) * 100 / ctest_total))
  echo "${passed}% tests passed, ${ctest_failed} tests failed out of ${ctest_total}"
  [ "$ctest_failed" -eq 0 ] && [ "$ctest_broken" -eq 0 ]
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
    phase "packages"
    build
    phase "release build"
    run_ctest release --preset release --output-on-failure
    phase "release tests"
    build_set asan "${ASAN_TARGETS[@]}"
    phase "asan build"
    run_ctest asan --preset asan -R "$ASAN_TESTS"
    phase "asan tests"
    build_set tsan "${TSAN_TARGETS[@]}"
    phase "tsan build"
    run_ctest tsan --preset tsan -R "$TSAN_TESTS"
    phase "tsan tests"
    printf '%s\n' "${phase_times[@]}"
    close_test_run
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
