// `pmrun --ps`: a running job seen from another process (docs/cli.md, "Looking at running jobs").
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "support/command.hpp"
#include "support/other_user.hpp"
#include "support/processes.hpp"

namespace {

using namespace std::chrono_literals;
using pm::test::background;
using pm::test::run_command;

std::vector<std::string> dir_entries(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    names.push_back(e.path().filename());
  }
  return names;
}

class PmrunStatus : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pm-status-test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root = tmpl;
    dir = root + "/st";
    // pmrun and `pmrun --ps` started by this test find the directory here.
    setenv("PM_STATUS_DIR", dir.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("PM_STATUS_DIR");
    std::filesystem::remove_all(root);
  }
  pm::test::command_result ps(std::vector<std::string> args) {
    args.insert(args.begin(), {pm::test::pmrun_path(), "--ps"});
    return run_command(args, 10s);
  }
  // `pmrun --ps PID --json` once it answers and `ready` holds for its document (5 s at most).
  nlohmann::json wait_for(pid_t pid, const std::function<bool(const nlohmann::json&)>& ready) {
    nlohmann::json doc;
    for (int i = 0; i < 100; ++i) {
      auto r = ps({std::to_string(pid), "--json"});
      if (r.exit_code == 0) {
        doc = nlohmann::json::parse(r.out);
        if (ready(doc)) return doc;
      }
      std::this_thread::sleep_for(50ms);
    }
    ADD_FAILURE() << "pmrun " << pid << " never showed the expected state: " << doc.dump();
    return doc;
  }
  std::string root, dir;
};

std::vector<std::string> sleeping_job(const std::string& np) {
  // Rank 2 exits 3 at once (the job goes on: --no-abort-on-failure), the others sleep.
  return {pm::test::pmrun_path(),
          "--allow-run-as-root",
          "--no-abort-on-failure",
          "-np",
          np,
          pm::test::payload_path(),
          "pid",
          "if-rank",
          "2",
          "exit",
          "3",
          "sleep",
          "30"};
}

TEST_F(PmrunStatus, PsShowsARunningJobsRanksHostsPidsAndStates) {
  background job(sleeping_job("3"));
  job.wait_lines(3);
  const auto pids = pm::test::printed_pids(job.text, "pid");
  ASSERT_EQ(pids.size(), 3u) << job.text;
  const auto doc = wait_for(job.pid, [](const nlohmann::json& d) {
    return d["report"]["ranks"][2]["state"] == "exited";
  });
  SCOPED_TRACE("status document: " + doc.dump());
  EXPECT_EQ(doc["pmrun_pid"], job.pid);
  EXPECT_EQ(doc["running"], true);
  EXPECT_EQ(doc["command"][2], "--no-abort-on-failure");
  const auto& ranks = doc["report"]["ranks"];
  ASSERT_EQ(ranks.size(), 3u);
  EXPECT_EQ(ranks[2]["exit_code"], 3);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ranks[r]["state"], "running");
    const pid_t pid = ranks[r]["pid"].get<pid_t>();
    EXPECT_NE(std::find(pids.begin(), pids.end(), pid), pids.end()) << pid;
  }

  // The human views: the job in the list, its ranks in the table.
  auto list = ps({});
  EXPECT_EQ(list.exit_code, 0) << list.err;
  EXPECT_NE(list.out.find(std::to_string(job.pid) + " "), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("--no-abort-on-failure"), std::string::npos) << list.out;
  auto one = ps({std::to_string(job.pid)});
  EXPECT_EQ(one.exit_code, 0) << one.err;
  EXPECT_NE(one.out.find("3 ranks on 1 host"), std::string::npos) << one.out;
  EXPECT_NE(one.out.find("exited (3)"), std::string::npos) << one.out;
  EXPECT_NE(one.out.find(std::to_string(ranks[0]["pid"].get<pid_t>()) + "  running"),
            std::string::npos)
      << one.out;

  // The job ends (its first failure decides the code: rank 2's 3): its socket goes with it.
  kill(job.pid, SIGTERM);
  const int status = job.wait_status();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << status;
  const auto left = dir_entries(dir);
  EXPECT_TRUE(left.empty()) << left.size() << " left, the first: " << (left.empty() ? "" : left[0]);
  EXPECT_TRUE(pm::test::all_gone(pids));
}

