// The differential test between worlds (issue 21, docs/simulator.md "The differential test"):
// each scenario runs twice, once as pmrun over fake hosts (network namespaces, real sshd, real
// processes, real faults: tests/multihost/README.md) and once in the simulator (pm::sim, virtual
// hosts and time, the same faults in its fault plan), and the launcher's and the controller's
// decisions must be the same in both. Both worlds drive the one launcher machine
// (pm::launch::launcher, which owns the controller), and both report its decisions through
// launch_config::decisions: pmrun appends them to the file PM_TEST_DECISION_LOG names as
// "HOST DECISION" lines, the simulator hands them to run_options::decisions. A decision is about
// a host (its allocation index) or the whole job ("*"): "spawn [0 1]", "signal [2] SIGTERM",
// "notify ...", "open N" (the link's Nth attempt), "retry", "greeted", "lost", "lost before its
// hello", "given up", and "finish CODE CAUSE". No times.
//
// How they are compared: the order of decisions about different hosts depends on which host's
// bytes arrive first, which no world fixes, so each host's own sequence is compared (real and
// simulated must be equal, element by element), and the job's finish (code and cause). Within
// one host's sequence nothing here is racy: every scenario's fault or failure comes once every
// rank runs, and the ranks that are still running when the abort's signals go out are fixed by
// the scenario (they sleep or wait in a barrier that never completes; an aborting MPI rank is
// held in PMIx_Abort until it is signalled, pmix_relay::release_abort), so the full sequences
// are compared.
//
// Host names differ (the fixture's node1..nodeN, the simulator's node0..nodeN-1); decisions name
// hosts by allocation index, so the same allocation order is what is compared.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "pm/sim/world.hpp"
#include "support/command.hpp"
#include "support/multihost.hpp"

extern char** environ;

namespace {

using namespace std::chrono_literals;
using pm::test::every_host_busy;
using pm::test::hosts_clean;
using pm::test::hosts_with_slots;
using pm::test::left_on_hosts;
using pm::test::multihost_fixture;
using pm::test::run_command;

// One world's decisions: each host's sequence ("0", "1", ...) and the job's ("*").
using decisions = std::map<std::string, std::vector<std::string>>;

std::string show(const decisions& d) {
  std::string out;
  for (const auto& [host, seq] : d) {
    out += "  " + host + ":";
    for (const auto& x : seq) out += " {" + x + "}";
    out += "\n";
  }
  return out;
}

// The lines "HOST DECISION" of a PM_TEST_DECISION_LOG file.
decisions read_log(const std::string& path) {
  decisions d;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto space = line.find(' ');
    if (space == std::string::npos) continue;
    d[line.substr(0, space)].push_back(line.substr(space + 1));
  }
  return d;
}

// The real world's run: pmrun's result and decisions.
struct real_run {
  pm::test::command_result result;
  decisions decided;
};

// Runs pmrun over the fixture's hosts with `args`, its decisions logged; `fault` (if any) runs
// on a thread beside it, from pmrun's start. The log lives in the fixture's state dir (removed
// with it).
real_run run_real(multihost_fixture& f, const std::string& rsh_agent,
                  const std::vector<std::string>& args,
                  const std::function<void()>& fault = nullptr) {
  const std::string log = f.state_dir() + "/decisions.log";
  std::filesystem::remove(log);
  std::vector<std::string> argv = {pm::test::pmrun_path(), "--allow-run-as-root", "-mca",
                                   "plm_rsh_agent", rsh_agent};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string_view(*e).starts_with("PM_TEST_DECISION_LOG=")) continue;
    env.emplace_back(*e);
  }
  env.push_back("PM_TEST_DECISION_LOG=" + log);
  std::thread faulting;
  if (fault) faulting = std::thread(fault);
  real_run r;
  r.result = run_command(argv, 90s, "", &env);
  if (faulting.joinable()) faulting.join();
  r.decided = read_log(log);
  return r;
}

// The simulated world's run of `s`.
struct sim_run {
  pm::sim::run_result result;
  decisions decided;
};

sim_run run_sim(const pm::sim::scenario& s) {
  sim_run r;
  pm::sim::run_options o;
  o.decisions = [&r](std::uint32_t host, const std::string& d) {
    r.decided[host == UINT32_MAX ? std::string("*") : std::to_string(host)].push_back(d);
  };
  r.result = pm::sim::run(s, o);
  return r;
}

