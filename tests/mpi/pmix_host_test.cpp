// Real Open MPI 4.1 programs under the embedded PMIx server, on one host (docs/pmix.md).
//
// The test is a tiny pmd (tiny_host.hpp): it starts the server, registers a namespace, spawns
// the ranks with the environment the server gives them and runs one poll loop over the server's
// event fd and the ranks' pidfds and pipes. libpmix allows one server per process, so every test
// here shares one (started by the first test that needs it) and registers its own namespace;
// the server's own start and stop are tested in a child process (ServerAlone).
//
// After every test: no process of its namespace is left (no process has its PMIX_NAMESPACE), and
// nothing new is in /tmp or /dev/shm with a PMIx or Open MPI name.
#include <dirent.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/pmix/predicted_env.hpp"
#include "mpi/tiny_host.hpp"
#include "pm/error.hpp"
#include "support/command.hpp"

namespace {

namespace px = pm::agent::pmix;
using pm::test::tiny_host;

const std::string mpi_dir = PM_MPI_DIR;

std::string hostname() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// ---- what the tests look at after a job ----

// Entries of `dir` whose names PMIx, Open MPI or this process's server would use (another
// process's server, e.g. a test running beside this one, is none of our business).
std::set<std::string> scratch_entries(const std::string& dir) {
  static const std::vector<std::string> prefixes = {
      "pm-pmix.", "pmix", "ompi.", "openmpi", "vader_segment", "sm_segment", "hwloc"};
  const std::string ours = "pm-pmix." + std::to_string(::getpid()) + ".";
  std::set<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind("pm-pmix.", 0) == 0 && name.rfind(ours, 0) != 0) continue;
      for (const auto& p : prefixes) {
        if (name.rfind(p, 0) == 0) out.insert(name);
      }
    }
    ::closedir(d);
  }
  return out;
}

// What is in `now` and was not in `before`: what a job left. Only what is new counts: an entry
// that went away meanwhile (Open MPI's per-user session directory, ompi.HOST.UID, made and
// removed by a test running beside this one) is not this test's.
std::set<std::string> added(const std::set<std::string>& now, const std::set<std::string>& before) {
  std::set<std::string> out;
  for (const auto& e : now) {
    if (!before.contains(e)) out.insert(e);
  }
  return out;
}

// Pids of the processes whose environment names PMIx namespace `nspace`.
std::vector<pid_t> processes_of(const std::string& nspace) {
  const std::string needle = "PMIX_NAMESPACE=" + nspace;
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream in("/proc/" + std::string(e->d_name) + "/environ", std::ios::binary);
    std::string var;
    while (std::getline(in, var, '\0')) {
      if (var == needle) {
        out.push_back(pid);
        break;
      }
    }
  }
  ::closedir(d);
  return out;
}

// ---- the shared server and what its callbacks saw ----

struct upcalls {
  std::vector<px::proc> connected, finalized;
  std::vector<px::abort_request> aborts;      // released by the test
  std::vector<px::fence_request> fences;      // answered already; `done` is empty
  std::vector<px::proc> modex_targets;        // answered "not found"
  std::vector<px::query> queries;             // what tools asked
  bool drop_queries = false;                  // leave them unanswered (the completion goes)
  std::string namespaces;                     // else: the answer to PMIX_QUERY_NAMESPACES
  std::vector<px::spawn_request> spawns;      // what was asked (answered by the host)
  std::vector<std::string> published;         // keys
  std::vector<px::lookup_request> lookups;    // what was asked (answered by the host)
  std::vector<std::string> unpublished;       // keys
  std::vector<px::connect_request> connects;  // answered with connect_answer already
  std::vector<px::connect_request> disconnects;
  px::status connect_answer = px::status::success;
  tiny_host* host = nullptr;
  std::function<void(px::abort_request&)> on_abort;   // what the "pmd" does before releasing
  std::function<void(const px::proc&)> on_finalized;  // what it does on hearing a finalize
};
upcalls* recording = nullptr;  // the running test's

px::server& shared_server() {
  static std::unique_ptr<px::server> server = [] {
    px::options opts;
    opts.on.client_connected = [](const px::proc& p) {
      if (recording != nullptr) recording->connected.push_back(p);
    };
    opts.on.client_finalized = [](const px::proc& p) {
      if (recording == nullptr) return;
      recording->finalized.push_back(p);
      if (recording->on_finalized) recording->on_finalized(p);
    };
    opts.on.abort = [](px::abort_request r) {
      if (recording == nullptr) return;  // released (with an error) when r goes
      if (recording->on_abort) recording->on_abort(r);
      recording->aborts.push_back(std::move(r));
    };
    opts.on.fence = [](px::fence_request f) {
      // A stand-in for the other hosts: they contributed nothing, so the collected bytes are
      // ours (what a real gather would hand every host for a one-host contribution).
      std::vector<char> all = f.data;
      f.done(px::status::success, std::move(all));
      if (recording != nullptr) recording->fences.push_back(std::move(f));
    };
    opts.on.direct_modex = [](px::modex_request m) {
      if (recording != nullptr) recording->modex_targets.push_back(m.target);
      m.done(px::status::not_found);  // the stand-in has no other host to ask
    };
    opts.on.query = [](px::query_request q) {
      if (recording == nullptr) return;  // answered with an error when q goes
      recording->queries.insert(recording->queries.end(), q.queries.begin(), q.queries.end());
      if (recording->drop_queries) return;
      std::vector<px::query_value> values;
      for (const auto& one : q.queries) {
        for (const auto& k : one.keys) {
          if (k == px::query_keys::namespaces) values.push_back({k, recording->namespaces});
        }
      }
      const auto st = values.empty() ? px::status::not_supported : px::status::success;
      q.done(st, std::move(values));
    };
    // Spawn and publish/lookup go to the running test's tiny host; without one, the requests
    // fail with status::error when they go.
    opts.on.spawn = [](px::spawn_request r) {
      if (recording == nullptr) return;
      recording->spawns.push_back({r.requester, r.apps, {}});
      if (recording->host != nullptr) recording->host->spawn_job(std::move(r));
    };
    opts.on.publish = [](px::publish_request r) {
      if (recording == nullptr || recording->host == nullptr) return;
      for (const auto& v : r.values) recording->published.push_back(v.key);
      recording->host->publish(std::move(r));
    };
    opts.on.lookup = [](px::lookup_request r) {
      if (recording == nullptr || recording->host == nullptr) return;
      recording->lookups.push_back({r.requester, r.keys, r.wait, r.timeout_s, {}});
      recording->host->lookup(std::move(r));
    };
    opts.on.unpublish = [](px::unpublish_request r) {
      if (recording == nullptr || recording->host == nullptr) return;
      recording->unpublished.insert(recording->unpublished.end(), r.keys.begin(), r.keys.end());
      recording->host->unpublish(std::move(r));
    };
    opts.on.connect = [](px::connect_request r) {
      if (recording == nullptr) return;
      r.done(recording->connect_answer);
      recording->connects.push_back(std::move(r));
    };
    opts.on.disconnect = [](px::connect_request r) {
      if (recording == nullptr) return;
      r.done(recording->connect_answer);
      recording->disconnects.push_back(std::move(r));
    };
    return px::server::start(opts);
  }();
  return *server;
}

