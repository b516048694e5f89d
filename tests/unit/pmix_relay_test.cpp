// The agent's PMIx decisions (agent/pmix_relay), without a PMIx server and without processes:
// what the server reports goes in as events, what to send and which request to complete comes out.
#include "agent/pmix_relay.hpp"
#include "topology/gpu_pci_class.hpp"

#include <algorithm>

#include <gtest/gtest.h>

namespace pm::agent {
namespace {

namespace ln = pm::link;
using pmix::proc;

// A job of 4 ranks: 0 and 1 on node "a" (this host), 2 and 3 on node "b".
ln::pmix_job two_hosts() {
  ln::pmix_job j;
  j.nspace = "pmrun.1.ab";
  j.universe = 4;
  j.node = 0;
  j.nodes = {"a", "b"};
  j.rank_node = {0, 0, 1, 1};
  j.rank_app = {0, 0, 0, 0};
  j.rank_local = {0, 1, 0, 1};
  return j;
}

pmix_host_facts facts(unsigned cores = 8, bool rdma = false, bool gpus = false) {
  pmix_host_facts f;
  f.place.dir = "/tmp/pm-pmix.7.x";
  f.place.port = 4242;
  f.place.server_pid = 7;
  f.cores = cores;
  f.rdma = rdma;
  f.gpus = gpus;
  return f;
}

struct harness {
  pmix_relay relay{two_hosts(), {"./app"}, facts()};
  std::vector<pmix_action> out;

