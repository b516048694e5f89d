// GPUs across fake hosts of different shapes (docs/gpus.md, issue 23): each host's sshd sets
// hwloc's own HWLOC_XMLFILE for its sessions (hosts.sh --topology), so pmd on node1 reads a DGX-2
// (16 V100s, 2 NUMA nodes) and pmd on node2 that DGX-2's package 1 alone (8 V100s, one NUMA node
// with OS index 1), cut from the same export with hwloc's own `lstopo --restrict`. What the ranks
// must get is checked against hwloc's tools on the same XML (lstopo's PCI list for the GPUs'
// order, hwloc-calc for every NUMA node), never against pmrun's own summary.
#include <stdlib.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "support/command.hpp"
#include "support/multihost.hpp"
#include "support/topologies.hpp"

namespace {

using namespace std::chrono_literals;
using pm::test::hosts_clean;
using pm::test::left_on_hosts;
using pm::test::multihost_fixture;
using pm::test::run_command;
namespace fs = std::filesystem;

// A temporary directory of the test's (the cut topology, reports, markers), removed however the
// test ends.
struct scratch_dir {
  fs::path path;
  scratch_dir() {
    char templ[] = "/tmp/pm-gpu-hosts.XXXXXX";
    if (::mkdtemp(templ) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = templ;
  }
  ~scratch_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
};

// One host's shape as hwloc's tools tell it.
struct shape {
  fs::path xml;
  std::vector<std::string> gpus;  // NVIDIA GPUs' PCI bus ids in bus order: the CUDA index order
  // NUMA node (OS index) of a GPU and of a cpu (OS index), by hwloc-calc.
  unsigned gpu_numa(unsigned index) const { return numa_of("pci=" + gpus.at(index), "--po"); }
  unsigned cpu_numa(unsigned cpu) const {
    return numa_of("pu:" + std::to_string(cpu), "--pi --po");
  }

 private:
  unsigned numa_of(const std::string& where, const std::string& flags) const {
    const auto out = pm::test::hwloc_calc(xml, flags + " -I numa " + where);
    const auto nodes = pm::test::numbers(out);
    if (nodes.size() != 1) throw std::runtime_error("hwloc-calc: " + where + " -> '" + out + "'");
    return nodes[0];
  }
};

// NVIDIA's display and 3D controllers (classes 0300, 0302) in PCI bus order, from `lstopo -v`.
shape shape_of(const fs::path& xml) {
  shape s{xml, {}};
  std::istringstream in(
      pm::test::run_command("lstopo-no-graphics -v --if xml --input '" + xml.string() + "'"));
  const std::regex re(R"(busid=(\S+) id=10de:\S+ class=030[02])");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, re)) s.gpus.push_back(m[1]);
  }
  std::sort(s.gpus.begin(), s.gpus.end());
  return s;
}