// The environment every rank starts from: this process's, plus what Open MPI needs to run as
// root here, plus the lean transport selection that keeps each case short; TCP on loopback only
// (the bridges of fake hosts that tests beside this one make and remove are no address to offer).
std::vector<std::string> base_env(std::uint32_t ranks, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> add = {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                                  "OMPI_MCA_pml=ob1", "OMPI_MCA_btl=self,vader,tcp",
                                  "OMPI_MCA_btl_tcp_if_include=lo"};
  // More ranks than cores: yield when idle, as mpirun sets it when it oversubscribes.
  if (ranks > std::thread::hardware_concurrency()) {
    add.emplace_back("OMPI_MCA_mpi_yield_when_idle=1");
  }
  add.insert(add.end(), extra.begin(), extra.end());
  return pm::test::merge_env(pm::test::own_environment(), add);
}

// Lines of `text` that match `re`, each split into its submatches. Copies, not std::smatch: a
// match points into its text, which is often a temporary (all_output()) gone by the time the
// submatches are read (a flaky comparison of freed memory, found in CI).
std::vector<std::vector<std::string>> matches(const std::string& text, const std::regex& re) {
  std::vector<std::vector<std::string>> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator();
       ++it) {
    std::vector<std::string> groups;
    for (const auto& g : *it) groups.push_back(g.str());
    out.push_back(std::move(groups));
  }
  return out;
}