  std::vector<pmix_action> feed(pmix_event e) {
    out.clear();
    relay.handle(std::move(e), out);
    return out;
  }
  std::vector<pmix_action> msg(const ln::message& m) {
    out.clear();
    EXPECT_TRUE(relay.on_message(m, out));
    return out;
  }
};

template <class T>
std::vector<T> all(const std::vector<pmix_action>& v) {
  std::vector<T> r;
  for (const auto& a : v) {
    if (const T* t = std::get_if<T>(&a)) r.push_back(*t);
  }
  return r;
}
std::vector<ln::message> sent(const std::vector<pmix_action>& v) {
  std::vector<ln::message> r;
  for (const auto& s : all<send>(v)) r.push_back(s.msg);
  return r;
}
// The one completion in `v`: its request, status and payload.
pmix_complete completed(const std::vector<pmix_action>& v) {
  const auto c = all<pmix_complete>(v);
  EXPECT_EQ(c.size(), 1u);
  return c.empty() ? pmix_complete{} : c[0];
}

TEST(PmixRelay, AFenceAcrossHostsIsForwardedOnceAndItsResultCompletesIt) {
  harness h;
  // PMIx gathers the local ranks' parts itself: the host hears of the fence once.
  const auto a = h.feed(pmix_fence_called{
      11, {proc{"pmrun.1.ab", pmix::wildcard_rank}}, true, std::vector<char>{'x', 'y'}});
  ASSERT_EQ(sent(a).size(), 1u);
  EXPECT_EQ(sent(a)[0], (ln::message{ln::fence_contribution{{true, {}}, 0, true, "xy"}}));
  EXPECT_TRUE(all<pmix_complete>(a).empty());
  // The next fence of the same members is the next of the sequence, on every host alike.
  const auto b =
      h.feed(pmix_fence_called{12, {proc{"pmrun.1.ab", pmix::wildcard_rank}}, false, {}});
  EXPECT_EQ(sent(b), (std::vector<ln::message>{ln::fence_contribution{{true, {}}, 1, false, ""}}));
  // The launcher's answers complete their own fences, whatever their order.
  const auto c = completed(h.msg(ln::fence_result{{true, {}}, 1, true, ""}));
  EXPECT_EQ(c.id, 12u);
  EXPECT_EQ(c.status, pmix::status::success);
  const auto d = completed(h.msg(ln::fence_result{{true, {}}, 0, true, "xyzw"}));
  EXPECT_EQ(d.id, 11u);
  EXPECT_EQ(std::get<std::vector<char>>(d.payload), (std::vector<char>{'x', 'y', 'z', 'w'}));
  // A result nobody waits for completes nothing.
  EXPECT_TRUE(h.msg(ln::fence_result{{true, {}}, 0, true, ""}).empty());
}

TEST(PmixRelay, AFenceOfSomeRanksNamesThemAndAFailedOneFails) {
  harness h;
  const auto a =
      h.feed(pmix_fence_called{3, {proc{"pmrun.1.ab", 3}, proc{"pmrun.1.ab", 0}}, false, {}});
  EXPECT_EQ(sent(a),
            (std::vector<ln::message>{ln::fence_contribution{{false, {0, 3}}, 0, false, ""}}));
  const auto c = completed(h.msg(ln::fence_result{{false, {0, 3}}, 0, false, ""}));
  EXPECT_EQ(c.id, 3u);
  EXPECT_EQ(c.status, pmix::status::error);
}

TEST(PmixRelay, AFenceWithAStrangerIsRefusedAndSaid) {
  harness h;
  const auto a = h.feed(pmix_fence_called{5, {proc{"other", 0}}, false, {}});
  EXPECT_EQ(completed(a).status, pmix::status::not_found);
  EXPECT_EQ(sent(a), (std::vector<ln::message>{ln::agent_notice{
                         "PMIx: a fence with a participant (other, 0) of no job of the launch"}}));
}

TEST(PmixRelay, AConnectAcrossHostsIsAFenceWithoutData) {
  harness h;
  const auto a = h.feed(pmix_connect_called{9, {proc{"pmrun.1.ab", pmix::wildcard_rank}}});
  EXPECT_EQ(sent(a), (std::vector<ln::message>{ln::fence_contribution{{true, {}}, 0, false, ""}}));
  const auto c = completed(h.msg(ln::fence_result{{true, {}}, 0, true, ""}));
  EXPECT_EQ(c.id, 9u);
  EXPECT_EQ(c.status, pmix::status::success);
}

TEST(PmixRelay, AModexRequestForARankNotHereIsRefused) {
  harness h;
  // Rank 2 runs on node b: this host has nothing to give.
  EXPECT_EQ(sent(h.msg(ln::modex_request{40, 2})),
            (std::vector<ln::message>{ln::modex_reply{40, false, {}}}));
  // Rank 1 runs here: the server is asked (and started if need be).
  const auto a = h.msg(ln::modex_request{41, 1});
  ASSERT_EQ(all<pmix_serve_modex>(a).size(), 1u);
  EXPECT_EQ(all<pmix_serve_modex>(a)[0].link_id, 41u);
  EXPECT_EQ(all<pmix_serve_modex>(a)[0].target, (proc{"pmrun.1.ab", 1}));
  EXPECT_EQ(sent(h.feed(pmix_local_modex_answered{41, true, "blob"})),
            (std::vector<ln::message>{ln::modex_reply{41, true, "blob"}}));
  // A server that could not start has no data either.
  h.feed(pmix_server_failed{});
  EXPECT_EQ(sent(h.msg(ln::modex_request{42, 1})),
            (std::vector<ln::message>{ln::modex_reply{42, false, {}}}));
}

TEST(PmixRelay, ADirectModexOfARemoteRankIsAskedAndAnswered) {
  harness h;
  const auto a = h.feed(pmix_modex_called{20, proc{"pmrun.1.ab", 3}});
  EXPECT_EQ(sent(a), (std::vector<ln::message>{ln::modex_request{0, 3}}));
  const auto c = completed(h.msg(ln::modex_reply{0, true, "data"}));
  EXPECT_EQ(c.id, 20u);
  EXPECT_EQ(std::get<std::vector<char>>(c.payload), (std::vector<char>{'d', 'a', 't', 'a'}));
  // Not found; and a wildcard names no host.
  h.feed(pmix_modex_called{21, proc{"pmrun.1.ab", 2}});
  EXPECT_EQ(completed(h.msg(ln::modex_reply{1, false, {}})).status, pmix::status::not_found);
  EXPECT_EQ(
      completed(h.feed(pmix_modex_called{22, proc{"pmrun.1.ab", pmix::wildcard_rank}})).status,
      pmix::status::not_found);
}

TEST(PmixRelay, ASpawnReplyReachesTheRightPendingRequest) {
  harness h;
  pmix::spawn_app app{{"./child"}, {"X=1"}, "/w", 2, {"b"}};
  const auto a = h.feed(pmix_spawn_called{100, proc{"pmrun.1.ab", 1}, {app}});
  EXPECT_EQ(sent(a), (std::vector<ln::message>{ln::pmix_spawn{
                         0, 1, {ln::spawn_app_spec{{"./child"}, {"X=1"}, "/w", 2, {"b"}}}, ""}}));
  // A tool attached here spawns under its own namespace.
  const auto b = h.feed(pmix_spawn_called{101, proc{"tool.9", 0}, {app}});
  ASSERT_EQ(sent(b).size(), 1u);
  EXPECT_EQ(std::get<ln::pmix_spawn>(sent(b)[0]).tool, "tool.9");
  EXPECT_EQ(std::get<ln::pmix_spawn>(sent(b)[0]).id, 1u);
  const auto c = completed(h.msg(ln::pmix_spawn_reply{1, true, "pmrun.1.ab.1", ""}));
  EXPECT_EQ(c.id, 101u);
  EXPECT_EQ(std::get<std::string>(c.payload), "pmrun.1.ab.1");
  const auto d = completed(h.msg(ln::pmix_spawn_reply{0, false, "", "not enough slots"}));
  EXPECT_EQ(d.id, 100u);
  EXPECT_EQ(d.status, pmix::status::error);
  EXPECT_TRUE(h.msg(ln::pmix_spawn_reply{0, true, "late", ""}).empty());
}

TEST(PmixRelay, PublishAndLookupGoToTheLaunchersStore) {
  harness h;
  const auto a =
      h.feed(pmix_publish_called{30, proc{"pmrun.1.ab", 0}, {{"port:accept", {'p', '1'}}}});
  EXPECT_EQ(sent(a),
            (std::vector<ln::message>{ln::pmix_publish{0, 0, {{"port:accept", 0, "p1"}}}}));
  const auto b = h.feed(pmix_lookup_called{31, proc{"pmrun.1.ab", 1}, {"port:accept"}, true, 600});
  EXPECT_EQ(sent(b), (std::vector<ln::message>{ln::pmix_lookup{1, 1, {"port:accept"}, true, 600}}));
  EXPECT_EQ(completed(h.msg(ln::pmix_data_reply{0, ln::data_status::ok, {}})).id, 30u);
  const auto c =
      completed(h.msg(ln::pmix_data_reply{1, ln::data_status::ok, {{"port:accept", 0, "p1"}}}));
  EXPECT_EQ(c.id, 31u);
  const auto& found = std::get<std::vector<pmix::found_value>>(c.payload);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].publisher, (proc{"pmrun.1.ab", 0}));
  EXPECT_EQ(found[0].value, (std::vector<char>{'p', '1'}));
  // Only a rank of the launch may publish.
  EXPECT_EQ(completed(h.feed(pmix_publish_called{32, proc{"tool.1", 0}, {}})).status,
            pmix::status::not_supported);
}

