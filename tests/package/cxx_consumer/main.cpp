// A C++ program built against an installed libpm through its CMake package (CMakeLists.txt next
// to this file) or through pkg-config (libpm-sim.pc), by tests/package/run_package_test.sh.
// It maps a job and runs a small simulation and checks what comes out. Exit 0: every check held.
#include <cstdio>
#include <cstring>
#include <string>

#include "pm/allocation.hpp"
#include "pm/error.hpp"
#include "pm/rank_map.hpp"
#include "pm/report.hpp"
#include "pm/sim/world.hpp"
#include "pm/version.hpp"

namespace {

int failures = 0;

void check(bool ok, const char* what, int line) {
  if (!ok) {
    std::fprintf(stderr, "main.cpp:%d: check failed: %s\n", line, what);
    ++failures;
  }
}
#define CHECK(cond) check((cond), #cond, __LINE__)

void check_mapping() {
  const pm::allocation alloc = pm::parse_host_list("a:2,b:2");
  CHECK(alloc.hosts.size() == 2);
  CHECK(alloc.total_slots() == 4);

  pm::job_spec job;
  job.apps.push_back(pm::app_context{{"/bin/true"}, 3, {}, {}});
  job.mapping.by = pm::map_by::node;  // round robin: a b a
  const pm::rank_map map = pm::map_job(job, alloc);
  CHECK(map.size() == 3);
  CHECK(map.num_nodes() == 2);
  CHECK(map.at(1).host == 1);
  CHECK(map.at(2).host == 0 && map.at(2).local_rank == 1 && map.at(2).local_size == 2);

  // Too many ranks: pm::error, naming the numbers.
  job.apps.front().np = 5;
  bool threw = false;
  try {
    (void)pm::map_job(job, alloc);
  } catch (const pm::error& e) {
    threw = std::strstr(e.what(), "5 ranks") != nullptr;
  }
  CHECK(threw);
}

void check_simulation() {
  // 4 hosts x 2 slots; rank 5 (on node2) exits 7 after a second.
  pm::sim::scenario s;
  s.hosts = 4;
  s.slots = 2;
  s.seed = 42;
  s.set_script(5, pm::sim::parse_script("exit:7@1s"));
  const pm::sim::run_result r = pm::sim::run(s);
  if (r.outcome != pm::sim::verdict::ok) std::fprintf(stderr, "%s\n", r.explain().c_str());
  CHECK(r.outcome == pm::sim::verdict::ok);
  CHECK(r.finished);
  CHECK(r.report.exit_code == 7);
  CHECK(r.report.cause == pm::cause_kind::rank_failed);
  CHECK(r.report.failed_rank == 5u);
  CHECK(r.report.summary == "rank 5 on node2 exited with code 7");
  CHECK(r.report.ranks_killed == 7u);
  std::printf("simulated: %s\n", r.report.summary.c_str());

  // Same seed, same run.
  CHECK(pm::sim::run(s).trace_hash == r.trace_hash);
}

}  // namespace

int main() {
  // The headers and the linked library are the same release.
  CHECK(std::string(pm::version_string()) == PM_VERSION_STRING);
  std::printf("libpm %s\n", pm::version_string());
  try {
    check_mapping();
    check_simulation();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    return 1;
  }
  if (failures != 0) {
    std::fprintf(stderr, "cxx_consumer: %d check(s) failed\n", failures);
    return 1;
  }
  std::printf("cxx_consumer: ok\n");
  return 0;
}