class PmixHost : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = &shared_server();  // its private directories are there before and after
    tmp_before_ = scratch_entries("/tmp");
    shm_before_ = scratch_entries("/dev/shm");
    recording = &seen_;
    static std::atomic<int> counter{0};
    nspace_ = "pmtest." + std::to_string(::getpid()) + "." + std::to_string(++counter);
  }

  void TearDown() override {
    if (host_)
      other_nspaces_.insert(other_nspaces_.end(), host_->spawned().begin(), host_->spawned().end());
    host_.reset();         // kills and reaps whatever is left
    seen_.aborts.clear();  // unreleased callers are released with an error
    recording = nullptr;
    if (registered_) server_->deregister_job(nspace_);
    EXPECT_EQ(processes_of(nspace_), std::vector<pid_t>{}) << "processes of " << nspace_ << " left";
    for (const auto& ns : other_nspaces_) {
      server_->deregister_job(ns);
      EXPECT_EQ(processes_of(ns), std::vector<pid_t>{}) << "processes of " << ns << " left";
    }
    EXPECT_EQ(added(scratch_entries("/tmp"), tmp_before_), std::set<std::string>{})
        << "left in /tmp";
    EXPECT_EQ(added(scratch_entries("/dev/shm"), shm_before_), std::set<std::string>{})
        << "left in /dev/shm";
    struct stat st {};
    EXPECT_NE(::stat(server_->job_tmpdir(nspace_).c_str(), &st), 0) << "job directory left";
  }

  px::job_info job(std::uint32_t ranks) const {
    return pm::test::one_node_job(nspace_, ranks, hostname());
  }

  // Registers `j`, spawns its ranks as `argv` and runs them to the end (at most 30 s).
  void run(const px::job_info& j, const std::vector<std::string>& argv,
           const std::vector<std::string>& env) {
    server_->register_job(j);
    registered_ = true;
    start_host(env);
    host_->spawn(j, argv, env);
    ASSERT_TRUE(host_->run(std::chrono::seconds(30))) << "job did not end:\n"
                                                      << host_->all_output();
  }

  // The tiny host, whose spawned jobs' ranks start from `env` too.
  void start_host(const std::vector<std::string>& env) {
    host_ = std::make_unique<tiny_host>(*server_);
    host_->child_env = env;
    host_->hostname = hostname();
    seen_.host = host_.get();
  }

  void expect_all_exited_zero() const {
    for (const auto& r : host_->ranks()) {
      EXPECT_TRUE(r.exited && r.exit_code == 0)
          << "rank " << r.rank << " exit " << r.exit_code << " signal " << r.signal << ":\n"
          << r.text;
    }
  }

  // Every rank said "hello rank R size N universe U appnum A" once, with the right R.
  void expect_hellos(std::uint32_t n, std::uint32_t universe,
                     const std::vector<std::uint32_t>& appnums = {}) const {
    const std::regex line(R"(hello rank (-?\d+) size (-?\d+) universe (-?\d+) appnum (-?\d+))");
    std::set<int> ranks;
    for (const auto& r : host_->ranks()) {
      const auto m = matches(r.text, line);
      ASSERT_EQ(m.size(), 1u) << "rank " << r.rank << " said:\n" << r.text;
      EXPECT_EQ(std::stoi(m[0][1]), static_cast<int>(r.rank)) << r.text;
      EXPECT_EQ(std::stoi(m[0][2]), static_cast<int>(n)) << r.text;
      EXPECT_EQ(std::stoi(m[0][3]), static_cast<int>(universe)) << r.text;
      const std::uint32_t app = appnums.empty() ? 0 : appnums.at(r.rank);
      EXPECT_EQ(std::stoi(m[0][4]), static_cast<int>(app)) << r.text;
      ranks.insert(std::stoi(m[0][1]));
    }
    EXPECT_EQ(ranks.size(), n);
  }

  std::vector<std::uint32_t> ranks_of(const std::vector<px::proc>& procs) const {
    std::vector<std::uint32_t> out;
    for (const auto& p : procs) {
      EXPECT_EQ(p.nspace, nspace_);
      out.push_back(p.rank);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  static std::vector<std::uint32_t> iota(std::uint32_t n) {
    std::vector<std::uint32_t> v(n);
    for (std::uint32_t i = 0; i < n; ++i) v[i] = i;
    return v;
  }

  px::server* server_ = nullptr;
  std::string nspace_;
  bool registered_ = false;
  std::vector<std::string> other_nspaces_;  // registered by the test, deregistered at the end
  upcalls seen_;
  std::unique_ptr<tiny_host> host_;
  std::set<std::string> tmp_before_, shm_before_;
};

class PmixHello : public PmixHost, public ::testing::WithParamInterface<std::uint32_t> {};

TEST_P(PmixHello, EveryRankSeesItsRankAndTheJobSize) {
  const std::uint32_t n = GetParam();
  auto j = job(n);
  j.universe_size = 8;  // MPI_UNIVERSE_SIZE comes from PMIX_UNIV_SIZE
  run(j, {mpi_dir + "/mpi_hello", std::to_string(n)}, base_env(n));
  expect_all_exited_zero();
  expect_hellos(n, 8);
  EXPECT_EQ(ranks_of(seen_.connected), iota(n));
  EXPECT_EQ(ranks_of(seen_.finalized), iota(n));
  EXPECT_TRUE(seen_.fences.empty()) << "a one-host fence completes inside libpmix";
  EXPECT_TRUE(seen_.aborts.empty());
}

INSTANTIATE_TEST_SUITE_P(Ranks, PmixHello, ::testing::Values(1u, 2u, 4u),
                         [](const auto& p) { return std::to_string(p.param); });

TEST_F(PmixHost, RingOverSharedMemoryOnly) {
  // btl=self,vader: no TCP, so the ranks must know they share the node (PMIX_LOCAL_PEERS).
  run(job(4), {mpi_dir + "/mpi_ring"}, base_env(4, {"OMPI_MCA_btl=self,vader"}));
  expect_all_exited_zero();
  EXPECT_NE(host_->all_output().find("ring size 4 sum 6\n"), std::string::npos)
      << host_->all_output();
}

TEST_F(PmixHost, AllreduceGivesEveryRankTheSum) {
  run(job(4), {mpi_dir + "/mpi_allreduce"}, base_env(4));
  expect_all_exited_zero();
  const auto m =
      matches(host_->all_output(), std::regex(R"(allreduce rank (\d+) size 4 sum (\d+))"));
  ASSERT_EQ(m.size(), 4u) << host_->all_output();
  for (const auto& one : m) EXPECT_EQ(one[2], "10");
}

TEST_F(PmixHost, BarriersInALoop) {
  run(job(4), {mpi_dir + "/mpi_barrier_loop", "200"}, base_env(4));
  expect_all_exited_zero();
  EXPECT_NE(host_->all_output().find("barriers 200 size 4\n"), std::string::npos)
      << host_->all_output();
}

TEST_F(PmixHost, MpmdAppsGetTheirAppNumbers) {
  // Two app contexts of the same program: ranks 0-1 are app 0, ranks 2-3 app 1.
  auto j = job(4);
  j.ranks[2].app = 1;
  j.ranks[3].app = 1;
  run(j, {mpi_dir + "/mpi_hello", "4"}, base_env(4));
  expect_all_exited_zero();
  expect_hellos(4, 4, {0, 0, 1, 1});
}

TEST_F(PmixHost, AbortReachesTheHostWithCallerAndStatus) {
  // Rank 2 calls MPI_Abort(MPI_COMM_WORLD, 42); the others wait in a barrier for ever. The
  // "pmd" ends the others (SIGTERM to their groups), then releases the caller.
  const std::uint32_t caller = 2;
  seen_.on_abort = [&](px::abort_request& r) {
    for (std::uint32_t rank = 0; rank < 4; ++rank) {
      if (rank != r.caller.rank) seen_.host->kill_rank(rank, SIGTERM);
    }
    r.release();
  };
  run(job(4), {mpi_dir + "/mpi_abort", std::to_string(caller)}, base_env(4));
  ASSERT_EQ(seen_.aborts.size(), 1u) << host_->all_output();
  const auto& a = seen_.aborts[0];
  EXPECT_EQ(a.caller, (px::proc{nspace_, caller}));
  EXPECT_EQ(a.exit_status, 42);
  EXPECT_TRUE(a.targets.empty()) << "MPI_Abort on MPI_COMM_WORLD means the whole namespace";
  for (const auto& r : host_->ranks()) {
    ASSERT_TRUE(r.exited);
    if (r.rank == caller) {
      EXPECT_EQ(r.exit_code, 42) << r.text;
      EXPECT_NE(r.text.find("aborting rank 2 size 4"), std::string::npos) << r.text;
    } else {
      EXPECT_EQ(r.signal, SIGTERM) << "rank " << r.rank << ": " << r.text;
    }
  }
}

TEST_F(PmixHost, SigkilledRanksLeaveNothingBehind) {
  // Ranks past MPI_Init (shared-memory segments made) die by SIGKILL: no cleanup of their own.
  // What they made lives in the job's directories, which deregister_job removes (TearDown checks
  // /tmp and /dev/shm).
  seen_.on_abort = [&](px::abort_request& r) {
    seen_.host->kill_all(SIGKILL);
    r.release();
  };
  run(job(3), {mpi_dir + "/mpi_abort", "1"}, base_env(3));
  ASSERT_EQ(seen_.aborts.size(), 1u);
  for (const auto& r : host_->ranks()) {
    EXPECT_EQ(r.signal, SIGKILL) << "rank " << r.rank << ": " << r.text;
  }
}

// A rank's PMIx_Finalize returns only once the host heard the notice: a host that sees the rank
// exit has it already, even when the server's process (pmd-helper) dies meanwhile. Here the host
// takes 200 ms over each notice; the rank must still be inside MPI_Finalize at its end (released
// first, it would have exited meanwhile: a zombie nobody reaped yet, the host being busy here).
TEST_F(PmixHost, FinalizeReturnsOnlyOnceTheHostHeardTheNotice) {
  std::vector<std::string> states;
  seen_.on_finalized = [&](const px::proc& p) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    for (const auto& r : host_->ranks()) {
      if (r.rank != p.rank) continue;
      std::ifstream stat("/proc/" + std::to_string(r.pid) + "/stat");
      std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
      const auto close = text.rfind(')');
      states.push_back(close == std::string::npos ? "gone" : text.substr(close + 2, 1));
    }
  };
  run(job(2), {mpi_dir + "/mpi_hello", "2"}, base_env(2));
  expect_all_exited_zero();
  ASSERT_EQ(states.size(), 2u);
  for (const auto& st : states)
    EXPECT_NE(st, "Z") << "a rank left MPI_Finalize before the host heard it";
  for (const auto& st : states) EXPECT_NE(st, "gone");
}

