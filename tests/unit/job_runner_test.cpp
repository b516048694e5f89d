// pm::job_runner on this machine: on_rank_state reports every change once, in order, matching
// the final report; controller::rank_report_of agrees with report() rank by rank.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <map>

#include <boost/asio/post.hpp>

#include "pm/env.hpp"
#include "pm/error.hpp"
#include "pm/launch_facts.hpp"
#include "pm/launcher.hpp"
#include "pm/rank_map.hpp"
#include "pm/transport.hpp"

namespace {

using namespace std::chrono_literals;

pm::job_request local_job(std::uint32_t np, std::vector<std::string> argv) {
  pm::allocation alloc;
  alloc.source = pm::allocation_source::api;
  const auto me = pm::local_host_info();
  alloc.hosts.push_back(pm::host{me.hostname, np, 0, true, true});
  pm::job_spec spec;
  spec.apps.push_back(pm::app_context{std::move(argv), np, {}, {}});
  pm::job_request request;
  request.map = pm::map_job(spec, alloc);
  request.apps = spec.apps;
  request.env = pm::make_job_env(
      pm::current_environment(), {}, pm::default_env_profiles,
      pm::decide_launch_facts(request.map, me, std::nullopt, pm::default_env_profiles));
  request.agent_path = std::string(PM_BINARY_DIR) + "/bin/pmd";
  // The ranks' output is not this test's business.
  request.output.sink = [](std::uint32_t, pm::output_stream, std::string_view, pm::line_flags) {};
  return request;
}

// Runs the job on an io_context of its own, 20 s at most: its exit code, or nothing if it did not
// end by then.
std::optional<int> run_to_end(pm::job_request request) {
  boost::asio::io_context io;
  std::optional<int> code;
  pm::job_runner runner(io, std::move(request),
                        {nullptr, [&](const pm::job_report& r) { code = r.exit_code; }});
  runner.start();
  io.run_for(20s);
  return code;
}

bool is_end(pm::rank_state s) {
  return s != pm::rank_state::pending && s != pm::rank_state::running;
}

TEST(JobRunner, OnRankStateReportsEveryChangeOnceInOrder) {
  const std::string payload = std::string(PM_BINARY_DIR) + "/tests/pm_payload";
  boost::asio::io_context io;
  std::map<std::uint32_t, std::vector<pm::rank_report>> seen;
  std::optional<pm::job_report> final_report;
  pm::job_callbacks cb;
  cb.on_rank_state = [&](const pm::rank_report& r) {
    EXPECT_FALSE(final_report.has_value()) << "a change after on_finish";
    seen[r.rank].push_back(r);
  };
  cb.on_finish = [&](const pm::job_report& r) { final_report = r; };
  // Rank 2 exits 3; the abort kills the others, which would sleep 30 s.
  pm::job_runner runner(io, local_job(4, {payload, "if-rank", "2", "exit", "3", "sleep", "30"}),
                        cb);
  runner.start();
  io.run_for(20s);
  ASSERT_TRUE(final_report.has_value()) << "the job did not end";
  EXPECT_EQ(final_report->exit_code, 3);
  ASSERT_EQ(seen.size(), 4u);
  for (const auto& [rank, changes] : seen) {
    ASSERT_FALSE(changes.empty());
    // pending -> running -> end, or pending -> end when the exit overtook the start.
    ASSERT_LE(changes.size(), 2u) << "rank " << rank;
    if (changes.size() == 2) {
      EXPECT_EQ(changes[0].state, pm::rank_state::running) << "rank " << rank;
      EXPECT_GT(changes[0].pid, 0);
    }
    const auto& last = changes.back();
    EXPECT_TRUE(is_end(last.state)) << "rank " << rank;
    EXPECT_TRUE(last.status.has_value());
    const auto& in_report = final_report->ranks[rank];
    EXPECT_EQ(last.state, in_report.state) << "rank " << rank;
    EXPECT_EQ(last.status, in_report.status) << "rank " << rank;
    EXPECT_EQ(last.ended_at, in_report.ended_at) << "rank " << rank;
  }
  EXPECT_EQ(seen[2].back().state, pm::rank_state::exited);
  EXPECT_EQ(seen[2].back().status, pm::exit_status::exited(3));
  for (std::uint32_t r : {0u, 1u, 3u}) EXPECT_EQ(seen[r].back().state, pm::rank_state::killed);
}

// The ranks' stdin (`--stdin all`): the caller may close its copies once the runner exists, and
// once a rank ended nothing holds its pipe open any more: writing to it fails at once, where it
// used to fill up and stop pmrun's forwarder for every rank.
TEST(JobRunner, ARanksStdinIsHeldOnlyWhileTheRankMayReadIt) {
  ::signal(SIGPIPE, SIG_IGN);
  int in0[2], in1[2];
  ASSERT_EQ(pipe2(in0, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(in1, O_CLOEXEC), 0);
  // Rank 0 reads its input to the end; rank 1 reads nothing and leaves.
  auto request = local_job(
      2, {"/bin/sh", "-c", "if [ $OMPI_COMM_WORLD_RANK = 0 ]; then wc -c; else echo gone; fi"});
  request.per_rank_stdin = {in0[0], in1[0]};
  std::vector<std::string> lines;
  request.output.sink = [&](std::uint32_t, pm::output_stream, std::string_view line,
                            pm::line_flags) { lines.emplace_back(line); };
  boost::asio::io_context io;
  std::optional<int> code;
  int write_to_gone_rank = 0;
  pm::job_callbacks cb;
  cb.on_finish = [&](const pm::job_report& r) { code = r.exit_code; };
  cb.on_rank_state = [&](const pm::rank_report& r) {
    if (r.rank != 1 || r.state != pm::rank_state::exited) return;
    // After the actions of the event that ended it (the release among them).
    boost::asio::post(io, [&] {
      write_to_gone_rank = ::write(in1[1], "x", 1) < 0 ? errno : 0;
      ASSERT_EQ(::write(in0[1], "hello\n", 6), 6);
      ::close(in0[1]);
    });
  };
  {
    pm::job_runner runner(io, std::move(request), cb);
    ::close(in0[0]);
    ::close(in1[0]);
    runner.start();
    io.run_for(20s);
  }
  ::close(in1[1]);
  ASSERT_EQ(code, 0);
  EXPECT_EQ(write_to_gone_rank, EPIPE);
  std::sort(lines.begin(), lines.end());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].substr(0, 1), "6");
  EXPECT_EQ(lines[1].substr(0, 4), "gone");
}