TEST(PmixRelay, AnAbortWaitsForItsRelease) {
  harness h;
  const auto a = h.feed(pmix_abort_called{50, proc{"pmrun.1.ab", 1}, 42, "bye"});
  EXPECT_EQ(sent(a), (std::vector<ln::message>{ln::pmix_abort{1, 42, "bye"}}));
  EXPECT_TRUE(all<pmix_complete>(a).empty());
  h.out.clear();
  h.relay.release_abort(0, h.out);  // not the caller
  EXPECT_TRUE(h.out.empty());
  h.relay.release_abort(1, h.out);
  EXPECT_EQ(completed(h.out).id, 50u);
  // Not a rank of ours: released at once, it exits with its status.
  EXPECT_EQ(completed(h.feed(pmix_abort_called{51, proc{"x", 0}, 1, ""})).id, 51u);
}

TEST(PmixRelay, NoticesBeforeTheServerStartsWaitForIt) {
  harness h;
  EXPECT_TRUE(h.msg(ln::pmix_notify{notice_kind::rank_exited, {2}, 7, "b", "rank 2 ..."}).empty());
  const auto a = h.feed(pmix_server_up{});
  ASSERT_EQ(all<pmix_notify_ranks>(a).size(), 1u);
  const auto n = all<pmix_notify_ranks>(a)[0].notice;
  EXPECT_EQ(n.nspace, "pmrun.1.ab");
  EXPECT_EQ(n.ranks, (std::vector<std::uint32_t>{2}));
  EXPECT_EQ(n.code, 7);
  // Now they go at once.
  EXPECT_EQ(all<pmix_notify_ranks>(h.msg(ln::pmix_notify{})).size(), 1u);
}

