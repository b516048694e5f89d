// Allocation sources: -H lists, Open MPI hostfiles, Slurm and PBS, and their resolution.
#include <gtest/gtest.h>

#include "pm/allocation.hpp"
#include "pm/error.hpp"

namespace {

template <class F>
std::string parse_error(F&& f) {
  try {
    f();
  } catch (const pm::error& e) {
    EXPECT_TRUE(e.code() == pm::errc::parse || e.code() == pm::errc::allocation);
    return e.what();
  }
  return "no error";
}

std::string names(const pm::allocation& a) {
  std::string s;
  for (const auto& h : a.hosts)
    s += (s.empty() ? "" : ",") + h.name + ":" + std::to_string(h.slots);
  return s;
}

TEST(HostList, SlotsDefaultToOneAndRepeatsAddUp) {
  EXPECT_EQ(names(pm::parse_host_list("a,b:4,c")), "a:1,b:4,c:1");
  EXPECT_EQ(names(pm::parse_host_list("10.0.0.2:2,a,a")), "10.0.0.2:2,a:2");
  EXPECT_EQ(pm::parse_host_list("a").source, pm::allocation_source::host_list);
}

TEST(HostList, Errors) {
  EXPECT_EQ(parse_error([] { pm::parse_host_list("a:x"); }),
            "-H 'a:x': invalid slot count 'x' (expected a positive integer)");
  EXPECT_EQ(parse_error([] { pm::parse_host_list("a:0"); }),
            "-H 'a:0': invalid slot count '0' (expected a positive integer)");
  EXPECT_EQ(parse_error([] { pm::parse_host_list("a:-1"); }),
            "-H 'a:-1': invalid slot count '-1' (expected a positive integer)");
  EXPECT_EQ(parse_error([] { pm::parse_host_list("a:99999999999"); }),
            "-H 'a:99999999999': invalid slot count '99999999999' (expected a positive integer)");
  EXPECT_EQ(parse_error([] { pm::parse_host_list("a,,b"); }), "-H 'a,,b': empty host name");
  EXPECT_EQ(parse_error([] { pm::parse_host_list(":2"); }), "-H ':2': empty host name");
  EXPECT_EQ(parse_error([] { pm::parse_host_list("a b"); }), "-H 'a b': invalid host name 'a b'");
  EXPECT_EQ(parse_error([] { pm::parse_host_list("", "--host"); }), "--host: empty host list");
}

TEST(Hostfile, OpenMpiRules) {
  auto a = pm::parse_hostfile(
      "# cluster\n\nn1 slots=2\nn2 slots=4 max_slots=6   # trailing comment\nn3\nn4\nn4\n", "hf");
  EXPECT_EQ(names(a), "n1:2,n2:4,n3:1,n4:2");
  EXPECT_EQ(a.hosts[1].max_slots, 6u);
  EXPECT_FALSE(a.hosts[2].slots_given);  // a single bare line: its cores decide
  EXPECT_TRUE(a.hosts[3].slots_given);   // repeated bare lines: one slot each
  EXPECT_EQ(names(pm::parse_hostfile("x count=3\ny cpu=2", "hf")), "x:3,y:2");
  EXPECT_EQ(a.source, pm::allocation_source::hostfile);
}

TEST(Hostfile, ErrorsNameFileLineAndToken) {
  EXPECT_EQ(parse_error([] { pm::parse_hostfile("a\nb slots=two\n", "hosts.txt"); }),
            "hostfile hosts.txt:2: invalid slots value 'two' (expected a positive integer)");
  EXPECT_EQ(parse_error([] { pm::parse_hostfile("a slots=0", "h"); }),
            "hostfile h:1: invalid slots value '0' (expected a positive integer)");
  EXPECT_EQ(parse_error([] { pm::parse_hostfile("a slots=", "h"); }),
            "hostfile h:1: invalid slots value '' (expected a positive integer)");
  EXPECT_EQ(parse_error([] { pm::parse_hostfile("a slotz=2", "h"); }),
            "hostfile h:1: unknown key 'slotz' (expected slots=N or max_slots=N)");
  EXPECT_EQ(parse_error([] { pm::parse_hostfile("a 4", "h"); }),
            "hostfile h:1: unexpected '4' (expected slots=N or max_slots=N)");
  EXPECT_EQ(parse_error([] { pm::parse_hostfile("a slots=4 max_slots=2", "h"); }),
            "hostfile h:1: max_slots=2 is below slots=4 for 'a'");
  EXPECT_EQ(parse_error([] { pm::parse_hostfile("a slots=2\na slots=2\n", "h"); }),
            "hostfile h:2: host 'a' is listed again; give its slots on one line only");
  EXPECT_EQ(parse_error([] { pm::parse_hostfile("a\na slots=2\n", "h"); }),
            "hostfile h:2: host 'a' is listed again; give its slots on one line only");
  EXPECT_EQ(parse_error([] { pm::parse_hostfile("# nothing\n\n", "h"); }),
            "hostfile h: no hosts in it");
  EXPECT_EQ(parse_error([] { pm::parse_hostfile("a$b\n", "h"); }),
            "hostfile h:1: invalid host name 'a$b'");
}

TEST(Slurm, HostlistExpressions) {
  EXPECT_EQ(
      pm::expand_hostlist("node[01-04,07],gpu[1-2]"),
      (std::vector<std::string>{"node01", "node02", "node03", "node04", "node07", "gpu1", "gpu2"}));
  EXPECT_EQ(pm::expand_hostlist("n[1-2]-ib"), (std::vector<std::string>{"n1-ib", "n2-ib"}));
  EXPECT_EQ(pm::expand_hostlist("r[1-2]-n[1-2]"),
            (std::vector<std::string>{"r1-n1", "r1-n2", "r2-n1", "r2-n2"}));
  EXPECT_EQ(pm::expand_hostlist("a,b"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(pm::expand_hostlist("n[098-101]"),
            (std::vector<std::string>{"n098", "n099", "n100", "n101"}));
}

TEST(Slurm, HostlistErrors) {
  EXPECT_EQ(parse_error([] { pm::expand_hostlist("node[1-"); }),
            "SLURM_JOB_NODELIST 'node[1-': unbalanced '['");
  EXPECT_EQ(parse_error([] { pm::expand_hostlist("node1]"); }),
            "SLURM_JOB_NODELIST 'node1]': unbalanced ']'");
  EXPECT_EQ(parse_error([] { pm::expand_hostlist("n[5-2]"); }),
            "SLURM_JOB_NODELIST 'n[5-2]': reversed range '5-2'");
  EXPECT_EQ(parse_error([] { pm::expand_hostlist("n[a-b]"); }),
            "SLURM_JOB_NODELIST 'n[a-b]': invalid range 'a-b'");
  EXPECT_EQ(parse_error([] { pm::expand_hostlist("n[1-999999999]"); }),
            "SLURM_JOB_NODELIST 'n[1-999999999]': expands to more than 10000000 hosts");
}

TEST(Slurm, TasksPerNode) {
  EXPECT_EQ(pm::parse_tasks_per_node("2(x3),1", 4), (std::vector<std::uint32_t>{2, 2, 2, 1}));
  EXPECT_EQ(parse_error([] { pm::parse_tasks_per_node("2(x3)", 4); }),
            "SLURM_TASKS_PER_NODE '2(x3)': describes 3 nodes, the allocation has 4");
  EXPECT_EQ(parse_error([] { pm::parse_tasks_per_node("2(3)", 3); }),
            "SLURM_TASKS_PER_NODE '2(3)': invalid item '2(3)'");
}

TEST(Slurm, AllocationFromTheEnvironment) {
  EXPECT_FALSE(pm::slurm_allocation({{"PATH", "/bin"}}));
  auto a = pm::slurm_allocation({{"SLURM_JOB_ID", "7"},
                                 {"SLURM_JOB_NODELIST", "node[01-02],gpu1"},
                                 {"SLURM_TASKS_PER_NODE", "4(x2),2"},
                                 {"SLURM_CPUS_PER_TASK", "2"}});
  ASSERT_TRUE(a);
  EXPECT_EQ(names(*a), "node01:2,node02:2,gpu1:1");  // divided by the CPUs per task
  EXPECT_EQ(a->source, pm::allocation_source::slurm);
  // Inside a step, the step's nodes and tasks.
  auto step = pm::slurm_allocation({{"SLURM_JOB_ID", "7"},
                                    {"SLURM_JOB_NODELIST", "n[1-4]"},
                                    {"SLURM_TASKS_PER_NODE", "1(x4)"},
                                    {"SLURM_STEP_NODELIST", "n[2-3]"},
                                    {"SLURM_STEP_TASKS_PER_NODE", "3,1"}});
  EXPECT_EQ(names(*step), "n2:3,n3:1");
}

TEST(Pbs, NodefileCountsSlots) {
  EXPECT_EQ(names(pm::parse_pbs_nodefile("n1\nn1\nn2\n\nn1\n", "nodes")), "n1:3,n2:1");
  pm::file_reader reader = [](const std::string& path) {
    EXPECT_EQ(path, "/var/spool/pbs/aux/1");
    return std::string("x\ny\n");
  };
  auto a = pm::managed_allocation({{"PBS_NODEFILE", "/var/spool/pbs/aux/1"}}, reader);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->source, pm::allocation_source::pbs);
  EXPECT_EQ(parse_error([] { pm::read_text_file("/nonexistent/hostfile"); }),
            "cannot read '/nonexistent/hostfile': No such file or directory");
}

pm::local_host me() {
  pm::local_host m;
  m.hostname = "node1";
  m.aliases = {"localhost", "node1.example.com", "10.1.2.3"};
  m.cores = 8;
  return m;
}

TEST(ResolveAllocation, NothingGivenMeansThisMachineWithItsCores) {
  auto a = pm::resolve_allocation({}, me());
  EXPECT_EQ(names(a), "node1:8");
  EXPECT_EQ(a.source, pm::allocation_source::implicit_local);
  EXPECT_TRUE(a.hosts[0].local);
}

TEST(ResolveAllocation, LocalAliasesAreOneHost) {
  pm::allocation_inputs in;
  in.host_list = pm::parse_host_list("localhost:2,127.0.0.1:1,node1.example.com:1,n2:2");
  auto a = pm::resolve_allocation(in, me());
  EXPECT_EQ(names(a), "node1:4,n2:2");
  EXPECT_TRUE(a.hosts[0].local);
  in.host_list = pm::parse_host_list("n2.example.com:2,n2:1");  // FQDN and short name: one host
  EXPECT_EQ(names(pm::resolve_allocation(in, me())), "n2.example.com:3");
}

TEST(ResolveAllocation, BareLocalHostfileLineMeansCores) {
  pm::allocation_inputs in;
  in.hostfile = pm::parse_hostfile("localhost\nremote\n", "hf");
  auto a = pm::resolve_allocation(in, me());
  EXPECT_EQ(names(a), "node1:8,remote:1");
  EXPECT_FALSE(a.hosts[1].slots_given);  // known once its agent reports
}

TEST(ResolveAllocation, HostListSelectsFromHostfileAndManaged) {
  pm::allocation_inputs in;
  in.hostfile = pm::parse_hostfile("a slots=4\nb slots=4\n", "hf");
  in.host_list = pm::parse_host_list("b:2");
  EXPECT_EQ(names(pm::resolve_allocation(in, me())), "b:2");
  in.host_list = pm::parse_host_list("c");
  EXPECT_EQ(parse_error([&] { pm::resolve_allocation(in, me()); }),
            "host 'c' is not in the hostfile");

  pm::allocation_inputs slurm;
  slurm.managed = pm::slurm_allocation(
      {{"SLURM_JOB_ID", "1"}, {"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURM_TASKS_PER_NODE", "2(x2)"}});
  EXPECT_EQ(names(pm::resolve_allocation(slurm, me())), "n1:2,n2:2");
  slurm.host_list = pm::parse_host_list("n2:1");
  EXPECT_EQ(names(pm::resolve_allocation(slurm, me())), "n2:1");
  slurm.host_list = pm::parse_host_list("n9");
  EXPECT_EQ(parse_error([&] { pm::resolve_allocation(slurm, me()); }),
            "host 'n9' is not in the Slurm allocation");
}

TEST(LocalHost, ProbeFindsThisMachine) {
  auto m = pm::local_host_info();
  EXPECT_FALSE(m.hostname.empty());
  EXPECT_GE(m.cores, 1u);
  EXPECT_TRUE(m.is_me("localhost"));
  EXPECT_TRUE(m.is_me("127.0.0.1"));
  EXPECT_TRUE(m.is_me(m.hostname));
  EXPECT_FALSE(m.is_me("surely-not-this-host"));
}

}  // namespace