class PmrunGpuHosts : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!multihost_fixture::available()) {
      GTEST_SKIP() << "no fake hosts here: " << multihost_fixture::unavailable_reason();
    }
    if (!pm::test::have_hwloc_calc()) GTEST_SKIP() << "hwloc-calc/lstopo missing (apt: hwloc)";
    dir_ = std::make_unique<scratch_dir>();
    const fs::path dgx2 = pm::test::topologies_dir() / "nvidiaDGX2.xml";
    // Package 1 of the DGX-2 as a machine of its own: its cpus, its NUMA node, the GPUs under it
    // (restrict flag 1: cpu-less objects go, and I/O under them with them).
    const fs::path half = dir_->path / "dgx2-package1.xml";
    const auto package1 = pm::test::hwloc_calc(dgx2, "package:1");
    bool ok = false;
    pm::test::run_command("lstopo-no-graphics --if xml --input '" + dgx2.string() +
                              "' --restrict " + package1 + " --restrict-flags 1 --of xml '" +
                              half.string() + "'",
                          &ok);
    ASSERT_TRUE(ok && fs::exists(half)) << "lstopo --restrict failed";
    shapes_ = {shape_of(dgx2), shape_of(half)};
    ASSERT_EQ(shapes_[0].gpus.size(), 16u);  // the DGX-2's V100s, as lstopo lists them
    ASSERT_GE(shapes_[1].gpus.size(), 4u);
    ASSERT_LT(shapes_[1].gpus.size(), shapes_[0].gpus.size());
    hosts_ = std::make_unique<multihost_fixture>(2, pm::test::multihost_options()
                                                        .with_topology(1, dgx2.string())
                                                        .with_topology(2, half.string()));
  }
  void TearDown() override {
    if (hosts_) {
      EXPECT_TRUE(hosts_clean(*hosts_)) << left_on_hosts(*hosts_);
    }
    hosts_.reset();  // down before the XMLs go
    dir_.reset();
  }

  const std::string& name(int k) const { return hosts_->hosts().at(k).name; }
  std::size_t gpus(int k) const { return shapes_.at(k).gpus.size(); }

  pm::test::command_result pmrun(std::vector<std::string> args) {
    std::vector<std::string> argv = {pm::test::pmrun_path(), "--allow-run-as-root", "-mca",
                                     "plm_rsh_agent", "ssh -F " + hosts_->ssh_config()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv, 60s);
  }

  // Runs a job whose ranks print their host and CUDA_VISIBLE_DEVICES, and checks every rank:
  // its GPU is its host's, no two ranks of a host share one, what it sees is what the report
  // says, and every cpu it is given is on its GPU's NUMA node. Returns the report's ranks.
  nlohmann::json run_and_check(const std::vector<std::string>& options, std::size_t ranks) {
    const fs::path report = dir_->path / "report.json";
    std::vector<std::string> args = options;
    args.insert(args.end(), {"--report", report.string(), "sh", "-c",
                             "echo \"rank=$OMPI_COMM_WORLD_RANK $(hostname) "
                             "${CUDA_VISIBLE_DEVICES-unset} pml=${OMPI_MCA_pml-}\""});
    const auto r = pmrun(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const auto seen = pm::test::lines_by_rank(r.out);
    EXPECT_EQ(seen.size(), ranks) << r.out;
    std::ifstream in(report);
    const auto doc = nlohmann::json::parse(in, nullptr, false);
    if (doc.is_discarded() || !doc.contains("ranks") || doc["ranks"].size() != ranks) {
      ADD_FAILURE() << "no report of " << ranks << " ranks";
      return nlohmann::json::array();
    }
    std::map<std::string, std::set<unsigned>> taken;  // host -> GPUs given
    for (const auto& rank : doc["ranks"]) {
      const int number = rank["rank"].get<int>();
      const std::string host = rank["host"].get<std::string>();
      SCOPED_TRACE("rank " + std::to_string(number) + " on " + host);
      const int k = host == name(0) ? 0 : 1;
      if (host != name(k) || rank["gpus"].size() != 1) {
        ADD_FAILURE() << "not a rank of the hosts with one GPU: " << rank.dump();
        continue;
      }
      const unsigned gpu = rank["gpus"][0].get<unsigned>();
      EXPECT_LT(gpu, gpus(k));
      EXPECT_TRUE(taken[host].insert(gpu).second) << "GPU " << gpu << " given twice";
      // What the rank itself saw: its host, its GPU alone, and no ob1/tcp shortcut (a GPU host
      // by its summary; this machine itself has no GPU and no RDMA device).
      EXPECT_EQ(seen.count(number) ? seen.at(number) : "",
                host + " " + std::to_string(gpu) + " pml=");
      const auto cpus = pm::test::cpu_ranges(rank["cpus"].get<std::string>());
      EXPECT_FALSE(cpus.empty());
      const unsigned numa = shapes_[static_cast<std::size_t>(k)].gpu_numa(gpu);
      for (const unsigned c : cpus) {
        EXPECT_EQ(shapes_[static_cast<std::size_t>(k)].cpu_numa(c), numa)
            << "cpu " << c << " is not on GPU " << gpu << "'s NUMA node";
      }
    }
    return doc["ranks"];
  }

  // A job refused before start: exit 2, one line naming one of `wants` (hosts are planned once
  // all answered; either may be the one named), and no rank ran on any host (each would have
  // left a marker in a directory every host sees).
  void expect_refused(std::vector<std::string> options, const std::vector<std::string>& wants) {
    const fs::path markers = dir_->path / "markers";
    fs::create_directories(markers);
    options.insert(options.end(), {"sh", "-c", "touch " + markers.string() + "/ran.$(hostname)"});
    const auto r = pmrun(options);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(std::any_of(wants.begin(), wants.end(), [&](const std::string& want) {
      return r.err.find(want) != std::string::npos;
    })) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_TRUE(fs::is_empty(markers)) << "a rank ran";
  }

  std::unique_ptr<scratch_dir> dir_;
  std::vector<shape> shapes_;
  std::unique_ptr<multihost_fixture> hosts_;
};