TEST_F(PmixHost, Mpi4pyHello) {
  const std::string python = "/usr/bin/python3";
  if (pm::test::run_command({python, "-c", "import mpi4py"}).exit_code != 0) {
    GTEST_SKIP() << "python3-mpi4py is not installed";
  }
  run(job(2), {python, std::string(PM_MPI_SOURCE_DIR) + "/mpi_hello.py", "2"}, base_env(2));
  expect_all_exited_zero();
  const auto m = matches(host_->all_output(), std::regex(R"(hello rank (\d) size 2 universe 2)"));
  ASSERT_EQ(m.size(), 2u) << host_->all_output();
  EXPECT_NE(m[0][1], m[1][1]);
}

TEST_F(PmixHost, FenceWithAnotherHostGoesToTheHost) {
  // Rank 1 lives on a host this server does not serve: every fence of MPI_Init and MPI_Finalize
  // needs that host, so PMIx hands it to us (fence_request). The stand-in answers for the
  // absent host; rank 0 then runs to the end believing in a world of 2.
  auto j = job(2);
  j.node_names.push_back("other-host");
  j.ranks[1].node = 1;
  j.ranks[1].local_rank = j.ranks[1].node_rank = 0;
  run(j, {mpi_dir + "/mpi_hello", "2"}, base_env(1));
  expect_all_exited_zero();
  ASSERT_EQ(host_->ranks().size(), 1u);
  EXPECT_NE(host_->ranks()[0].text.find("hello rank 0 size 2"), std::string::npos);
  // MPI_Init's modex (collect, with this host's data), its barrier, MPI_Finalize's barrier.
  ASSERT_EQ(seen_.fences.size(), 3u);
  for (const auto& f : seen_.fences) {
    EXPECT_EQ(f.participants, (std::vector<px::proc>{{nspace_, px::wildcard_rank}}));
  }
  EXPECT_TRUE(seen_.fences[0].collect);
  EXPECT_FALSE(seen_.fences[0].data.empty());
  EXPECT_FALSE(seen_.fences[1].collect);
  EXPECT_FALSE(seen_.fences[2].collect);
}

TEST_F(PmixHost, DirectModexForARankOfAnotherHostGoesToTheHost) {
  // With the asynchronous modex, rank 0 asks for rank 1's connection data only when it first
  // sends to it; rank 1 lives on another host, so PMIx asks us (modex_request). The stand-in
  // answers "not found": rank 0 cannot reach rank 1 and aborts, which we release at once.
  auto j = job(2);
  j.node_names.push_back("other-host");
  j.ranks[1].node = 1;
  j.ranks[1].local_rank = j.ranks[1].node_rank = 0;
  seen_.on_abort = [](px::abort_request& r) { r.release(); };
  run(j, {mpi_dir + "/mpi_ring"},
      base_env(1, {"OMPI_MCA_pmix_base_async_modex=1", "OMPI_MCA_btl=self,tcp"}));
  ASSERT_FALSE(seen_.modex_targets.empty()) << host_->all_output();
  for (const auto& t : seen_.modex_targets) EXPECT_EQ(t, (px::proc{nspace_, 1}));
  ASSERT_EQ(seen_.aborts.size(), 1u) << host_->all_output();
  EXPECT_EQ(seen_.aborts[0].caller, (px::proc{nspace_, 0}));
  ASSERT_EQ(host_->ranks().size(), 1u);
  EXPECT_TRUE(host_->ranks()[0].exited);
  EXPECT_NE(host_->ranks()[0].exit_code, 0);
}

TEST_F(PmixHost, RankEnvHasPmixAndOpenMpiDirectLaunchVariables) {
  server_->register_job(job(2));
  registered_ = true;
  const auto env = server_->rank_env(nspace_, 1);
  auto has = [&](const std::string& var) {
    return std::find(env.begin(), env.end(), var) != env.end();
  };
  EXPECT_TRUE(has("PMIX_NAMESPACE=" + nspace_));
  EXPECT_TRUE(has("PMIX_RANK=1"));
  EXPECT_TRUE(has("OMPI_MCA_schizo=^orte,slurm,flux,jsm"));
  EXPECT_TRUE(has("OMPI_MCA_ess=pmi"));
  EXPECT_TRUE(has("OMPI_MCA_orte_tmpdir_base=" + server_->job_tmpdir(nspace_)));
  EXPECT_TRUE(std::any_of(env.begin(), env.end(),
                          [](const std::string& v) { return v.rfind("PMIX_SERVER_URI", 0) == 0; }));
  // Everything the ranks are told to write lives under the server's private directories.
  for (const auto& v : env) {
    if (v.find("/tmp") != std::string::npos) {
      EXPECT_NE(v.find(server_->tmpdir()), std::string::npos) << v;
    }
  }
}

