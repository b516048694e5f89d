// The srun transport without a cluster: the step's command line and environment (pure), the
// connect-back greeting, and the transport itself with a stand-in srun (a script that records its
// argv and environment and waits) and agents dialled from the test over loopback: one caller per
// node becomes that node's stream; a wrong token, garbage, a duplicate and a stranger are refused
// and reported; srun's exit fails the nodes that never called and ends the streams of those that
// did.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "agent/host_facts.hpp"
#include "pm/error.hpp"
#include "support/command.hpp"
#include "support/other_user.hpp"
#include "text/printable.hpp"
#include "transport/srun/caller_gate.hpp"
#include "transport/srun/connect_back.hpp"
#include "transport/srun/refusal_log.hpp"
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

// ---- refused callers: bounded lines, sanitized names (issue 20, item 7) ----

TEST(ConnectBack, RefusalsAreSaidOncePerKindAndAddressThenCounted) {
  using clock = sr::refusal_log::clock;
  sr::refusal_log log;
  const auto t0 = clock::now();
  // The first of each (address, kind) in full, whatever the port.
  EXPECT_EQ(log.refused("10.0.0.5:4000", "wrong token", "wrong token (claims to be node 'n1')", t0),
            "refused a connection from 10.0.0.5:4000: wrong token (claims to be node 'n1')");
  EXPECT_FALSE(log.refused("10.0.0.5:4001", "wrong token", "wrong token (...)", t0));
  EXPECT_TRUE(log.refused("10.0.0.5:4002", "no greeting", "no greeting within 5 s", t0));
  EXPECT_TRUE(log.refused("10.0.0.6:4000", "wrong token", "wrong token (...)", t0));
  // Counted: a summary an interval after the first counted one, not before.
  ASSERT_TRUE(log.summary_due());
  EXPECT_EQ(*log.summary_due(), t0 + std::chrono::seconds(10));
  EXPECT_FALSE(log.summary(t0 + std::chrono::seconds(9)));
  for (int i = 0; i < 5; ++i) log.refused("10.0.0.6:1", "wrong token", "x", t0);
  EXPECT_EQ(log.summary(t0 + std::chrono::seconds(10)),
            "refused 6 more connections in the last 10 s: 5 from 10.0.0.6 (wrong token), 1 from "
            "10.0.0.5 (wrong token)");
  EXPECT_FALSE(log.summary_due());
  EXPECT_FALSE(log.summary(t0 + std::chrono::seconds(30), true));  // nothing left to say
  // The end of the job says what is left, due or not.
  log.refused("10.0.0.6:1", "wrong token", "x", t0 + std::chrono::seconds(31));
  EXPECT_EQ(log.summary(t0 + std::chrono::seconds(32), true),
            "refused 1 more connection in the last 1 s: 1 from 10.0.0.6 (wrong token)");
  EXPECT_EQ(log.total(), 10u);
}

TEST(ConnectBack, AFloodOfRefusalsPrintsABoundedNumberOfLines) {
  // The flood: 27,000 connections over 30 s printed 18,247 lines. Now from one address,
  // and again from 1,000 addresses with every kind of refusal.
  using clock = sr::refusal_log::clock;
  for (const int addresses : {1, 1000}) {
    sr::refusal_log log;
    const auto t0 = clock::now();
    std::vector<std::string> lines;
    const char* reasons[] = {"wrong token", "not an agent's greeting", "no greeting",
                             "a broken connection"};
    for (int i = 0; i < 27000; ++i) {
      const auto now = t0 + std::chrono::microseconds(i * 30000000LL / 27000);
      const std::string peer =
          "10.1." + std::to_string(i % addresses / 250) + "." + std::to_string(i % addresses % 250);
      if (auto l = log.refused(peer + ":" + std::to_string(1024 + i % 60000), reasons[i % 4],
                               reasons[i % 4], now)) {
        lines.push_back(*l);
      }
      if (auto l = log.summary(now)) lines.push_back(*l);
    }
    if (auto l = log.summary(t0 + std::chrono::seconds(31), true)) lines.push_back(*l);
    // 8 first lines at most, one summary per 10 s, one at the end.
    EXPECT_LE(lines.size(), 8u + 3u + 1u) << addresses;
    EXPECT_GE(lines.size(), 2u);
    // Every connection is accounted for: said, or counted in a summary.
    std::uint64_t said = 0;
    for (const auto& l : lines) {
      if (l.starts_with("refused a connection")) {
        ++said;
      } else {
        std::string n = l.substr(std::string("refused ").size());
        n = n.substr(0, n.find(' '));
        std::erase(n, ',');
        said += std::stoull(n);
      }
      EXPECT_LE(l.size(), 300u) << l;
    }
    EXPECT_EQ(said, 27000u) << addresses;
    EXPECT_EQ(log.total(), 27000u);
  }
}

