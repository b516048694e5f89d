// exit_status text, signal names, state/cause names and the JSON report's exact schema.
#include <signal.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "pm/report.hpp"

namespace {

using namespace std::chrono_literals;

TEST(ExitStatus, DescribeAndShellCode) {
  EXPECT_EQ(pm::exit_status::exited(7).describe(), "exited with code 7");
  EXPECT_EQ(pm::exit_status::exited(0).describe(), "exited with code 0");
  EXPECT_EQ(pm::exit_status::signaled(SIGKILL).describe(), "was killed by SIGKILL");
  EXPECT_EQ(pm::exit_status::signaled(77).describe(), "was killed by signal 77");
  EXPECT_EQ(pm::exit_status::exited(7).shell_code(), 7);
  EXPECT_EQ(pm::exit_status::signaled(SIGSEGV).shell_code(), 139);
  EXPECT_TRUE(pm::exit_status().success());
  EXPECT_FALSE(pm::exit_status::signaled(SIGTERM).success());
  EXPECT_NE(pm::exit_status::exited(9), pm::exit_status::signaled(9));
}

TEST(ExitStatus, SignalNames) {
  const std::vector<std::pair<int, std::string>> expected = {
      {1, "SIGHUP"},     {2, "SIGINT"},   {3, "SIGQUIT"},   {4, "SIGILL"},   {5, "SIGTRAP"},
      {6, "SIGABRT"},    {7, "SIGBUS"},   {8, "SIGFPE"},    {9, "SIGKILL"},  {10, "SIGUSR1"},
      {11, "SIGSEGV"},   {12, "SIGUSR2"}, {13, "SIGPIPE"},  {14, "SIGALRM"}, {15, "SIGTERM"},
      {16, "SIGSTKFLT"}, {17, "SIGCHLD"}, {18, "SIGCONT"},  {19, "SIGSTOP"}, {20, "SIGTSTP"},
      {21, "SIGTTIN"},   {22, "SIGTTOU"}, {23, "SIGURG"},   {24, "SIGXCPU"}, {25, "SIGXFSZ"},
      {26, "SIGVTALRM"}, {27, "SIGPROF"}, {28, "SIGWINCH"}, {29, "SIGIO"},   {30, "SIGPWR"},
      {31, "SIGSYS"}};
  for (const auto& [signo, name] : expected) EXPECT_EQ(pm::signal_name(signo), name) << signo;
  EXPECT_EQ(pm::signal_name(0), "signal 0");
  EXPECT_EQ(pm::signal_name(34), "signal 34");  // real-time signals have no fixed name
  EXPECT_EQ(pm::signal_name(77), "signal 77");
  EXPECT_EQ(pm::signal_name(-1), "signal -1");
}

TEST(Report, StateAndCauseNames) {
  EXPECT_STREQ(pm::to_string(pm::rank_state::pending), "pending");
  EXPECT_STREQ(pm::to_string(pm::rank_state::running), "running");
  EXPECT_STREQ(pm::to_string(pm::rank_state::exited), "exited");
  EXPECT_STREQ(pm::to_string(pm::rank_state::killed), "killed");
  EXPECT_STREQ(pm::to_string(pm::rank_state::spawn_failed), "spawn_failed");
  EXPECT_STREQ(pm::to_string(pm::rank_state::lost), "lost");
  EXPECT_STREQ(pm::to_string(pm::rank_state::not_started), "not_started");
  EXPECT_STREQ(pm::to_string(static_cast<pm::rank_state>(99)), "unknown");
  EXPECT_STREQ(pm::to_string(pm::cause_kind::none), "none");
  EXPECT_STREQ(pm::to_string(pm::cause_kind::rank_failed), "rank_failed");
  EXPECT_STREQ(pm::to_string(pm::cause_kind::spawn_failed), "spawn_failed");
  EXPECT_STREQ(pm::to_string(pm::cause_kind::abort_requested), "abort_requested");
  EXPECT_STREQ(pm::to_string(pm::cause_kind::host_lost), "host_lost");
  EXPECT_STREQ(pm::to_string(pm::cause_kind::signal), "signal");
  EXPECT_STREQ(pm::to_string(pm::cause_kind::timeout), "timeout");
  EXPECT_STREQ(pm::to_string(static_cast<pm::cause_kind>(99)), "unknown");
}

pm::job_report failed_job() {
  pm::job_report r;
  r.exit_code = 7;
  r.cause = pm::cause_kind::rank_failed;
  r.failed_rank = 1;
  r.failed_host = 1;
  r.failed_status = pm::exit_status::exited(7);
  r.summary = "rank 1 on b exited with code 7";
  r.ranks_failed = 1;
  r.ranks_killed = 1;
  r.host_names = {"a", "b"};
  pm::rank_report r0;
  r0.rank = 0;
  r0.host = 0;
  r0.state = pm::rank_state::killed;
  r0.status = pm::exit_status::signaled(SIGTERM);
  r0.pid = 123;
  r0.started_at = 1ms;
  r0.ended_at = 13500us;
  pm::rank_report r1;
  r1.rank = 1;
  r1.host = 1;
  r1.state = pm::rank_state::exited;
  r1.status = pm::exit_status::exited(7);
  r1.pid = 124;
  r1.started_at = 2ms;
  r1.ended_at = 4ms;
  r.ranks = {r0, r1};
  return r;
}

// The whole document, byte for byte: its keys, their order and its layout are the schema.
TEST(Report, JsonOfAFailedJob) {
  EXPECT_EQ(pm::to_json(failed_job()), R"({
  "exit_code": 7,
  "cause": "rank_failed",
  "signal": null,
  "summary": "rank 1 on b exited with code 7",
  "failed": {
    "rank": 1,
    "host": "b",
    "exit_code": 7,
    "signal": null,
    "reason": null
  },
  "ranks_failed": 1,
  "ranks_killed": 1,
  "ranks": [
    {
      "rank": 0,
      "host": "a",
      "state": "killed",
      "exit_code": null,
      "signal": "SIGTERM",
      "pid": 123,
      "duration_ms": 12.5,
      "reason": null
    },
    {
      "rank": 1,
      "host": "b",
      "state": "exited",
      "exit_code": 7,
      "signal": null,
      "pid": 124,
      "duration_ms": 2.0,
      "reason": null
    }
  ]
})");
}

