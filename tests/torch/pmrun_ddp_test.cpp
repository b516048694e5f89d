// PyTorch DDP training (gloo, CPU; tests/torch/ddp_train.py) under pmrun across fake hosts
// (tests/multihost/README.md) that survives a lost host (docs/resilience.md, "Training that
// survives a lost host"): with a spare host the killed host's ranks move there and the job resumes
// from the last checkpoint, ending with parameters bit-identical to an uninterrupted run; without
// one, `--min-hosts 2` goes on with the hosts left (WORLD_SIZE 4 instead of 6). Label multihost;
// skips where there are no fake hosts or no PyTorch with gloo (Debian's python3-torch).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include "support/command.hpp"
#include "support/multihost.hpp"

namespace {

using namespace std::chrono_literals;
using pm::test::hosts_clean;
using pm::test::left_on_hosts;
using pm::test::multihost_fixture;
using pm::test::run_command;
namespace fs = std::filesystem;

constexpr const char* python = "/usr/bin/python3";  // Debian's, with python3-torch
constexpr int steps = 30;
constexpr int every = 10;  // a checkpoint every 10 steps; the host dies after the first one

// Why this machine cannot run the training ("" if it can), asked once.
const std::string& no_torch() {
  static const std::string reason = [] {
    const auto r = run_command(
        {python, "-c", "import torch.distributed as d; assert d.is_gloo_available()"}, 60s);
    return r.exit_code == 0 ? std::string()
                            : std::string("no PyTorch with gloo in ") + python +
                                  " (apt-get install python3-torch)";
  }();
  return reason;
}

#define NEED_TORCH() \
  NEED_HOSTS();      \
  if (!no_torch().empty()) GTEST_SKIP() << no_torch();

// A fresh directory for one run's checkpoints (every host sees this machine's /tmp), removed after.
struct scratch_dir {
  std::string path;
  scratch_dir() {
    char name[] = "/tmp/pm-ddp-XXXXXX";
    path = mkdtemp(name) != nullptr ? name : "";
  }
  ~scratch_dir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  std::string file(const std::string& name) const { return path + "/" + name; }
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

std::vector<std::string> pmrun(const multihost_fixture& f, const std::string& hosts, int np,
                               const std::vector<std::string>& options, const scratch_dir& dir) {
  std::vector<std::string> argv = {pm::test::pmrun_path(),
                                   "--allow-run-as-root",
                                   "-mca",
                                   "plm_rsh_agent",
                                   "ssh -F " + f.ssh_config(),
                                   "-H",
                                   hosts,
                                   "-np",
                                   std::to_string(np)};
  argv.insert(argv.end(), options.begin(), options.end());
  argv.insert(argv.end(), {python, std::string(PM_SOURCE_DIR) + "/tests/torch/ddp_train.py",
                           "--dir", dir.path, "--steps", std::to_string(steps), "--every",
                           std::to_string(every), "--sleep", "0.1"});
  return argv;
}

double wall_clock() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Crashes `host` once the checkpoint of step `every` is in `dir` (or gives up once `over`);
// `killed_at` is the wall clock just before the crash (0: none).
std::thread crash_after_checkpoint(multihost_fixture& f, const std::string& host,
                                   const scratch_dir& dir, std::atomic<double>& killed_at,
                                   const std::atomic<bool>& over) {
  return std::thread([&f, host, &dir, &killed_at, &over] {
    const auto checkpoint = dir.file("ckpt-" + std::string(6 - std::to_string(every).size(), '0') +
                                     std::to_string(every) + ".pt");
    while (!fs::exists(checkpoint) && !over) {
      std::this_thread::sleep_for(20ms);
    }
    if (!fs::exists(checkpoint)) return;
    killed_at = wall_clock();
    f.crash(host);
  });
}

// One "start rank R world W local L restart C host H pid P from S t0 T" line of ddp_train.py.
struct start_line {
  int rank, world, restart, from;
  std::string host, pid;
  double t0;
};

std::vector<start_line> starts(const std::string& out) {
  std::vector<start_line> found;
  const std::regex re(
      R"(start rank (\d+) world (\d+) local \d+ restart (\d+) host (\S+) pid (\d+) from (\d+) t0 ([\d.]+))");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator();
       ++it) {
    found.push_back({std::stoi((*it)[1]), std::stoi((*it)[2]), std::stoi((*it)[3]),
                     std::stoi((*it)[6]), (*it)[4], (*it)[5], std::stod((*it)[7])});
  }
  return found;
}

// What the recovery took, from the kill until every rank of the next incarnation ran (its first
// line, before `import torch`) and until each had finished its first step: one line for the log.
void say_recovery(const std::string& out, double killed_at) {
  double running = 0, stepping = 0;
  std::set<std::string> pids;
  for (const auto& s : starts(out)) {
    if (s.restart == 0) continue;
    running = std::max(running, s.t0 - killed_at);
    pids.insert(s.pid);
  }
  const std::regex re(R"(step \d+ rank \d+ world \d+ pid (\d+) t ([\d.]+))");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator();
       ++it) {
    if (pids.erase((*it)[1]) == 1) stepping = std::max(stepping, std::stod((*it)[2]) - killed_at);
  }
  std::printf("[ ddp ] kill -> every rank running again %.2f s, stepping again %.2f s\n", running,
              stepping);
}

