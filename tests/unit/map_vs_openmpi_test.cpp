// Differential test: pmrun's mapping against Open MPI 4.1's own (`mpirun --display-map
// --do-not-launch`), on generated host lists and jobs. Skipped when mpirun.openmpi is missing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <vector>

#include "pm/error.hpp"
#include "pm/rank_map.hpp"

namespace {

struct openmpi_result {
  bool refused = false;
  std::map<std::uint32_t, std::string> host_of_rank;
};

// mpirun.openmpi, started at once; its map is read later, so that the cases run side by side.
// The hosts a, b, c, d exist nowhere: without `if_base_do_not_resolve` mpirun asked the DNS
// server for each name (traffic to an address the test does not own) and waited 5 s for an
// answer that never came, in several of the cases (31 s for the 24).
struct openmpi_run {
  FILE* pipe = nullptr;
  explicit openmpi_run(const std::string& hosts, const std::string& args)
      : pipe(popen(("exec mpirun.openmpi --allow-run-as-root -mca if_base_do_not_resolve 1 "
                    "--bind-to none --display-map --do-not-launch -H " +
                    hosts + " " + args + " true 2>&1")
                       .c_str(),
                   "r")) {}
  openmpi_run(const openmpi_run&) = delete;
  openmpi_run& operator=(const openmpi_run&) = delete;
  ~openmpi_run() {
    if (pipe != nullptr) pclose(pipe);
  }

  openmpi_result result() {
    std::string text;
    if (pipe != nullptr) {
      char buf[4096];
      std::size_t n;
      while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) text.append(buf, n);
      pclose(pipe);
      pipe = nullptr;
    }
    openmpi_result result;
    std::istringstream in(text);
    std::string line, node;
    while (std::getline(in, line)) {
      if (auto p = line.find("Data for node: "); p != std::string::npos) {
        node = line.substr(p + 15, line.find('\t') - p - 15);
      } else if (auto r = line.find("Process rank: "); r != std::string::npos) {
        result.host_of_rank[static_cast<std::uint32_t>(std::stoul(line.substr(r + 14)))] = node;
      }
    }
    result.refused = result.host_of_rank.empty();
    return result;
  }
};

struct map_case {
  std::string hosts, args;
  pm::allocation alloc;
  pm::job_spec job;
  std::unique_ptr<openmpi_run> theirs;
};

TEST(MapVsOpenMpi, SameRanksOnSameHosts) {
  if (access("/usr/bin/mpirun.openmpi", X_OK) != 0) GTEST_SKIP() << "mpirun.openmpi not installed";
  std::mt19937 rng(20261122);  // the engine is fully specified; no std distributions
  std::vector<map_case> cases(24);
  for (auto& c : cases) {
    auto& alloc = c.alloc;
    auto& hosts = c.hosts;
    auto& job = c.job;
    const auto nhosts = static_cast<std::uint32_t>(1 + rng() % 4);
    const bool equal_slots = rng() % 2 == 0;
    const auto shared_slots = static_cast<std::uint32_t>(1 + rng() % 4);
    alloc.source = pm::allocation_source::host_list;
    for (std::uint32_t h = 0; h < nhosts; ++h) {
      const auto slots = equal_slots ? shared_slots : static_cast<std::uint32_t>(1 + rng() % 4);
      alloc.hosts.push_back(pm::host{std::string(1, static_cast<char>('a' + h)), slots});
      hosts += (h ? "," : "") + alloc.hosts.back().name + ":" + std::to_string(slots);
    }
    const auto policy = rng() % 3;
    const bool oversubscribe = rng() % 3 == 0;
    const auto np = static_cast<std::uint32_t>(1 + rng() % (alloc.total_slots() + 3));
    job.apps.push_back(pm::app_context{{"true"}, np, {}, {}});
    std::string args = "-np " + std::to_string(np);
    if (policy == 0) {
      job.mapping.by = pm::map_by::slot;
      args += " --map-by slot";
    } else if (policy == 1) {
      job.mapping.by = pm::map_by::node;
      args += " --map-by node";
    } else {
      job.mapping.by = pm::map_by::ppr_node;
      job.mapping.ppr = static_cast<std::uint32_t>(1 + rng() % 3);
      args += " --map-by ppr:" + std::to_string(job.mapping.ppr) + ":node";
    }
    if (oversubscribe) {
      job.mapping.oversubscribe = true;
      args += " --oversubscribe";
    }
    c.args = args;
    c.theirs = std::make_unique<openmpi_run>(hosts, args);
  }
  int compared = 0, refused_both = 0;
  for (auto& [hosts, args, alloc, job, run] : cases) {
    const auto theirs = run->result();
    std::optional<pm::rank_map> ours;
    try {
      ours = pm::map_job(job, alloc);
    } catch (const pm::error&) {
    }
    SCOPED_TRACE("mpirun -H " + hosts + " " + args);
    ASSERT_EQ(theirs.refused, !ours.has_value());
    if (!ours) {
      ++refused_both;
      continue;
    }
    ASSERT_EQ(theirs.host_of_rank.size(), ours->size());
    for (std::uint32_t r = 0; r < ours->size(); ++r) {
      EXPECT_EQ(theirs.host_of_rank.at(r), alloc.hosts[ours->at(r).host].name) << "rank " << r;
    }
    ++compared;
  }
  EXPECT_GT(compared, 10);
  RecordProperty("refused_by_both", refused_both);
}

}  // namespace