TEST(Report, JsonOfASuccessfulJobHasNoFailed) {
  pm::job_report r;
  r.host_names = {"a"};
  pm::rank_report r0;
  r0.state = pm::rank_state::exited;
  r0.status = pm::exit_status::exited(0);
  r.ranks = {r0};
  const auto doc = nlohmann::json::parse(pm::to_json(r));
  EXPECT_EQ(doc["exit_code"], 0);
  EXPECT_EQ(doc["cause"], "none");
  EXPECT_TRUE(doc["failed"].is_null());
  EXPECT_TRUE(doc["signal"].is_null());
  EXPECT_EQ(doc["summary"], "");
  EXPECT_EQ(doc["ranks"][0]["exit_code"], 0);
  EXPECT_TRUE(doc["ranks"][0]["pid"].is_null());          // never known
  EXPECT_TRUE(doc["ranks"][0]["duration_ms"].is_null());  // no time stamps
}

TEST(Report, JsonOfALostHostAndAnInterrupt) {
  pm::job_report r;
  r.exit_code = pm::exit_codes::host_lost;
  r.cause = pm::cause_kind::host_lost;
  r.failed_rank = 0;
  r.failed_host = 0;
  r.summary = "host a was lost (agent channel closed); its 1 rank failed";
  r.host_names = {"a"};
  pm::rank_report r0;
  r0.state = pm::rank_state::lost;
  r0.reason = "agent channel closed";
  r0.started_at = 1ms;  // no end: lost
  r.ranks = {r0};
  auto doc = nlohmann::json::parse(pm::to_json(r));
  EXPECT_EQ(doc["exit_code"], 213);
  EXPECT_EQ(doc["failed"]["host"], "a");
  EXPECT_TRUE(doc["failed"]["exit_code"].is_null());
  EXPECT_TRUE(doc["failed"]["signal"].is_null());
  EXPECT_EQ(doc["failed"]["reason"], "agent channel closed");
  EXPECT_EQ(doc["ranks"][0]["state"], "lost");
  EXPECT_EQ(doc["ranks"][0]["reason"], "agent channel closed");
  EXPECT_TRUE(doc["ranks"][0]["duration_ms"].is_null());

  pm::job_report i;
  i.exit_code = 130;
  i.cause = pm::cause_kind::signal;
  i.signal = SIGINT;
  i.summary = "interrupted by SIGINT";
  doc = nlohmann::json::parse(pm::to_json(i));
  EXPECT_EQ(doc["signal"], "SIGINT");
  EXPECT_TRUE(doc["failed"]["rank"].is_null());
  EXPECT_TRUE(doc["failed"]["host"].is_null());
  EXPECT_TRUE(doc["failed"]["reason"].is_null());
  EXPECT_EQ(doc["ranks"], nlohmann::json::array());
}