// The ranks that printed "done rank R world W".
std::map<int, int> done(const std::string& out) {
  std::map<int, int> world_by_rank;
  const std::regex re(R"(done rank (\d+) world (\d+))");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator();
       ++it) {
    world_by_rank[std::stoi((*it)[1])] = std::stoi((*it)[2]);
  }
  return world_by_rank;
}

// (a) 3 hosts x 2 ranks, uninterrupted: the hash H. (b) the same with node4 as spare and node2
// killed after the first checkpoint: the ranks of node2 go to node4, every rank resumes from the
// checkpoint, and the parameters end bit-identical to H.
TEST(PmrunDdp, ASpareHostTakesTheLostHostsRanksAndTheTrainingEndsBitIdentical) {
  NEED_TORCH();
  multihost_fixture f(4);
  const auto& n = f.hosts();
  const std::string three = n[0].name + ":2," + n[1].name + ":2," + n[2].name + ":2";
  scratch_dir plain;
  const auto a = run_command(pmrun(f, three, 6, {}, plain), 120s);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const auto want = read_file(plain.file("params.sha256"));
  ASSERT_EQ(want.size(), 64u) << a.out;
  EXPECT_EQ(done(a.out).size(), 6u) << a.out;

  scratch_dir dir;
  std::atomic<double> killed_at{0};
  std::atomic<bool> over{false};
  auto killer = crash_after_checkpoint(f, n[1].name, dir, killed_at, over);
  const auto b =
      run_command(pmrun(f, three + "," + n[3].name + ":2", 6, {"--max-restarts", "3"}, dir), 120s);
  over = true;
  killer.join();
  ASSERT_GT(killed_at, 0) << b.out << b.err;
  say_recovery(b.out, killed_at);
  EXPECT_EQ(b.exit_code, 0) << b.err;
  EXPECT_NE(b.err.find("restarting the job (1 of 3)"), std::string::npos) << b.err;
  const std::regex restart_line("restarting the job \\(1 of 3\\)[^\n]*" + n[1].name);
  EXPECT_TRUE(std::regex_search(b.err, restart_line)) << b.err;
  EXPECT_NE(b.err.find("ranks 2-3 move from " + n[1].name + " to spare " + n[3].name),
            std::string::npos)
      << b.err;
  EXPECT_EQ(read_file(dir.file("params.sha256")), want) << b.out;
  std::map<int, std::string> second;  // rank -> host of the incarnation after the crash
  for (const auto& s : starts(b.out)) {
    if (s.restart == 0) continue;
    second[s.rank] = s.host;
    EXPECT_EQ(s.world, 6) << b.out;
    EXPECT_GE(s.from, every) << b.out;  // resumed from a checkpoint, not from scratch
  }
  ASSERT_EQ(second.size(), 6u) << b.out;
  for (int rank = 0; rank < 6; ++rank) {
    const auto& host = rank / 2 == 1 ? n[3].name : n[static_cast<std::size_t>(rank / 2)].name;
    EXPECT_EQ(second[rank], host) << "rank " << rank << "\n" << b.out;
  }
  EXPECT_EQ(done(b.out).size(), 6u) << b.out;
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

// No spare, --min-hosts 2: node2 is killed after the first checkpoint and the training goes on
// from it on node1 and node3 with WORLD_SIZE 4. The global batch is the same at every world size
// (ddp_train.py), but 4 ranks sum in another order than 6: the check of the bits is against a
// 4-rank run resumed from the same checkpoint.
TEST(PmrunDdp, WithoutASpareTheTrainingGoesOnWithTheHostsLeft) {
  NEED_TORCH();
  multihost_fixture f(3);
  const auto& n = f.hosts();
  scratch_dir dir;
  std::atomic<double> killed_at{0};
  std::atomic<bool> over{false};
  auto killer = crash_after_checkpoint(f, n[1].name, dir, killed_at, over);
  const auto r = run_command(pmrun(f, pm::test::hosts_with_slots(f, 2), 6,
                                   {"--max-restarts", "3", "--min-hosts", "2"}, dir),
                             120s);
  over = true;
  killer.join();
  ASSERT_GT(killed_at, 0) << r.out << r.err;
  say_recovery(r.out, killed_at);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::regex restart_line("restarting the job \\(1 of 3\\)[^\n]*" + n[1].name);
  EXPECT_TRUE(std::regex_search(r.err, restart_line)) << r.err;
  EXPECT_NE(r.err.find("going on with 2 hosts and 4 ranks (--min-hosts 2)"), std::string::npos)
      << r.err;
  int from = -1;
  std::set<int> ranks;
  for (const auto& s : starts(r.out)) {
    if (s.restart == 0) continue;
    EXPECT_EQ(s.world, 4) << r.out;
    EXPECT_NE(s.host, n[1].name) << r.out;
    ranks.insert(s.rank);
    from = s.from;
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3})) << r.out;
  ASSERT_GE(from, every) << r.out;
  const auto finished = done(r.out);
  EXPECT_EQ(finished, (std::map<int, int>{{0, 4}, {1, 4}, {2, 4}, {3, 4}})) << r.out;
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);

  // The reference: 4 ranks on the same hosts, resumed from the checkpoint the restart resumed
  // from, uninterrupted.
  scratch_dir ref;
  char step[16];
  std::snprintf(step, sizeof step, "ckpt-%06d.pt", from);
  fs::copy_file(dir.file(step), ref.file(step));
  const auto c = run_command(pmrun(f, n[0].name + ":2," + n[2].name + ":2", 4, {}, ref), 120s);
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(read_file(dir.file("params.sha256")), read_file(ref.file("params.sha256")));
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

}  // namespace