TEST_F(PmixHost, AToolsQueriesReachTheHostAndAnUnansweredOneFailsAtOnce) {
  // A PMIx tool attaches to the server's URI (what a rank is told) and queries it; the host
  // answers on its own thread (run_pending). A query the host drops (its completion destroyed
  // uncalled) reaches the tool as an error at once: a tool never waits for ever.
  server_->register_job(job(1));
  registered_ = true;
  std::string uri;
  for (const auto& v : server_->rank_env(nspace_, 0)) {
    if (v.rfind("PMIX_SERVER_URI41=", 0) == 0) uri = v.substr(v.find('=') + 1);
  }
  ASSERT_FALSE(uri.empty());
  const auto tool = [&] {
    pm::test::command_result result;
    std::atomic<bool> finished{false};
    std::thread t([&] {
      result =
          pm::test::run_command({mpi_dir + "/pmix_tool", "--uri", uri}, std::chrono::seconds(30));
      finished = true;
    });
    // The host's loop: upcalls run here, on this thread.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(40);
    while (!finished && std::chrono::steady_clock::now() < until) {
      pollfd p{server_->event_fd(), POLLIN, 0};
      if (::poll(&p, 1, 20) == 1) server_->run_pending();
    }
    t.join();
    return result;
  };
  seen_.namespaces = nspace_;
  auto r = tool();
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("namespaces " + nspace_ + "\n"), std::string::npos) << r.out;
  // The tool's PMIx_Spawn reaches the host, which has no tiny host to start it here: it drops
  // the request, which fails with ERROR.
  EXPECT_NE(r.out.find("spawn ERROR\n"), std::string::npos) << r.out;
  ASSERT_EQ(seen_.spawns.size(), 1u);
  EXPECT_TRUE(seen_.spawns[0].requester.nspace.starts_with("pm-tool."))
      << seen_.spawns[0].requester.nspace;
  EXPECT_NE(r.out.find("unsupported NOT-SUPPORTED\n"), std::string::npos) << r.out;
  ASSERT_FALSE(seen_.queries.empty());
  EXPECT_EQ(seen_.queries[0].keys, std::vector<std::string>{px::query_keys::namespaces});
  seen_.queries.clear();
  seen_.drop_queries = true;
  r = tool();
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.out.find("namespaces error ERROR\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("unknown_nspace ERROR\n"), std::string::npos) << r.out;
  // Every query of the tool reached the host, qualified as asked.
  ASSERT_GE(seen_.queries.size(), 2u);
  bool unknown_asked = false;
  for (const auto& q : seen_.queries) {
    unknown_asked = unknown_asked || q.nspace == std::optional<std::string>("no-such-job");
  }
  EXPECT_TRUE(unknown_asked);
}

TEST_F(PmixHost, MisuseIsOneClearError) {
  auto expect_error = [](auto&& call, pm::errc code, const std::string& text) {
    try {
      call();
      ADD_FAILURE() << "no error; expected: " << text;
    } catch (const pm::error& e) {
      EXPECT_EQ(e.code(), code);
      EXPECT_EQ(e.what(), text);
    }
  };
  expect_error([&] { server_->rank_env("nobody", 0); }, pm::errc::usage,
               "PMIx namespace 'nobody' is not registered");
  auto j = job(2);
  j.node_names.push_back("other-host");
  j.ranks[1].node = 1;
  j.ranks[1].local_rank = 0;
  server_->register_job(j);
  registered_ = true;
  expect_error([&] { server_->register_job(j); }, pm::errc::usage,
               "PMIx namespace '" + nspace_ + "' is registered already");
  expect_error([&] { server_->rank_env(nspace_, 1); }, pm::errc::usage,
               "PMIx job '" + nspace_ + "': rank 1 is not one of this node's ranks");
  expect_error([&] { server_->rank_env(nspace_, 9); }, pm::errc::usage,
               "PMIx job '" + nspace_ + "': rank 9 is not one of this node's ranks");
  j.nspace = "bad name";
  expect_error([&] { server_->register_job(j); }, pm::errc::usage,
               "PMIx namespace 'bad name' is not 1-200 characters of letters, digits, '.', '_' "
               "and '-'");
  expect_error([] { px::server::start({}); }, pm::errc::system,
               "PMIx: a server was started in this process already (libpmix allows one)");
}

// ---- spawn, publish/lookup, connect ----

// A parent (1 rank) and its children ran to the end: each said who it is and the sum it got.
void expect_spawn_lines(const std::string& out, std::uint32_t children) {
  EXPECT_EQ(
      matches(out, std::regex("parent 0 of 1: children " + std::to_string(children) + "\n")).size(),
      1u)
      << out;
  const long child_sum = static_cast<long>(children) * (children + 1) / 2;
  EXPECT_EQ(
      matches(out, std::regex("parent 0 of 1: sum " + std::to_string(child_sum) + "\n")).size(), 1u)
      << out;
  EXPECT_EQ(matches(out, std::regex(R"(child \d of )" + std::to_string(children) +
                                    R"(: parent size 1\n)"))
                .size(),
            children)
      << out;
  EXPECT_EQ(matches(out, std::regex(R"(child \d of )" + std::to_string(children) + R"(: sum 1\n)"))
                .size(),
            children)
      << out;
}

