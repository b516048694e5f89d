// pmrun held against its docs and against mpirun 4.1.4, with real processes and files: each test
// is a defect found by trying pmrun as a new user would (issue 14), fixed.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/command.hpp"
#include "support/processes.hpp"
#include "sys/sanitizers.hpp"

namespace {

using namespace std::chrono_literals;
using pm::test::run_command;
namespace fs = std::filesystem;

std::vector<std::string> pmrun(std::vector<std::string> args) {
  args.insert(args.begin(), {pm::test::pmrun_path(), "--allow-run-as-root"});
  return args;
}

// A fresh directory, removed with everything in it when the test ends (also when it fails).
struct temp_dir {
  fs::path path;
  temp_dir() {
    char tmpl[] = "/tmp/pmrun-compat-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

void write_file(const std::string& path, const std::string& text, bool executable = false) {
  std::ofstream(path) << text;
  if (executable) chmod(path.c_str(), 0755);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `script` with /bin/sh in `dir` (for cd, redirections and ulimit around pmrun).
pm::test::command_result shell(const std::string& dir, const std::string& script,
                               std::chrono::milliseconds deadline = 30s) {
  return run_command({"/bin/sh", "-c", "cd '" + dir + "' && " + script}, deadline);
}

std::string pmrun_words() {
  return "'" + pm::test::pmrun_path() + "' --allow-run-as-root";
}

TEST(PmrunCompat, MissingInterpreterIsNamed) {
  temp_dir dir;
  write_file(dir / "x.sh", "#!/no/such/interpreter -e\necho never\n", true);
  auto r = shell(dir.path, pmrun_words() + " -np 1 ./x.sh");
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(r.err.find("cannot execute './x.sh': its interpreter '/no/such/interpreter' (#! line) "
                       "does not exist"),
            std::string::npos)
      << r.err;
}

TEST(PmrunCompat, RelativeWdirWithRelativeProgram) {
  // mpirun -wdir w1 ./app.sh runs w1/app.sh in w1.
  temp_dir dir;
  fs::create_directory(dir.path / "w1");
  write_file(dir / "w1/app.sh", "#!/bin/sh\necho \"in $(pwd)\"\n", true);
  auto r = shell(dir.path, pmrun_words() + " -np 2 -wdir w1 ./app.sh");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string line = "in " + fs::canonical(dir.path / "w1").string() + "\n";
  EXPECT_EQ(r.out, line + line);
}

TEST(PmrunCompat, RanksGetTheOriginalDescriptorLimit) {
  rlimit lim{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &lim), 0);
  if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max <= 1000) GTEST_SKIP() << "hard limit too low";
  // pmrun raises its own soft limit to the hard one; the ranks must see 1000, as under mpirun.
  auto r = shell("/tmp", "ulimit -Sn 1000 && " + pmrun_words() + " -np 2 /bin/sh -c 'ulimit -Sn'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "1000\n1000\n");
}

TEST(PmrunCompat, ReportOfAProgramNotFound) {
  temp_dir dir;
  auto r = run_command(pmrun({"-np", "2", "--report", dir / "r.json", "./no-such-program"}));
  EXPECT_EQ(r.exit_code, 127);
  auto doc = nlohmann::json::parse(read_file(dir / "r.json"));
  EXPECT_EQ(doc["exit_code"], 127);
  EXPECT_EQ(doc["cause"], "spawn_failed");  // told from a rank that exited 127
  EXPECT_EQ(doc["summary"], "'./no-such-program' does not exist");
  ASSERT_EQ(doc["ranks"].size(), 2u);
  EXPECT_EQ(doc["ranks"][1]["state"], "pending");
}

TEST(PmrunCompat, ReportOfALaunchThatCouldNotStart) {
  temp_dir dir;
  auto r =
      shell(dir.path, "PM_AGENT=/nonexistent/pmd " + pmrun_words() + " -np 1 --report r.json true");
  EXPECT_EQ(r.exit_code, 125);
  auto doc = nlohmann::json::parse(read_file(dir / "r.json"));
  EXPECT_EQ(doc["exit_code"], 125);
  EXPECT_EQ(doc["cause"], "spawn_failed");
  EXPECT_EQ(doc["summary"], "PM_AGENT names '/nonexistent/pmd', which is not an executable file");
}

TEST(PmrunCompat, UnwritableReportPathStopsBeforeAnythingRuns) {
  temp_dir dir;
  const auto marker = dir / "ran";
  auto r = run_command(pmrun({"-np", "1", "--report", dir / "no-such-dir/r.json", "/bin/sh", "-c",
                              "touch '" + marker + "'; exit 3"}));
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_NE(r.err.find("--report: cannot write '" + dir / "no-such-dir/r.json" +
                       "': No such file or directory"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(marker)) << "the job ran";
}

TEST(PmrunCompat, DoNotLaunchWritesAReport) {
  temp_dir dir;
  auto r = run_command(pmrun({"-np", "3", "--do-not-launch", "--report", dir / "r.json", "true"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto doc = nlohmann::json::parse(read_file(dir / "r.json"));
  EXPECT_EQ(doc["exit_code"], 0);
  EXPECT_EQ(doc["cause"], "none");
  EXPECT_EQ(doc["summary"], "not launched (--do-not-launch)");
  ASSERT_EQ(doc["ranks"].size(), 3u);
  for (const auto& rank : doc["ranks"]) EXPECT_EQ(rank["state"], "pending");
}

TEST(PmrunCompat, OutputFilenameNojobid) {
  // mpirun 4.1.4: --output-filename out:nojobid,nocopy writes out/rank.N/stdout and nothing to
  // the terminal.
  temp_dir dir;
  auto r = run_command(pmrun({"-np", "2", "--output-filename", dir / "out:nojobid", "/bin/sh", "-c",
                              "echo hi; echo err >&2"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "hi\nhi\n");
  EXPECT_EQ(read_file(dir / "out/rank.0/stdout"), "hi\n");
  EXPECT_EQ(read_file(dir / "out/rank.1/stderr"), "err\n");
  EXPECT_FALSE(fs::exists(dir / "out/1"));
  EXPECT_FALSE(fs::exists(dir / "out:nojobid"));
  auto quiet = run_command(pmrun(
      {"-np", "1", "--output-filename", dir / "q:nojobid,nocopy", "/bin/sh", "-c", "echo hi"}));
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_EQ(quiet.out, "");
  EXPECT_EQ(read_file(dir / "q/rank.0/stdout"), "hi\n");
}

TEST(PmrunCompat, EveryMcaReachesTheRanks) {
  auto r = run_command(
      pmrun({"-np", "1", "-mca", "orte_abort_on_non_zero_status", "0", "-mca", "plm_rsh_agent",
             "ssh -x", "-mca", "btl", "self", "/bin/sh", "-c", "env | grep '^OMPI_MCA_' | sort"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("OMPI_MCA_btl=self\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("OMPI_MCA_orte_abort_on_non_zero_status=0\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("OMPI_MCA_plm_rsh_agent=ssh -x\n"), std::string::npos) << r.out;
}

TEST(PmrunCompat, AbortPolicyFromTheEnvironment) {
  // Rank 1 fails at once; rank 0 prints after 0.3 s only if it was not aborted.
  const std::string script =
      "if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then exit 3; fi; sleep 0.3; echo survived";
  for (const std::string value : {"0", "no", "false"}) {
    auto r = shell("/tmp", "OMPI_MCA_orte_abort_on_non_zero_status=" + value + " " + pmrun_words() +
                               " -np 2 /bin/sh -c '" + script + "'");
    EXPECT_EQ(r.exit_code, 3) << value;
    EXPECT_EQ(r.out, "survived\n") << value;
  }
  // The command line wins over the environment.
  auto r = shell("/tmp", "OMPI_MCA_orte_abort_on_non_zero_status=0 " + pmrun_words() +
                             " -mca orte_abort_on_non_zero_status yes -np 2 /bin/sh -c '" + script +
                             "'");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, "");
  auto bad = shell("/tmp",
                   "OMPI_MCA_orte_abort_on_non_zero_status=maybe " + pmrun_words() + " -np 1 true");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.err,
            "pmrun: OMPI_MCA_orte_abort_on_non_zero_status='maybe' in the environment: expected a "
            "boolean (1, 0, true, false, yes or no)\n");
}

TEST(PmrunCompat, MpiexecTimeoutFromTheEnvironment) {
  const auto start = std::chrono::steady_clock::now();
  auto r = shell("/tmp", "MPIEXEC_TIMEOUT=0.5 " + pmrun_words() + " -np 2 sleep 20");
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  auto bad = shell("/tmp", "MPIEXEC_TIMEOUT=abc " + pmrun_words() + " -np 1 true");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.err, "pmrun: MPIEXEC_TIMEOUT 'abc': expected a positive number of seconds\n");
}

// The parent pid of `pid` (from /proc/PID/stat).
pid_t parent_of(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  std::istringstream fields(text.substr(text.rfind(')') + 2));
  char state = 0;
  pid_t parent = 0;
  fields >> state >> parent;
  return parent;
}

// Peak resident memory of `pid` in kB (VmHWM).
long peak_kb(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

// pmd's peak memory with a 100 KB -x variable, with `np` ranks that print their pid and sleep.
long agent_peak_kb(int np) {
  const std::string big = "BIG=" + std::string(100000, 'x');
  pm::test::background bg(pmrun({"--oversubscribe", "-np", std::to_string(np), "-x", big,
                                 pm::test::payload_path(), "pid", "sleep", "5"}));
  bg.wait_lines(static_cast<std::size_t>(np));
  const auto ranks = pm::test::printed_pids(bg.text, "pid");
  if (ranks.size() != static_cast<std::size_t>(np)) return -1;
  return peak_kb(parent_of(ranks[0]));
}

TEST(PmrunCompat, AgentMemoryDoesNotGrowPerRankWithALargeExport) {
  // Each rank's environment is composed when it starts, not for every queued rank at once: with
  // 32 queued ranks of 100 KB each pmd once peaked 1.7 MB above a one-rank job.
#if defined(PM_ADDRESS_SANITIZER) || defined(PM_THREAD_SANITIZER)
  GTEST_SKIP()
      << "a sanitizer's allocator keeps freed memory (ASan's quarantine): peaks say nothing";
#endif
  const long one = agent_peak_kb(1);
  const long many = agent_peak_kb(32);
  ASSERT_GT(one, 0);
  ASSERT_GT(many, 0);
  EXPECT_LT(many - one, 800) << "pmd peaked at " << many << " kB with 32 ranks, " << one
                             << " kB with one";
}

TEST(PmrunCompat, RanksOfASigkilledAgentDieAtOnce) {
  pm::test::background bg(pmrun({"-np", "2", pm::test::payload_path(), "pid", "sleep", "30"}));
  bg.wait_lines(2);
  const auto ranks = pm::test::printed_pids(bg.text, "pid");
  ASSERT_EQ(ranks.size(), 2u) << bg.text;
  const pid_t pmd = parent_of(ranks[0]);  // pmd is the ranks' parent
  ASSERT_GT(pmd, 1);
  ASSERT_EQ(kill(pmd, SIGKILL), 0);
  EXPECT_TRUE(pm::test::all_gone(ranks, 300ms)) << "a rank outlived its agent";
  for (auto p : ranks) kill(p, SIGKILL);
}

TEST(PmrunCompat, AppFile) {
  temp_dir dir;
  write_file(dir / "apps", "# two app contexts\n-np 1 echo one\n\n-np 2 echo 'two words'\n");
  auto r = run_command(pmrun({"--tag-output", "--app", dir / "apps"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(
      r.out.size(),
      std::string("[1,0]<stdout>:one\n[1,1]<stdout>:two words\n[1,2]<stdout>:two words\n").size())
      << r.out;
  EXPECT_NE(r.out.find("[1,0]<stdout>:one\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[1,2]<stdout>:two words\n"), std::string::npos) << r.out;
  auto both = run_command(pmrun({"--app", dir / "apps", "true"}));
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_EQ(both.err,
            "pmrun: --app '" + dir / "apps" +
                "': the app file names the programs; 'true' follows on the command line\n");
}

TEST(PmrunCompat, DisplayAllocation) {
  auto r = run_command(
      pmrun({"-H", "localhost:2", "--display-allocation", "--do-not-launch", "-np", "1", "true"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("======================   ALLOCATED NODES   ======================\n\t"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(": flags=0x11 slots=2 max_slots=0 slots_inuse=0 state=UP\n"
                       "=================================================================\n"),
            std::string::npos)
      << r.out;
}

TEST(PmrunCompat, NpernodeAndRankBy) {
  auto r = run_command(
      pmrun({"-H", "localhost:3", "-N", "2", "--display-map", "--do-not-launch", "true"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Num procs: 2\n"), std::string::npos) << r.out;
  auto v =
      run_command(pmrun({"-v", "-np", "1", "-npernode", "1", "--rank-by", "slot", "echo", "ok"}));
  EXPECT_EQ(v.exit_code, 0) << v.err;
  EXPECT_EQ(v.out, "ok\n");
  // Binding is done (docs/gpus.md); a word Open MPI does not know is one line.
  auto bind = run_command(pmrun({"--bind-to", "core", "-np", "1", "true"}));
  EXPECT_EQ(bind.exit_code, 0) << bind.err;
  auto bad = run_command(pmrun({"--bind-to", "cores", "-np", "1", "true"}));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.err,
            "pmrun: --bind-to cores: unknown object 'cores' (none, hwthread, core, l3cache, numa, "
            "package)\n");
}

}  // namespace

// pmrun starts this machine's pmd before it maps the job (docs/agent.md, "Lifecycle"). A stand-in
// agent (PM_AGENT) records every start and then becomes the real pmd.
struct counted_agent {
  temp_dir dir;
  counted_agent() {
    write_file(dir / "pmd",
               "#!/bin/sh\necho $$ >> '" + (dir / "starts") + "'\nenv > '" + (dir / "env") +
                   "'\nexec '" + std::string(PM_BINARY_DIR) + "/bin/pmd' \"$@\"\n",
               true);
  }
  std::vector<pid_t> starts() const {
    std::vector<pid_t> pids;
    std::istringstream in(read_file(dir / "starts"));
    for (long pid = 0; in >> pid;) pids.push_back(static_cast<pid_t>(pid));
    return pids;
  }
};

TEST(PmrunEarlyAgent, TheJobAdoptsThePmdStartedEarly) {
  counted_agent agent;
  auto r = shell(agent.dir.path,
                 "PM_AGENT='" + (agent.dir / "pmd") + "' " + pmrun_words() + " -np 3 echo ran");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "ran\nran\nran\n");
  EXPECT_EQ(agent.starts().size(), 1u);  // one pmd: the early one served the job
}

TEST(PmrunEarlyAgent, APmdNobodyAdoptsIsGoneWhenPmrunExits) {
  counted_agent agent;
  // Refused after the early start: the hostfile does not exist.
  auto r = shell(agent.dir.path, "PM_AGENT='" + (agent.dir / "pmd") + "' " + pmrun_words() +
                                     " -np 1 --hostfile ./no-such-hostfile true");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no-such-hostfile"), std::string::npos) << r.err;
  // The early pmd may be killed before its wrapper wrote down its start (a fast refusal): at
  // most one started, and whatever started was killed and reaped before pmrun exited (the pid
  // names no process, not even a zombie).
  const auto pids = agent.starts();
  ASSERT_LE(pids.size(), 1u);
  for (const auto pid : pids) {
    EXPECT_EQ(::kill(pid, 0), -1);
    EXPECT_EQ(errno, ESRCH);
  }
}

TEST(PmrunEarlyAgent, AnOuterJobsIdentityReachesNeitherPmdNorTheRanks) {
  // pmrun inside a rank of another job: that job's identity must not reach pmd (its PMIx server)
  // nor the ranks; settings (PMIX_MCA_*) pass.
  counted_agent agent;
  auto r = shell(agent.dir.path, "PM_AGENT='" + (agent.dir / "pmd") +
                                     "' PMIX_RANK=5 OMPI_COMM_WORLD_RANK=9 PMIX_MCA_x=1 " +
                                     pmrun_words() + " --no-pmix -np 1 sh -c 'echo r=$PMIX_RANK'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "r=\n");
  const std::string env = read_file(agent.dir / "env");
  EXPECT_EQ(env.find("PMIX_RANK="), std::string::npos) << env;
  EXPECT_EQ(env.find("OMPI_COMM_WORLD_RANK="), std::string::npos) << env;
  EXPECT_NE(env.find("PMIX_MCA_x=1"), std::string::npos) << env;
}
