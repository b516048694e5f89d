// PMIx tools (tests/mpi/pmix_tool.c) attached to a pmrun job's agent on this host: what a tool
// sees of the job's ranks, its spawns run like a rank's, beyond the free slots, a job whose ranks
// never called PMIx (docs/pmix.md, "Tools"). The fixture is mpi/pmrun_mpi.hpp.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/command.hpp"
#include "support/other_user.hpp"
#include "support/processes.hpp"

#include "mpi/pmrun_mpi.hpp"

namespace {

TEST_F(PmrunMpi, APmixToolSeesTheJobsRanksAndSpawns) {
  // Three ranks print their pids; ranks 0 and 1 stay in PMIx (pmix_touch), rank 2 exits 3 (the
  // job goes on). A PMIx tool finds the agent through `pmrun --ps PID --json`, asks its server
  // for the job's process table and spawns two ranks of mpi_hello on the free slots.
  const std::string status_dir = tmp_ + "/st";
  pm::test::background job({"/usr/bin/env", "TMPDIR=" + tmp_, "PM_STATUS_DIR=" + status_dir,
                            one_host_tcp, pm::test::pmrun_path(), "--allow-run-as-root",
                            "--no-abort-on-failure", "--tag-output", "-H", "localhost:7", "-np",
                            "3", "sh", "-c",
                            "echo pid $$ rank $PMIX_RANK; if [ $PMIX_RANK = 2 ]; then exit 3; fi; "
                            "exec " +
                                mpi_dir + "/pmix_touch 60"});
  job.wait_lines(5);  // each rank: its pid; ranks 0 and 1 "touch" once in PMIx
  std::map<std::string, std::string> pid_of_rank;
  {
    const std::regex re(R"(\[1,\d\]<stdout>:pid (\d+) rank (\d+))");
    for (std::sregex_iterator it(job.text.begin(), job.text.end(), re), end; it != end; ++it) {
      pid_of_rank[(*it)[2]] = (*it)[1];
    }
  }
  ASSERT_EQ(pid_of_rank.size(), 3u) << job.text;
  ASSERT_EQ(lines_of(job.text, "[1,0]<stdout>:touch").size() +
                lines_of(job.text, "[1,1]<stdout>:touch").size(),
            2u)
      << job.text;

  const auto agent = agent_of(job.pid, status_dir, [](const nlohmann::json& doc) {
    return doc["report"]["ranks"][2]["state"] == "exited";
  });
  ASSERT_FALSE(agent.is_null()) << "pmrun --ps never showed the agent's server and rank 2's end";
  SCOPED_TRACE("agent: " + agent.dump());
  EXPECT_EQ(agent["host"], host_name());
  const auto agent_pid = agent["pid"].get<std::int64_t>();
  EXPECT_GT(agent_pid, 0);
  const std::string uri = agent["pmix_uri"], tmpdir = agent["pmix_tmpdir"];
  EXPECT_EQ(uri.rfind("pmix-server." + std::to_string(agent_pid) + ";tcp4://127.0.0.1:", 0), 0u);
  EXPECT_EQ(tmpdir.rfind(tmp_ + "/pm-pmix." + std::to_string(agent_pid) + ".", 0), 0u);

  // The human view names the agent and its server too.
  auto ps_env = env_;
  ps_env.push_back("PM_STATUS_DIR=" + status_dir);
  const auto human =
      run_command({pm::test::pmrun_path(), "--ps", std::to_string(job.pid)}, 10s, "", &ps_env);
  EXPECT_NE(human.out.find("agent on " + host_name() + ": pid " + std::to_string(agent_pid) +
                           ", PMIx " + uri),
            std::string::npos)
      << human.out;

  // Attached by the URI, and by the pid and tmpdir (the rendezvous files), the tool sees the
  // same: one namespace, 3 ranks with the pids they printed, on this host, running. Each time it
  // spawns two ranks of mpi_hello: jobs 2 and 3 of the launch, on the 7 - 2 free slots.
  int spawned = 0;
  for (const auto& how :
       {std::vector<std::string>{"--uri", uri},
        std::vector<std::string>{"--pid", std::to_string(agent_pid), "--tmpdir", tmpdir}}) {
    std::vector<std::string> argv = {mpi_dir + "/pmix_tool"};
    argv.insert(argv.end(), how.begin(), how.end());
    argv.insert(argv.end(), {"--spawn", mpi_dir + "/mpi_hello", "--np", "2", "--arg", "2"});
    const auto t = run_command(argv, 30s, "", &env_);
    SCOPED_TRACE("tool " + how[0] + ": " + t.out + t.err);
    ASSERT_EQ(t.exit_code, 0);
    const auto ns = lines_of(t.out, "namespaces");
    ASSERT_EQ(ns.size(), 1u);
    EXPECT_EQ(ns[0].rfind("pmrun.", 0), 0u);
    // Every namespace of the launch: the first job's, then those spawned before this tool asked.
    const std::string first_ns = ns[0].substr(0, ns[0].find(','));
    std::string all = first_ns;
    for (int k = 1; k <= spawned; ++k) all += "," + first_ns + "." + std::to_string(k);
    EXPECT_EQ(ns[0], all);
    EXPECT_EQ(lines_of(t.out, "job_size"), std::vector<std::string>{"3"});
    for (const std::string table : {"proc", "local"}) {
      const auto procs = lines_of(t.out, table);
      ASSERT_EQ(procs.size(), 3u) << table;
      for (std::size_t r = 0; r < 3; ++r) {
        const std::string rank = std::to_string(r);
        // The exit code does not cross PMIx 4.2.2's wire (it packs pid and state, not the code):
        // rank 2's state says how it ended.
        const std::string expected =
            first_ns + " " + rank + " " + host_name() + " sh " + pid_of_rank[rank] +
            (r < 2 ? " PROC EXECUTING 0" : " PROC TERMINATED WITH NON-ZERO STATUS ");
        EXPECT_EQ(procs[r].substr(0, expected.size()), expected) << table;
      }
    }
    EXPECT_EQ(lines_of(t.out, "spawn_support"), std::vector<std::string>{"'pmix.host,pmix.wdir'"});
    EXPECT_EQ(lines_of(t.out, "unknown_nspace"), std::vector<std::string>{"NOT-FOUND"});
    EXPECT_EQ(lines_of(t.out, "unsupported"), std::vector<std::string>{"NOT-SUPPORTED"});
    EXPECT_EQ(lines_of(t.out, "mixed"), std::vector<std::string>{"SUCCESS namespaces"});
    EXPECT_EQ(lines_of(t.out, "spawn"), std::vector<std::string>{"SUCCESS"});
    // The launch's namespaces are the first job's and that with ".<spawned job>" appended.
    ++spawned;
    EXPECT_EQ(lines_of(t.out, "spawned"),
              std::vector<std::string>{first_ns + "." + std::to_string(spawned)});
  }
  // The spawned ranks' lines come through pmrun, tagged with their own job and rank; each
  // mpi_hello found itself in a world of 2 (else it exits 3 and says nothing).
  job.wait_lines(5 + 4);
  for (const std::string j : {"2", "3"}) {
    for (const std::string r : {"0", "1"}) {
      EXPECT_NE(job.text.find("[" + j + "," + r + "]<stdout>:hello rank " + r + " size 2 "),
                std::string::npos)
          << job.text;
    }
  }

  ::kill(job.pid, SIGTERM);
  job.wait_status();
  // pmrun's status directory is the test's; its socket went with pmrun.
  std::error_code ec;
  EXPECT_TRUE(fs::remove(status_dir, ec)) << ec.message();
  expect_nothing_left();
}

// A job of one rank that waits until `file` exists (the agent's server starts with the tool's
// connection) under `pmrun --tag-output -H localhost:SLOTS`.
std::vector<std::string> waiting_job(const std::string& tmp, const std::string& status_dir,
                                     const std::string& slots, const std::string& file) {
  return {"/usr/bin/env",
          "TMPDIR=" + tmp,
          "PM_STATUS_DIR=" + status_dir,
          pm::test::pmrun_path(),
          "--allow-run-as-root",
          "--tag-output",
          "-H",
          "localhost:" + slots,
          "-np",
          "1",
          "sh",
          "-c",
          "echo first up; while [ ! -e " + file + " ]; do sleep 0.05; done; echo first done"};
}

TEST_F(PmrunMpi, AToolsSpawnedJobRunsLikeARanksAndTheLaunchEndsWithItsLastRank) {
  // A tool spawns two ranks that print their PMIx facts and outlive the first job's rank by a
  // second: their parent is the tool, their output comes through pmrun as job 2's, and pmrun
  // exits 0 once they ended too.
  const std::string status_dir = tmp_ + "/st", go = tmp_ + "/go";
  pm::test::background job(waiting_job(tmp_, status_dir, "3", go));
  job.wait_lines(1);
  ASSERT_EQ(job.text, "[1,0]<stdout>:first up\n");
  const auto agent = agent_of(job.pid, status_dir, [](const nlohmann::json&) { return true; });
  ASSERT_FALSE(agent.is_null()) << "pmrun --ps never showed the agent's server";
  const auto t = run_command(
      {mpi_dir + "/pmix_tool", "--uri", agent["pmix_uri"], "--spawn", "/bin/sh", "--np", "2",
       "--arg", "-c", "--arg", mpi_dir + "/pmix_pubsub info; sleep 1; echo child $PMIX_RANK done"},
      30s, "", &env_);
  SCOPED_TRACE("tool: " + t.out + t.err);
  ASSERT_EQ(t.exit_code, 0);
  ASSERT_EQ(lines_of(t.out, "spawn"), std::vector<std::string>{"SUCCESS"});
  const auto ns = lines_of(t.out, "namespaces"), me = lines_of(t.out, "tool");
  ASSERT_EQ(ns.size(), 1u);
  ASSERT_EQ(me.size(), 1u);
  EXPECT_EQ(me[0].rfind("pm-tool." + std::to_string(agent["pid"].get<std::int64_t>()) + ".", 0),
            0u);
  EXPECT_EQ(lines_of(t.out, "spawned"), std::vector<std::string>{ns[0] + ".1"});
  // The first job ends now; the spawned ranks still sleep.
  { std::ofstream(go).put('\n'); }
  const int status = job.wait_status();
  job.wait_lines(6);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << job.text;
  const std::string parent =
      me[0].substr(0, me[0].find(' ')) + ":" + me[0].substr(me[0].find(' ') + 1);  // "NSPACE:RANK"
  for (const std::string r : {"0", "1"}) {
    EXPECT_NE(job.text.find("[2," + r + "]<stdout>:spawned 1 parent " + parent + "\n"),
              std::string::npos)
        << job.text;
    EXPECT_NE(job.text.find("[2," + r + "]<stdout>:child " + r + " done\n"), std::string::npos)
        << job.text;
  }
  // pmrun went on after the first job's end: the children's last lines came later.
  const auto first_done = job.text.find("[1,0]<stdout>:first done\n");
  EXPECT_NE(first_done, std::string::npos) << job.text;
  EXPECT_LT(first_done, job.text.find("<stdout>:child ")) << job.text;
  std::error_code ec;
  fs::remove(go, ec);
  EXPECT_TRUE(fs::remove(status_dir, ec)) << ec.message();
  expect_nothing_left();
}

TEST_F(PmrunMpi, AToolsSpawnBeyondTheFreeSlotsIsRefusedInOneLineAndTheJobGoesOn) {
  // Two slots, one taken by the job's rank: three ranks do not fit. The tool's PMIx_Spawn fails,
  // pmrun says why in one line, and the job ends as it would have (exit 0).
  const std::string status_dir = tmp_ + "/st", go = tmp_ + "/go";
  const std::string err_file = tmp_ + "/err";
  auto argv = waiting_job(tmp_, status_dir, "2", go);
  // pmrun's stderr into a file (background keeps only stdout): the shell becomes pmrun.
  std::string cmd = "exec";
  for (const auto& a : argv) cmd += " '" + a + "'";
  pm::test::background job({"/bin/sh", "-c", cmd + " 2>'" + err_file + "'"});
  job.wait_lines(1);
  ASSERT_EQ(job.text, "[1,0]<stdout>:first up\n");
  const auto agent = agent_of(job.pid, status_dir, [](const nlohmann::json&) { return true; });
  ASSERT_FALSE(agent.is_null()) << "pmrun --ps never showed the agent's server";
  const auto t = run_command(
      {mpi_dir + "/pmix_tool", "--uri", agent["pmix_uri"], "--spawn", "/bin/echo", "--np", "3"},
      30s, "", &env_);
  SCOPED_TRACE("tool: " + t.out + t.err);
  ASSERT_EQ(t.exit_code, 0);
  EXPECT_EQ(lines_of(t.out, "spawn"), std::vector<std::string>{"ERROR"});
  EXPECT_TRUE(lines_of(t.out, "spawned").empty());
  const auto me = lines_of(t.out, "tool");
  ASSERT_EQ(me.size(), 1u);
  { std::ofstream(go).put('\n'); }
  const int status = job.wait_status();
  job.wait_lines(2);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << job.text;
  EXPECT_EQ(job.text, "[1,0]<stdout>:first up\n[1,0]<stdout>:first done\n");
  std::ifstream in(err_file);
  const std::string err((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(err, "pmrun: PMIx_Spawn of tool " + me[0].substr(0, me[0].find(' ')) + " on " +
                     host_name() +
                     " refused: not enough slots: 3 ranks requested, 1 slot available on 1 host "
                     "(add --oversubscribe to place more ranks than slots)\n");
  std::error_code ec;
  fs::remove(go, ec);
  fs::remove(err_file, ec);
  EXPECT_TRUE(fs::remove(status_dir, ec)) << ec.message();
  expect_nothing_left();
}

TEST_F(PmrunMpi, AToolAttachesToAJobWhoseRanksNeverCalledPmix) {
  // The tool's connection starts the agent's server, as a rank's first one would.
  const std::string status_dir = tmp_ + "/st";
  pm::test::background job({"/usr/bin/env", "TMPDIR=" + tmp_, "PM_STATUS_DIR=" + status_dir,
                            one_host_tcp, pm::test::pmrun_path(), "--allow-run-as-root", "-np", "2",
                            "sh", "-c", "echo pid $$ rank $PMIX_RANK; exec sleep 60"});
  job.wait_lines(2);
  const auto agent = agent_of(job.pid, status_dir, [](const nlohmann::json&) { return true; });
  ASSERT_FALSE(agent.is_null()) << "pmrun --ps never showed the agent's server";
  const std::string tmpdir = agent["pmix_tmpdir"];
  EXPECT_FALSE(fs::exists(tmpdir)) << "the server started before anyone connected";
  const auto t = run_command({mpi_dir + "/pmix_tool", "--uri", agent["pmix_uri"]}, 30s, "", &env_);
  ASSERT_EQ(t.exit_code, 0) << t.out << t.err;
  const auto procs = lines_of(t.out, "proc");
  ASSERT_EQ(procs.size(), 2u) << t.out;
  const std::regex re(R"(pid (\d+) rank (\d+))");
  int ranks = 0;
  for (std::sregex_iterator it(job.text.begin(), job.text.end(), re), end; it != end; ++it) {
    ++ranks;
    EXPECT_NE(t.out.find(" " + std::string((*it)[2]) + " " + host_name() + " sh " +
                         std::string((*it)[1]) + " PROC EXECUTING 0"),
              std::string::npos)
        << t.out;
  }
  EXPECT_EQ(ranks, 2) << job.text;
  EXPECT_TRUE(fs::exists(tmpdir));  // the server runs now
  ::kill(job.pid, SIGTERM);
  job.wait_status();
  std::error_code ec;
  EXPECT_TRUE(fs::remove(status_dir, ec)) << ec.message();
  expect_nothing_left();
}

}  // namespace