TEST(PmixRelay, ASpawnedJobIsRegisteredOnceTheServerRuns) {
  harness h;
  ln::job_add add;
  add.job = 1;
  add.first = 4;
  add.pmix = ln::pmix_job{"pmrun.1.ab.1", 4, 0, {"a"}, {0, 0}, {0, 0}, {0, 1}, "pmrun.1.ab", 1};
  h.out.clear();
  h.relay.add_job(add, h.out);
  EXPECT_TRUE(all<pmix_register_job>(h.out).empty());  // no server yet
  EXPECT_EQ(h.relay.proc_of(5), (proc{"pmrun.1.ab.1", 1}));
  const auto a = h.feed(pmix_server_up{});
  ASSERT_EQ(all<pmix_register_job>(a).size(), 1u);
  const auto r = all<pmix_register_job>(a)[0];
  EXPECT_EQ(r.job.nspace, "pmrun.1.ab.1");
  EXPECT_TRUE(r.job.spawned);
  EXPECT_EQ(r.job.parent, (proc{"pmrun.1.ab", 1}));
  EXPECT_EQ(r.local_ranks, (std::vector<std::uint32_t>{0, 1}));
}

TEST(PmixRelay, ARankThatEndsWithoutFinalizingIsReported) {
  harness h;
  h.feed(pmix_client_connected{proc{"pmrun.1.ab", 0}});
  h.feed(pmix_client_connected{proc{"pmrun.1.ab", 1}});
  h.feed(pmix_client_finalized{proc{"pmrun.1.ab", 1}});
  h.out.clear();
  h.relay.rank_ended(1, exit_status::exited(0), h.out);
  EXPECT_TRUE(h.out.empty());
  h.relay.rank_ended(0, exit_status::signaled(9), h.out);
  EXPECT_EQ(sent(h.out),
            (std::vector<ln::message>{ln::pmix_unfinalized{0, exit_status::signaled(9)}}));
}

TEST(PmixRelay, AToolsProcessTableComesFromTheLauncher) {
  harness h;
  pmix::query q;
  q.keys = {pmix::query_keys::proc_table};
  const auto a = h.feed(pmix_query_called{60, proc{"tool.1", 0}, {q}});
  EXPECT_EQ(sent(a), (std::vector<ln::message>{ln::proc_table_request{0}}));
  ln::proc_table_reply t{0, {{0, 100, "running", -1, 0}, {2, 200, "exited", 3, 0}}};
  const auto c = completed(h.msg(t));
  EXPECT_EQ(c.id, 60u);
  const auto& values = std::get<std::vector<pmix::query_value>>(c.payload);
  ASSERT_EQ(values.size(), 1u);
  const auto& table = std::get<std::vector<pmix::proc_entry>>(values[0].value);
  ASSERT_EQ(table.size(), 2u);
  EXPECT_EQ(table[1].hostname, "b");
  EXPECT_EQ(table[1].executable, "./app");
  EXPECT_EQ(table[1].state, pmix::proc_state::exited_nonzero);
  // What this host knows is answered here.
  pmix::query size;
  size.keys = {pmix::query_keys::job_size};
  const auto s = completed(h.feed(pmix_query_called{61, proc{"tool.1", 0}, {size}}));
  EXPECT_EQ(std::get<std::uint32_t>(std::get<std::vector<pmix::query_value>>(s.payload)[0].value),
            4u);
}