TEST(Report, JsonNamesAHostOutsideTheListByIndexAndEscapesText) {
  pm::job_report r;
  r.cause = pm::cause_kind::spawn_failed;
  r.exit_code = 127;
  r.failed_rank = 0;
  r.failed_host = 5;  // no names given
  r.failed_status = pm::exit_status::exited(127);
  r.summary = "rank 0 on 5 could not start: cannot execute '/x \"y\"': No such file";
  pm::rank_report r0;
  r0.host = 5;
  r0.state = pm::rank_state::spawn_failed;
  r0.status = pm::exit_status::exited(127);
  r0.reason = "cannot execute '/x \"y\"': No such file";
  r.ranks = {r0};
  const auto doc = nlohmann::json::parse(pm::to_json(r));
  EXPECT_EQ(doc["failed"]["host"], "5");
  EXPECT_EQ(doc["failed"]["exit_code"], 127);
  EXPECT_EQ(doc["failed"]["reason"], "cannot execute '/x \"y\"': No such file");
  EXPECT_EQ(doc["summary"], r.summary);
}

// A quarantined host a discovery command named is in no list the report keeps: its own name is.
TEST(Report, JsonNamesAQuarantinedHostByItsOwnName) {
  pm::job_report r;
  pm::incarnation_report i;
  r.incarnations = {i};
  r.quarantined = {pm::quarantined_host{3, "its ssh failed", 0, "nosuchhost"}};
  const auto doc = nlohmann::json::parse(pm::to_json(r));
  ASSERT_EQ(doc["quarantined"].size(), 1u);
  EXPECT_EQ(doc["quarantined"][0]["host"], "nosuchhost");
}

// A spawned job's rank carries its job and its rank there, right after "rank" (its process
// number); the first job's ranks keep the schema they had.
TEST(Report, JsonNamesTheJobOfASpawnedJobsRankOnly) {
  pm::job_report r;
  r.host_names = {"a"};
  pm::rank_report first, spawned;
  first.rank = 1;
  first.job_rank = 1;
  spawned.rank = 2;
  spawned.job = 1;
  spawned.job_rank = 0;
  r.ranks = {first, spawned};
  const auto text = pm::to_json(r);
  const auto doc = nlohmann::json::parse(text);
  EXPECT_FALSE(doc["ranks"][0].contains("job"));
  EXPECT_FALSE(doc["ranks"][0].contains("job_rank"));
  EXPECT_EQ(doc["ranks"][1]["rank"], 2);
  EXPECT_EQ(doc["ranks"][1]["job"], 1);
  EXPECT_EQ(doc["ranks"][1]["job_rank"], 0);
  EXPECT_NE(text.find(R"("rank": 2,
      "job": 1,
      "job_rank": 0,
      "host": "a")"),
            std::string::npos);
}

}  // namespace
