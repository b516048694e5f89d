// The srun transport without a cluster: the step's command line and environment (pure), the
// connect-back greeting, and the transport itself with a stand-in srun (a script that records its
// argv and environment and waits) and agents dialled from the test over loopback: one caller per
// node becomes that node's stream; a wrong token, garbage, a duplicate and a stranger are refused
// and reported; srun's exit fails the nodes that never called and ends the streams of those that
// did.
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "pm/error.hpp"
#include "transport/srun/caller_gate.hpp"
#include "transport/srun/connect_back.hpp"
#include "transport/srun/srun_command.hpp"
#include "transport/srun/srun_transport.hpp"

namespace {

using words = std::vector<std::string>;
using namespace std::chrono_literals;
namespace sr = pm::srun;

TEST(SrunCommand, OneStepOneAgentPerNodeNoBindingOwnFailurePolicy) {
  sr::srun_settings s;
  const auto argv = sr::srun_argv(s, {"node2", "node3"}, {"/opt/pm/bin/pmd", "--connect"});
  const words want = {"srun",
                      "--overlap",
                      "--mpi=none",
                      "--cpu-bind=none",
                      "--export=ALL",
                      "--kill-on-bad-exit=0",
                      "--input=none",
                      "--quiet",
                      "--nodes=2",
                      "--ntasks=2",
                      "--ntasks-per-node=1",
                      "--nodelist=node2,node3",
                      "/opt/pm/bin/pmd",
                      "--connect"};
  EXPECT_EQ(argv, want);
  s.external_launcher = true;
  s.extra_args = {"--partition=x"};
  const auto newer = sr::srun_argv(s, {"n1"}, {"pmd"});
  EXPECT_EQ(newer[1], "--external-launcher");
  EXPECT_EQ(newer[newer.size() - 2], "--partition=x");
}

TEST(SrunCommand, RefusesWhatCannotBeAStep) {
  sr::srun_settings s;
  EXPECT_THROW(sr::srun_argv(s, {}, {"pmd"}), pm::error);
  EXPECT_THROW(sr::srun_argv(s, {"-n1"}, {"pmd"}), pm::error);
  EXPECT_THROW(sr::srun_argv(s, {"a,b"}, {"pmd"}), pm::error);
  EXPECT_THROW(sr::srun_argv(s, {"a"}, {}), pm::error);
  s.command.clear();
  EXPECT_THROW(sr::srun_argv(s, {"a"}, {"pmd"}), pm::error);
}

TEST(SrunCommand, TheEnvironmentLosesTheEnclosingStepAndGainsTheConnectBack) {
  const words env = {"PATH=/bin",
                     "SLURM_JOB_ID=7",
                     "SLURM_JOB_NODELIST=n[1-3]",
                     "SLURM_STEP_ID=0",
                     "SLURM_STEP_NODELIST=n1",
                     "SLURM_PROCID=0",
                     "SLURM_NTASKS=3",
                     "SLURM_CPU_BIND=quiet,mask_cpu:0x1",
                     "SLURM_EXPORT_ENV=NONE",
                     "PMIX_RANK=0",
                     "PMIX_MCA_gds=hash",
                     "PMI_FD=5",
                     "PM_AGENT_TOKEN=stale",
                     "OMPI_MCA_btl=tcp"};
  const auto out = sr::srun_environment(env, {"10.0.0.1", "10.1.0.1"}, 4242, "cafe");
  const words want = {
      "PATH=/bin",          "SLURM_JOB_ID=7",     "SLURM_JOB_NODELIST=n[1-3]",
      "PMIX_MCA_gds=hash",  "OMPI_MCA_btl=tcp",   "PM_AGENT_ADDRS=10.0.0.1,10.1.0.1",
      "PM_AGENT_PORT=4242", "PM_AGENT_TOKEN=cafe"};
  EXPECT_EQ(out, want);
}

TEST(SrunCommand, ExternalLauncherFrom2311On) {
  EXPECT_FALSE(sr::has_external_launcher("slurm-wlm 22.05.8\n"));
  EXPECT_FALSE(sr::has_external_launcher("slurm 23.02.7"));
  EXPECT_TRUE(sr::has_external_launcher("slurm 23.11.1\n"));
  EXPECT_TRUE(sr::has_external_launcher("slurm 24.05.0"));
  EXPECT_FALSE(sr::has_external_launcher(""));
  EXPECT_FALSE(sr::has_external_launcher("srun: fatal: Could not establish a configuration"));
}

TEST(ConnectBack, TokensAreFreshAndLong) {
  const auto a = sr::fresh_token(), b = sr::fresh_token();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_NE(a, b);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
}

TEST(ConnectBack, GreetingsParseOrAreRefusedEarly) {
  const std::string token(64, 'b');
  std::string problem;
  const auto line = sr::greeting(token, "node2");
  const auto g = sr::parse_greeting(line, problem);
  ASSERT_TRUE(g) << problem;
  EXPECT_EQ(g->token, token);
  EXPECT_EQ(g->node, "node2");
  // Incomplete: wait for more.
  EXPECT_FALSE(sr::parse_greeting(line.substr(0, 10), problem));
  EXPECT_TRUE(problem.empty());
  EXPECT_FALSE(sr::parse_greeting("pm", problem));
  EXPECT_TRUE(problem.empty());
  // Garbage is refused at its first byte, without waiting for a newline.
  EXPECT_FALSE(sr::parse_greeting("GET / HTTP/1.0", problem));
  EXPECT_EQ(problem, "not an agent's greeting");
  EXPECT_FALSE(sr::parse_greeting("\x16\x03\x01", problem));
  EXPECT_FALSE(problem.empty());
  EXPECT_FALSE(sr::parse_greeting("pmcb1 abc node2\n", problem));
  EXPECT_EQ(problem, "malformed token");
  EXPECT_FALSE(sr::parse_greeting("pmcb1 " + token + "\n", problem));
  EXPECT_EQ(problem, "greeting without a node name");
  EXPECT_FALSE(sr::parse_greeting("pmcb1 " + token + " a\tb\n", problem));
  EXPECT_EQ(problem, "malformed node name");
  EXPECT_FALSE(sr::parse_greeting("pmcb1 " + std::string(600, 'a'), problem));
  EXPECT_EQ(problem, "greeting longer than 512 bytes");
}

TEST(ConnectBack, TokenComparison) {
  EXPECT_TRUE(sr::same_token("abc", "abc"));
  EXPECT_FALSE(sr::same_token("abc", "abd"));
  EXPECT_FALSE(sr::same_token("abc", "abcd"));
  EXPECT_EQ(sr::split_addresses("a,,b,"), (words{"a", "b"}));
}

TEST(ConnectBack, NobodyListeningIsOneLineNamingTheAddresses) {
  try {
    (void)sr::dial_launcher({"127.0.0.1"}, 1, std::string(64, 'a'), "n", 500ms);
    FAIL() << "dialled port 1";
  } catch (const pm::error& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1: Connection refused"), std::string::npos)
        << e.what();
  }
}

TEST(CallerGate, OneCallerPerExpectedHostLateDuplicateForgedAndStrangersRefused) {
  const std::string token(64, 'c');
  sr::caller_gate gate(token);
  gate.expect(2, "node2");
  gate.expect(3, "node3.cluster");
  using v = sr::caller_gate::verdict;
  // Bytes come in pieces: more is needed until the line ends.
  const auto line = sr::greeting(token, "node2");
  EXPECT_EQ(gate.judge(line.substr(0, 20)).kind, v::more);
  const auto ok = gate.judge(line);
  ASSERT_EQ(ok.kind, v::accept) << ok.why;
  EXPECT_EQ(ok.host, 2u);
  EXPECT_TRUE(gate.called(2));
  // Duplicate, forged, stranger, garbage.
  EXPECT_EQ(gate.judge(line).why, "node 'node2' has its agent already");
  EXPECT_EQ(gate.judge(sr::greeting(std::string(64, 'd'), "node3")).why,
            "wrong token (claims to be node 'node3')");
  EXPECT_EQ(gate.judge(sr::greeting(token, "node9")).why, "node 'node9' is not a host of this job");
  EXPECT_EQ(gate.judge("\x16\x03").kind, v::refuse);
  // A short name matches the host's full one, as host names do everywhere.
  const auto n3 = gate.judge(sr::greeting(token, "node3"));
  EXPECT_EQ(n3.kind, v::accept);
  EXPECT_EQ(n3.host, 3u);
  // Late: the host's stream is over (or its agent was given up): nobody becomes it any more.
  gate.forget(2);
  EXPECT_FALSE(gate.called(2));
  EXPECT_EQ(gate.judge(line).why, "node 'node2' expects no agent now");
  // Started again (a new step): one caller again.
  gate.expect(2, "node2");
  EXPECT_EQ(gate.judge(line).kind, v::accept);
}

// ---- the transport, with a stand-in srun ----

struct stand_in {
  std::string dir;
  stand_in() {
    char t[] = "/tmp/pm-srun-test-XXXXXX";
    dir = mkdtemp(t);
    std::ofstream s(dir + "/srun");
    // Records its argv and environment, says something, waits until told to end. The environment
    // file appears whole (renamed into place): the test reads it as soon as it exists, and a
    // plain `env > file` could be read between the shell creating the file and env writing it.
    s << "#!/bin/sh\n[ \"$1\" = --version ] && { echo 'slurm 22.05.8'; exit 0; }\nprintf '%s\\n' "
         "\"$@\" > "
      << dir << "/argv\nenv > " << dir << "/env.part && mv " << dir << "/env.part " << dir
      << "/env\necho 'srun: error: stand-in speaking' >&2\n"
      << "while [ ! -e " << dir << "/end ]; do sleep 0.02; done\nexit 3\n";
    s.close();
    std::filesystem::permissions(dir + "/srun", std::filesystem::perms::owner_all);
  }
  ~stand_in() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::map<std::string, std::string> env() const {
    std::map<std::string, std::string> out;
    std::ifstream in(dir + "/env");
    for (std::string line; std::getline(in, line);) {
      const auto eq = line.find('=');
      if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return out;
  }
};

template <class Pred>
bool run_until(boost::asio::io_context& io, Pred done, std::chrono::milliseconds limit = 10s) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    io.restart();
    io.run_for(10ms);
  }
  return true;
}