TEST(PmixRelay, RankVariablesTellTheServerAndLeaveTheUsersChoice) {
  const auto none = [](std::string_view) { return false; };
  pmix_relay tcp(two_hosts(), {}, facts(1, false));  // 2 ranks here, 1 core, no RDMA
  auto v = tcp.rank_variables(1, none);
  const auto has = [&](const std::string& e) {
    return std::find(v.begin(), v.end(), e) != v.end();
  };
  EXPECT_TRUE(has("PMIX_NAMESPACE=pmrun.1.ab"));
  EXPECT_TRUE(has("PMIX_RANK=1"));
  EXPECT_TRUE(has("OMPI_MCA_mpi_yield_when_idle=1"));
  EXPECT_TRUE(has("OMPI_MCA_pml=ob1"));
  EXPECT_TRUE(has("OMPI_MCA_btl=self,vader,tcp"));
  v = tcp.rank_variables(1, [](std::string_view n) { return n == "OMPI_MCA_btl"; });
  EXPECT_FALSE(has("OMPI_MCA_btl=self,vader,tcp"));
  pmix_relay rdma(two_hosts(), {}, facts(8, true));
  v = rdma.rank_variables(0, none);
  EXPECT_FALSE(has("OMPI_MCA_pml=ob1"));
  EXPECT_FALSE(has("OMPI_MCA_mpi_yield_when_idle=1"));
  EXPECT_EQ(rdma.server_info(),
            (ln::pmix_server{"pmix-server.7;tcp4://127.0.0.1:4242", "/tmp/pm-pmix.7.x/pmix"}));
}

// A GPU host without RDMA devices is not "TCP only": naming ob1 and tcp there would shut out the
// CUDA/ROCm-aware transports Open MPI picks by itself (issue 23).
TEST(PmixRelay, AHostWithGpusGetsNoOb1AndTcpShortcut) {
  const auto none = [](std::string_view) { return false; };
  const auto has = [](const std::vector<std::string>& v, std::string_view prefix) {
    return std::any_of(v.begin(), v.end(),
                       [&](const std::string& e) { return e.starts_with(prefix); });
  };
  pmix_relay plain(two_hosts(), {}, facts(8, false, false));
  EXPECT_TRUE(plain.tcp_only_host());
  EXPECT_TRUE(has(plain.rank_variables(0, none), "OMPI_MCA_pml="));
  pmix_relay gpus(two_hosts(), {}, facts(1, false, true));  // oversubscribed, no RDMA, GPUs
  EXPECT_FALSE(gpus.tcp_only_host());
  const auto v = gpus.rank_variables(0, none);
  EXPECT_FALSE(has(v, "OMPI_MCA_pml="));
  EXPECT_FALSE(has(v, "OMPI_MCA_btl="));
  EXPECT_TRUE(has(v, "OMPI_MCA_mpi_yield_when_idle=1"));  // the other setting stays
  EXPECT_TRUE(has(v, "PMIX_RANK=0"));
}

