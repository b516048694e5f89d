// pmrun's mapping half, end to end: --display-map/--display-map-json --do-not-launch, allocations
// from -H, hostfiles and Slurm variables, and every bad input's one-line error.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "support/command.hpp"

namespace {

using pm::test::run_command;

std::vector<std::string> pmrun(std::vector<std::string> args) {
  args.insert(args.begin(), {pm::test::pmrun_path(), "--allow-run-as-root"});
  return args;
}

struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    char tmpl[] = "/tmp/pmrun-map-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~temp_dir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
    return (path / name).string();
  }
};

TEST(PmrunMap, DisplayMapIsOpenMpi4Text) {
  auto r =
      run_command(pmrun({"--host", "a:2,b:2,c:2", "-np", "6", "--display-map", "--do-not-launch",
                         "--tag-output", "-bind-to", "none", "-map-by", "slot", "-x", "VAR", "-mca",
                         "orte_abort_on_non_zero_status", "1", "prog"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  // The job id varies; everything else is mpirun 4.1's layout, byte for byte.
  const std::string text = std::regex_replace(r.out, std::regex(R"(\[\d+,1\])"), "[J,1]");
  std::string expected =
      " Data for JOB [J,1] offset 0 Total slots allocated 6\n\n"
      " ========================   JOB MAP   ========================\n";
  for (int node = 0; node < 3; ++node) {
    const std::string name(1, static_cast<char>('a' + node));
    expected += "\n Data for node: " + name + "\tNum slots: 2\tMax slots: 0\tNum procs: 2\n";
    for (int r2 = 2 * node; r2 < 2 * node + 2; ++r2) {
      expected += " \tProcess OMPI jobid: [J,1] App: 0 Process rank: " + std::to_string(r2) +
                  " Bound: N/A\n";
    }
  }
  expected += "\n =============================================================\n";
  EXPECT_EQ(text, expected);
}

TEST(PmrunMap, JsonMapForPrograms) {
  auto r = run_command(pmrun({"-H", "a:3,b:1,c:2", "-np", "5", "--map-by", "node",
                              "--display-map-json", "-", "--do-not-launch", "prog"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["size"], 5);
  EXPECT_EQ(doc["total_slots"], 6);
  ASSERT_EQ(doc["nodes"].size(), 3u);
  std::vector<int> on_a;
  for (auto& rank : doc["nodes"][0]["ranks"]) on_a.push_back(rank["rank"]);
  EXPECT_EQ(on_a, (std::vector<int>{0, 3, 4}));  // as mpirun places them
  EXPECT_EQ(doc["nodes"][2]["ranks"][0]["rank"], 2);
}

TEST(PmrunMap, HostfileAndMpmd) {
  temp_dir tmp;
  auto hf = tmp.file("hosts", "# cluster\nn1 slots=2\nn2 slots=2 max_slots=3\n\nn3\n");
  auto r = run_command(pmrun({"--hostfile", hf, "--display-map-json", "-", "--do-not-launch", "-np",
                              "1", "a", ":", "-np", "3", "b"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["apps"][1]["first_rank"], 1);
  EXPECT_EQ(doc["nodes"][0]["ranks"][1]["app"], 1);
  EXPECT_EQ(doc["nodes"][1]["max_slots"], 3);
}

TEST(PmrunMap, SlurmAllocationIsUsedInsideOne) {
  std::vector<std::string> env = {"PATH=/usr/bin:/bin", "SLURM_JOB_ID=77",
                                  "SLURM_JOB_NODELIST=node[01-02]", "SLURM_TASKS_PER_NODE=2(x2)"};
  auto r = run_command(pmrun({"--display-map-json", "-", "--do-not-launch", "prog"}),
                       std::chrono::seconds(30), "", &env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["size"], 4);
  EXPECT_EQ(doc["nodes"][0]["name"], "node01");
  EXPECT_EQ(doc["nodes"][1]["name"], "node02");
  EXPECT_EQ(doc["allocation_source"], "slurm");
}

struct bad_case {
  std::vector<std::string> args;
  std::string hostfile;  // written to a temp file and passed with --hostfile when not empty
  std::string message;   // the one line pmrun prints (after "pmrun: ")
};

TEST(PmrunMap, BadInputIsOneClearLineAndExit2) {
  const std::vector<bad_case> cases = {
      {{"-np", "0", "prog"}, "", "-np 0: at least one rank is needed"},
      {{"-np", "abc", "prog"}, "", "-np 'abc': not a number"},
      {{"-H", "a:2", "-np", "3", "prog"},
       "",
       "not enough slots: 3 ranks requested, 2 slots available on 1 host (add --oversubscribe to "
       "place more ranks than slots)"},
      {{"--bogus", "prog"}, "", "unknown option '--bogus' (pmrun --help lists the options)"},
      {{"-np", "2"}, "", "no program to run (usage: pmrun [OPTIONS] PROGRAM [ARGS...])"},
      {{"--bind-to", "cores", "prog"},
       "",
       "--bind-to cores: unknown object 'cores' (none, hwthread, core, l3cache, numa, package)"},
      {{"--hostfile", "/nonexistent/hosts", "prog"}, "", ""},
      {{"-np", "1", "prog"}, "a slots=two\n", ""},
      {{"-x", "1BAD=x", "prog"}, "", ""},
      {{"-mca", "plm_rsh_agent", "ssh -F 'cfg", "prog"},
       "",
       "-mca plm_rsh_agent 'ssh -F 'cfg': unterminated single quote"},
      {{"--launch", "star", "prog"}, "", "--launch 'star': expected auto, flat or tree"},
      {{"--iface", "10.0.0.0/40", "prog"}, "", ""},
      {{"--heartbeat-interval", "0", "prog"}, "", ""},
      {{"--prefix", "rel/dir", "prog"}, "", "--prefix 'rel/dir': expected an absolute path"},
      {{"-H", "@n1", "prog"}, "", "-H '@n1': empty user name in '@n1'"},
      {{"-np", "1", "prog"}, "a port=0\n", ""},
      {{"-np", "1", "prog"}, "bob@a\nal@a\n", ""},
  };
  temp_dir tmp;
  for (const auto& c : cases) {
    auto args = c.args;
    if (!c.hostfile.empty()) {
      args.insert(args.begin(), {"--hostfile", tmp.file("hf", c.hostfile)});
    }
    args.insert(args.begin(), "--do-not-launch");
    auto r = run_command(pmrun(args));
    SCOPED_TRACE(c.message.empty() ? args.back() : c.message);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.out, "");
    // Exactly one line, starting with "pmrun: ".
    ASSERT_FALSE(r.err.empty());
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("pmrun: ", 0), 0u) << r.err;
    if (!c.message.empty()) {
      EXPECT_EQ(r.err, "pmrun: " + c.message + "\n");
    }
  }
}

TEST(PmrunMap, UserAndPortReachTheJsonMap) {
  temp_dir tmp;
  auto hf = tmp.file("hosts", "bob@n1 slots=2\nn2 slots=2 port=2222 username=al\nn3 slots=2\n");
  auto r = run_command(pmrun(
      {"--hostfile", hf, "-H", "n1,n2,n3", "--display-map-json", "-", "--do-not-launch", "prog"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["nodes"][0]["user"], "bob");
  EXPECT_FALSE(doc["nodes"][0].contains("port"));
  EXPECT_EQ(doc["nodes"][1]["user"], "al");
  EXPECT_EQ(doc["nodes"][1]["port"], 2222);
  EXPECT_FALSE(doc["nodes"][2].contains("user"));
}

TEST(PmrunMap, ABadRshAgentInTheEnvironmentIsOneLine) {
  std::vector<std::string> env = {"PATH=/usr/bin:/bin", "PM_RSH_AGENT=ssh \"x"};
  auto r = run_command(pmrun({"--do-not-launch", "prog"}), std::chrono::seconds(30), "", &env);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "pmrun: PM_RSH_AGENT 'ssh \"x': unterminated double quote\n");
  env.back() = "PM_RSH_AGENT=ssh -F '/a b/cfg'";
  EXPECT_EQ(
      run_command(pmrun({"--do-not-launch", "prog"}), std::chrono::seconds(30), "", &env).exit_code,
      0);
}

TEST(PmrunMap, RootNeedsPermission) {
  if (geteuid() != 0) GTEST_SKIP() << "not root";
  std::vector<std::string> env = {"PATH=/usr/bin:/bin"};
  auto refused = run_command({pm::test::pmrun_path(), "--do-not-launch", "-np", "1", "prog"},
                             std::chrono::seconds(30), "", &env);
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_EQ(refused.err,
            "pmrun: refusing to run as root: pass --allow-run-as-root (or set "
            "OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1), as mpirun requires\n");
  env.push_back("OMPI_ALLOW_RUN_AS_ROOT=1");
  env.push_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
  auto allowed = run_command({pm::test::pmrun_path(), "--do-not-launch", "-np", "1", "prog"},
                             std::chrono::seconds(30), "", &env);
  EXPECT_EQ(allowed.exit_code, 0) << allowed.err;
}

TEST(PmrunMap, HelpAndVersion) {
  auto help = run_command({pm::test::pmrun_path(), "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("Usage: pmrun"), std::string::npos);
  auto version = run_command({pm::test::pmrun_path(), "--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out.rfind("pmrun (libpm) ", 0), 0u);
}

}  // namespace

namespace {

// A 2-socket node of 2 x 4 cores x 2 threads with 4 GPUs, as the summary line pmd --topology
// prints (docs/gpus.md): PUs c and c + 8 on core c, GPUs 0-1 on NUMA 0, 2-3 on NUMA 1.
constexpr const char* gpu_node =
    "pmtopo1;p=2;l=2;n=0-1;c=4*0.0.0,4*1.1.1;u=8*2;o=0-7|8-15;g=nvidia/0000:10:00.0/0/0/GPU-0,"
    "nvidia/0000:11:00.0/0/0/GPU-1,nvidia/0000:12:00.0/1/1/GPU-2,nvidia/0000:13:00.0/1/1/GPU-3;i=";

TEST(PmrunMap, DoNotLaunchShowsEachRanksBindingAndGpuFromTheTopologyFile) {
  temp_dir dir;
  const auto shape = dir.file("shape", std::string(gpu_node) + "\n");
  const auto json = (dir.path / "map.json").string();
  auto r = run_command(pmrun({"-H", "a:4,b:4", "-np", "8", "--bind-to", "core", "--gpus-per-rank",
                              "1", "--display-map", "--display-map-json", json, "--do-not-launch",
                              "--topology-file", shape, "prog"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Rank 2 takes GPU 2, on socket 1: its core is the first of that socket (core 4: PUs 4 and 12).
  EXPECT_NE(r.out.find("Process rank: 2 Bound: socket 1[core 4[hwt 0-1]]:[../../../..][BB/../../..]"
                       " GPUs: 2\n"),
            std::string::npos)
      << r.out;
  std::ifstream in(json);
  const auto map = nlohmann::json::parse(in);
  for (const auto& node : map["nodes"]) {
    std::set<int> gpus;
    std::set<std::string> cpus;
    for (const auto& rank : node["ranks"]) {
      ASSERT_EQ(rank["gpus"].size(), 1u) << rank.dump();
      EXPECT_TRUE(gpus.insert(rank["gpus"][0].get<int>()).second) << node.dump();
      EXPECT_TRUE(cpus.insert(rank["cpus"].get<std::string>()).second) << node.dump();
    }
  }
  // A host that cannot meet the policy refuses as a launch would: 5 ranks, 4 GPUs.
  auto refused = run_command(pmrun({"-H", "a:5", "-np", "5", "--gpus-per-rank", "1",
                                    "--do-not-launch", "--topology-file", shape, "prog"}));
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("host 'a' has 4 GPUs"), std::string::npos) << refused.err;
  // A launch plans from its agents' answers, not from a file.
  auto launch = run_command(pmrun({"-np", "1", "--topology-file", shape, "true"}));
  EXPECT_EQ(launch.exit_code, 2);
  EXPECT_NE(launch.err.find("--topology-file is for --do-not-launch"), std::string::npos);
  // A file nothing needs (no binding, no GPUs) is still read: a wrong path is said.
  auto missing = run_command(pmrun(
      {"-np", "1", "--do-not-launch", "--topology-file", (dir.path / "none").string(), "prog"}));
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("cannot read '"), std::string::npos) << missing.err;
}

TEST(PmrunMap, ALaunchShowsItsPlannedBindingsBeforeTheRanksRun) {
  temp_dir dir;
  const auto json = (dir.path / "map.json").string();
  auto r = run_command(pmrun({"-np", "2", "--bind-to", "core", "--display-map-json", json, "sh",
                              "-c", "grep Cpus_allowed_list: /proc/self/status"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(json);
  const auto map = nlohmann::json::parse(in);
  std::multiset<std::string> shown, applied;
  for (const auto& rank : map["nodes"][0]["ranks"]) shown.insert(rank["cpus"].get<std::string>());
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("Cpus_allowed_list:\t", 0) == 0) applied.insert(line.substr(19));
  // The map said what each rank was then bound to (pmd applies cpus this host has).
  EXPECT_EQ(shown, applied) << r.out;
}

}  // namespace