TEST_F(PmixHost, SpawnStartsChildrenThatTalkToTheirParent) {
  // MPI_Comm_spawn of 2 children: PMIx_Spawn reaches the host, which registers and starts the
  // new namespace; the roots meet by publish/lookup (the lookup waits), and PMIx_Connect of the
  // two namespaces completes inside libpmix (every participant is local).
  run(job(1), {mpi_dir + "/mpi_spawn", "2"}, base_env(3));
  expect_all_exited_zero();
  ASSERT_EQ(host_->ranks().size(), 3u) << host_->all_output();
  expect_spawn_lines(host_->all_output(), 2);
  ASSERT_EQ(seen_.spawns.size(), 1u);
  const auto& sp = seen_.spawns[0];
  EXPECT_EQ(sp.requester, (px::proc{nspace_, 0}));
  ASSERT_EQ(sp.apps.size(), 1u);
  EXPECT_EQ(sp.apps[0].argv, (std::vector<std::string>{mpi_dir + "/mpi_spawn", "child"}));
  EXPECT_EQ(sp.apps[0].max_procs, 2u);
  EXPECT_EQ(sp.apps[0].wdir, std::filesystem::current_path().string());
  EXPECT_TRUE(sp.apps[0].hosts.empty());
  EXPECT_TRUE(std::any_of(sp.apps[0].env.begin(), sp.apps[0].env.end(), [](const std::string& e) {
    return e.starts_with("OMPI_PARENT_PORT=");
  })) << "the children find their parent by OMPI_PARENT_PORT";
  // The roots meet on "<port>:connect" and "<port>:accept"; Open MPI 4.1 then agrees on the
  // intercommunicator's context id the same way ("<port>:nextcid:send:N", ..., each looked up
  // with PMIX_WAIT by the other root).
  auto has_key = [&](const std::string& suffix) {
    return std::any_of(seen_.published.begin(), seen_.published.end(),
                       [&](const std::string& k) { return k.ends_with(suffix); });
  };
  EXPECT_TRUE(has_key(":connect") && has_key(":accept"))
      << ::testing::PrintToString(seen_.published);
  EXPECT_EQ(seen_.lookups.size(), seen_.published.size());
  for (const auto& l : seen_.lookups) {
    EXPECT_TRUE(l.wait) << "Open MPI looks up with PMIX_WAIT";
    EXPECT_EQ(l.timeout_s, 600u) << "and PMIX_TIMEOUT 600";
  }
  EXPECT_TRUE(seen_.unpublished.empty()) << ::testing::PrintToString(seen_.unpublished);
  EXPECT_TRUE(seen_.connects.empty()) << "a connect among local ranks completes inside libpmix";
  ASSERT_EQ(host_->spawned().size(), 1u);
  const auto& ranks = host_->ranks();
  EXPECT_EQ(std::count_if(ranks.begin(), ranks.end(),
                          [&](const auto& r) { return r.nspace == host_->spawned()[0]; }),
            2);
}

TEST_F(PmixHost, AChildLeavingWithoutFinalizeIsTheHostsToEnd) {
  // The last child exits 5 after its first line, without MPI_Finalize; the parent and the other
  // child wait in the exchange for ever. The host sees that child connect and never finalize,
  // and ends the rest (here: SIGTERM); nothing of either namespace is left (TearDown).
  const auto j = job(1);
  server_->register_job(j);
  registered_ = true;
  const auto env = base_env(3);
  start_host(env);
  host_->spawn(j, {mpi_dir + "/mpi_spawn", "2", "child-fails"}, env);
  const auto failed = [&] {
    const auto& ranks = host_->ranks();
    return std::any_of(ranks.begin(), ranks.end(),
                       [](const auto& r) { return r.exited && r.exit_code == 5; });
  };
  ASSERT_TRUE(host_->run_until(failed, std::chrono::seconds(30))) << host_->all_output();
  ASSERT_TRUE(failed()) << host_->all_output();
  ASSERT_EQ(host_->spawned().size(), 1u);
  const std::string children = host_->spawned()[0];
  host_->kill_all(SIGTERM);
  ASSERT_TRUE(host_->run(std::chrono::seconds(30))) << host_->all_output();
  EXPECT_NE(host_->all_output().find("child 1 of 2: parent size 1\n"), std::string::npos)
      << host_->all_output();
  EXPECT_TRUE(std::find(seen_.connected.begin(), seen_.connected.end(), px::proc{children, 1}) !=
              seen_.connected.end());
  EXPECT_TRUE(std::find(seen_.finalized.begin(), seen_.finalized.end(), px::proc{children, 1}) ==
              seen_.finalized.end());
  for (const auto& r : host_->ranks()) {
    if (r.nspace == children && r.rank == 1) continue;
    EXPECT_EQ(r.signal, SIGTERM) << r.nspace << " rank " << r.rank << ": " << r.text;
  }
}

TEST_F(PmixHost, Mpi4pySpawn) {
  const std::string python = "/usr/bin/python3";
  if (pm::test::run_command({python, "-c", "import mpi4py"}).exit_code != 0) {
    GTEST_SKIP() << "python3-mpi4py is not installed";
  }
  run(job(1), {python, std::string(PM_MPI_SOURCE_DIR) + "/mpi_spawn.py", "2"}, base_env(3));
  expect_all_exited_zero();
  ASSERT_EQ(host_->ranks().size(), 3u) << host_->all_output();
  expect_spawn_lines(host_->all_output(), 2);
  ASSERT_EQ(seen_.spawns.size(), 1u);
  EXPECT_EQ(seen_.spawns[0].apps[0].argv,
            (std::vector<std::string>{python, std::string(PM_MPI_SOURCE_DIR) + "/mpi_spawn.py",
                                      "child"}));
}

TEST_F(PmixHost, PublishLookupWaitsForTheKeys) {
  // Rank 0 looks up with PMIX_WAIT before anyone published: the host holds the lookup and
  // answers it when rank 1 publishes. The values (a string, an int32, a byte object with a 0
  // in it) come back as published, packed and unpacked by the server.
  const auto j = job(2);
  server_->register_job(j);
  registered_ = true;
  const auto env = base_env(2);
  start_host(env);
  const std::string pubsub = mpi_dir + "/pmix_pubsub";
  host_->spawn_rank(j, 0, {pubsub, "lookup", "k", "wait"}, env);
  ASSERT_TRUE(
      host_->run_until([&] { return host_->waiting_lookups() == 1; }, std::chrono::seconds(30)))
      << host_->all_output();
  ASSERT_EQ(host_->waiting_lookups(), 1u) << host_->all_output();
  host_->spawn_rank(j, 1, {pubsub, "publish", "k"}, env);
  ASSERT_TRUE(host_->run(std::chrono::seconds(30))) << host_->all_output();
  expect_all_exited_zero();
  const std::string& looker = host_->ranks()[0].text;
  EXPECT_NE(looker.find("found k = value-of-k from " + nspace_ + ":1\n"), std::string::npos)
      << looker;
  EXPECT_NE(looker.find("found k.int = -7\n"), std::string::npos) << looker;
  EXPECT_NE(looker.find("found k.bytes = 01 02 00 03\n"), std::string::npos) << looker;
  EXPECT_EQ(seen_.published, (std::vector<std::string>{"k", "k.int", "k.bytes"}));
  ASSERT_EQ(seen_.lookups.size(), 1u);
  EXPECT_EQ(seen_.lookups[0].requester, (px::proc{nspace_, 0}));
  EXPECT_EQ(seen_.lookups[0].keys, (std::vector<std::string>{"k", "k.int", "k.bytes"}));
  EXPECT_TRUE(seen_.lookups[0].wait);
  EXPECT_EQ(seen_.lookups[0].timeout_s, 60u);
}

