// One host's agent whole (agent/host_machine): which part takes each launcher message, and what
// one part's event means for another, without processes, ssh or a PMIx server.
#include "agent/host_machine.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>

#include <gtest/gtest.h>

#include "support/gpu_node.hpp"

namespace pm::agent {
namespace {

namespace ln = pm::link;
using namespace std::chrono_literals;

// A host where /usr/bin/app exists and nothing else.
class files final : public host_files {
 public:
  file_facts look(const std::string& path) const override {
    if (path == "/usr/bin/app") return {file_facts::kind::executable, 0};
    if (path == "/usr/bin" || path == "/home/u") return {file_facts::kind::directory, 0};
    return {file_facts::kind::missing, ENOENT};
  }
  std::string working_directory() const override { return "/"; }
};

struct harness {
  files fs;
  host_machine m{options{{"PATH=/usr/bin", "HOME=/home/u"}, 1000ms, 20ms, &fs}};
  std::vector<host_action> out;
  agent_time now{0};

  std::vector<host_action> feed(host_event e) {
    out.clear();
    now += 1ms;
    m.handle(now, std::move(e), out);
    m.handle(now, turn_ended{}, out);  // as a driver's turn ends (host_machine.hpp)
    return out;
  }
  // Several events in one turn of the driver's loop.
  std::vector<host_action> turn(std::vector<host_event> events) {
    out.clear();
    now += 1ms;
    for (auto& e : events) m.handle(now, std::move(e), out);
    m.handle(now, turn_ended{}, out);
    return out;
  }
  std::vector<host_action> msg(ln::message x) { return feed(event{received{std::move(x)}}); }

