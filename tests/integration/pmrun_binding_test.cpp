// Binding and GPUs end to end (docs/gpus.md): the real pmrun and pmd on this machine, bindings
// that really apply (each rank's Cpus_allowed_list), --report-bindings against mpirun's own lines,
// and fake hosts of another machine's shape through HWLOC_XMLFILE (a DGX-2's 16 GPUs): a distinct
// GPU per rank on its own NUMA node, and a job asking for more GPUs than the host has refused in
// one line before anything starts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "pm/host_binding.hpp"
#include "support/command.hpp"
#include "support/topologies.hpp"
#include "topology/read_hwloc.hpp"

namespace {

using pm::test::run_command;

std::vector<std::string> pmrun(std::vector<std::string> args) {
  args.insert(args.begin(), {pm::test::pmrun_path(), "--allow-run-as-root"});
  return args;
}

// The environment of this process plus `more` (HWLOC_XMLFILE for a fake host).
std::vector<std::string> env_with(const std::vector<std::string>& more) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  env.insert(env.end(), more.begin(), more.end());
  return env;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// "R<rank> <what the rank printed>" lines, by rank.
std::map<int, std::string> by_rank(const std::string& out) {
  std::map<int, std::string> got;
  for (const auto& line : lines_of(out)) {
    std::smatch m;
    if (std::regex_match(line, m, std::regex(R"(R(\d+) (.*))"))) got[std::stoi(m[1])] = m[2];
  }
  return got;
}

// The --report-bindings lines, "[host:pid] " cut off: what mpirun and pmrun must agree on.
std::vector<std::string> binding_lines(const std::string& err) {
  std::vector<std::string> out;
  for (const auto& line : lines_of(err)) {
    const auto close = line.find("] MCW rank ");
    if (line.starts_with("[") && close != std::string::npos) out.push_back(line.substr(close + 2));
  }
  std::sort(out.begin(), out.end());
  return out;
}

struct temp_file {
  std::string path;
  temp_file() {
    char tmpl[] = "/tmp/pmrun-binding-XXXXXX";
    const int fd = mkstemp(tmpl);
    if (fd >= 0) ::close(fd);
    path = tmpl;
  }
  ~temp_file() { std::filesystem::remove(path); }
  nlohmann::json json() const {
    std::ifstream in(path);
    return nlohmann::json::parse(in);
  }
};

// The implicit local allocation names this machine by its hostname.
std::string this_host() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

const std::string print_cpus =
    "echo R$OMPI_COMM_WORLD_RANK $(grep Cpus_allowed_list /proc/self/status | cut -f2)";

// This machine: the cpus each rank runs on are those --report-bindings and the JSON report name.
TEST(PmrunBinding, BindToCoreAppliesWhatItReports) {
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus < 2) GTEST_SKIP() << "needs 2 cpus";
  temp_file report;
  auto r =
      run_command(pmrun({"-np", "2", "--bind-to", "core", "--map-by", "core", "--report-bindings",
                         "--report", report.path, "sh", "-c", print_cpus}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto got = by_rank(r.out);
  ASSERT_EQ(got.size(), 2u) << r.out;
  const auto lines = binding_lines(r.err);
  ASSERT_EQ(lines.size(), 2u) << r.err;
  const auto doc = report.json();
  std::set<std::string> seen;
  for (const auto& rank : doc["ranks"]) {
    const int n = rank["rank"];
    ASSERT_TRUE(rank["cpus"].is_string()) << doc.dump();
    EXPECT_EQ(got.at(n), rank["cpus"].get<std::string>()) << "rank " << n;
    // "MCW rank N bound to ... [B/.]": the B stands where the cpu is (one thread per core here).
    EXPECT_NE(lines[static_cast<std::size_t>(n)].find("MCW rank " + std::to_string(n) + " bound"),
              std::string::npos);
    seen.insert(got.at(n));
  }
  EXPECT_EQ(seen.size(), 2u) << "two ranks bound to the same core";
}

// The same options as mpirun 4.1: the same lines (but the [host:pid] prefix) and the same cpus.
TEST(PmrunBinding, AgreesWithMpirun) {
  if (::sysconf(_SC_NPROCESSORS_ONLN) < 2) GTEST_SKIP() << "needs 2 cpus";
  if (!std::filesystem::exists("/usr/bin/mpirun.openmpi")) GTEST_SKIP() << "no mpirun.openmpi";
  const std::vector<std::string> options = {
      "--report-bindings", "--bind-to", "core", "--map-by", "core", "-np", "2"};
  std::vector<std::string> theirs = {"/usr/bin/mpirun.openmpi", "--allow-run-as-root"};
  theirs.insert(theirs.end(), options.begin(), options.end());
  theirs.insert(theirs.end(), {"sh", "-c", print_cpus});
  const auto env = env_with({"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"});
  const auto m = run_command(theirs, std::chrono::seconds(60), "", &env);
  if (m.exit_code != 0) GTEST_SKIP() << "mpirun cannot run here: " << m.err;
  auto mine = options;
  mine.insert(mine.end(), {"sh", "-c", print_cpus});
  const auto p = run_command(pmrun(mine));
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_EQ(binding_lines(p.err), binding_lines(m.err)) << p.err << "\nmpirun:\n" << m.err;
  EXPECT_EQ(by_rank(p.out), by_rank(m.out));
}

// Not asked, not bound: the ranks keep every cpu pmd has (binding stays none by default).
TEST(PmrunBinding, NothingAskedNothingBound) {
  const auto r = run_command(pmrun({"-np", "2", "sh", "-c", print_cpus}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto mine =
      run_command({"/bin/sh", "-c", "grep Cpus_allowed_list /proc/self/status | cut -f2"});
  for (const auto& [rank, cpus] : by_rank(r.out)) EXPECT_EQ(cpus + "\n", mine.out) << rank;
  EXPECT_EQ(r.err, "");
}

// A DGX-2 on this machine (HWLOC_XMLFILE): each rank a GPU of its own, on its own NUMA node, as
// plan_host decides from the same XML; cpus that are not this machine's are planned and reported
// but not applied (one notice).
TEST(PmrunBinding, FakeDgx2GivesEachRankItsOwnGpu) {
  const auto xml = pm::test::topologies_dir() / "nvidiaDGX2.xml";
  if (!std::filesystem::exists(xml)) GTEST_SKIP() << "no " << xml;
  const auto env = env_with({"HWLOC_XMLFILE=" + xml.string()});
  temp_file report;
  const auto r = run_command(
      pmrun({"-np", "4", "--gpus-per-rank", "1", "--bind-to", "core", "--report", report.path, "sh",
             "-c", "echo R$OMPI_COMM_WORLD_RANK $CUDA_VISIBLE_DEVICES $CUDA_DEVICE_ORDER"}),
      std::chrono::seconds(60), "", &env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto topology = pm::topo::read_topology_xml(xml.string());
  pm::topo::binding_policy policy;
  policy.gpus.per_rank = 1;
  policy.bind.to = pm::topo::object::core;
  const auto plan = pm::topo::plan_host(topology, this_host(), 4, policy);
  const auto got = by_rank(r.out);
  ASSERT_EQ(got.size(), 4u) << r.out;
  std::set<std::string> gpus;
  const auto doc = report.json();
  for (std::uint32_t rank = 0; rank < 4; ++rank) {
    const auto& gpu = topology.gpus.at(plan.gpus(rank)[0]);
    EXPECT_EQ(got.at(static_cast<int>(rank)), std::to_string(gpu.index) + " PCI_BUS_ID");
    gpus.insert(got.at(static_cast<int>(rank)));
    // Its cores on its GPU's NUMA node while that node has free cores (this DGX-2 export keeps
    // 2 cores per package: ranks 2 and 3 get package 1's).
    std::uint32_t cores_there = 0;
    for (const auto& core : topology.cores) cores_there += core.numa == gpu.numa ? 1 : 0;
    if (rank >= cores_there) continue;
    for (const auto pu : plan.cpus(rank)) {
      bool on_node = false;
      for (const auto& core : topology.cores) {
        for (std::uint32_t i = 0; i < core.pu_count; ++i) {
          if (topology.pu_os_index[core.first_pu + i] == pu) on_node = core.numa == gpu.numa;
        }
      }
      EXPECT_TRUE(on_node) << "rank " << rank << " pu " << pu;
    }
    EXPECT_EQ(doc["ranks"][rank]["gpus"], nlohmann::json::array({gpu.index}));
    EXPECT_EQ(doc["ranks"][rank]["cpus"], pm::topo::cpu_list(plan.cpus(rank)));
  }
  EXPECT_EQ(gpus.size(), 4u) << r.out;
  // The DGX-2's cpus 0-95 are not all this machine's: not applied, said once.
  if (::sysconf(_SC_NPROCESSORS_ONLN) < 96) {
    EXPECT_NE(r.err.find(": binding not applied ("), std::string::npos) << r.err;
  }
}

// More GPUs than the host has: one line, exit 2, no rank started.
TEST(PmrunBinding, MoreGpusThanTheHostHasIsRefusedBeforeStart) {
  const auto xml = pm::test::topologies_dir() / "nvidiaDGX2.xml";
  if (!std::filesystem::exists(xml)) GTEST_SKIP() << "no " << xml;
  const auto env = env_with({"HWLOC_XMLFILE=" + xml.string()});
  temp_file report, marker;
  std::filesystem::remove(marker.path);
  const auto r = run_command(pmrun({"-np", "17", "--gpus-per-rank", "1", "--report", report.path,
                                    "sh", "-c", "touch " + marker.path}),
                             std::chrono::seconds(60), "", &env);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err,
            "pmrun: host '" + this_host() +
                "' has 16 GPUs; 17 ranks x 1 GPU asked (--gpus-per-rank 1; add :shared to share "
                "GPUs)\n");
  EXPECT_FALSE(std::filesystem::exists(marker.path)) << "a rank ran";
  const auto doc = report.json();
  for (const auto& rank : doc["ranks"]) EXPECT_EQ(rank["state"], "not_started");
}

// A machine without GPUs asked for one: refused the same way.
TEST(PmrunBinding, NoGpusIsRefused) {
  const auto xml = pm::test::topologies_dir() / "16em64t-4s2c2t.xml";
  if (!std::filesystem::exists(xml)) GTEST_SKIP() << "no " << xml;
  const auto env = env_with({"HWLOC_XMLFILE=" + xml.string()});
  const auto r = run_command(pmrun({"-np", "1", "--gpus-per-rank", "1", "/bin/true"}),
                             std::chrono::seconds(60), "", &env);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err, "pmrun: host '" + this_host() + "' has no GPUs (--gpus-per-rank 1)\n");
}

// More ranks than cores with --bind-to core: refused, naming the host and the counts.
TEST(PmrunBinding, MoreRanksThanCoresIsRefused) {
  const auto xml = pm::test::topologies_dir() / "16em64t-4s2c2t.xml";
  if (!std::filesystem::exists(xml)) GTEST_SKIP() << "no " << xml;
  const auto env = env_with({"HWLOC_XMLFILE=" + xml.string()});
  const auto r = run_command(pmrun({"-np", "9", "--bind-to", "core", "/bin/true"}),
                             std::chrono::seconds(60), "", &env);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err,
            "pmrun: host '" + this_host() +
                "' has 8 cores; 9 ranks x 1 core asked (--bind-to core; add :overload-allowed to "
                "bind more)\n");
}

}  // namespace
