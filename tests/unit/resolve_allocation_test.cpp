// resolve_allocation: Open MPI's precedence, local aliases, selection errors; allocation basics;
// local_host::is_me and the probe.
#include <gtest/gtest.h>

#include "model/host_name.hpp"
#include "pm/allocation.hpp"
#include "pm/error.hpp"

namespace {

template <class F>
std::string alloc_error(F&& f) {
  try {
    f();
  } catch (const pm::error& e) {
    EXPECT_EQ(e.code(), pm::errc::allocation) << e.what();
    return e.what();
  }
  return "no error";
}

std::string names(const pm::allocation& a) {
  std::string s;
  for (const auto& h : a.hosts) {
    s += (s.empty() ? "" : ",") + h.name + ":" + std::to_string(h.slots);
    if (h.max_slots) s += "/" + std::to_string(h.max_slots);
    if (h.local) s += "*";
  }
  return s;
}

pm::local_host me() {
  pm::local_host m;
  m.hostname = "node1";
  m.aliases = {"localhost", "node1.example.com", "10.1.2.3", "node1-ib"};
  m.cores = 8;
  return m;
}

pm::allocation slurm(const char* nodes, const char* tasks) {
  return *pm::slurm_allocation(
      {{"SLURM_JOB_ID", "1"}, {"SLURM_JOB_NODELIST", nodes}, {"SLURM_TASKS_PER_NODE", tasks}});
}

TEST(Allocation, Basics) {
  EXPECT_STREQ(pm::to_string(pm::allocation_source::implicit_local), "implicit_local");
  EXPECT_STREQ(pm::to_string(pm::allocation_source::host_list), "host_list");
  EXPECT_STREQ(pm::to_string(pm::allocation_source::hostfile), "hostfile");
  EXPECT_STREQ(pm::to_string(pm::allocation_source::slurm), "slurm");
  EXPECT_STREQ(pm::to_string(pm::allocation_source::pbs), "pbs");
  EXPECT_STREQ(pm::to_string(pm::allocation_source::api), "api");
  pm::allocation a;
  EXPECT_EQ(a.total_slots(), 0u);
  EXPECT_FALSE(a.find("x"));
  a.hosts = {{"a", 4294967295u}, {"b", 3}};
  EXPECT_EQ(a.total_slots(), 4294967298u);  // 64-bit sum
  EXPECT_EQ(a.find("b"), 1u);
  EXPECT_FALSE(a.find("b.example.com"));  // exact names only
}

TEST(ResolveAllocation, NothingGivenMeansThisMachineWithItsCores) {
  const auto a = pm::resolve_allocation({}, me());
  EXPECT_EQ(names(a), "node1:8*");
  EXPECT_EQ(a.source, pm::allocation_source::implicit_local);
  EXPECT_TRUE(a.hosts[0].slots_given);
}

TEST(ResolveAllocation, OneExplicitSourceIsUsedAsItIs) {
  pm::allocation_inputs in;
  in.host_list = pm::parse_host_list("a:2,b");
  auto a = pm::resolve_allocation(in, me());
  EXPECT_EQ(names(a), "a:2,b:1");
  EXPECT_EQ(a.source, pm::allocation_source::host_list);
  in = {};
  in.hostfile = pm::parse_hostfile("b slots=2 max_slots=3\na\n", "hf");
  a = pm::resolve_allocation(in, me());
  EXPECT_EQ(names(a), "b:2/3,a:1");
  EXPECT_EQ(a.source, pm::allocation_source::hostfile);
  EXPECT_FALSE(a.hosts[1].slots_given);  // a remote bare line: known once its agent reports
}

TEST(ResolveAllocation, LocalAliasesMergeIntoOneHostNamedByTheHostname) {
  pm::allocation_inputs in;
  in.host_list = pm::parse_host_list(
      "n2:2,localhost:2,127.0.0.1:1,node1.example.com:1,10.1.2.3:1,node1-ib,127.0.1.1");
  const auto a = pm::resolve_allocation(in, me());
  EXPECT_EQ(names(a), "n2:2,node1:7*");
  // Spellings that add up past 2^32 - 1 slots are refused, not capped.
  in.host_list = pm::parse_host_list("localhost:4294967295,node1:1");
  try {
    pm::resolve_allocation(in, me());
    FAIL() << "no error";
  } catch (const pm::error& e) {
    EXPECT_EQ(e.code(), pm::errc::parse);
    EXPECT_STREQ(e.what(), "host 'node1' adds up to more than 4294967295 slots (overflow)");
  }
}

TEST(ResolveAllocation, NamesCompareByShortNameButAddressesExactly) {
  pm::allocation_inputs in;
  in.host_list = pm::parse_host_list("n2.example.com:2,n2:1,n2.other.org");
  EXPECT_EQ(names(pm::resolve_allocation(in, me())), "n2.example.com:4");  // first spelling kept
  in.host_list = pm::parse_host_list("10.0.0.2,10.0.0.3,10.0.0.2:2");
  EXPECT_EQ(names(pm::resolve_allocation(in, me())), "10.0.0.2:3,10.0.0.3:1");
}

TEST(ResolveAllocation, BareLocalHostfileLineMeansCores) {
  pm::allocation_inputs in;
  in.hostfile = pm::parse_hostfile("localhost\nremote\n", "hf");
  const auto a = pm::resolve_allocation(in, me());
  EXPECT_EQ(names(a), "node1:8*,remote:1");
  // Two bare lines naming this machine are repeated lines: a slot each (mpirun: "localhost"
  // and "vm" in one hostfile give vm 2 slots).
  in.hostfile = pm::parse_hostfile("localhost\nnode1\n", "hf");
  EXPECT_EQ(names(pm::resolve_allocation(in, me())), "node1:2*");
  in.hostfile = pm::parse_hostfile("127.0.0.1 slots=3\n", "hf");
  EXPECT_EQ(names(pm::resolve_allocation(in, me())), "node1:3*");
}

TEST(ResolveAllocation, HostListSelectsFromTheHostfile) {
  pm::allocation_inputs in;
  in.hostfile = pm::parse_hostfile("a slots=4 max_slots=6\nb slots=4\nlocalhost\n", "hf");
  in.host_list = pm::parse_host_list("b:2,a,node1");
  const auto a = pm::resolve_allocation(in, me());
  // -H's order and counts apply (mpirun: hostfile "a slots=4 max_slots=6" with -H a gives a
  // one slot and no max; hostfile "b, a" with -H a,b lists a first).
  EXPECT_EQ(names(a), "b:2,a:1,node1:1*");
  EXPECT_EQ(a.source, pm::allocation_source::host_list);
  in.host_list = pm::parse_host_list("a:9");  // no batch system: nothing caps -H's count
  EXPECT_EQ(names(pm::resolve_allocation(in, me())), "a:9");
  in.host_list = pm::parse_host_list("a,c");
  EXPECT_EQ(alloc_error([&] { pm::resolve_allocation(in, me()); }),
            "host 'c' is not in the hostfile (a, b, node1)");
}

template <class F>
std::string parse_error(F&& f) {
  try {
    f();
  } catch (const pm::error& e) {
    EXPECT_EQ(e.code(), pm::errc::parse) << e.what();
    return e.what();
  }
  return "no error";
}

std::string reach(const pm::allocation& a) {
  std::string s;
  for (const auto& h : a.hosts) {
    s += (s.empty() ? "" : ",") + (h.user.empty() ? "" : h.user + "@") + h.name;
    if (h.port) s += "#" + std::to_string(h.port);
  }
  return s;
}

TEST(ResolveAllocation, UserAndPortSurvive) {
  pm::allocation_inputs in;
  in.hostfile = pm::parse_hostfile("bob@a slots=2\nb port=2222\nc username=al port=22\n", "hf");
  EXPECT_EQ(reach(pm::resolve_allocation(in, me())), "bob@a,b#2222,al@c#22");
  // -H selecting from the hostfile keeps the hostfile's user and port, and may add its own.
  in.host_list = pm::parse_host_list("c,bob@a,jo@b");
  EXPECT_EQ(reach(pm::resolve_allocation(in, me())), "al@c#22,bob@a,jo@b#2222");
  in.host_list = pm::parse_host_list("jo@a");
  EXPECT_EQ(alloc_error([&] { pm::resolve_allocation(in, me()); }),
            "host 'a' is given with user 'jo', the hostfile has user 'bob'");
  // Inside a batch allocation (which knows no users) -H's users stay.
  pm::allocation_inputs batch;
  batch.managed = slurm("n[1-2]", "2(x2)");
  batch.host_list = pm::parse_host_list("bob@n2");
  EXPECT_EQ(reach(pm::resolve_allocation(batch, me())), "bob@n2");
  batch.hostfile = pm::parse_hostfile("n1 port=2200\nn2\n", "hf");
  batch.host_list.reset();
  EXPECT_EQ(reach(pm::resolve_allocation(batch, me())), "n1#2200,n2");
  // This machine keeps a user given for it; whether it is then reached by ssh is the launcher's
  // business (a local host runs here).
  pm::allocation_inputs local;
  local.host_list = pm::parse_host_list("bob@localhost:2");
  const auto l = pm::resolve_allocation(local, me());
  EXPECT_EQ(reach(l), "bob@node1");
  EXPECT_TRUE(l.hosts[0].local);
}

TEST(ResolveAllocation, TwoSpellingsOfOneHostMustAgreeOnUserAndPort) {
  pm::allocation_inputs in;
  in.host_list = pm::parse_host_list("bob@n2.example.com,n2:2");
  EXPECT_EQ(parse_error([&] { pm::resolve_allocation(in, me()); }),
            "host 'n2' (n2.example.com) is listed again with no user, before with user 'bob'");
  in.host_list = pm::parse_host_list("bob@n2.example.com,bob@n2:2");
  EXPECT_EQ(reach(pm::resolve_allocation(in, me())), "bob@n2.example.com");
  in.host_list.reset();
  in.hostfile = pm::parse_hostfile("localhost port=2222\n127.0.0.1\n", "hf");
  EXPECT_EQ(parse_error([&] { pm::resolve_allocation(in, me()); }),
            "host '127.0.0.1' (node1) is listed again with no port, before with port 2222");
}

TEST(ResolveAllocation, ManagedAllocationAlone) {
  pm::allocation_inputs in;
  in.managed = slurm("n[1-2]", "2(x2)");
  const auto a = pm::resolve_allocation(in, me());
  EXPECT_EQ(names(a), "n1:2,n2:2");
  EXPECT_EQ(a.source, pm::allocation_source::slurm);
  // This machine inside the allocation, under its FQDN: the local host, by its hostname.
  in.managed = slurm("node1.example.com,n2", "4,2");
  EXPECT_EQ(names(pm::resolve_allocation(in, me())), "node1:4*,n2:2");
}

TEST(ResolveAllocation, HostListSelectsFromTheManagedAllocation) {
  pm::allocation_inputs in;
  in.managed = slurm("n[1-2]", "2(x2)");
  in.host_list = pm::parse_host_list("n2:1");
  EXPECT_EQ(names(pm::resolve_allocation(in, me())), "n2:1");
  EXPECT_EQ(pm::resolve_allocation(in, me()).source, pm::allocation_source::host_list);
  in.host_list = pm::parse_host_list("n2.cluster");  // the batch system's spelling is kept
  EXPECT_EQ(names(pm::resolve_allocation(in, me())), "n2:1");
  in.host_list = pm::parse_host_list("n1,n9");
  EXPECT_EQ(alloc_error([&] { pm::resolve_allocation(in, me()); }),
            "host 'n9' is not in the Slurm allocation (n1, n2)");
  in.managed = pm::parse_pbs_nodefile("p1\np1\n", "nodes");
  in.host_list = pm::parse_host_list("p2");
  EXPECT_EQ(alloc_error([&] { pm::resolve_allocation(in, me()); }),
            "host 'p2' is not in the PBS allocation (p1)");
  in.managed = pm::allocation{{{"e1", 1}}, pm::allocation_source::api};
  EXPECT_EQ(alloc_error([&] { pm::resolve_allocation(in, me()); }),
            "host 'p2' is not in the allocation (e1)");
}

TEST(ResolveAllocation, LongAllocationsAreSummarisedInTheMessage) {
  pm::allocation_inputs in;
  in.managed = slurm("n[1-4]", "1(x4)");
  in.host_list = pm::parse_host_list("x");
  EXPECT_EQ(alloc_error([&] { pm::resolve_allocation(in, me()); }),
            "host 'x' is not in the Slurm allocation (n1, n2, n3, n4)");
  in.managed = slurm("n[1-100]", "1(x100)");
  EXPECT_EQ(alloc_error([&] { pm::resolve_allocation(in, me()); }),
            "host 'x' is not in the Slurm allocation (n1, n2, n3 and 97 more)");
}

TEST(ResolveAllocation, InsideABatchAllocationItsOrderAndGrantedSlotsWin) {
  // mpirun 4.1 (SLURM_NODELIST=n[1-3] SLURM_TASKS_PER_NODE=4(x3)): -H n3,n1 maps n1 first;
  // -H n2:3 gives 3 slots, -H n2:8 gives 4.
  pm::allocation_inputs in;
  in.managed = slurm("n[1-3]", "4(x3)");
  in.host_list = pm::parse_host_list("n3,n1");
  EXPECT_EQ(names(pm::resolve_allocation(in, me())), "n1:1,n3:1");
  in.host_list = pm::parse_host_list("n2:3,n3:8");
  EXPECT_EQ(names(pm::resolve_allocation(in, me())), "n2:3,n3:4");
  // A hostfile's counts are taken (mpirun ignores them) and capped alike; a bare line takes the
  // allocation's count; max_slots stays.
  in.host_list.reset();
  in.hostfile = pm::parse_hostfile("n3 slots=2\nn1\nn2 slots=9 max_slots=9\n", "hf");
  const auto a = pm::resolve_allocation(in, me());
  EXPECT_EQ(names(a), "n1:4,n2:4/9,n3:2");
  EXPECT_EQ(a.source, pm::allocation_source::hostfile);
  EXPECT_TRUE(a.hosts[0].slots_given);
}

TEST(ResolveAllocation, HostfileSelectsFromTheManagedAllocation) {
  pm::allocation_inputs in;
  in.managed = slurm("n[1-3]", "4(x3)");
  in.hostfile = pm::parse_hostfile("n3\nx\n", "hf");
  EXPECT_EQ(alloc_error([&] { pm::resolve_allocation(in, me()); }),
            "host 'x' is not in the Slurm allocation (n1, n2, n3)");
  // With -H too: the hostfile is checked against the allocation, -H against the hostfile.
  in.hostfile = pm::parse_hostfile("n1\nn2\n", "hf");
  in.host_list = pm::parse_host_list("n3");
  EXPECT_EQ(alloc_error([&] { pm::resolve_allocation(in, me()); }),
            "host 'n3' is not in the hostfile (n1, n2)");
  in.host_list = pm::parse_host_list("n2:2,n1");
  EXPECT_EQ(names(pm::resolve_allocation(in, me())), "n1:1,n2:2");
  EXPECT_EQ(pm::resolve_allocation(in, me()).source, pm::allocation_source::host_list);
}

TEST(LocalHost, IsMe) {
  const auto m = me();
  for (const char* yes : {"node1", "localhost", "127.0.0.1", "127.0.1.1", "127.255.0.9", "::1",
                          "node1.example.com", "node1.elsewhere.org", "10.1.2.3", "node1-ib"}) {
    EXPECT_TRUE(m.is_me(yes)) << yes;
  }
  for (const char* no :
       {"", "node2", "node10", "10.1.2.4", "128.0.0.1", "127.x", "node", "node1x.example.com"}) {
    EXPECT_FALSE(m.is_me(no)) << no;
  }
}

TEST(LocalHost, HostNameHelpers) {
  EXPECT_TRUE(pm::model::is_ip_address("10.0.0.2"));
  EXPECT_TRUE(pm::model::is_ip_address("fe80::1"));
  EXPECT_FALSE(pm::model::is_ip_address("cafe.be"));  // hex digits and dots, still a name
  EXPECT_FALSE(pm::model::is_ip_address("10.0.0"));
  EXPECT_EQ(pm::model::short_name("a.b.c"), "a");
  EXPECT_EQ(pm::model::short_name("10.0.0.2"), "10.0.0.2");
  EXPECT_TRUE(pm::model::same_host("n1", "n1.x.org"));
  EXPECT_FALSE(pm::model::same_host("10.0.0.2", "10.0.0.3"));
}

TEST(LocalHost, NamesFromTheHostsFile) {
  const std::string hosts =
      "127.0.0.1\tlocalhost\n"
      "127.0.1.1 node1.example.com node1   # Debian's line\n"
      "10.0.0.5 node1-ib.example.com node1-ib\n"
      "10.0.0.6 node2.example.com node2\n"
      "# 10.0.0.7 node1.commented.out\n";
  EXPECT_EQ(pm::model::hosts_file_names(hosts, "node1"),
            (std::vector<std::string>{"node1.example.com"}));
  EXPECT_EQ(pm::model::hosts_file_names(hosts, "node1-ib"),
            (std::vector<std::string>{"node1-ib.example.com"}));
  EXPECT_TRUE(pm::model::hosts_file_names(hosts, "node3").empty());
  EXPECT_TRUE(pm::model::hosts_file_names("", "node1").empty());
}

TEST(LocalHost, ProbeFindsThisMachine) {
  const auto m = pm::local_host_info();
  EXPECT_FALSE(m.hostname.empty());
  EXPECT_GE(m.cores, 1u);
  EXPECT_TRUE(m.is_me("localhost"));
  EXPECT_TRUE(m.is_me("127.0.0.1"));
  EXPECT_TRUE(m.is_me(m.hostname));
  EXPECT_FALSE(m.is_me("surely-not-this-host"));
  EXPECT_NE(std::find(m.aliases.begin(), m.aliases.end(), "localhost"), m.aliases.end());
  EXPECT_NE(std::find(m.aliases.begin(), m.aliases.end(), "127.0.0.1"), m.aliases.end())
      << "the loopback interface's address";
  EXPECT_EQ(std::find(m.aliases.begin(), m.aliases.end(), m.hostname), m.aliases.end())
      << "the hostname is not repeated among the aliases";
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  EXPECT_EQ(m.cores, static_cast<std::uint32_t>(CPU_COUNT(&set)));
}

}  // namespace