  // A job of 2 ranks on 2 hosts, rank 0 here, with PMIx.
  static ln::job_setup setup(bool pmix) {
    ln::job_setup j;
    j.cwd = "/home/alice/proj";  // the launcher's, not on this host
    j.heartbeat_ms = 500;
    j.silence_ms = 2000;
    j.apps.push_back(ln::app_spec{{"app"}, "", {}});
    if (pmix) {
      j.pmix = ln::pmix_job{"pmrun.1.ab", 2, 0, {"a", "b"}, {0, 1}, {0, 0}, {0, 0}, "", 0};
    }
    return j;
  }
  // Setup, the driver's answer to start_pmix, rank 0 spawned with pid 100.
  void start(bool pmix) {
    const auto a = msg(setup(pmix));
    if (pmix) {
      pmix_host_facts f;
      f.place.port = 4000;
      f.place.server_pid = 9;
      f.place.dir = "/tmp/p";
      f.cores = 4;
      feed(pmix_ready{f});
    }
    msg(ln::spawn_request{{ln::rank_spec{0, 0, {}, false}}});
    feed(event{rank_spawned{0, 100}});
  }
};

template <class T, class V>
constexpr bool one_of = false;
template <class T, class... A>
constexpr bool one_of<T, std::variant<A...>> = (std::is_same_v<T, A> || ...);

// Every T among the actions, at the top or inside a part's actions (a part's own `send` never
// comes out: every message is an agent `send`).
template <class T>
std::vector<T> all(const std::vector<host_action>& v) {
  std::vector<T> r;
  const auto take = [&]<class V>(const V& x) {
    if constexpr (one_of<T, V>) {
      if (const T* t = std::get_if<T>(&x)) r.push_back(*t);
    }
  };
  for (const auto& a : v) {
    take(a);
    if (const auto* x = std::get_if<action>(&a)) take(*x);
    if (const auto* x = std::get_if<pmix_action>(&a)) {
      EXPECT_FALSE(std::holds_alternative<send>(*x));
      take(*x);
    }
    if (const auto* x = std::get_if<child_action>(&a)) {
      EXPECT_FALSE(std::holds_alternative<send>(*x));
      take(*x);
    }
  }
  return r;
}
std::vector<ln::message> sent(const std::vector<host_action>& v) {
  std::vector<ln::message> r;
  for (const auto& s : all<send>(v)) r.push_back(s.msg);
  return r;
}

TEST(HostMachine, TheJobsSetupAsksForHeartbeatsAndAPmixServer) {
  harness h;
  const auto a = h.msg(harness::setup(true));
  ASSERT_EQ(all<set_heartbeats>(a).size(), 1u);
  EXPECT_EQ(all<set_heartbeats>(a)[0].every, 500ms);
  EXPECT_EQ(all<set_heartbeats>(a)[0].silence, 2000ms);
  ASSERT_EQ(all<start_pmix>(a).size(), 1u);
  EXPECT_EQ(all<start_pmix>(a)[0].job.nspace, "pmrun.1.ab");
  EXPECT_EQ(all<start_pmix>(a)[0].executables, (std::vector<std::string>{"app"}));
  pmix_host_facts f;
  f.place.port = 4000;
  f.place.server_pid = 9;
  f.place.dir = "/tmp/p";
  // Where tools attach, once the driver named the place.
  EXPECT_EQ(sent(h.feed(pmix_ready{f})),
            (std::vector<ln::message>{
                ln::pmix_server{"pmix-server.9;tcp4://127.0.0.1:4000", "/tmp/p/pmix"}}));
  ASSERT_NE(h.m.pmix(), nullptr);
}

TEST(HostMachine, APmixServerThatCannotBeServedEndsTheJob) {
  harness h;
  h.msg(harness::setup(true));
  const auto a = h.feed(pmix_unavailable{"PMIx: cannot listen on 127.0.0.1: Too many open files"});
  EXPECT_EQ(sent(a), (std::vector<ln::message>{ln::agent_error{
                         "PMIx: cannot listen on 127.0.0.1: Too many open files"}}));
}

TEST(HostMachine, ARankIsPlacedOnThisHostAndToldItsPmixServer) {
  harness h;
  h.msg(harness::setup(true));
  pmix_host_facts f;
  f.place.port = 4000;
  f.place.server_pid = 9;
  f.place.dir = "/tmp/p";
  h.feed(pmix_ready{f});
  const auto a = h.msg(ln::spawn_request{{ln::rank_spec{0, 0, {}, false}}});
  ASSERT_EQ(all<spawn_rank>(a).size(), 1u);
  const auto spec = all<spawn_rank>(a)[0].spec;
  EXPECT_EQ(spec.program, "/usr/bin/app");
  EXPECT_EQ(spec.wdir, "/home/u");  // the launcher's directory is not here
  const auto env = spec.environment();
  EXPECT_NE(std::find(env.begin(), env.end(), "PMIX_RANK=0"), env.end());
  EXPECT_NE(std::find(env.begin(), env.end(), "PMIX_NAMESPACE=pmrun.1.ab"), env.end());
  EXPECT_EQ(spec.variable("PATH"), "/usr/bin");
}

// The summary the agent sent decides that the host has GPUs, also where the driver's own look
// found no device (a fake HWLOC_XMLFILE host): no ob1/tcp shortcut for its ranks.
TEST(HostMachine, ASummaryWithGpusKeepsTheRanksOffTheTcpShortcut) {
  for (const bool gpus : {false, true}) {
    harness h;
    auto j = harness::setup(true);
    j.topology = ln::topology_request{};
    options o{{"PATH=/usr/bin", "HOME=/home/u"}, 1000ms, 20ms, &h.fs};
    o.read_topology = [gpus] {
      return ln::host_shape{topo::to_text(pm::test::gpu_node(2, gpus ? 2 : 0, 1)), ""};
    };
    h.m = host_machine{o};
    h.msg(j);
    pmix_host_facts f;  // the driver's look: no RDMA, no GPU device
    f.place.port = 4000;
    f.place.dir = "/tmp/p";
    f.cores = 4;
    h.feed(pmix_ready{f});
    const auto a = h.msg(ln::spawn_request{{ln::rank_spec{0, 0, {}, false}}});
    ASSERT_EQ(all<spawn_rank>(a).size(), 1u);
    const auto pml = all<spawn_rank>(a)[0].spec.variable("OMPI_MCA_pml");
    EXPECT_EQ(pml.has_value(), !gpus) << (gpus ? "with" : "without") << " GPUs";
  }
}

TEST(HostMachine, AProgramThisHostLacksIsRefusedWithoutASpawn) {
  harness h;
  auto j = harness::setup(false);
  j.apps[0].argv = {"nosuch"};
  h.msg(j);
  const auto a = h.msg(ln::spawn_request{{ln::rank_spec{0, 0, {}, false}}});
  EXPECT_TRUE(all<spawn_rank>(a).empty());
  EXPECT_EQ(
      sent(a),
      (std::vector<ln::message>{ln::spawn_failed{0, 127, "program 'nosuch' not found in PATH"}}));
}

TEST(HostMachine, ChildAgentMessagesNeverReachTheAgentMachine) {
  harness h;
  // Before the job's setup too: the relay is the launcher's business, not the job's.
  const auto a = h.msg(ln::child_open{2, {"ssh", "b"}});
  EXPECT_EQ(all<start_child>(a).size(), 1u);
  EXPECT_TRUE(sent(a).empty());
  EXPECT_EQ(sent(h.feed(child_output{2, "bytes"})),
            (std::vector<ln::message>{ln::child_data{2, "bytes"}}));
}

TEST(HostMachine, AModexRequestWithoutPmixIsRefused) {
  harness h;
  h.start(false);
  EXPECT_EQ(sent(h.msg(ln::modex_request{5, 0})),
            (std::vector<ln::message>{ln::modex_reply{5, false, {}}}));
  // Other PMIx answers have nobody waiting and are dropped, not refused.
  EXPECT_TRUE(h.msg(ln::fence_result{}).empty());
}

TEST(HostMachine, ASignalReleasesARankBlockedInAbort) {
  harness h;
  h.start(true);
  const auto a = h.feed(pmix_abort_called{7, pm::agent::pmix::proc{"pmrun.1.ab", 0}, 3, "oops"});
  EXPECT_EQ(sent(a), (std::vector<ln::message>{ln::pmix_abort{0, 3, "oops"}}));
  const auto b = h.msg(ln::signal_request{{0}, SIGTERM});
  // The group is signalled first, then the caller may return.
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(std::get<signal_group>(std::get<action>(b[0])).signo, SIGTERM);
  EXPECT_EQ(std::get<pmix_complete>(std::get<pmix_action>(b[1])).id, 7u);
}

TEST(HostMachine, ARankThatEndsWithoutFinalizeIsReportedBeforeItsExit) {
  harness h;
  h.start(true);
  h.feed(pmix_client_connected{pm::agent::pmix::proc{"pmrun.1.ab", 0}});
  const auto a = h.feed(event{rank_exited{0, exit_status::exited(0)}});
  EXPECT_EQ(sent(a), (std::vector<ln::message>{ln::pmix_unfinalized{0, exit_status::exited(0)},
                                               ln::exited{{{0, exit_status::exited(0)}}}}));
}

TEST(HostMachine, ALostLauncherEndsTheChildAgentsAndReleasesAborts) {
  harness h;
  h.start(true);
  h.msg(ln::child_open{2, {"ssh", "b"}});
  h.feed(pmix_abort_called{7, pm::agent::pmix::proc{"pmrun.1.ab", 0}, 3, "oops"});
  const auto a = h.feed(event{channel_lost{"the launcher closed the link"}});
  EXPECT_EQ(all<pmix_complete>(a).size(), 1u);
  EXPECT_EQ(all<close_child_input>(a).size(), 1u);
  EXPECT_EQ(all<signal_group>(a).size(), 1u);  // SIGTERM to rank 0's group
  // The sweep that comes later kills a child agent still there after the grace.
  h.feed(event{rank_exited{0, exit_status::signaled(SIGTERM)}});
  h.now += child_relay::end_sequence.grace;
  const auto b = h.feed(event{swept{1}});
  EXPECT_TRUE(all<kill_child>(b).empty());  // swept only asks for a timer
  const auto c = h.feed(event{child_changed{}});
  EXPECT_EQ(all<sweep>(c).size(), 1u);
  EXPECT_EQ(all<kill_child>(c).size(), 1u);
}

// What one turn of the driver's loop did to ranks goes out as one message per kind, in the order
// ranks live (started, then streams and exits); anything else said in the turn goes after
// what was held before it, and the agent's exit sends what is held.
TEST(HostMachine, ATurnsReportsAboutRanksTravelTogetherAndInOrder) {
  harness h;
  h.msg(harness::setup(false));
  h.msg(ln::spawn_request{{ln::rank_spec{0, 0, {}, false}, ln::rank_spec{1, 0, {}, false},
                           ln::rank_spec{2, 0, {}, false}}});
  const auto a = h.turn(
      {event{rank_spawned{0, 100}}, event{rank_spawned{1, 101}}, event{rank_spawned{2, 102}}});
  EXPECT_EQ(sent(a), (std::vector<ln::message>{ln::started{{{0, 100}, {1, 101}, {2, 102}}}}));

  // Held reports, then a message about something else: they go first.
  const auto b = h.turn({event{rank_exited{0, exit_status::exited(0)}},
                         event{output_ended{0, output_stream::out, 12}},
                         event{rank_exited{1, exit_status::exited(3)}},
                         event{received{ln::modex_request{5, 0}}},
                         event{rank_exited{2, exit_status::signaled(9)}}});
  EXPECT_EQ(sent(b),
            (std::vector<ln::message>{
                ln::stream_closed{{{0, output_stream::out, 12}}},
                ln::exited{{{0, exit_status::exited(0)}, {1, exit_status::exited(3)}}},
                ln::modex_reply{5, false, {}}, ln::exited{{{2, exit_status::signaled(9)}}}}));

  // Nothing held: the turn's end says nothing.
  EXPECT_TRUE(sent(h.turn({})).empty());
  EXPECT_FALSE(h.m.holds_reports());
}

TEST(HostMachine, TheAgentsExitSendsWhatItHolds) {
  harness h;
  h.msg(harness::setup(false));
  h.msg(ln::spawn_request{{ln::rank_spec{0, 0, {}, false}}});
  h.feed(event{rank_spawned{0, 100}});
  h.msg(ln::shutdown_request{});
  // The rank's exit and the sweep's answer in one turn: exit_agent comes before the turn's end.
  h.out.clear();
  h.m.handle(h.now, event{rank_exited{0, exit_status::signaled(SIGKILL)}}, h.out);
  h.m.handle(h.now, event{swept{0}}, h.out);
  EXPECT_FALSE(h.m.holds_reports());
  const auto msgs = sent(h.out);
  ASSERT_EQ(msgs.size(), 2u);
  EXPECT_EQ(msgs[0], ln::message(ln::exited{{{0, exit_status::signaled(SIGKILL)}}}));
  EXPECT_EQ(msgs[1], ln::message(ln::shutdown_done{}));
  EXPECT_EQ(all<exit_agent>(h.out).size(), 1u);
}

// A restart in place: a rank blocked in PMIx_Abort returns before the kill, every request of the
// jobs before fails, what the turn said about the old ranks goes before `restarted`, and the
// ranks of the new incarnation are told its namespace.
TEST(HostMachine, ARestartGivesTheNextRanksTheNewNamespaceAfterEverythingAboutTheOldOnes) {
  harness h;
  h.start(true);
  h.feed(pmix_abort_called{7, pm::agent::pmix::proc{"pmrun.1.ab", 0}, 3, "oops"});
  h.feed(pmix_fence_called{
      8, {pm::agent::pmix::proc{"pmrun.1.ab", pm::agent::pmix::wildcard_rank}}, false, {}});
  auto next = *harness::setup(true).pmix;
  next.nspace = "pmrun.1.cd";
  const auto a = h.msg(ln::restart_request{1, next});
  // The abort's caller first, then SIGKILL to the group, then the ranks sweep.
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(std::get<pmix_complete>(std::get<pmix_action>(a[0])).id, 7u);
  EXPECT_EQ(std::get<signal_group>(std::get<action>(a[1])).signo, SIGKILL);
  EXPECT_TRUE(std::holds_alternative<sweep_ranks>(std::get<action>(a[2])));

  // The rank's exit, its streams' ends and the clean sweep in one turn: what is held goes
  // before `restarted`.
  const auto b =
      h.turn({event{rank_exited{0, exit_status::signaled(SIGKILL)}},
              event{output_ended{0, output_stream::out, 5}},
              event{output_ended{0, output_stream::err, 0}}, event{ranks_swept{0, 5555}}});
  EXPECT_EQ(sent(b),
            (std::vector<ln::message>{
                ln::stream_closed{{{0, output_stream::out, 5}, {0, output_stream::err, 0}}},
                ln::exited{{{0, exit_status::signaled(SIGKILL)}}}, ln::restarted{1, 5555}}));
  // The fence still pending fails; the driver drops the old namespace and takes the new one.
  const auto completes = all<pmix_complete>(b);
  ASSERT_EQ(completes.size(), 1u);
  EXPECT_EQ(completes[0].id, 8u);
  EXPECT_EQ(completes[0].status, pm::agent::pmix::status::error);
  const auto restarts = all<pmix_restart>(b);
  ASSERT_EQ(restarts.size(), 1u);
  EXPECT_EQ(restarts[0].dropped, (std::vector<std::string>{"pmrun.1.ab"}));
  EXPECT_EQ(restarts[0].job.nspace, "pmrun.1.cd");
  EXPECT_EQ(all<forget_ranks>(b).size(), 1u);
  ASSERT_NE(h.m.pmix(), nullptr);
  EXPECT_EQ(h.m.pmix()->job().nspace, "pmrun.1.cd");

  // Rank 0 again, with the new namespace's variables.
  const auto c = h.msg(ln::spawn_request{{ln::rank_spec{0, 0, {}, false}}});
  ASSERT_EQ(all<spawn_rank>(c).size(), 1u);
  const auto spec = all<spawn_rank>(c)[0].spec;
  EXPECT_EQ(spec.variable("PMIX_NAMESPACE"), "pmrun.1.cd");
  EXPECT_EQ(spec.variable("PMIX_RANK"), "0");
  // A late answer to the old fence completes nothing.
  EXPECT_TRUE(all<pmix_complete>(h.msg(ln::fence_result{})).empty());
}

TEST(HostMachine, ARestartWithoutPmixFactsKeepsTheNamespace) {
  harness h;
  h.start(true);
  h.msg(ln::restart_request{1, std::nullopt});
  const auto b = h.turn({event{rank_exited{0, exit_status::signaled(SIGKILL)}},
                         event{output_ended{0, output_stream::out, 0}},
                         event{output_ended{0, output_stream::err, 0}}, event{ranks_swept{0, 1}}});
  EXPECT_EQ(all<forget_ranks>(b).size(), 1u);
  EXPECT_TRUE(all<pmix_restart>(b).empty());
  EXPECT_EQ(h.m.pmix()->job().nspace, "pmrun.1.ab");
}

// --enable-recovery: a rank whose process ended is asked for again; the PMIx server registers its
// client again before it starts (same namespace, same rank), and it gets the same variables.
TEST(HostMachine, ARankStartedAgainIsRegisteredAgainWithItsServer) {
  harness h;
  h.start(true);
  h.feed(event{rank_exited{0, exit_status::exited(7)}});
  const auto a = h.msg(ln::spawn_request{{ln::rank_spec{0, 0, {}, false}}});
  const auto again = all<pmix_reregister>(a);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].nspace, "pmrun.1.ab");
  EXPECT_EQ(again[0].rank, 0u);
  EXPECT_EQ(all<forget_rank>(a).size(), 1u);
  ASSERT_EQ(all<spawn_rank>(a).size(), 1u);
  const auto spec = all<spawn_rank>(a)[0].spec;
  EXPECT_EQ(spec.variable("PMIX_NAMESPACE"), "pmrun.1.ab");
  EXPECT_EQ(spec.variable("PMIX_RANK"), "0");
}

}  // namespace
}  // namespace pm::agent