// The cheap look of a host without a summary (agent::has_gpu_devices) counts what the hwloc
// reader counts: compute GPUs, not a BMC's display or a laptop's integrated graphics.
TEST(PmixRelay, GpuHostsAreToldByPciVendorAndClassAsTheReaderTellsThem) {
  using pm::topo::gpu_by_pci_class;
  EXPECT_TRUE(gpu_by_pci_class(0x10de, 0x0302));   // NVIDIA 3D (V100, H100)
  EXPECT_TRUE(gpu_by_pci_class(0x10de, 0x0300));   // NVIDIA VGA (a workstation's GPU)
  EXPECT_TRUE(gpu_by_pci_class(0x1002, 0x0380));   // AMD Instinct
  EXPECT_TRUE(gpu_by_pci_class(0x8086, 0x0380));   // Intel Data Center GPU Max
  EXPECT_TRUE(gpu_by_pci_class(0x1002, 0x1200));   // AMD accelerator class
  EXPECT_FALSE(gpu_by_pci_class(0x1002, 0x0300));  // ATI ES1000: a BMC's display
  EXPECT_FALSE(gpu_by_pci_class(0x8086, 0x0300));  // integrated graphics
  EXPECT_FALSE(gpu_by_pci_class(0x1a03, 0x0300));  // ASPEED BMC
  EXPECT_FALSE(gpu_by_pci_class(0x15b3, 0x0207));  // a Mellanox InfiniBand NIC
}

// A restart in place: every pending request fails, the jobs served are dropped (the spawned
// one too), and the new incarnation's namespace is the first job's from now on.
TEST(PmixRelay, ARestartDropsEveryJobAndTakesTheNewNamespace) {
  harness h;
  h.feed(pmix_server_up{});
  ln::job_add add;
  add.job = 1;
  add.first = 4;
  add.pmix = ln::pmix_job{"pmrun.1.ab.1", 4, 0, {"a"}, {0, 0}, {0, 0}, {0, 1}, "pmrun.1.ab", 1};
  h.out.clear();
  h.relay.add_job(add, h.out);
  h.feed(pmix_client_connected{proc{"pmrun.1.ab", 0}});
  h.feed(pmix_fence_called{11, {proc{"pmrun.1.ab", pmix::wildcard_rank}}, false, {}});
  h.feed(pmix_modex_called{12, proc{"pmrun.1.ab", 2}});
  auto next = two_hosts();
  next.nspace = "pmrun.1.cd";
  next.rank_node = {0, 1, 1, 1};  // this host runs rank 0 alone now
  h.out.clear();
  h.relay.restart(next, h.out);
  const auto failed = all<pmix_complete>(h.out);
  ASSERT_EQ(failed.size(), 2u);
  for (const auto& c : failed) EXPECT_EQ(c.status, pmix::status::error);
  EXPECT_EQ(failed[0].id + failed[1].id, 23u);
  const auto r = all<pmix_restart>(h.out);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].dropped, (std::vector<std::string>{"pmrun.1.ab", "pmrun.1.ab.1"}));
  EXPECT_EQ(r[0].job.nspace, "pmrun.1.cd");
  // The old names are no job's now; the new one's ranks are.
  EXPECT_EQ(h.relay.process_of(proc{"pmrun.1.ab", 0}), std::nullopt);
  EXPECT_EQ(h.relay.proc_of(5), std::nullopt);
  EXPECT_EQ(h.relay.proc_of(0), (proc{"pmrun.1.cd", 0}));
  EXPECT_EQ(h.relay.local_ranks(), (std::vector<std::uint32_t>{0}));
  EXPECT_FALSE(h.relay.unfinalized(0));
  const auto vars = h.relay.rank_variables(0, [](std::string_view) { return false; });
  EXPECT_NE(std::find(vars.begin(), vars.end(), "PMIX_NAMESPACE=pmrun.1.cd"), vars.end());
  // Late answers to the dropped requests complete nothing; fences count from 0 again.
  h.out.clear();
  EXPECT_TRUE(h.relay.on_message(ln::modex_reply{0, true, "x"}, h.out));
  EXPECT_TRUE(h.out.empty());
  const auto f =
      h.feed(pmix_fence_called{13, {proc{"pmrun.1.cd", pmix::wildcard_rank}}, false, {}});
  const auto c = sent(f);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(std::get<ln::fence_contribution>(c[0]).seq, 0u);
}

}  // namespace
}  // namespace pm::agent
