// Slurm: hostlist expressions, SLURM_TASKS_PER_NODE and the allocation read from the environment.
#include <gtest/gtest.h>

#include "pm/allocation.hpp"
#include "pm/error.hpp"

namespace {

using names_t = std::vector<std::string>;

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

std::string names(const pm::allocation& a) {
  std::string s;
  for (const auto& h : a.hosts)
    s += (s.empty() ? "" : ",") + h.name + ":" + std::to_string(h.slots);
  return s;
}

TEST(SlurmHostlist, RangesListsAndPadding) {
  EXPECT_EQ(pm::expand_hostlist("node[01-04,07],gpu[1-2]"),
            (names_t{"node01", "node02", "node03", "node04", "node07", "gpu1", "gpu2"}));
  EXPECT_EQ(pm::expand_hostlist("n[098-101]"), (names_t{"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(pm::expand_hostlist("n[7]"), (names_t{"n7"}));
  EXPECT_EQ(pm::expand_hostlist("a,b.example.com"), (names_t{"a", "b.example.com"}));
  EXPECT_EQ(pm::expand_hostlist("[1-2]"), (names_t{"1", "2"}));
}

TEST(SlurmHostlist, SuffixesAndSeveralGroups) {
  EXPECT_EQ(pm::expand_hostlist("n[1-2]-ib"), (names_t{"n1-ib", "n2-ib"}));
  EXPECT_EQ(pm::expand_hostlist("r[1-2]-n[1-2]"), (names_t{"r1-n1", "r1-n2", "r2-n1", "r2-n2"}));
  EXPECT_EQ(pm::expand_hostlist("r[1,3]n[08-09],x"),
            (names_t{"r1n08", "r1n09", "r3n08", "r3n09", "x"}));
}

TEST(SlurmHostlist, LongNumbers) {
  EXPECT_EQ(pm::expand_hostlist("n[0000000001-0000000002]"),
            (names_t{"n0000000001", "n0000000002"}));
  EXPECT_EQ(pm::expand_hostlist("n[123456789012345678]"), (names_t{"n123456789012345678"}));
}

TEST(SlurmHostlist, Errors) {
  EXPECT_EQ(parse_error([] { pm::expand_hostlist("node[1-"); }),
            "SLURM_JOB_NODELIST 'node[1-': unbalanced '['");
  EXPECT_EQ(parse_error([] { pm::expand_hostlist("node[1-2,a[3]"); }),
            "SLURM_JOB_NODELIST 'node[1-2,a[3]': nested '['");
  EXPECT_EQ(parse_error([] { pm::expand_hostlist("node1]"); }),
            "SLURM_JOB_NODELIST 'node1]': unbalanced ']'");
  EXPECT_EQ(parse_error([] { pm::expand_hostlist("n[5-2]"); }),
            "SLURM_JOB_NODELIST 'n[5-2]': reversed range '5-2'");
  EXPECT_EQ(parse_error([] { pm::expand_hostlist("n[a-b]"); }),
            "SLURM_JOB_NODELIST 'n[a-b]': invalid range 'a-b'");
  EXPECT_EQ(parse_error([] { pm::expand_hostlist("n[1-2-3]"); }),
            "SLURM_JOB_NODELIST 'n[1-2-3]': invalid range '1-2-3'");
  EXPECT_EQ(parse_error([] { pm::expand_hostlist("n[]"); }),
            "SLURM_JOB_NODELIST 'n[]': invalid range ''");
  EXPECT_EQ(parse_error([] { pm::expand_hostlist("n[1,,2]"); }),
            "SLURM_JOB_NODELIST 'n[1,,2]': invalid range ''");
  EXPECT_EQ(parse_error([] { pm::expand_hostlist("n[1234567890123456789]"); }),
            "SLURM_JOB_NODELIST 'n[1234567890123456789]': invalid range '1234567890123456789'");
  EXPECT_EQ(parse_error([] { pm::expand_hostlist("a,,b"); }),
            "SLURM_JOB_NODELIST 'a,,b': empty host name");
  EXPECT_EQ(parse_error([] { pm::expand_hostlist(""); }), "SLURM_JOB_NODELIST '': empty host list");
  EXPECT_EQ(parse_error([] { pm::expand_hostlist("a b"); }),
            "SLURM_JOB_NODELIST 'a b': invalid host name 'a b'");
  EXPECT_EQ(parse_error([] { pm::expand_hostlist("n[1-", "SLURM_STEP_NODELIST"); }),
            "SLURM_STEP_NODELIST 'n[1-': unbalanced '['");
}

TEST(SlurmHostlist, ExpansionIsCappedAtTenMillionNames) {
  EXPECT_EQ(parse_error([] { pm::expand_hostlist("n[1-10000001]"); }),
            "SLURM_JOB_NODELIST 'n[1-10000001]': expands to more than 10000000 hosts");
  EXPECT_EQ(parse_error([] { pm::expand_hostlist("n[1-999999999999999999]"); }),
            "SLURM_JOB_NODELIST 'n[1-999999999999999999]': expands to more than 10000000 hosts");
  // The product of several groups counts, and so do the items before.
  EXPECT_EQ(parse_error([] { pm::expand_hostlist("r[1-4000]-n[1-4000]"); }),
            "SLURM_JOB_NODELIST 'r[1-4000]-n[1-4000]': expands to more than 10000000 hosts");
  EXPECT_EQ(parse_error([] { pm::expand_hostlist("a[1-6000000],b[1-6000000]"); }),
            "SLURM_JOB_NODELIST 'a[1-6000000],b[1-6000000]': expands to more than 10000000 hosts");
}

TEST(SlurmTasksPerNode, RepeatsAndCounts) {
  EXPECT_EQ(pm::parse_tasks_per_node("2(x3),1", 4), (std::vector<std::uint32_t>{2, 2, 2, 1}));
  EXPECT_EQ(pm::parse_tasks_per_node("72(x2)", 2), (std::vector<std::uint32_t>{72, 72}));
  EXPECT_EQ(pm::parse_tasks_per_node("1,2,3", 3), (std::vector<std::uint32_t>{1, 2, 3}));
}

TEST(SlurmTasksPerNode, MustCoverExactlyTheNodes) {
  EXPECT_EQ(parse_error([] { pm::parse_tasks_per_node("2(x3)", 4); }),
            "SLURM_TASKS_PER_NODE '2(x3)': describes 3 nodes, the allocation has 4");
  EXPECT_EQ(parse_error([] { pm::parse_tasks_per_node("2(x3),1", 3); }),
            "SLURM_TASKS_PER_NODE '2(x3),1': describes more than the 3 nodes of the allocation");
  EXPECT_EQ(parse_error([] { pm::parse_tasks_per_node("2(x4000000000)", 2); }),
            "SLURM_TASKS_PER_NODE '2(x4000000000)': describes more than the 2 nodes of the "
            "allocation");
}

TEST(SlurmTasksPerNode, Errors) {
  EXPECT_EQ(parse_error([] { pm::parse_tasks_per_node("2(3)", 3); }),
            "SLURM_TASKS_PER_NODE '2(3)': invalid item '2(3)'");
  EXPECT_EQ(parse_error([] { pm::parse_tasks_per_node("2(x0)", 3); }),
            "SLURM_TASKS_PER_NODE '2(x0)': invalid repeat in '2(x0)'");
  EXPECT_EQ(parse_error([] { pm::parse_tasks_per_node("x,1", 2); }),
            "SLURM_TASKS_PER_NODE 'x,1': invalid count 'x'");
  EXPECT_EQ(parse_error([] { pm::parse_tasks_per_node("0", 1); }),
            "SLURM_TASKS_PER_NODE '0': invalid count '0'");
  EXPECT_EQ(parse_error([] { pm::parse_tasks_per_node("", 1); }),
            "SLURM_TASKS_PER_NODE '': empty value");
  EXPECT_EQ(parse_error([] { pm::parse_tasks_per_node("1,", 1); }),
            "SLURM_TASKS_PER_NODE '1,': invalid count ''");
  EXPECT_EQ(parse_error([] { pm::parse_tasks_per_node("4", 2, "SLURM_JOB_CPUS_PER_NODE"); }),
            "SLURM_JOB_CPUS_PER_NODE '4': describes 1 nodes, the allocation has 2");
}

TEST(SlurmAllocation, NoneOutsideAJob) {
  EXPECT_FALSE(pm::slurm_allocation({}));
  EXPECT_FALSE(pm::slurm_allocation({{"SLURM_JOB_NODELIST", "n[1-2]"}}));  // no job id
  EXPECT_FALSE(pm::slurm_allocation({{"SLURM_JOB_ID", "5"}}));             // no node list
  EXPECT_FALSE(pm::slurm_allocation({{"SLURM_JOB_ID", ""}, {"SLURM_JOB_NODELIST", "n1"}}));
}

TEST(SlurmAllocation, JobVariables) {
  auto a = pm::slurm_allocation({{"SLURM_JOB_ID", "7"},
                                 {"SLURM_JOB_NODELIST", "node[01-02],gpu1"},
                                 {"SLURM_TASKS_PER_NODE", "4(x2),2"}});
  ASSERT_TRUE(a);
  EXPECT_EQ(names(*a), "node01:4,node02:4,gpu1:2");
  EXPECT_EQ(a->source, pm::allocation_source::slurm);
  EXPECT_TRUE(a->hosts[0].slots_given);
  // The older spellings.
  a = pm::slurm_allocation({{"SLURM_JOBID", "7"}, {"SLURM_NODELIST", "n[1-2]"}});
  ASSERT_TRUE(a);
  EXPECT_EQ(names(*a), "n1:1,n2:1");  // no counts at all: one slot each
}

TEST(SlurmAllocation, SlotsFallBackToCpusPerNode) {
  auto a = pm::slurm_allocation({{"SLURM_JOB_ID", "7"},
                                 {"SLURM_JOB_NODELIST", "n[1-3]"},
                                 {"SLURM_JOB_CPUS_PER_NODE", "8(x2),4"}});
  ASSERT_TRUE(a);
  EXPECT_EQ(names(*a), "n1:8,n2:8,n3:4");
  // SLURM_TASKS_PER_NODE wins when both are set.
  a = pm::slurm_allocation({{"SLURM_JOB_ID", "7"},
                            {"SLURM_JOB_NODELIST", "n[1-3]"},
                            {"SLURM_TASKS_PER_NODE", "1(x3)"},
                            {"SLURM_JOB_CPUS_PER_NODE", "8(x2),4"}});
  EXPECT_EQ(names(*a), "n1:1,n2:1,n3:1");
}

TEST(SlurmAllocation, DividedByCpusPerTaskAtLeastOne) {
  auto a = pm::slurm_allocation({{"SLURM_JOB_ID", "7"},
                                 {"SLURM_JOB_NODELIST", "n[1-3]"},
                                 {"SLURM_JOB_CPUS_PER_NODE", "8(x2),1"},
                                 {"SLURM_CPUS_PER_TASK", "3"}});
  ASSERT_TRUE(a);
  EXPECT_EQ(names(*a), "n1:2,n2:2,n3:1");
  EXPECT_EQ(
      parse_error([] {
        pm::slurm_allocation(
            {{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NODELIST", "n1"}, {"SLURM_CPUS_PER_TASK", "0"}});
      }),
      "SLURM_CPUS_PER_TASK '0': expected a positive integer");
}

TEST(SlurmAllocation, InsideAStepTheStepsNodesAndTasks) {
  const pm::env_map job{{"SLURM_JOB_ID", "7"},
                        {"SLURM_JOB_NODELIST", "n[1-4]"},
                        {"SLURM_TASKS_PER_NODE", "1(x4)"},
                        {"SLURM_JOB_CPUS_PER_NODE", "2(x4)"}};
  auto env = job;
  env["SLURM_STEP_NODELIST"] = "n[2-3]";
  env["SLURM_STEP_TASKS_PER_NODE"] = "3,1";
  auto a = pm::slurm_allocation(env);
  ASSERT_TRUE(a);
  EXPECT_EQ(names(*a), "n2:3,n3:1");
  // Without the step's counts: one slot per step node (the job's counts describe other nodes).
  env.erase("SLURM_STEP_TASKS_PER_NODE");
  EXPECT_EQ(names(*pm::slurm_allocation(env)), "n2:1,n3:1");
}

TEST(SlurmAllocation, ErrorsNameTheVariable) {
  EXPECT_EQ(parse_error([] {
              pm::slurm_allocation({{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NODELIST", "n[1-"}});
            }),
            "SLURM_JOB_NODELIST 'n[1-': unbalanced '['");
  EXPECT_EQ(parse_error([] {
              pm::slurm_allocation({{"SLURM_JOB_ID", "7"}, {"SLURM_NODELIST", "n]"}});
            }),
            "SLURM_NODELIST 'n]': unbalanced ']'");
  EXPECT_EQ(parse_error([] {
              pm::slurm_allocation({{"SLURM_JOB_ID", "7"},
                                    {"SLURM_JOB_NODELIST", "n[1-2]"},
                                    {"SLURM_STEP_NODELIST", "n[1-2]"},
                                    {"SLURM_STEP_TASKS_PER_NODE", "1"}});
            }),
            "SLURM_STEP_TASKS_PER_NODE '1': describes 1 nodes, the allocation has 2");
}

}  // namespace