TEST_F(PmrunStatus, TheSocketOfAKilledPmrunIsClearedByTheNextPs) {
  background job(sleeping_job("2"));
  job.wait_lines(2);
  wait_for(job.pid, [](const nlohmann::json&) { return true; });
  ASSERT_EQ(dir_entries(dir).size(), 1u);
  kill(job.pid, SIGKILL);
  EXPECT_EQ(job.wait_status(), SIGKILL);  // WTERMSIG in the low bits
  auto list = ps({});
  EXPECT_EQ(list.exit_code, 0) << list.err;
  EXPECT_EQ(list.out.find(std::to_string(job.pid)), std::string::npos) << list.out;
  EXPECT_TRUE(dir_entries(dir).empty());
}

TEST_F(PmrunStatus, ADirectoryOpenToOthersGetsNoSocketAndTheJobRunsTheSame) {
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  ASSERT_EQ(chmod(dir.c_str(), 0755), 0);  // whatever the umask
  auto r = run_command({pm::test::pmrun_path(), "--allow-run-as-root", "-np", "2",
                        pm::test::payload_path(), "sleep", "0.4", "echo", "done"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "done\ndone\n");
  EXPECT_TRUE(dir_entries(dir).empty());
  // Nor does --ps read one: another user may have made it.
  auto list = ps({});
  EXPECT_EQ(list.exit_code, 1);
  EXPECT_EQ(list.err, "pmrun: --ps: " + dir +
                          " is not a directory of this user closed to others; not read\n");
}

TEST_F(PmrunStatus, AnArgumentThatIsNotUtf8NeitherHidesNorEndsTheJob) {
  background job({pm::test::pmrun_path(), "--allow-run-as-root", "-np", "2", "/bin/sh", "-c",
                  "echo up; sleep 30", "caf\xe9"});
  job.wait_lines(2);
  const auto doc = wait_for(job.pid, [](const nlohmann::json&) { return true; });
  EXPECT_EQ(doc["command"].back(), "caf\xef\xbf\xbd");  // U+FFFD
  auto one = ps({std::to_string(job.pid)});
  EXPECT_EQ(one.exit_code, 0) << one.err;
  EXPECT_TRUE(pm::test::alive(job.pid));
  kill(job.pid, SIGTERM);
  const int status = job.wait_status();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  EXPECT_TRUE(dir_entries(dir).empty());
}

// Another local user learns nothing of the job: neither through `pmrun --ps` pointed at the job's
// directory nor by connecting to its socket (docs/security.md).
TEST_F(PmrunStatus, AnotherUserNeitherListsNorReachesTheJob) {
  std::string why;
  auto other = pm::test::other_user::create(why);
  if (!other) GTEST_SKIP() << why;
  background job(sleeping_job("2"));
  job.wait_lines(2);
  wait_for(job.pid, [](const nlohmann::json&) { return true; });
  const auto names = dir_entries(dir);
  ASSERT_EQ(names.size(), 1u);
  const std::string socket = dir + "/" + names[0];
  // The test's root directory is the test's; the other user may pass through it to the job's.
  ASSERT_EQ(chmod(root.c_str(), 0755), 0);

  auto list = run_command(other->as({pm::test::pmrun_path(), "--ps", std::to_string(job.pid)},
                                    {"PM_STATUS_DIR=" + dir}),
                          10s);
  EXPECT_EQ(list.exit_code, 1) << list.out << list.err;
  EXPECT_EQ(list.out, "");
  EXPECT_EQ(list.err, "pmrun: --ps: " + dir +
                          " is not a directory of this user closed to others; not read\n");
  auto reach = run_command(
      other->as(
          {"/usr/bin/python3", "-c",
           "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ntry:\n s.connect(sys.argv[1])\n"
           " print(s.recv(100))\nexcept OSError as e:\n print(e.errno)",
           socket}),
      10s);
  EXPECT_EQ(reach.out, "13\n") << reach.err;  // EACCES: the directory is closed to others
  EXPECT_TRUE(pm::test::alive(job.pid));
  kill(job.pid, SIGTERM);
  job.wait_status();
  EXPECT_TRUE(dir_entries(dir).empty());
}

TEST_F(PmrunStatus, BadPsUsageAndAMissingJobSayOneLine) {
  auto r = ps({"999999999"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err,
            "pmrun: --ps: no running pmrun job with pid 999999999 (looked in " + dir + ")\n");
  r = ps({"12x"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "pmrun: --ps: unexpected '12x' (usage: pmrun --ps [PID] [--json])\n");
  r = ps({});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << r.out;  // the header only
}

}  // namespace
