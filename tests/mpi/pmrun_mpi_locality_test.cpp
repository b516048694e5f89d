// MPI knows the locality (docs/pmix.md, "Locality"; issue 23): a rank pmrun bound is told its
// cpuset and locality string by its agent's PMIx server, as PRRTE tells them, and they are the
// cpus it runs on, those --report and --report-bindings name, and hwloc's objects holding them
// (hwloc-calc on this machine, never pmrun's own summary). On this 2-core machine the bindings
// really apply.
#include <sched.h>

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "mpi/pmrun_mpi.hpp"
#include "support/topologies.hpp"

namespace {

// "0-1,4" -> {0, 1, 4}.
std::set<unsigned> cpu_set(const std::string& list) {
  const auto cpus = pm::test::cpu_ranges(list);
  return {cpus.begin(), cpus.end()};
}

// hwloc-calc's logical indexes of the OBJs holding `cpus` (OS indexes) on this machine.
std::set<unsigned> holding(const std::string& obj, const std::set<unsigned>& cpus) {
  std::string where;
  for (const unsigned c : cpus) where += " pu:" + std::to_string(c);
  const auto out = pm::test::run_command("hwloc-calc --pi -I " + obj + where);
  const auto numbers = pm::test::numbers(out);
  return {numbers.begin(), numbers.end()};
}

// The field of a PMIx locality string ("SK0:L30:L21:L11:CR1:HT1:NM0") that starts with `tag`
// followed by a digit, as a set; nullopt when absent.
std::optional<std::set<unsigned>> field(const std::string& locality, const std::string& tag) {
  std::istringstream in(locality);
  for (std::string part; std::getline(in, part, ':');) {
    if (part.size() > tag.size() && part.compare(0, tag.size(), tag) == 0 &&
        std::isdigit(static_cast<unsigned char>(part[tag.size()])) != 0) {
      return cpu_set(part.substr(tag.size()));
    }
  }
  return std::nullopt;
}

struct told {
  std::string cpuset, locality;
  std::set<unsigned> affinity;
  std::map<unsigned, std::string> peers;  // local peer -> the locality string it is told
};

std::map<unsigned, told> parse(const std::string& out) {
  std::map<unsigned, told> ranks;
  const std::regex self(R"(locality rank (\d+) cpuset (\S+) locality (\S+) affinity (\S*))");
  const std::regex peer(R"(peer (\d+) of (\d+) locality (\S+))");
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_match(line, m, self)) {
      auto& t = ranks[static_cast<unsigned>(std::stoul(m[1]))];
      t.cpuset = m[2];
      t.locality = m[3];
      t.affinity = cpu_set(m[4]);
    } else if (std::regex_match(line, m, peer)) {
      ranks[static_cast<unsigned>(std::stoul(m[2]))]
          .peers[static_cast<unsigned>(std::stoul(m[1]))] = m[3];
    }
  }
  return ranks;
}

TEST_F(PmrunMpi, BoundRanksAreToldTheirCpusetAndLocalityByPmix) {
  if (!pm::test::have_hwloc_calc()) GTEST_SKIP() << "hwloc-calc missing (apt: hwloc)";
  const std::string report = tmp_ + "/report.json";
  const auto r = pmrun({"-np", "2", "--bind-to", "core", "--report-bindings", "--report", report,
                        mpi_dir + "/pmix_locality"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(report);
  const auto doc = nlohmann::json::parse(in);
  const auto ranks = parse(r.out);
  ASSERT_EQ(ranks.size(), 2u) << r.out;
  for (const auto& [rank, t] : ranks) {
    SCOPED_TRACE("rank " + std::to_string(rank) + ": " + t.cpuset + " " + t.locality);
    const auto cpus = cpu_set(doc["ranks"][rank]["cpus"].get<std::string>());
    ASSERT_FALSE(cpus.empty());
    // --report-bindings says the same cores ("[B/..]" per bound core of its package).
    EXPECT_NE(r.err.find("MCW rank " + std::to_string(rank) + " bound to"), std::string::npos)
        << r.err;
    // PMIX_CPUSET: PMIx's "hwloc:<list>", the cpus of the report, the cpus it runs on.
    ASSERT_EQ(t.cpuset.rfind("hwloc:", 0), 0u);
    EXPECT_EQ(cpu_set(t.cpuset.substr(6)), cpus);
    EXPECT_EQ(t.affinity, cpus);
    // PMIX_LOCALITY_STRING: hwloc's package, core, threads and NUMA node of those cpus (logical
    // indexes).
    EXPECT_EQ(field(t.locality, "SK"), holding("package", cpus));
    EXPECT_EQ(field(t.locality, "CR"), holding("core", cpus));
    EXPECT_EQ(field(t.locality, "HT"), holding("pu", cpus));
    EXPECT_EQ(field(t.locality, "NM"), holding("numa", cpus));
  }
  // Each rank is told its local peer's locality as that peer is (what Open MPI compares).
  for (const auto& [rank, t] : ranks) {
    for (const auto& [peer, locality] : t.peers) {
      EXPECT_EQ(locality, ranks.at(peer).locality) << "rank " << rank << " about " << peer;
    }
    EXPECT_EQ(t.peers.size(), ranks.size());  // every local rank, itself included
  }
  fs::remove(report);
  expect_nothing_left();
}

TEST_F(PmrunMpi, UnboundRanksHaveNoCpusetAndMpiRunsBoundAndUnbound) {
  auto r = pmrun({"-np", "2", mpi_dir + "/pmix_locality"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto ranks = parse(r.out);
  ASSERT_EQ(ranks.size(), 2u) << r.out;
  for (const auto& [rank, t] : ranks) {
    EXPECT_EQ(t.cpuset, "none") << rank;
    EXPECT_EQ(t.locality, "none") << rank;
  }
  // Open MPI reads the locality strings of its local peers in MPI_Init: it must take ours.
  for (const std::vector<std::string>& bind :
       {std::vector<std::string>{"--bind-to", "core"}, std::vector<std::string>{}}) {
    std::vector<std::string> args = bind;
    args.insert(args.end(), {"-np", "2", mpi_dir + "/mpi_ring"});
    r = pmrun(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("ring size 2 sum 1"), std::string::npos) << r.out;
  }
  expect_nothing_left();
}

}  // namespace
