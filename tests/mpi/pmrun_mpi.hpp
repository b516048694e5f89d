// The fixture of the tests that run real MPI programs under pmrun on this host
// (tests/mpi/pmrun_mpi*_test.cpp): a private TMPDIR per test, checked empty afterwards with
// /dev/shm, and the helpers more than one of them uses.
#pragma once

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

using namespace std::chrono_literals;
using pm::test::run_command;
namespace fs = std::filesystem;

inline const std::string mpi_dir = PM_MPI_DIR;
inline const std::string python = "/usr/bin/python3";  // Debian's, where python3-mpi4py lives

// One host: ranks of different jobs (spawn) meet over loopback. Left to itself Open MPI's TCP
// transport also offers the bridges of fake hosts that tests beside this one (ctest -j2, the soak)
// make and remove, and a child that binds or dials a bridge gone meanwhile fails its first
// collective (MPI_ERR_OTHER).
constexpr const char* one_host_tcp = "OMPI_MCA_btl_tcp_if_include=lo";

// A private TMPDIR per test (the agents put their PMIx directories there) and what /dev/shm held.
class PmrunMpi : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/pm-mpi-test.XXXXXX";
    ASSERT_NE(::mkdtemp(templ), nullptr);
    tmp_ = templ;
    shm_before_ = dead_shm_entries();
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::string(*e).rfind("TMPDIR=", 0) != 0) env_.emplace_back(*e);
    }
    env_.push_back("TMPDIR=" + tmp_);
    env_.push_back(one_host_tcp);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }

  pm::test::command_result pmrun(std::vector<std::string> args,
                                 std::chrono::milliseconds deadline = 120s,
                                 std::vector<std::string> extra_env = {}) {
    std::vector<std::string> argv = {pm::test::pmrun_path(), "--allow-run-as-root"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto env = env_;
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    return run_command(argv, deadline, "", &env);
  }

  // Nothing of the job stays behind: the TMPDIR is empty again, and /dev/shm holds no PMIx
  // directory of a process that is gone (pmd's) that was not there before.
  void expect_nothing_left() {
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(tmp_)) left.push_back(e.path().string());
    EXPECT_TRUE(left.empty()) << "left in TMPDIR: " << (left.empty() ? "" : left.front());
    for (const auto& name : dead_shm_entries()) {
      if (shm_before_.contains(name) || !of_this_test(name)) continue;
      ADD_FAILURE() << "left in /dev/shm: " << name;
    }
  }

  // A dead agent's directory holds its job's, `pmrun.PID.*`: this test's if it started that pmrun
  // (a multi-host test beside it, ctest -j2, SIGKILLs agents whose directories wait for a sweep).
  static bool of_this_test(const std::string& name) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/dev/shm/" + name, ec)) {
      const std::string job = e.path().filename().string();
      if (job.rfind("pmrun.", 0) != 0) continue;
      const auto pid = static_cast<pid_t>(std::strtol(job.c_str() + 6, nullptr, 10));
      const auto& mine = pm::test::started_pids();
      if (std::find(mine.begin(), mine.end(), pid) != mine.end()) return true;
    }
    return false;
  }

  static std::set<std::string> dead_shm_entries() {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator("/dev/shm")) {
      const std::string name = e.path().filename().string();
      if (name.rfind("pm-pmix.", 0) != 0) continue;
      // Only directories: a link named like one is another test's bait (the sweep test).
      if (!fs::is_directory(e.symlink_status())) continue;
      const long pid = std::strtol(name.c_str() + 8, nullptr, 10);
      if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) out.insert(name);
    }
    return out;
  }

  // A pmrun job of 2 ranks in the background, held open by its ranks until `go` exists, and its
  // agent: how the tests of who reaches the PMIx server begin. hold() starts it, release() lets
  // it end and checks that it ended well and left nothing; tidy() only does the second part.
  struct held_job {
    std::string status_dir, err, go;  // pmrun's PM_STATUS_DIR, its stderr, the ranks' go file
    std::optional<pm::test::background> run;
    nlohmann::json agent;  // its record in `pmrun --ps PID --json`
    pid_t pmd = 0;
    std::string said;  // pmrun's stderr, read by tidy()
    // How hold() starts it. Each rank's sh -c command ("": mpi_hello 2, then a wait for `go`):
    std::string ranks;
    std::vector<std::string> options;  // pmrun's, before -np 2
    std::vector<std::string> env;      // more of pmrun's environment
    bool hellos_first = true;          // both ranks said hello before the agent is looked up
    explicit held_job(const std::string& tmp)
        : status_dir(tmp + "/st"), err(tmp + "/err"), go(tmp + "/go") {}
  };
  void hold(held_job& job);
  void release(held_job& job);
  void tidy(held_job& job);

  std::string tmp_;
  std::set<std::string> shm_before_;
  std::vector<std::string> env_;
};

inline std::string host_name() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// "hello rank R size S universe U appnum A ..." lines, by rank.
inline std::map<int, std::smatch::string_type> hellos(const std::string& out, int size) {
  std::map<int, std::string> by_rank;
  const std::regex re(R"(hello rank (\d+) size (\d+) universe (\d+)(?: appnum (\d+))?.*)");
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, re)) continue;
    EXPECT_EQ(std::stoi(m[2]), size) << line;
    by_rank[std::stoi(m[1])] = line;
  }
  return by_rank;
}

// The lines of `out` that start with `word` and a space, without it.
inline std::vector<std::string> lines_of(const std::string& out, const std::string& word) {
  std::vector<std::string> found;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(word + " ", 0) == 0) found.push_back(line.substr(word.size() + 1));
  }
  return found;
}

// The one agent of pmrun `pid` in `pmrun --ps PID --json` once it shows where its PMIx server is
// and `ready` holds for the document (5 s at most); null if never.
inline nlohmann::json agent_of(pid_t pid, const std::string& status_dir,
                               const std::function<bool(const nlohmann::json&)>& ready) {
  std::vector<std::string> env = {"PM_STATUS_DIR=" + status_dir, "PATH=/usr/bin:/bin"};
  for (int i = 0; i < 100; ++i) {
    const auto r =
        run_command({pm::test::pmrun_path(), "--ps", std::to_string(pid), "--json"}, 10s, "", &env);
    if (r.exit_code == 0) {
      const auto doc = nlohmann::json::parse(r.out);
      if (doc.contains("agents") && doc["agents"].size() == 1 &&
          doc["agents"][0].contains("pmix_uri") && ready(doc)) {
        return doc["agents"][0];
      }
    }
    std::this_thread::sleep_for(50ms);
  }
  return {};
}