TEST_F(PmixHost, LookupOfAMissingKeyWithoutWaitIsNotFound) {
  const auto j = job(2);
  server_->register_job(j);
  registered_ = true;
  const auto env = base_env(2);
  start_host(env);
  const std::string pubsub = mpi_dir + "/pmix_pubsub";
  host_->spawn_rank(j, 0, {pubsub, "lookup", "nokey"}, env);
  host_->spawn_rank(j, 1, {pubsub, "unpublish", "gone"}, env);
  ASSERT_TRUE(host_->run(std::chrono::seconds(30))) << host_->all_output();
  EXPECT_EQ(host_->ranks()[0].exit_code, 4) << host_->ranks()[0].text;
  EXPECT_NE(host_->ranks()[0].text.find("lookup nokey: NOT-FOUND"), std::string::npos)
      << host_->ranks()[0].text;
  ASSERT_EQ(seen_.lookups.size(), 1u);
  EXPECT_FALSE(seen_.lookups[0].wait);
  EXPECT_EQ(seen_.lookups[0].timeout_s, 0u);
  EXPECT_EQ(host_->ranks()[1].exit_code, 0) << host_->ranks()[1].text;
  EXPECT_EQ(seen_.unpublished, (std::vector<std::string>{"gone"}));
}

TEST_F(PmixHost, ConnectWithANamespaceElsewhereGoesToTheHost) {
  // A namespace registered with no rank here (no_node): PMIx cannot complete a connect with it
  // alone and hands it to the host; the host's answer is the caller's.
  px::job_info far;
  far.nspace = nspace_ + ".far";
  far.node_names = {"other-host"};
  far.node_index = px::no_node;
  far.ranks.resize(2);
  far.ranks[1].local_rank = far.ranks[1].node_rank = 1;
  server_->register_job(far);
  other_nspaces_.push_back(far.nspace);
  EXPECT_THROW(server_->rank_env(far.nspace, 0), pm::error) << "no rank of it is here";
  run(job(1), {mpi_dir + "/pmix_pubsub", "connect", far.nspace}, base_env(1));
  expect_all_exited_zero();
  EXPECT_NE(host_->all_output().find("connect: SUCCESS"), std::string::npos) << host_->all_output();
  ASSERT_EQ(seen_.connects.size(), 1u);
  EXPECT_EQ(seen_.connects[0].participants,
            (std::vector<px::proc>{{nspace_, px::wildcard_rank}, {far.nspace, px::wildcard_rank}}));
}

TEST_F(PmixHost, AFailedConnectFailsTheCaller) {
  px::job_info far;
  far.nspace = nspace_ + ".far";
  far.node_names = {"other-host"};
  far.node_index = px::no_node;
  far.ranks.resize(1);
  server_->register_job(far);
  other_nspaces_.push_back(far.nspace);
  seen_.connect_answer = px::status::unreachable;
  run(job(1), {mpi_dir + "/pmix_pubsub", "connect", far.nspace}, base_env(1));
  ASSERT_EQ(host_->ranks().size(), 1u);
  EXPECT_EQ(host_->ranks()[0].exit_code, 4) << host_->all_output();
  EXPECT_EQ(seen_.connects.size(), 1u);
}

TEST_F(PmixHost, ASpawnedJobKnowsItsParent) {
  auto j = job(1);
  j.spawned = true;
  j.parent = px::proc{"pmtest.parent", 3};
  run(j, {mpi_dir + "/pmix_pubsub", "info"}, base_env(1));
  expect_all_exited_zero();
  EXPECT_NE(host_->all_output().find("spawned 1 parent pmtest.parent:3\n"), std::string::npos)
      << host_->all_output();
}

TEST_F(PmixHost, AJobNotSpawnedHasNoParent) {
  run(job(1), {mpi_dir + "/pmix_pubsub", "info"}, base_env(1));
  expect_all_exited_zero();
  EXPECT_NE(host_->all_output().find("spawned 0 parent none\n"), std::string::npos)
      << host_->all_output();
}

// ---- the server's own life, in a process of its own ----

bool alone() {
  return std::getenv("PM_PMIX_ALONE") != nullptr;
}

// Signal masks of this process's threads other than the calling one.
std::vector<std::string> other_threads_masks() {
  std::vector<std::string> out;
  const std::string me = std::to_string(::gettid());
  DIR* d = ::opendir("/proc/self/task");
  while (const dirent* e = ::readdir(d)) {
    const std::string tid = e->d_name;
    if (tid == "." || tid == ".." || tid == me) continue;
    std::ifstream in("/proc/self/task/" + tid + "/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("SigBlk:", 0) == 0) out.push_back(line.substr(7));
    }
  }
  ::closedir(d);
  return out;
}