// A simulated cluster as the fixture's: `hosts` hosts of `slots` slots, a flat launch (pmrun's
// `auto` is flat when the hosts fit in one level of its tree), ranks that run until they are
// stopped unless a scenario says otherwise. One seed for every scenario: nothing compared
// depends on it (it draws latencies, jitter and simultaneous events' order).
pm::sim::scenario cluster(std::uint32_t hosts, std::uint32_t slots) {
  pm::sim::scenario s;
  s.hosts = hosts;
  s.slots = slots;
  s.seed = 21;
  s.latency.fanout = 0;
  s.default_script = pm::sim::parse_script("hang");
  return s;
}

// Each host's sequence and the job's must be the same in both worlds.
void expect_same(const real_run& real, const sim_run& sim, std::uint32_t hosts) {
  ASSERT_EQ(sim.result.outcome, pm::sim::verdict::ok) << sim.result.explain();
  ASSERT_FALSE(real.result.timed_out) << real.result.err;
  const std::string both = "\nreal world (pmrun over sshd):\n" + show(real.decided) +
                           "simulator:\n" + show(sim.decided) + "pmrun said: " + real.result.err +
                           "\nthe simulator's replay: " + sim.result.replay;
  // What was compared, for the log: the real world's decisions (the simulator's are the same).
  std::cerr << "decisions (real world, host by host):\n" << show(real.decided);
  for (std::uint32_t h = 0; h < hosts; ++h) {
    const auto key = std::to_string(h);
    const auto r = real.decided.find(key);
    const auto s = sim.decided.find(key);
    EXPECT_EQ(r == real.decided.end() ? std::vector<std::string>{} : r->second,
              s == sim.decided.end() ? std::vector<std::string>{} : s->second)
        << "host " << h << both;
  }
  const auto r = real.decided.find("*");
  const auto s = sim.decided.find("*");
  ASSERT_TRUE(r != real.decided.end() && s != sim.decided.end()) << both;
  EXPECT_EQ(r->second, s->second) << "the job" << both;
  EXPECT_EQ(real.result.exit_code, sim.result.report.exit_code) << both;
  // Nothing about a host outside the allocation.
  EXPECT_LE(real.decided.size(), hosts + 1u) << both;
  EXPECT_LE(sim.decided.size(), hosts + 1u) << both;
}

std::string ssh_of(const multihost_fixture& f) {
  return "ssh -F " + f.ssh_config();
}

// Whether the decision log at `path` says every one of `hosts` hosts was greeted.
bool every_host_greeted(const std::string& path, std::size_t hosts) {
  const auto d = read_log(path);
  for (std::size_t h = 0; h < hosts; ++h) {
    const auto seq = d.find(std::to_string(h));
    if (seq == d.end() ||
        std::find(seq->second.begin(), seq->second.end(), "greeted") == seq->second.end()) {
      return false;
    }
  }
  return true;
}

// A fault applied once the launcher has admitted every host's agent (its hello: a host lost
// before it is another decision, "lost before its hello", and a tree-relayed agent can run its
// ranks well before its hello has crossed its parent on a loaded machine) and every host runs
// `ranks` ranks, or after 20 s at the latest; then 300 ms later.
std::function<void()> once_running(multihost_fixture& f, std::size_t ranks,
                                   std::function<void()> what) {
  return [&f, ranks, what = std::move(what)] {
    const auto log = f.state_dir() + "/decisions.log";
    const auto until = std::chrono::steady_clock::now() + 20s;
    bool greeted = false;
    while (!(greeted = every_host_greeted(log, f.hosts().size())) &&
           std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(20ms);
    }
    // Said here: the comparison would only show that the worlds differ.
    EXPECT_TRUE(greeted) << "not every agent was greeted within 20 s; the fault came anyway";
    EXPECT_TRUE(every_host_busy(f, ranks)) << "not every host ran its ranks within 20 s";
    std::this_thread::sleep_for(300ms);
    what();
  };
}

// ---- the scenarios ----