// Every GPU of both hosts, one per rank. The DGX-2 export has 2 cores per NUMA node for its 8
// GPUs there, so 16 ranks bound to cores share them (overload-allowed): the cores still follow
// each rank's GPU.
TEST_F(PmrunGpuHosts, EveryRankGetsItsOwnGpuWithCoresOnThatGpusNumaNode) {
  const auto a = gpus(0), b = gpus(1);
  const auto ranks = run_and_check(
      {"-H", name(0) + ":" + std::to_string(a) + "," + name(1) + ":" + std::to_string(b),
       "--gpus-per-rank", "1", "--bind-to", "core:overload-allowed"},
      a + b);
  std::map<std::string, std::size_t> per_host;
  for (const auto& r : ranks) ++per_host[r["host"].get<std::string>()];
  EXPECT_EQ(per_host[name(0)], a);
  EXPECT_EQ(per_host[name(1)], b);
}

// Strict core binding across both hosts (no overload): also a core of its own per rank. Then the
// same placed by NUMA node first (--map-by numa), where the GPU follows the rank's place.
TEST_F(PmrunGpuHosts, BoundToCoresAndMappedByNumaAcrossBothHosts) {
  const std::string cores1 = pm::test::hwloc_calc(shapes_[0].xml, "-N core machine:0");
  const std::string cores2 = pm::test::hwloc_calc(shapes_[1].xml, "-N core machine:0");
  const std::string hosts = name(0) + ":" + cores1 + "," + name(1) + ":" + cores2;
  const std::size_t ranks = std::stoul(cores1) + std::stoul(cores2);
  for (const std::vector<std::string>& placement :
       {std::vector<std::string>{}, std::vector<std::string>{"--map-by", "numa"}}) {
    SCOPED_TRACE(placement.empty() ? "map-by slot" : "map-by numa");
    std::vector<std::string> options = {"-H", hosts, "--gpus-per-rank", "1", "--bind-to", "core"};
    options.insert(options.end(), placement.begin(), placement.end());
    const auto done = run_and_check(options, ranks);
    std::map<std::string, std::set<std::string>> cpus;
    for (const auto& r : done) {
      EXPECT_TRUE(cpus[r["host"].get<std::string>()].insert(r["cpus"].get<std::string>()).second)
          << "core shared: " << r.dump();
    }
  }
}

// More GPUs than a host has, in either way, is refused in one line before any rank starts on
// either host.
TEST_F(PmrunGpuHosts, AskingMoreGpusThanAHostHasIsRefusedBeforeAnyRankStarts) {
  const auto a = gpus(0), b = gpus(1);
  const auto slots = [&](std::size_t on_a, std::size_t on_b) {
    return name(0) + ":" + std::to_string(on_a) + "," + name(1) + ":" + std::to_string(on_b);
  };
  const auto too_few = [&](int k, std::size_t ranks, int each) {
    return "host '" + name(k) + "' has " + std::to_string(gpus(k)) + " GPUs; " +
           std::to_string(ranks) + " ranks x " + std::to_string(each) +
           (each == 1 ? " GPU" : " GPUs") + " asked";
  };
  // One rank more than node2 has GPUs.
  expect_refused(
      {"-H", slots(a, b + 1), "--gpus-per-rank", "1", "--bind-to", "core:overload-allowed"},
      {too_few(1, b + 1, 1)});
  // As many ranks as GPUs, two GPUs each: both hosts are short.
  expect_refused({"-H", slots(a, b), "--gpus-per-rank", "2"}, {too_few(0, a, 2), too_few(1, b, 2)});
  // More GPUs for one rank than node1 has.
  const auto each = std::to_string(a + 1);
  expect_refused({"-H", slots(1, 1), "--gpus-per-rank", each},
                 {"host '" + name(0) + "' has " + std::to_string(a) + " GPUs; --gpus-per-rank " +
                      each + " asks " + each + " for each rank",
                  "host '" + name(1) + "' has " + std::to_string(b) + " GPUs; --gpus-per-rank " +
                      each + " asks " + each + " for each rank"});
}

}  // namespace