TEST(ConnectBack, WhatACallerSaysIsSanitizedBeforeItIsPrinted) {
  const std::string token(64, 'c');
  sr::caller_gate gate(token);
  gate.expect(1, "node1");
  // No blanks or control characters pass the greeting's own check; bytes past ASCII (a C1 CSI
  // that some terminals obey, invalid UTF-8), quotes and backslashes do, and length up to 255.
  const std::string hostile =
      "n\x9b"
      "2J'\xff\\x";
  auto v = gate.judge(sr::greeting(std::string(64, 'd'), hostile));
  EXPECT_EQ(v.why, "wrong token (claims to be node 'n\\x9b2J\\x27\\xff\\\\x')");
  EXPECT_EQ(v.reason, "wrong token");
  v = gate.judge(sr::greeting(token, std::string(255, 'z')));
  EXPECT_EQ(v.why, "node '" + std::string(64, 'z') + "...' is not a host of this job");
  EXPECT_EQ(v.reason, "not a host of this job");
  v = gate.judge("\x1b[2J");
  EXPECT_EQ(v.why, "not an agent's greeting");
  for (unsigned c = 0; c < 256; ++c) {
    const auto shown = pm::text::untrusted(std::string(1, static_cast<char>(c)));
    for (const char ch : shown) {
      EXPECT_TRUE(ch >= 0x20 && ch < 0x7f && ch != '\'') << c;
    }
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

// The nodes of the tests below by numeric address (TEST-NET-2): the listener resolves the first
// node to order its connect-back addresses, and a made-up name would ask the name server.
std::string node_name(std::uint32_t h) {
  return "198.51.100." + std::to_string(h);
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
    target.info.name = node_name(h);
    target.agent_argv = {"/opt/pmd", "--stdio", "--nonce", "ab"};
    t->open(
        target, [&, h](pm::agent_stream s) { opened[h] = s; },
        [&, h](std::string why) { failed[h] = why; });
  }
  ASSERT_TRUE(run_until(io, [&] { return std::filesystem::exists(fake.dir + "/env"); }));
  std::ifstream argv_file(fake.dir + "/argv");
  std::string argv((std::istreambuf_iterator<char>(argv_file)), {});
  EXPECT_NE(argv.find("--nodelist=" + node_name(1) + "," + node_name(2) + "," + node_name(3) +
                      "\n/opt/pmd\n--connect\n--nonce\nab\n"),
            std::string::npos)
      << argv;
  const auto env = fake.env();
  const std::string token = env.at("PM_AGENT_TOKEN");
  EXPECT_EQ(argv.find(token), std::string::npos);  // never on the command line
  const auto port = static_cast<std::uint16_t>(std::stoi(env.at("PM_AGENT_PORT")));

  // Node 2 calls with the right token; the test then writes on the stream it became.
  const int agent2 = sr::dial_launcher({"127.0.0.1"}, port, token, node_name(2));
  ASSERT_TRUE(run_until(io, [&] { return opened.count(2) == 1; }));
  const char hello[] = "link bytes";
  ASSERT_EQ(::write(agent2, hello, sizeof hello - 1), static_cast<ssize_t>(sizeof hello - 1));
  char got[32] = {};
  ASSERT_EQ(::read(opened[2].read_fd, got, sizeof got), static_cast<ssize_t>(sizeof hello - 1));
  EXPECT_STREQ(got, "link bytes");  // the greeting was taken, nothing after it
  EXPECT_FALSE(opened[2].socket);

  // Refused: a wrong token, a second node 2, a stranger; the job's nodes are not affected.
  const int wrong = sr::dial_launcher({"127.0.0.1"}, port, std::string(64, 'f'), node_name(3));
  const int twice = sr::dial_launcher({"127.0.0.1"}, port, token, node_name(2));
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
  // Node 3 calls after all.
  const int agent3 = sr::dial_launcher({"127.0.0.1"}, port, token, node_name(3));
  ASSERT_TRUE(run_until(io, [&] { return opened.count(3) == 1; }));

  // srun ends: node 1 never called and fails with srun's word; nodes 2 and 3's streams end.
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
    target.info.name = node_name(h + 1);
    target.agent_argv = {"/opt/pmd", "--stdio"};
    t.open(
        target, [](pm::agent_stream) { FAIL(); }, [&, h](std::string why) { failed[h] = why; });
  }
  ASSERT_TRUE(run_until(io, [&] { return failed.size() == 2; }));
  EXPECT_NE(failed[0].find("srun: '/nonexistent/srun' does not exist"), std::string::npos)
      << failed[0];
}

