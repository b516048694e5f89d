// build/bin/pmsim as users run it: the seed first, the report, the trace hash last; the exit
// code of each verdict; the replay command replays; bad input is one error line and exit 2.
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/command.hpp"

namespace {

using pm::test::run_command;

std::string pmsim_path() {
  return std::string(PM_BINARY_DIR) + "/bin/pmsim";
}

pm::test::command_result pmsim(std::vector<std::string> args) {
  args.insert(args.begin(), pmsim_path());
  return run_command(args, std::chrono::seconds(240));
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The value after `prefix` on the first line that begins with it ("" when none does).
std::string line_after(const std::string& text, const std::string& prefix) {
  for (const auto& line : lines_of(text))
    if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
  return "";
}

// "build/bin/pmsim --a b --c d" -> {"--a", "b", "--c", "d"} (the replay line has no quoting
// for the scenarios used here).
std::vector<std::string> replay_args(const std::string& out) {
  std::istringstream in(line_after(out, "replay: "));
  std::vector<std::string> args;
  std::string word;
  in >> word;  // the program
  while (in >> word) args.push_back(word);
  return args;
}

// A temporary directory removed at the end of the test, also when it fails.
struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "pmsim-cli-XXXXXX").string();
    path = mkdtemp(tmpl.data());
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

TEST(PmsimCli, TheIssuesCommandReportsTheFailingRankAndExitsZero) {
  const auto r = pmsim({"--hosts", "100000", "--slots", "8", "--fail", "123456:7", "--seed", "42"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto lines = lines_of(r.out);
  ASSERT_GE(lines.size(), 4u);
  EXPECT_EQ(lines.front(), "seed 42");
  EXPECT_EQ(lines.back().rfind("trace hash 0x", 0), 0u) << lines.back();
  // 8 slots a host: rank 123456 is on host 123456 / 8.
  EXPECT_EQ(line_after(r.out, "exit code "), "7: rank 123456 on node15432 exited with code 7");
  EXPECT_EQ(line_after(r.out, "ranks: "), "1 exited, 799999 killed");
  EXPECT_EQ(line_after(r.out, "verdict: "), "ok");
  EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST(PmsimCli, TheReplayCommandReplaysTheSameTrace) {
  const auto first =
      pmsim({"--hosts", "64", "--slots", "8", "--random-faults", "3", "--seed", "7"});
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  const auto hash = line_after(first.out, "trace hash ");
  ASSERT_FALSE(hash.empty());
  // The replay command lists the generated faults: no generator needed to replay.
  const auto args = replay_args(first.out);
  ASSERT_FALSE(args.empty());
  for (const auto& a : args) EXPECT_NE(a, "--random-faults");
  const auto again = pmsim(args);
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_EQ(line_after(again.out, "trace hash "), hash);
  EXPECT_EQ(line_after(again.out, "exit code "), line_after(first.out, "exit code "));

  const auto other =
      pmsim({"--hosts", "64", "--slots", "8", "--random-faults", "3", "--seed", "8"});
  ASSERT_EQ(other.exit_code, 0) << other.out << other.err;
  EXPECT_NE(line_after(other.out, "trace hash "), hash);
}

TEST(PmsimCli, ATraceFileIsReadableAndDoesNotChangeTheHash) {
  temp_dir dir;
  const auto file = (dir.path / "trace.txt").string();
  const std::vector<std::string> base = {"--hosts", "4",   "--slots", "2",
                                         "--fail",  "3:7", "--seed",  "5"};
  auto with_trace = base;
  with_trace.insert(with_trace.end(), {"--trace", file});
  const auto plain = pmsim(base);
  const auto traced = pmsim(with_trace);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(traced.exit_code, 0) << traced.err;
  EXPECT_EQ(line_after(plain.out, "trace hash "), line_after(traced.out, "trace hash "));
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("<- job_start"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("-> spawn host=1 ranks=[2..3]"), std::string::npos) << text.str();
}

TEST(PmsimCli, ScenarioFileAndFlagsGiveTheSameRun) {
  temp_dir dir;
  const auto file = (dir.path / "scenario.ini").string();
  {
    std::ofstream out(file);
    out << "hosts = 8\nslots = 4\nfail = [\"5:3\"]\ncrash = [\"2@1s\"]\nseed = 11\n";
  }
  const auto from_file = pmsim({"--scenario", file});
  const auto from_flags =
      pmsim({"--hosts", "8", "--slots", "4", "--fail", "5:3", "--crash", "2@1s", "--seed", "11"});
  ASSERT_EQ(from_file.exit_code, 0) << from_file.out << from_file.err;
  ASSERT_EQ(from_flags.exit_code, 0) << from_flags.out << from_flags.err;
  EXPECT_EQ(from_file.out.substr(0, from_file.out.find("simulated ")),
            from_flags.out.substr(0, from_flags.out.find("simulated ")));
  EXPECT_EQ(line_after(from_file.out, "trace hash "), line_after(from_flags.out, "trace hash "));
  // node2 crashes at 1 s, before rank 5 fails at 5 s: the lost host is the first failure.
  EXPECT_EQ(line_after(from_file.out, "first failure: ").rfind("host_lost", 0), 0u)
      << from_file.out;
}

TEST(PmsimCli, WithoutAbortTheOtherRanksRunToCompletion) {
  const auto r = pmsim({"--hosts", "4", "--slots", "2", "--fail", "3:7", "--no-abort"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(line_after(r.out, "ranks: "), "8 exited");
  EXPECT_EQ(line_after(r.out, "exit code ").rfind("7:", 0), 0u) << r.out;
}

TEST(PmsimCli, PartitionLongerThanTheDetectionTimeLosesTheHost) {
  const auto r = pmsim({"--hosts", "4", "--slots", "2", "--partition", "1@1s-9s", "--seed", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(line_after(r.out, "first failure: ").rfind("host_lost", 0), 0u) << r.out;
  EXPECT_NE(line_after(r.out, "ranks: ").find("2 lost"), std::string::npos) << r.out;
}

TEST(PmsimCli, ALostExitIsALivenessFailureWithItsReplayCommand) {
  const auto r = pmsim({"--hosts", "2", "--slots", "2", "--fault", "lost-exit:1", "--seed", "9"});
  EXPECT_EQ(r.exit_code, 11) << r.out << r.err;
  EXPECT_EQ(line_after(r.out, "verdict: "), "liveness failure");
  EXPECT_NE(r.out.find("no events left"), std::string::npos) << r.out;
  // The replay command is printed again at the end of a failed run, before the hash.
  const auto lines = lines_of(r.out);
  ASSERT_GE(lines.size(), 2u);
  EXPECT_EQ(lines[lines.size() - 2].rfind("replay: ", 0), 0u) << r.out;
}

TEST(PmsimCli, BadInputIsOneErrorLineAndExitTwo) {
  const std::vector<std::vector<std::string>> cases = {
      {"--hosts", "0"},
      {"--np", "0"},
      {"--hosts", "2", "--slots", "2", "--np", "9"},
      {"--hosts", "4", "--fail", "99:7"},
      {"--hosts", "4", "--fail", "seven"},
      {"--hosts", "4", "--crash", "4@1s"},
      {"--hosts", "4", "--partition", "1@1s-2s", "--partition", "1@3s-4s"},
      {"--fault", "meteor:1@2s"},
      {"--rank", "1=explode"},
      {"--no-such-option"},
      {"--hosts", "many"},
      {"--trace", "/nonexistent-dir/trace.txt"},
      {"--scenario", "/nonexistent-dir/scenario.ini"},
  };
  for (const auto& args : cases) {
    std::string shown;
    for (const auto& a : args) shown += a + " ";
    const auto r = pmsim(args);
    EXPECT_EQ(r.exit_code, 2) << shown << r.out << r.err;
    EXPECT_TRUE(r.out.empty()) << shown << r.out;
    const auto err = lines_of(r.err);
    ASSERT_EQ(err.size(), 1u) << shown << r.err;
    EXPECT_EQ(err[0].rfind("pmsim: ", 0), 0u) << shown << r.err;
  }
}

// Fault plans the properties found failing once (tests/sim/sim_property_test.cpp, 1,000 cases a
// round), replayed as found: each ends with the verdict ok and the outcome the contract gives.
struct found_once {
  const char* what;
  const char* args;
  const char* outcome;  // a line of the report that says how it ended
};

std::vector<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

TEST(PmsimCli, FaultPlansThePropertiesFoundFailingEndAsTheContractSays) {
  const found_once cases[] = {
      {"a rank queued to a host given up after the job's end is swept with it",
       "--host-slots 1,2,2,1,4,4,1 --app 1 --app 6 --app 8 --map-by node --timeout 40s "
       "--max-restarts 1 --scripts-every-incarnation --fanout 2 --run-time 2s --run-jitter 500ms "
       "--rank 0=hang+spawn:1@0s+slow=50ms --rank 1=exit:0@0s+leftover "
       "--rank 6=abort:0@0s+leftover --fault partition:0@23ms-123ms --fault agent-fail:4 "
       "--fault launcher-signal:USR1@0s --seed 15",
       "line: cannot restart the job: no spare takes the ranks of lost host node4"},
      {"a spare's copy of a rank waits until the cut-off host's agent ended its own",
       "--host-slots 1,1 --np 1 --kill-grace 1s --timeout 40s --max-restarts 1 "
       "--scripts-every-incarnation --fanout 1 --run-time 2s --run-jitter 500ms "
       "--rank 0=hang+slow=50ms+leftover --fault partition:0@1.025s-4.025s --connect-back --seed 0",
       "line: rank 0 moves from node0 to spare node1"},
      {"a lost tree parent loses the host it relays between two incarnations",
       "--host-slots 1,1 --np 2 --map-by node --kill-grace 1s --timeout 40s --max-restarts 1 "
       "--fanout 1 --run-time 2s --run-jitter 500ms --rank 0=abort:0@0s --fault silent:1 "
       "--fault crash:0@25ms --seed 0",
       "line: cannot restart the job: no spare takes the ranks of lost hosts node0, node1"},
      {"a host lost while its restart answer is awaited is not awaited any more",
       "--host-slots 3,3,1,2,3,4,1 --np 4 --kill-grace 100ms --timeout 40s --max-restarts 1 "
       "--scripts-every-incarnation --run-time 2s --run-jitter 500ms "
       "--rank 0=abort:0@1.74s+spawn:1@0s+ignore-term+slow=50ms+leftover "
       "--rank 1=signal:6@1.789s+ignore-term+leftover --fault crash:1@0s --fault crash:1@0s "
       "--fault crash:0@1.916s --seed 0",
       "line: ranks 0-2 move from node0 to spare node4; rank 3 moves from node1 to spare node2"},
      {"a host that crashed before it was asked for is given up by its hello deadline",
       "--host-slots 1,1,3,4,3 --app 1 --app 1 --app 4 --map-by node --no-abort --kill-grace 100ms "
       "--timeout 40s --enable-recovery --fanout 1 --run-time 2s --run-jitter 500ms "
       "--rank 0=exit:7@0s --fault crash:2@0s --fault partition:0@1ms-1.281s --seed 0",
       "exit code 7: rank 0 on node0 exited with code 7"},
      {"a host relayed by a parent cut off later gives up with its parent's cut",
       "--host-slots 1,2,3,2 --app 1 --app 3 --no-abort --fanout 2 --run-time 2s "
       "--run-jitter 500ms --fault partition:2@24ms-124ms --fault partition:0@1.186s-4.025s "
       "--seed 0",
       "first failure: host_lost"},
  };
  for (const auto& c : cases) {
    const auto r = pmsim(words(c.args));
    EXPECT_EQ(r.exit_code, 0) << c.what << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find("verdict: ok"), std::string::npos) << c.what << "\n" << r.out;
    EXPECT_NE(r.out.find(c.outcome), std::string::npos) << c.what << "\n" << r.out;
  }
}

// The spare's copy of rank 0 starts once the cut-off host's agent must have ended its own: its
// silence bound runs out with the launcher's, give or take a heartbeat interval (1 s here), then
// the kill grace (1 s).
TEST(PmsimCli, ARankMovesToASpareOnlyOnceItsLostHostMustHaveEndedIt) {
  const auto r = pmsim(
      words("--host-slots 1,1 --np 1 --kill-grace 1s --timeout 40s --max-restarts 1 --fanout 1 "
            "--run-time 2s --run-jitter 500ms --rank 0=hang --fault partition:0@1s-30s --seed 3 "
            "--trace -"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  double lost = -1, restarted = -1;
  for (const auto& line : lines_of(r.out)) {
    std::istringstream in(line);
    double at = 0;
    std::string arrow, what;
    if (!(in >> at >> arrow >> what)) continue;
    if (arrow == "<-" && what == "host_lost" && lost < 0) lost = at;
    if (arrow == "<-" && what == "job_start" && at > 0) restarted = at;
  }
  ASSERT_GT(lost, 0) << r.out;
  ASSERT_GT(restarted, 0) << r.out;
  EXPECT_GE(restarted - lost, 2.0) << r.out;
  EXPECT_LT(restarted - lost, 2.5) << r.out;
}

}  // namespace