TEST(JobRunner, WithoutOnRankStateTheJobRunsAsBefore) {
  EXPECT_EQ(run_to_end(local_job(2, {"/bin/true"})), 0);
}

// An agent started before the job (pm::early_agent) serves the job's ranks: their parent is it.
TEST(JobRunner, AdoptsAnAgentStartedEarly) {
  auto request = local_job(2, {"/bin/sh", "-c", "echo $PPID"});
  auto early = pm::early_agent::start(request.agent_path);
  ASSERT_NE(early, nullptr);
  EXPECT_FALSE(early->adopted());
  request.prestarted = early;
  std::vector<std::string> parents;
  request.output.sink = [&](std::uint32_t, pm::output_stream, std::string_view line,
                            pm::line_flags) { parents.emplace_back(line); };
  EXPECT_EQ(run_to_end(std::move(request)), 0);
  EXPECT_TRUE(early->adopted());
  ASSERT_EQ(parents.size(), 2u);
  for (auto& p : parents) {
    while (!p.empty() && (p.back() == '\n' || p.back() == '\r')) p.pop_back();
    EXPECT_EQ(p, std::to_string(early->pid()));
  }
}

// One whose path the job does not use is not adopted, and ends when the last reference goes.
TEST(JobRunner, AnEarlyAgentNobodyAdoptedIsEndedWithItsLastReference) {
  auto request = local_job(1, {"/bin/true"});
  auto early = pm::early_agent::start(request.agent_path);
  ASSERT_NE(early, nullptr);
  const auto pid = static_cast<pid_t>(early->pid());
  request.agent_path = std::string(PM_BINARY_DIR) + "/bin/../bin/pmd";  // another command line
  request.prestarted = early;
  EXPECT_EQ(run_to_end(std::move(request)), 0);
  EXPECT_FALSE(early->adopted());
  EXPECT_EQ(::kill(pid, 0), 0) << "still ours until released";
  early.reset();
  EXPECT_EQ(::kill(pid, 0), -1) << "killed and reaped";
  EXPECT_EQ(errno, ESRCH);
}