// Opens hosts 1..n of a transport with the stand-in srun and waits for its environment.
std::map<std::string, std::string> start_step(sr::srun_transport& t, boost::asio::io_context& io,
                                              const stand_in& fake, std::uint32_t n) {
  for (std::uint32_t h = 1; h <= n; ++h) {
    pm::agent_target target;
    target.host = h;
    target.info.name = node_name(h);
    target.agent_argv = {"/opt/pmd", "--stdio"};
    t.open(
        target, [](pm::agent_stream s) { ::close(s.read_fd); }, [](std::string) {});
  }
  EXPECT_TRUE(run_until(io, [&] { return std::filesystem::exists(fake.dir + "/env"); }));
  return fake.env();
}

// Connects to address:port; true when something listens there.
bool listening(const std::string& address, std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  ::inet_pton(AF_INET, address.c_str(), &sa.sin_addr);
  const bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0;
  ::close(fd);
  return ok;
}

TEST(SrunTransport, AFloodFromAnotherUserPrintsABoundedNumberOfLines) {
  std::string why;
  auto mallory = pm::test::other_user::create(why);
  if (!mallory) GTEST_SKIP() << why;
  if (::access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no python3 for the flood";
  stand_in fake;
  boost::asio::io_context io;
  pm::remote_launch opts;
  opts.launcher = pm::agent_launcher::srun;
  opts.srun_command = {fake.dir + "/srun"};
  std::vector<std::string> notices;
  opts.notice = [&](std::string_view line) { notices.emplace_back(line); };
  auto t = std::make_unique<sr::srun_transport>(io, opts);
  const auto env = start_step(*t, io, fake, 2);
  const std::string port = env.at("PM_AGENT_PORT");
  // 3,000 connections as another user: wrong tokens, garbage, and some closed at once.
  const std::string flood =
      "import socket\n"
      "for i in range(3000):\n"
      "    s = socket.create_connection(('127.0.0.1', " +
      port +
      "))\n"
      "    if i % 3 == 0: s.sendall(b'pmcb1 ' + b'f' * 64 + b' node1\\n')\n"
      "    elif i % 3 == 1: s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n')\n"
      "    s.close()\n";
  pm::test::command_result result;
  std::atomic<bool> done{false};
  std::thread client([&] {
    result = pm::test::run_command(mallory->as({"/usr/bin/python3", "-c", flood}),
                                   std::chrono::seconds(120));
    done = true;
  });
  // The launcher keeps serving while the flood runs.
  while (!done) {
    io.restart();
    io.run_for(20ms);
  }
  client.join();
  ASSERT_EQ(result.exit_code, 0) << result.err;
  // Every refusal reached the launcher: wait until each one was said or counted.
  const auto count_said = [&] {
    std::uint64_t n = 0;
    for (const auto& l : notices) {
      if (l.starts_with("srun: refused a connection")) ++n;
    }
    return n;
  };
  // The job ends: the hosts close, the count is said.
  std::ofstream(fake.dir + "/end").put('x');
  int closed = 0;
  run_until(
      io, [] { return false; }, 1000ms);  // let the last refusals arrive
  for (std::uint32_t h = 1; h <= 2; ++h) t->close(h, [&](pm::agent_end) { ++closed; });
  ASSERT_TRUE(run_until(io, [&] { return closed == 2; }));
  std::uint64_t total = count_said();
  std::size_t lines = 0;
  for (const auto& l : notices) {
    if (!l.starts_with("srun: refused")) continue;
    ++lines;
    if (l.starts_with("srun: refused a connection")) continue;
    std::string n = l.substr(std::string("srun: refused ").size());
    n = n.substr(0, n.find(' '));
    std::erase(n, ',');
    total += std::stoull(n);
  }
  std::string said;
  for (const auto& l : notices) said += l + "\n";
  EXPECT_LE(lines, 8u + 2u) << said;
  EXPECT_EQ(total, 3000u);  // each connection accounted for once
  bool summary = false;
  for (const auto& l : notices)
    summary = summary || l.find(" more connections in the last ") != std::string::npos;
  EXPECT_TRUE(summary);
}

TEST(SrunTransport, WithIfaceTheListenerBindsOnlyThatAddress) {
  const auto mine = pm::agent::reachable_addresses();
  if (mine.empty()) GTEST_SKIP() << "no address but loopback on this machine";
  const std::string address = mine.front().substr(0, mine.front().find('%'));
  stand_in fake;
  boost::asio::io_context io;
  pm::remote_launch opts;
  opts.launcher = pm::agent_launcher::srun;
  opts.srun_command = {fake.dir + "/srun"};
  opts.iface = {address + "/32"};
  auto t = std::make_unique<sr::srun_transport>(io, opts);
  const auto env = start_step(*t, io, fake, 1);
  EXPECT_EQ(env.at("PM_AGENT_ADDRS"), address);
  const auto port = static_cast<std::uint16_t>(std::stoi(env.at("PM_AGENT_PORT")));
  EXPECT_TRUE(listening(address, port));
  EXPECT_FALSE(listening("127.0.0.1", port)) << "bound to every address";
  std::ofstream(fake.dir + "/end").put('x');
  bool closed = false;
  t->close(1, [&](pm::agent_end) { closed = true; });
  EXPECT_TRUE(run_until(io, [&] { return closed; }));
  // Without --iface: every address, loopback included (a node on this machine reaches it).
  stand_in fake2;
  opts.srun_command = {fake2.dir + "/srun"};
  opts.iface.clear();
  auto any = std::make_unique<sr::srun_transport>(io, opts);
  const auto env2 = start_step(*any, io, fake2, 1);
  const auto port2 = static_cast<std::uint16_t>(std::stoi(env2.at("PM_AGENT_PORT")));
  EXPECT_TRUE(listening("127.0.0.1", port2));
  std::ofstream(fake2.dir + "/end").put('x');
  closed = false;
  any->close(1, [&](pm::agent_end) { closed = true; });
  EXPECT_TRUE(run_until(io, [&] { return closed; }));
}

}  // namespace