// A remote rank exits 7 (rank 3, on the second host) after a second: the abort signals every
// other rank, the job ends with 7.
TEST(Differential, ARemoteRankExits7) {
  NEED_HOSTS();
  multihost_fixture f(3);
  const auto real =
      run_real(f, ssh_of(f),
               {"-H", hosts_with_slots(f, 2), "-np", "6", pm::test::payload_path(), "if-rank", "3",
                "sleep", "1", "if-rank", "3", "exit", "7", "sleep", "30"});
  auto s = cluster(3, 2);
  s.set_script(3, pm::sim::parse_script("exit:7@1s"));
  expect_same(real, run_sim(s), 3);
  EXPECT_EQ(real.result.exit_code, 7) << real.result.err;
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

// A host is killed (every process on it, its sshd too) while its ranks run: it is lost (its ssh
// connection resets in the real world; its silence times out in the simulator, which models a
// crash as silence: the decision is the same), the job ends with the host-loss code.
TEST(Differential, AHostIsKilled) {
  NEED_HOSTS();
  multihost_fixture f(3);
  const auto real =
      run_real(f, ssh_of(f),
               {"-H", hosts_with_slots(f, 2), "-np", "6", pm::test::payload_path(), "sleep", "30"},
               once_running(f, 2, [&f] { f.crash(f.hosts()[2].name); }));
  auto s = cluster(3, 2);
  s.faults.push_back(pm::sim::parse_fault("crash:2@1s"));
  expect_same(real, run_sim(s), 3);
  EXPECT_EQ(real.result.exit_code, 213) << real.result.err;
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

// A host is cut off the network (its link down: frames dropped, nothing refused) while its
// ranks run: both ends notice the silence; the launcher loses it (213). Healed after the job:
// its agent, cut off, has ended its ranks by itself.
TEST(Differential, APartition) {
  NEED_HOSTS();
  multihost_fixture f(3);
  const auto victim = f.hosts()[1].name;
  const auto real =
      run_real(f, ssh_of(f),
               {"-H", hosts_with_slots(f, 2), "-np", "6", pm::test::payload_path(), "sleep", "30"},
               once_running(f, 2, [&f, victim] { f.partition(victim); }));
  f.heal(victim);
  auto s = cluster(3, 2);
  s.faults.push_back(pm::sim::parse_fault("partition:1@1s-10m"));
  expect_same(real, run_sim(s), 3);
  EXPECT_EQ(real.result.exit_code, 213) << real.result.err;
  EXPECT_TRUE(hosts_clean(f, 10s)) << left_on_hosts(f);
}

// ssh to the second host ends with 255 on the first attempt (sshd dropped it in the key
// exchange; here an ssh wrapper says so and exits 255 once), then works: the launcher retries
// after its backoff and the job succeeds.
TEST(Differential, SshFailsWith255ThenSucceeds) {
  NEED_HOSTS();
  multihost_fixture f(3);
  const std::string dir = f.state_dir() + "/flaky-ssh";
  std::filesystem::create_directories(dir);
  const std::string marker = dir + "/failed-once";
  {
    std::ofstream w(dir + "/ssh");
    w << "#!/bin/sh\n"
      << "for a in \"$@\"; do\n"
      << "  if [ \"$a\" = " << f.hosts()[1].name << " ] && [ ! -e " << marker << " ]; then\n"
      << "    : > " << marker << "\n"
      << "    echo 'kex_exchange_identification: read: Connection reset by peer' >&2\n"
      << "    exit 255\n"
      << "  fi\n"
      << "done\n"
      << "exec /usr/bin/ssh -F " << f.ssh_config() << " \"$@\"\n";
  }
  std::filesystem::permissions(dir + "/ssh", std::filesystem::perms::owner_all);
  const auto real =
      run_real(f, dir + "/ssh",
               {"-H", hosts_with_slots(f, 2), "-np", "6", pm::test::payload_path(), "sleep", "1"});
  EXPECT_TRUE(std::filesystem::exists(marker));  // the wrapper did fail once
  auto s = cluster(3, 2);
  s.default_script = pm::sim::parse_script("exit:0@1s");
  s.faults.push_back(pm::sim::parse_fault("ssh-fail:1"));
  expect_same(real, run_sim(s), 3);
  EXPECT_EQ(real.result.exit_code, 0) << real.result.err;
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

// The tree launch (fan-out 2 over 5 hosts: pmrun starts node1 and node2, node1 relays node3 and
// node4, node2 relays node5); node2 is killed while the ranks run: it is lost, and with it the
// host whose link it relayed (the fifth), at once.
TEST(Differential, ATreeParentIsLost) {
  NEED_HOSTS();
  multihost_fixture f(5);
  const auto real =
      run_real(f, ssh_of(f),
               {"--launch", "tree", "--tree-fanout", "2", "-H", hosts_with_slots(f, 1), "-np", "5",
                pm::test::payload_path(), "sleep", "30"},
               once_running(f, 1, [&f] { f.crash(f.hosts()[1].name); }));
  auto s = cluster(5, 1);
  s.latency.fanout = 2;
  s.faults.push_back(pm::sim::parse_fault("crash:1@1s"));
  expect_same(real, run_sim(s), 5);
  EXPECT_EQ(real.result.exit_code, 213) << real.result.err;
  EXPECT_TRUE(hosts_clean(f, 10s)) << left_on_hosts(f);
}

// An MPI program fences, then aborts: Open MPI's MPI_Init (whose fence spans every host), then
// rank 3 calls MPI_Abort(42) while the others wait in a barrier it never joins (mpi_abort). In
// the simulator every rank fences at its start (the modelled PMIx client's fence, through each
// host's PMIx relay and the launcher), then rank 3 calls PMIx_Abort through its host's relay
// (fences are not decisions, the abort's consequences are): the abort signals every rank still
// running, the aborting one too (its agent holds it in PMIx_Abort until it is signalled; the
// simulated one waits to be killed), and the job ends with its status.
TEST(Differential, AnMpiProgramFencesThenAborts) {
  NEED_HOSTS();
  const std::string program = std::string(PM_MPI_DIR) + "/mpi_abort";
  if (access(program.c_str(), X_OK) != 0) GTEST_SKIP() << "no " << program << " (no MPI here)";
  multihost_fixture f(3);
  const auto real =
      run_real(f, ssh_of(f), {"-H", hosts_with_slots(f, 2), "-np", "6", program, "3"});
  auto s = cluster(3, 2);
  s.default_script = pm::sim::parse_script("hang+fence@0s");
  s.set_script(3, pm::sim::parse_script("abort:42@1s+fence@0s"));
  const auto sim = run_sim(s);
  expect_same(real, sim, 3);
  EXPECT_EQ(sim.result.stats.pmix_fences, 6u);
  EXPECT_EQ(real.result.exit_code, 42) << real.result.err;
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

// MPI_Comm_spawn onto another host: the only parent fills the first host's one slot; its
// MPI_Comm_spawn of two ranks (mpi_spawn 2) is placed by the launcher on the second host's free
// slots, whose agent starts only then; parents and children exchange a value, disconnect and
// end. In the simulator rank 0 calls PMIx_Spawn through its host's PMIx relay (the launcher's
// placement, job_add, the spawn requests: pmix_routing.cpp), and the children run the default
// script: the spawn's decisions (the second host opened, the children spawned there) and the
// finish are the same.
TEST(Differential, MpiCommSpawnOntoAnotherHost) {
  NEED_HOSTS();
  const std::string program = std::string(PM_MPI_DIR) + "/mpi_spawn";
  if (access(program.c_str(), X_OK) != 0) GTEST_SKIP() << "no " << program << " (no MPI here)";
  multihost_fixture f(2);
  const std::string hosts = f.hosts()[0].name + ":1," + f.hosts()[1].name + ":2";
  const auto real = run_real(f, ssh_of(f), {"-H", hosts, "-np", "1", program, "2"});
  auto s = cluster(2, 1);
  s.host_slots = {1, 2};
  s.np = 1;
  s.default_script = pm::sim::parse_script("exit:0@1s");
  s.set_script(0, pm::sim::parse_script("exit:0@2s+fence@0s+spawn:2@100ms"));
  const auto sim = run_sim(s);
  expect_same(real, sim, 2);
  EXPECT_EQ(sim.result.stats.pmix_spawned_jobs, 1u);
  EXPECT_EQ(sim.result.report.ranks.size(), 3u);
  EXPECT_EQ(real.result.exit_code, 0) << real.result.err << real.result.out;
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

}  // namespace