TEST(JobRunner, EarlyAgentStartIsNullWithoutAnAgentProgram) {
  EXPECT_EQ(pm::early_agent::start("/nonexistent/pmd"), nullptr);
}

// A signal the controller would ignore is refused, not accepted and dropped; the job goes on.
TEST(JobRunner, RefusesASignalAJobDoesNotTake) {
  boost::asio::io_context io;
  std::optional<int> code;
  pm::job_runner runner(io, local_job(2, {"/bin/true"}),
                        {nullptr, [&](const pm::job_report& r) { code = r.exit_code; }});
  runner.start();
  for (const int signo : {SIGKILL, SIGQUIT, SIGSEGV, 0, 99}) {
    try {
      runner.signal(signo);
      ADD_FAILURE() << "signal " << signo << " was accepted";
    } catch (const pm::error& e) {
      EXPECT_EQ(e.code(), pm::errc::usage);
      EXPECT_NE(std::string(e.what()).find("is not one a job takes"), std::string::npos);
    }
  }
  for (const int signo : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGTSTP, SIGCONT})
    EXPECT_TRUE(pm::job_takes_signal(signo)) << signo;
  io.run_for(20s);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0);
}

// A request that does not hold together is refused by the constructor in one line, before
// anything starts (an agent that gave up on it was reported as a lost host, exit 213).
TEST(JobRunner, RefusesARequestThatDoesNotHoldTogether) {
  boost::asio::io_context io;
  const auto refused = [&](pm::job_request request, const std::string& says) {
    try {
      pm::job_runner runner(io, std::move(request), {});
      ADD_FAILURE() << "accepted; expected: " << says;
    } catch (const pm::error& e) {
      EXPECT_EQ(e.code(), pm::errc::usage);
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  auto no_apps = local_job(1, {"/bin/true"});
  no_apps.apps.clear();
  refused(std::move(no_apps), "0 app contexts for a rank map of 1");
  auto two_apps = local_job(1, {"/bin/true"});
  two_apps.apps.push_back(two_apps.apps.front());
  refused(std::move(two_apps), "2 app contexts for a rank map of 1");
  auto no_program = local_job(1, {"/bin/true"});
  no_program.apps.front().argv.clear();
  refused(std::move(no_program), "app 0 has no program");
  auto no_ranks = local_job(1, {"/bin/true"});
  no_ranks.map = pm::rank_map{};
  refused(std::move(no_ranks), "no rank");
  EXPECT_EQ(io.poll(), 0u) << "nothing was started";
}

// ---- the set-up (docs/failure-semantics.md, "Set-up"), with a transport that stands for ssh ----

// A remote transport whose agents never answer (`fail` empty: ssh waits for a host that does not
// answer) or fail at once with `fail` (ssh's reason). It records which hosts the job closed.
struct stub_transport : pm::transport {
  boost::asio::io_context& io;
  std::string fail;
  std::vector<std::uint32_t> opened, closed;
  stub_transport(boost::asio::io_context& context, std::string why)
      : io(context), fail(std::move(why)) {}
  void open(const pm::agent_target& target, std::function<void(pm::agent_stream)>,
            std::function<void(std::string)> failed) override {
    opened.push_back(target.host);
    if (!fail.empty()) boost::asio::post(io, [failed, why = fail] { failed(why); });
  }
  void close(std::uint32_t host, std::function<void(pm::agent_end)> done) override {
    closed.push_back(host);
    boost::asio::post(io, [done] { done({}); });
  }
};

// This machine (one slot, rank 0) and a remote host "far" (one slot, rank 1) reached through
// `transport`: rank 0's MASTER_ADDR must be an address "far" reaches, so its spawn waits for far's
// agent's hello, which never comes.
pm::job_request local_and_far(const std::shared_ptr<pm::transport>& transport) {
  pm::allocation alloc;
  alloc.source = pm::allocation_source::api;
  const auto me = pm::local_host_info();
  alloc.hosts.push_back(pm::host{me.hostname, 1, 0, true, true});
  alloc.hosts.push_back(pm::host{"far", 1, 0, true, false});
  pm::job_spec spec;
  spec.apps.push_back(pm::app_context{{"/bin/sleep", "30"}, 2, {}, {}});
  pm::job_request request;
  request.map = pm::map_job(spec, alloc);
  request.apps = spec.apps;
  request.env = pm::make_job_env(
      pm::current_environment(), {}, pm::default_env_profiles,
      pm::decide_launch_facts(request.map, me, std::nullopt, pm::default_env_profiles));
  request.agent_path = std::string(PM_BINARY_DIR) + "/bin/pmd";
  request.remote_transport = transport;
  request.output.sink = [](std::uint32_t, pm::output_stream, std::string_view, pm::line_flags) {};
  return request;
}

struct ended_job {
  std::optional<pm::job_report> report;
  std::vector<std::string> lines;
  std::map<std::uint32_t, pm::rank_state> last_state;
  std::chrono::steady_clock::duration took{};
};

// Runs the job; `poke` (if any) is called on the runner 200 ms in.
ended_job run_with(pm::job_request request, boost::asio::io_context& io,
                   const std::function<void(pm::job_runner&)>& poke = {}) {
  ended_job out;
  pm::job_callbacks cb;
  cb.on_message = [&](std::string_view line) { out.lines.emplace_back(line); };
  cb.on_finish = [&](const pm::job_report& r) { out.report = r; };
  cb.on_rank_state = [&](const pm::rank_report& r) { out.last_state[r.rank] = r.state; };
  pm::job_runner runner(io, std::move(request), cb);
  const auto start = std::chrono::steady_clock::now();
  runner.start();
  if (poke) {
    io.run_for(200ms);
    poke(runner);
  }
  while (!out.report && std::chrono::steady_clock::now() - start < 20s) io.run_for(10ms);
  out.took = std::chrono::steady_clock::now() - start;
  io.run_for(300ms);  // what the runner still closes after the finish
  return out;
}

TEST(JobRunnerSetup, AnAgentThatFailsBeforeItsHelloFailsTheLaunchWith125AtOnce) {
  boost::asio::io_context io;
  auto t = std::make_shared<stub_transport>(
      io, "ssh to far failed: ssh: connect to host 10.0.0.9 port 22: Connection refused");
  const auto r = run_with(local_and_far(t), io);
  ASSERT_TRUE(r.report) << "the launch did not end";
  EXPECT_LT(r.took, 5s);
  EXPECT_EQ(r.report->exit_code, pm::exit_codes::launch_failed);
  EXPECT_EQ(r.report->cause, pm::cause_kind::spawn_failed);
  EXPECT_EQ(r.report->failed_host, 1u);
  ASSERT_EQ(r.lines.size(), 1u);
  EXPECT_EQ(r.lines[0],
            "the agent on far did not start (ssh to far failed: ssh: connect to host 10.0.0.9 "
            "port 22: Connection refused); its 1 rank could not start");
  // Rank 0 waited for far's hello (the launch facts): it never started.
  EXPECT_EQ(r.report->ranks[0].state, pm::rank_state::not_started);
  EXPECT_EQ(r.report->ranks[0].pid, 0);
  EXPECT_EQ(r.report->ranks[1].state, pm::rank_state::spawn_failed);
  EXPECT_EQ(r.last_state.at(0), pm::rank_state::not_started);  // on_rank_state says so too
}

TEST(JobRunnerSetup, SigintWhileAHostNeverAnswersEndsTheLaunchAtOnce) {
  boost::asio::io_context io;
  auto t = std::make_shared<stub_transport>(io, "");
  const auto r = run_with(local_and_far(t), io, [](pm::job_runner& j) { j.signal(SIGINT); });
  ASSERT_TRUE(r.report) << "the launch did not end";
  EXPECT_LT(r.took, 200ms + 2s);
  EXPECT_EQ(r.report->cause, pm::cause_kind::signal);
  EXPECT_EQ(r.report->exit_code, 128 + SIGINT);
  ASSERT_EQ(r.lines.size(), 1u);
  EXPECT_EQ(r.lines[0], "interrupted by SIGINT");  // nothing ran, nothing was signalled
  for (const auto& rr : r.report->ranks) EXPECT_EQ(rr.state, pm::rank_state::not_started);
  EXPECT_EQ(t->closed, (std::vector<std::uint32_t>{1}));  // far's "ssh" was ended, not waited for
}

TEST(JobRunnerSetup, TheTimeoutWhileAHostNeverAnswersEndsTheLaunch) {
  boost::asio::io_context io;
  auto t = std::make_shared<stub_transport>(io, "");
  auto request = local_and_far(t);
  request.control.timeout = 300ms;
  const auto r = run_with(std::move(request), io);
  ASSERT_TRUE(r.report) << "the launch did not end";
  EXPECT_LT(r.took, 300ms + 2s);
  EXPECT_EQ(r.report->exit_code, pm::exit_codes::timeout);
  EXPECT_EQ(t->closed, (std::vector<std::uint32_t>{1}));
}

TEST(JobRunnerSetup, ACancelWhileAHostNeverAnswersEndsTheLaunch) {
  boost::asio::io_context io;
  auto t = std::make_shared<stub_transport>(io, "");
  const auto r = run_with(local_and_far(t), io, [](pm::job_runner& j) { j.cancel(); });
  ASSERT_TRUE(r.report) << "the launch did not end";
  EXPECT_EQ(r.report->cause, pm::cause_kind::abort_requested);
  EXPECT_EQ(r.report->ranks_failed, 0u);
}

TEST(Controller, RankReportOfAgreesWithTheReport) {
  pm::allocation alloc;
  alloc.source = pm::allocation_source::host_list;
  alloc.hosts = {pm::host{"a", 2}, pm::host{"b", 2}};
  pm::job_spec spec;
  spec.apps.push_back(pm::app_context{{"app"}, 4, {}, {}});
  const auto map = pm::map_job(spec, alloc);
  pm::controller ctl(map, {});
  std::vector<pm::action> out;
  const auto same = [&] {
    const auto report = ctl.report();
    for (std::uint32_t r = 0; r < 4; ++r) {
      const auto one = ctl.rank_report_of(r);
      EXPECT_EQ(one.state, report.ranks[r].state) << r;
      EXPECT_EQ(one.status, report.ranks[r].status) << r;
      EXPECT_EQ(one.pid, report.ranks[r].pid) << r;
      EXPECT_EQ(one.host, report.ranks[r].host) << r;
      EXPECT_EQ(one.reason, report.ranks[r].reason) << r;
      EXPECT_EQ(one.ended_at, report.ranks[r].ended_at) << r;
    }
  };
  ctl.handle(0ms, pm::job_start{}, out);
  same();
  ctl.handle(1ms, pm::rank_started{0, 100}, out);
  ctl.handle(1ms, pm::rank_spawn_failed{1, 127, "no such file"}, out);
  same();
  ctl.handle(2ms, pm::host_lost{1, "agent gone"}, out);
  same();
  EXPECT_EQ(ctl.rank_report_of(2).state, pm::rank_state::lost);
  EXPECT_EQ(ctl.rank_report_of(2).reason, "agent gone");
  EXPECT_EQ(ctl.rank_report_of(1).reason, "no such file");
  EXPECT_THROW(ctl.rank_report_of(4), pm::error);
}

}  // namespace