TEST(ServerAlone, StartStopLeavesNothingAndThreadsTakeNoSignal) {
  if (!alone()) GTEST_SKIP() << "run by PmixServerLifecycle in a process of its own";
  const auto tmp_before = scratch_entries("/tmp");
  const auto shm_before = scratch_entries("/dev/shm");
  sigset_t before, after;
  pthread_sigmask(SIG_SETMASK, nullptr, &before);

  px::options opts;
  std::vector<px::proc> connected;
  opts.on.client_connected = [&](const px::proc& p) { connected.push_back(p); };
  auto server = px::server::start(opts);
  std::printf("PMIx_server_init: %.1f ms\n", server->init_time().count() / 1e6);

  // The caller's mask is as it was; every thread PMIx started blocks every signal.
  pthread_sigmask(SIG_SETMASK, nullptr, &after);
  for (int sig = 1; sig <= SIGRTMAX; ++sig) {
    EXPECT_EQ(sigismember(&before, sig), sigismember(&after, sig)) << "signal " << sig;
  }
  const auto masks = other_threads_masks();
  EXPECT_FALSE(masks.empty()) << "PMIx runs a progress thread";
  // Every signal blocked; SIGKILL, SIGSTOP and glibc's two internal signals (32, 33) may show
  // as unblocked (they cannot be blocked).
  const auto bit = [](int sig) { return std::uint64_t{1} << (sig - 1); };
  const std::uint64_t may_miss = bit(SIGKILL) | bit(SIGSTOP) | bit(32) | bit(33);
  for (const auto& m : masks) {
    const std::uint64_t blocked = std::stoull(m, nullptr, 16);
    EXPECT_EQ(blocked | may_miss, ~std::uint64_t{0}) << m;
  }

  // The private directory: 0700, under /tmp; PMIx's tmpdir inside it.
  struct stat st {};
  ASSERT_EQ(::stat(server->tmpdir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(server->tmpdir().rfind("/tmp/pm-pmix." + std::to_string(::getpid()) + ".", 0), 0u)
      << server->tmpdir();

  // Jobs, run and left registered: stop() must clear it all.
  const auto j = pm::test::one_node_job("alone", 2, hostname());
  server->register_job(j);
  {
    tiny_host h(*server);
    h.spawn(j, {mpi_dir + "/mpi_hello", "2"}, base_env(2));
    ASSERT_TRUE(h.run(std::chrono::seconds(30)));
    for (const auto& r : h.ranks()) EXPECT_EQ(r.exit_code, 0) << r.text;
  }
  EXPECT_EQ(connected.size(), 2u);
  // No abort callback: MPI_Abort's caller is released at once and exits with its code.
  const auto j2 = pm::test::one_node_job("alone-abort", 1, hostname());
  server->register_job(j2);
  {
    tiny_host h(*server);
    h.spawn(j2, {mpi_dir + "/mpi_abort", "0"}, base_env(1));
    ASSERT_TRUE(h.run(std::chrono::seconds(30)));
    EXPECT_EQ(h.ranks().at(0).exit_code, 42) << h.ranks().at(0).text;
  }
  const std::string dir = server->tmpdir();
  server->stop();
  server->stop();  // idempotent
  EXPECT_NE(::stat(dir.c_str(), &st), 0) << dir << " is left";
  EXPECT_EQ(added(scratch_entries("/tmp"), tmp_before), std::set<std::string>{});
  EXPECT_EQ(added(scratch_entries("/dev/shm"), shm_before), std::set<std::string>{});
  EXPECT_TRUE(other_threads_masks().empty()) << "PMIx's threads end at stop()";

  // libpmix cannot start again in this process: a clear error instead of its crash.
  try {
    px::server::start({});
    ADD_FAILURE() << "a second server started";
  } catch (const pm::error& e) {
    EXPECT_EQ(std::string(e.what()),
              "PMIx: a server was started in this process already (libpmix allows one)");
  }
}

TEST(PmixServerLifecycle, InAProcessOfItsOwn) {
  if (alone()) GTEST_SKIP();
  char exe[4096] = {};
  ASSERT_GT(::readlink("/proc/self/exe", exe, sizeof exe - 1), 0);
  std::vector<std::string> env = pm::test::own_environment();
  env.emplace_back("PM_PMIX_ALONE=1");
  const auto res = pm::test::run_command({exe, "--gtest_filter=ServerAlone.*", "--gtest_color=no"},
                                         std::chrono::seconds(60), "", &env);
  std::printf("%s", res.out.c_str());
  EXPECT_EQ(res.exit_code, 0) << res.out << res.err;
  EXPECT_NE(res.out.find("[  PASSED  ] 1 test"), std::string::npos) << res.out;
}

// What pmd tells a rank at exec before its server runs (predicted_env.hpp) is what the server's
// setup_fork says once it runs, but for the port (pmd's, relayed to the server's). Run in a
// process of its own, like ServerAlone: one server per process.
TEST(PredictedAlone, TheServerSaysWhatTheRanksWereTold) {
  if (std::getenv("PM_PMIX_PREDICTED") == nullptr) GTEST_SKIP() << "run by PmixPredictedEnv";
  ::setenv("PMIX_MCA_gds", px::server_store, 1);
  char dir[] = "/tmp/pm-pmix.predicted.XXXXXX";
  char shm[] = "/dev/shm/pm-pmix.predicted.XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  ASSERT_NE(::mkdtemp(shm), nullptr);
  px::options opts;
  opts.hostname = "nodeA";
  opts.dir = dir;
  opts.shm_dir = shm;
  auto server = px::server::start(opts);
  px::job_info j;
  j.nspace = "predicted.ns";
  j.universe_size = 4;
  j.node_index = 1;
  j.node_names = {"nodeB", "nodeA"};
  j.ranks = {{0, 0, 0, 0}, {0, 1, 0, 0}, {0, 1, 1, 1}};
  server->register_job(j);
  const auto said = server->rank_env(j.nspace, 2);
  std::string port;
  for (const auto& v : said) {
    if (v.rfind("PMIX_SERVER_URI41=", 0) == 0) port = v.substr(v.rfind(':') + 1);
  }
  ASSERT_FALSE(port.empty());
  px::server_place place{dir, shm, "nodeA", static_cast<std::uint16_t>(std::stoi(port)),
                         ::getpid()};
  const auto told = px::predicted_rank_env(place, j.nspace, 2);
  EXPECT_EQ(std::set<std::string>(told.begin(), told.end()),
            std::set<std::string>(said.begin(), said.end()));
  server->stop();
  EXPECT_FALSE(std::filesystem::exists(dir));
  EXPECT_FALSE(std::filesystem::exists(shm));
}

TEST(PmixPredictedEnv, MatchesWhatTheServerSays) {
  if (std::getenv("PM_PMIX_PREDICTED") != nullptr) GTEST_SKIP();
  char exe[4096] = {};
  ASSERT_GT(::readlink("/proc/self/exe", exe, sizeof exe - 1), 0);
  std::vector<std::string> env = pm::test::own_environment();
  env.emplace_back("PM_PMIX_PREDICTED=1");
  const auto res =
      pm::test::run_command({exe, "--gtest_filter=PredictedAlone.*", "--gtest_color=no"},
                            std::chrono::seconds(60), "", &env);
  std::printf("%s", res.out.c_str());
  EXPECT_EQ(res.exit_code, 0) << res.out << res.err;
  EXPECT_NE(res.out.find("[  PASSED  ] 1 test"), std::string::npos) << res.out;
}

}  // namespace