TEST(SrunTransport, CallersBecomeTheirNodesStreamsAndStrangersAreRefused) {
  stand_in fake;
  boost::asio::io_context io;
  pm::remote_launch opts;
  opts.launcher = pm::agent_launcher::srun;
  opts.srun_command = {fake.dir + "/srun"};
  std::vector<std::string> notices;
  opts.notice = [&](std::string_view line) { notices.emplace_back(line); };
  auto t = std::make_unique<sr::srun_transport>(io, opts);

  std::map<std::uint32_t, pm::agent_stream> opened;
  std::map<std::uint32_t, std::string> failed;
  for (std::uint32_t h = 1; h <= 3; ++h) {
    pm::agent_target target;
    target.host = h;
    target.info.name = "node" + std::to_string(h);
    target.agent_argv = {"/opt/pmd", "--stdio", "--nonce", "ab"};
    t->open(
        target, [&, h](pm::agent_stream s) { opened[h] = s; },
        [&, h](std::string why) { failed[h] = why; });
  }
  ASSERT_TRUE(run_until(io, [&] { return std::filesystem::exists(fake.dir + "/env"); }));
  std::ifstream argv_file(fake.dir + "/argv");
  std::string argv((std::istreambuf_iterator<char>(argv_file)), {});
  EXPECT_NE(argv.find("--nodelist=node1,node2,node3\n/opt/pmd\n--connect\n--nonce\nab\n"),
            std::string::npos)
      << argv;
  const auto env = fake.env();
  const std::string token = env.at("PM_AGENT_TOKEN");
  EXPECT_EQ(argv.find(token), std::string::npos);  // never on the command line
  const auto port = static_cast<std::uint16_t>(std::stoi(env.at("PM_AGENT_PORT")));

  // node2 calls with the right token; the test then writes on the stream it became.
  const int agent2 = sr::dial_launcher({"127.0.0.1"}, port, token, "node2");
  ASSERT_TRUE(run_until(io, [&] { return opened.count(2) == 1; }));
  const char hello[] = "link bytes";
  ASSERT_EQ(::write(agent2, hello, sizeof hello - 1), static_cast<ssize_t>(sizeof hello - 1));
  char got[32] = {};
  ASSERT_EQ(::read(opened[2].read_fd, got, sizeof got), static_cast<ssize_t>(sizeof hello - 1));
  EXPECT_STREQ(got, "link bytes");  // the greeting was taken, nothing after it
  EXPECT_FALSE(opened[2].socket);

  // Refused: a wrong token, a second node2, a stranger; the job's nodes are not affected.
  const int wrong = sr::dial_launcher({"127.0.0.1"}, port, std::string(64, 'f'), "node3");
  const int twice = sr::dial_launcher({"127.0.0.1"}, port, token, "node2");
  const int stranger = sr::dial_launcher({"127.0.0.1"}, port, token, "elsewhere");
  ASSERT_TRUE(run_until(io, [&] {
    return std::count_if(notices.begin(), notices.end(), [](const std::string& n) {
             return n.find("refused a connection") != std::string::npos;
           }) == 3;
  }));
  for (const int fd : {wrong, twice, stranger}) {
    char b;
    EXPECT_EQ(::read(fd, &b, 1), 0);  // closed by the launcher
    ::close(fd);
  }
  EXPECT_EQ(opened.size(), 1u);
  // node3 calls after all.
  const int agent3 = sr::dial_launcher({"127.0.0.1"}, port, token, "node3");
  ASSERT_TRUE(run_until(io, [&] { return opened.count(3) == 1; }));

  // srun ends: node1 never called and fails with srun's word; node2's and node3's streams end.
  std::ofstream(fake.dir + "/end").put('x');
  ASSERT_TRUE(run_until(io, [&] { return failed.count(1) == 1; }));
  EXPECT_NE(failed[1].find("srun exited with code 3: srun: error: stand-in speaking"),
            std::string::npos)
      << failed[1];
  char b;
  EXPECT_EQ(::read(opened[2].read_fd, &b, 1), 0);
  bool closed = false;
  pm::agent_end end;
  t->close(2, [&](pm::agent_end e) {
    end = e;
    closed = true;
  });
  ASSERT_TRUE(run_until(io, [&] { return closed; }));
  EXPECT_NE(end.how.find("srun exited with code 3"), std::string::npos) << end.how;
  EXPECT_FALSE(end.retryable);
  bool notice_passed = false;
  for (const auto& n : notices)
    notice_passed = notice_passed || n == "srun: error: stand-in speaking";
  EXPECT_TRUE(notice_passed);
  for (const int fd : {agent2, agent3, opened[2].read_fd, opened[3].read_fd}) ::close(fd);
}

TEST(SrunTransport, AMissingSrunFailsEveryNodeWithOneLine) {
  boost::asio::io_context io;
  pm::remote_launch opts;
  opts.launcher = pm::agent_launcher::srun;
  opts.srun_command = {"/nonexistent/srun"};
  sr::srun_transport t(io, opts);
  std::map<std::uint32_t, std::string> failed;
  for (std::uint32_t h = 0; h < 2; ++h) {
    pm::agent_target target;
    target.host = h;
    target.info.name = "n" + std::to_string(h);
    target.agent_argv = {"/opt/pmd", "--stdio"};
    t.open(
        target, [](pm::agent_stream) { FAIL(); }, [&, h](std::string why) { failed[h] = why; });
  }
  ASSERT_TRUE(run_until(io, [&] { return failed.size() == 2; }));
  EXPECT_NE(failed[0].find("srun: '/nonexistent/srun' does not exist"), std::string::npos)
      << failed[0];
}

}  // namespace
