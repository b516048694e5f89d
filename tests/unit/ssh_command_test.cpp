// The ssh command line: quoting, agent splitting, argv order (checked against the real ssh's
// `-G`, which prints the settings it would use without connecting), the remote agent's path.
#include <fcntl.h>
#include <pwd.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "pm/error.hpp"
#include "transport/ssh/ssh_command.hpp"

extern char** environ;

namespace {

using words = std::vector<std::string>;

pm::host host(std::string name, std::string user = "", std::uint16_t port = 0) {
  pm::host h;
  h.name = std::move(name);
  h.user = std::move(user);
  h.port = port;
  return h;
}

template <class F>
std::string error_of(F&& f, pm::errc code = pm::errc::usage) {
  try {
    f();
  } catch (const pm::error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  return "no error";
}

// Runs argv, returns its stdout (stderr to /dev/null) and sets `status` to its exit code.
std::string run(const words& argv, int& status) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  std::string out;
  if (rc == 0) {
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
      if (n > 0) out.append(buf, static_cast<std::size_t>(n));
    }
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
  } else {
    status = -1;
  }
  close(fds[0]);
  return out;
}

// The value `ssh -G` reports for `key` ("port 2222" -> "2222").
std::string setting(const std::string& config, const std::string& key) {
  const auto at = config.find("\n" + key + " ");
  if (at == std::string::npos) return "";
  const auto start = at + key.size() + 2;
  return config.substr(start, config.find('\n', start) - start);
}

TEST(ShellQuote, SafeWordsStayBare) {
  EXPECT_EQ(pm::ssh::shell_quote("/opt/pm-1.0/bin/pmd"), "/opt/pm-1.0/bin/pmd");
  EXPECT_EQ(pm::ssh::shell_quote("--stdio"), "--stdio");
  EXPECT_EQ(pm::ssh::shell_quote("a,b:c+d@e_f"), "a,b:c+d@e_f");
}

TEST(ShellQuote, EverythingElseInSingleQuotes) {
  EXPECT_EQ(pm::ssh::shell_quote(""), "''");
  EXPECT_EQ(pm::ssh::shell_quote("a b"), "'a b'");
  EXPECT_EQ(pm::ssh::shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(pm::ssh::shell_quote("'"), "''\\'''");
  EXPECT_EQ(pm::ssh::shell_quote("$(rm -rf ~)"), "'$(rm -rf ~)'");
  EXPECT_EQ(pm::ssh::shell_quote("`id`;*?"), "'`id`;*?'");
  EXPECT_EQ(pm::ssh::shell_quote("a\nb\t"), "'a\nb\t'");
  EXPECT_EQ(pm::ssh::shell_quote("back\\slash"), "'back\\slash'");
  EXPECT_EQ(pm::ssh::shell_quote("A=b"), "'A=b'");  // a bare first word would be an assignment
  EXPECT_EQ(pm::ssh::shell_quote("~"), "'~'");      // tilde expansion
  EXPECT_EQ(pm::ssh::shell_quote("%1"), "'%1'");
  EXPECT_EQ(pm::ssh::shell_quote("h\xc3\xa9llo"), "'h\xc3\xa9llo'");  // non-ASCII: quoted
}

TEST(ShellQuote, RefusesNul) {
  EXPECT_EQ(error_of([] { pm::ssh::shell_quote(std::string("a\0b", 3)); }),
            "a word with a NUL byte cannot be passed to a remote command: 'a\\x00b'");
}

TEST(ShellQuote, JoinQuotesEachWord) {
  EXPECT_EQ(pm::ssh::shell_join({}), "");
  EXPECT_EQ(pm::ssh::shell_join({"/x/pmd", "--stdio"}), "/x/pmd --stdio");
  EXPECT_EQ(pm::ssh::shell_join({"/my dir/pmd", "", "a'b"}), "'/my dir/pmd' '' 'a'\\''b'");
}

TEST(SplitAgentCommand, LikeAShellWithoutExpansion) {
  using pm::ssh::split_agent_command;
  EXPECT_EQ(split_agent_command("ssh"), words{"ssh"});
  EXPECT_EQ(split_agent_command("  ssh  -x\t-q \n"), (words{"ssh", "-x", "-q"}));
  EXPECT_EQ(split_agent_command("ssh -F '/a b/cfg' -x"), (words{"ssh", "-F", "/a b/cfg", "-x"}));
  EXPECT_EQ(split_agent_command("ssh -F \"/a b/cfg\""), (words{"ssh", "-F", "/a b/cfg"}));
  EXPECT_EQ(split_agent_command("ssh -F /a\\ b/cfg"), (words{"ssh", "-F", "/a b/cfg"}));
  EXPECT_EQ(split_agent_command("ssh -o 'ProxyJump a'b\"c d\""),
            (words{"ssh", "-o", "ProxyJump abc d"}));
  // Inside double quotes a backslash escapes only $ ` " \ and newline.
  EXPECT_EQ(split_agent_command(R"(x "a\"b\\c\$d\`e\nf")"), (words{"x", "a\"b\\c$d`e\\nf"}));
  EXPECT_EQ(split_agent_command("x \"a\\\nb\""), (words{"x", "ab"}));
  EXPECT_EQ(split_agent_command("x a\\\nb"), (words{"x", "ab"}));
  // Nothing is expanded.
  EXPECT_EQ(split_agent_command("ssh -F $HOME/cfg ~/x *"),
            (words{"ssh", "-F", "$HOME/cfg", "~/x", "*"}));
  // Empty words are words; blank text is none.
  EXPECT_EQ(split_agent_command("x '' \"\""), (words{"x", "", ""}));
  EXPECT_EQ(split_agent_command(""), words{});
  EXPECT_EQ(split_agent_command(" \t"), words{});
}

// docs/multihost.md's own example, -mca plm_rsh_agent "ssh -F ~/cluster.cfg", needs the `~` a shell
// would have expanded (ssh does not expand -F's path): a leading unquoted tilde prefix is.
TEST(SplitAgentCommand, ALeadingTildeIsExpandedAsAShellWouldForAnUnquotedWord) {
  using pm::ssh::split_agent_command;
  const pm::ssh::home_lookup homes = [](std::string_view user) -> std::optional<std::string> {
    if (user.empty()) return "/home/me";
    if (user == "bob") return "/srv/bob home";
    return std::nullopt;
  };
  const auto split = [&](std::string_view text) { return split_agent_command(text, "x", homes); };
  EXPECT_EQ(split("ssh -F ~/cluster.cfg"), (words{"ssh", "-F", "/home/me/cluster.cfg"}));
  EXPECT_EQ(split("~/bin/myssh -x"), (words{"/home/me/bin/myssh", "-x"}));
  EXPECT_EQ(split("ssh -i ~ -F ~bob/cfg ~bob"),
            (words{"ssh", "-i", "/home/me", "-F", "/srv/bob home/cfg", "/srv/bob home"}));
  EXPECT_EQ(split(R"(ssh -F ~/a\ b/'c d')"), (words{"ssh", "-F", "/home/me/a b/c d"}));
  // As written: quoted or escaped, a quoted character in the prefix, inside a word, unknown user.
  EXPECT_EQ(split(R"(ssh '~/a' "~/b" \~/c ~"bob"/d ~'x')"),
            (words{"ssh", "~/a", "~/b", "~/c", "~bob/d", "~x"}));
  EXPECT_EQ(split("ssh -oIdentityFile=~/k a~/b ~nobody-here/x"),
            (words{"ssh", "-oIdentityFile=~/k", "a~/b", "~nobody-here/x"}));
  // Without a lookup (PM_SRUN_ARGS, --app lines) nothing is expanded, as before.
  EXPECT_EQ(split_agent_command("ssh -F ~/cluster.cfg"), (words{"ssh", "-F", "~/cluster.cfg"}));
}

TEST(SplitAgentCommand, TheSystemsHomeIsHomeThenThePasswordDatabase) {
  const char* saved = std::getenv("HOME");
  const std::string before = saved != nullptr ? saved : "";
  ::setenv("HOME", "/some/where", 1);
  EXPECT_EQ(pm::ssh::system_home(""), "/some/where");
  ::unsetenv("HOME");
  const passwd* me = ::getpwuid(::getuid());
  ASSERT_NE(me, nullptr);
  EXPECT_EQ(pm::ssh::system_home(""), std::string(me->pw_dir));
  EXPECT_EQ(pm::ssh::system_home(me->pw_name), std::string(me->pw_dir));
  EXPECT_EQ(pm::ssh::system_home("no-such-user-here"), std::nullopt);
  if (saved != nullptr) ::setenv("HOME", before.c_str(), 1);
}

TEST(SplitAgentCommand, ErrorsNameTheSource) {
  using pm::ssh::split_agent_command;
  EXPECT_EQ(error_of([] { split_agent_command("ssh 'x"); }),
            "plm_rsh_agent 'ssh 'x': unterminated single quote");
  EXPECT_EQ(error_of([] { split_agent_command("ssh \"x", "PM_RSH_AGENT"); }),
            "PM_RSH_AGENT 'ssh \"x': unterminated double quote");
  EXPECT_EQ(error_of([] { split_agent_command("ssh \"x\\\""); }),
            "plm_rsh_agent 'ssh \"x\\\"': unterminated double quote");
  EXPECT_EQ(error_of([] { split_agent_command("ssh x\\"); }),
            "plm_rsh_agent 'ssh x\\': ends with a backslash");
  EXPECT_EQ(error_of([] { split_agent_command("ssh\n'"); }),
            "plm_rsh_agent 'ssh\\n'': unterminated single quote");
}

TEST(SplitAgentCommand, UndoesShellJoin) {
  const words w{"ssh", "-F", "/a b/c'f\"g", "", "$x", "\\", "\n"};
  EXPECT_EQ(pm::ssh::split_agent_command(pm::ssh::shell_join(w)), w);
}

TEST(SshArgv, DefaultsForTheSystemSsh) {
  EXPECT_EQ(
      pm::ssh::ssh_argv({}, host("n1"), {"/opt/pm/bin/pmd", "--stdio"}),
      (words{"ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=5",
             "-o", "ServerAliveCountMax=3", "-T", "n1", "/opt/pm/bin/pmd --stdio; exit"}));
  pm::ssh::ssh_settings s;
  s.connect_timeout = std::chrono::seconds(3);
  s.server_alive_interval = std::chrono::seconds(1);
  s.server_alive_count = 2;
  EXPECT_EQ(
      pm::ssh::ssh_argv(s, host("n1"), {"pmd"}),
      (words{"ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=3", "-o", "ServerAliveInterval=1",
             "-o", "ServerAliveCountMax=2", "-T", "n1", "pmd; exit"}));
}

TEST(SshArgv, HostUserAndPortFirstThenTheUsersWordsThenDefaults) {
  pm::ssh::ssh_settings s;
  s.agent = {"/usr/bin/ssh", "-F", "/a b/cfg"};
  s.extra_args = {"-o", "ConnectTimeout=3"};
  EXPECT_EQ(pm::ssh::ssh_argv(s, host("n1", "bob", 2222), {"pmd"}), (words{"/usr/bin/ssh",
                                                                           "-l",
                                                                           "bob",
                                                                           "-p",
                                                                           "2222",
                                                                           "-F",
                                                                           "/a b/cfg",
                                                                           "-o",
                                                                           "ConnectTimeout=3",
                                                                           "-o",
                                                                           "BatchMode=yes",
                                                                           "-o",
                                                                           "ConnectTimeout=10",
                                                                           "-o",
                                                                           "ServerAliveInterval=5",
                                                                           "-o",
                                                                           "ServerAliveCountMax=3",
                                                                           "-T",
                                                                           "n1",
                                                                           "pmd; exit"}));
}

TEST(SshArgv, TheRemoteCommandIsOneQuotedArgument) {
  const auto argv = pm::ssh::ssh_argv({}, host("n1"), {"/opt/my pm/pmd", "--stdio", "a;b $(c)"});
  EXPECT_EQ(argv.back(), "'/opt/my pm/pmd' --stdio 'a;b $(c)'; exit");
  EXPECT_EQ(argv[argv.size() - 2], "n1");
}

TEST(SshArgv, OtherAgentsGetTheirWordsAsTheyAre) {
  pm::ssh::ssh_settings s;
  s.agent = {"rsh"};
  s.extra_args = {"-x"};
  EXPECT_EQ(pm::ssh::ssh_argv(s, host("n1"), {"pmd", "--stdio"}),
            (words{"rsh", "-x", "n1", "pmd --stdio"}));
  EXPECT_EQ(pm::ssh::ssh_argv(s, host("n1", "bob"), {"pmd"}),
            (words{"rsh", "-x", "bob@n1", "pmd"}));
  s.agent = {"/usr/local/bin/ssh-wrapper", "--fast"};
  EXPECT_EQ(pm::ssh::ssh_argv(s, host("n1"), {"pmd"}),
            (words{"/usr/local/bin/ssh-wrapper", "--fast", "-x", "n1", "pmd"}));
  EXPECT_EQ(error_of([&] { pm::ssh::ssh_argv(s, host("n1", "", 2222), {"pmd"}); }),
            "host 'n1' has port 2222, but the rsh agent '/usr/local/bin/ssh-wrapper' is not ssh: "
            "pmrun passes a port only to ssh");
}

TEST(SshArgv, IsSshProgram) {
  EXPECT_TRUE(pm::ssh::is_ssh_program("ssh"));
  EXPECT_TRUE(pm::ssh::is_ssh_program("/usr/bin/ssh"));
  EXPECT_FALSE(pm::ssh::is_ssh_program("rsh"));
  EXPECT_FALSE(pm::ssh::is_ssh_program("/usr/bin/autossh"));
  EXPECT_FALSE(pm::ssh::is_ssh_program("ssh.sh"));
  EXPECT_FALSE(pm::ssh::is_ssh_program("/ssh/x"));
}

TEST(SshArgv, Refusals) {
  pm::ssh::ssh_settings empty;
  empty.agent.clear();
  EXPECT_EQ(error_of([&] { pm::ssh::ssh_argv(empty, host("n1"), {"pmd"}); }),
            "the rsh agent (plm_rsh_agent) is empty");
  EXPECT_EQ(error_of([] { pm::ssh::ssh_argv({}, host("-Fcfg"), {"pmd"}); }),
            "host name '-Fcfg' cannot be passed to ssh");
  EXPECT_EQ(error_of([] { pm::ssh::ssh_argv({}, host("n1", "-oX"), {"pmd"}); }),
            "user name '-oX' of host 'n1' cannot be passed to ssh");
  EXPECT_EQ(error_of([] { pm::ssh::ssh_argv({}, host("n1"), {}); }),
            "no remote command for host 'n1'");
}

// The order's point, checked with the real client: ssh keeps the first value of a setting, so
// the host's user and port win over the agent's words, and those over pmrun's defaults.
TEST(SshArgv, TheRealSshTakesTheFirstValue) {
  if (access("/usr/bin/ssh", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/ssh";
  pm::ssh::ssh_settings s;
  s.agent = {"/usr/bin/ssh", "-F", "/dev/null", "-p", "2200", "-l", "alice"};
  s.extra_args = {"-o", "ConnectTimeout=3", "-o", "BatchMode=no"};
  auto argv = pm::ssh::ssh_argv(s, host("n1", "bob", 2222), {"pmd"});
  argv.insert(argv.begin() + 1, "-G");  // print the settings, connect nowhere
  int status = 0;
  const auto config = "\n" + run(argv, status);
  ASSERT_EQ(status, 0) << config;
  EXPECT_EQ(setting(config, "hostname"), "n1");
  EXPECT_EQ(setting(config, "user"), "bob");               // the host's, over the agent's -l
  EXPECT_EQ(setting(config, "port"), "2222");              // the host's, over the agent's -p
  EXPECT_EQ(setting(config, "connecttimeout"), "3");       // the user's, over pmrun's 10
  EXPECT_EQ(setting(config, "batchmode"), "no");           // the user's choice stands
  EXPECT_EQ(setting(config, "serveraliveinterval"), "5");  // pmrun's default where unset
  EXPECT_EQ(setting(config, "serveralivecountmax"), "3");

  // Without the user's words, the defaults apply and ssh's own default port and user stay.
  s.agent = {"/usr/bin/ssh", "-F", "/dev/null"};
  s.extra_args.clear();
  argv = pm::ssh::ssh_argv(s, host("n2"), {"pmd"});
  argv.insert(argv.begin() + 1, "-G");
  const auto plain = "\n" + run(argv, status);
  ASSERT_EQ(status, 0) << plain;
  EXPECT_EQ(setting(plain, "batchmode"), "yes");
  EXPECT_EQ(setting(plain, "connecttimeout"), "10");
  EXPECT_EQ(setting(plain, "port"), "22");
}

TEST(RemoteAgentPath, LaunchAgentThenPrefixThenTheLocalPath) {
  using pm::ssh::remote_agent_path;
  EXPECT_EQ(remote_agent_path("/x/pmd", "/opt/pm", "/usr/bin/pmd"), "/x/pmd");
  EXPECT_EQ(remote_agent_path("pmd", std::nullopt, "/usr/bin/pmd"), "pmd");  // remote PATH
  EXPECT_EQ(remote_agent_path(std::nullopt, "/opt/pm", "/usr/bin/pmd"), "/opt/pm/bin/pmd");
  EXPECT_EQ(remote_agent_path(std::nullopt, "/opt/pm//", "/usr/bin/pmd"), "/opt/pm/bin/pmd");
  EXPECT_EQ(remote_agent_path(std::nullopt, "/", "/usr/bin/pmd"), "/bin/pmd");
  EXPECT_EQ(remote_agent_path(std::nullopt, std::nullopt, "/work/build/bin/pmd"),
            "/work/build/bin/pmd");
  EXPECT_EQ(remote_agent_path("", "", "/usr/bin/pmd"), "/usr/bin/pmd");
  EXPECT_EQ(error_of([] { remote_agent_path(std::nullopt, std::nullopt, "build/bin/pmd"); },
                     pm::errc::internal),
            "the local pmd path 'build/bin/pmd' is not absolute");
}

TEST(RemoteAgentPath, WhyTheAgentDidNotStart) {
  using pm::ssh::agent_start_failure;
  EXPECT_EQ(agent_start_failure(host("n1"), "/opt/pm/bin/pmd", 127),
            "pmd was not found on n1 at /opt/pm/bin/pmd (install it there, or use --prefix or "
            "--launch-agent)");
  EXPECT_EQ(agent_start_failure(host("n1"), "/opt/pm/bin/pmd", 126),
            "pmd is not executable on n1 at /opt/pm/bin/pmd (install it there, or use --prefix "
            "or --launch-agent)");
  EXPECT_EQ(agent_start_failure(host("n1", "bob", 2222), "/x", 255),
            "ssh to bob@n1 (port 2222) failed (unreachable, refused, or no key accepted: pmrun "
            "never asks for a password; ssh's message says why)");
  EXPECT_EQ(agent_start_failure(host("n1"), "/x/pmd", 3),
            "the agent on n1 (/x/pmd) exited with status 3 before it answered");
  EXPECT_EQ(agent_start_failure(host("n1"), "/x/pmd", 137),
            "pmd on n1 (/x/pmd) was killed by SIGKILL before it answered");
}

TEST(SshEnd, AfterTheHelloASignalNamesTheAgentAndA255IsSshs) {
  using pm::ssh::ssh_end;
  EXPECT_TRUE(ssh_end(host("n2"), "/x/pmd", 0, 0, true, "").how.empty());
  // The remote shell's 128+9 (ssh_argv's "; exit"): the agent was killed, not ssh.
  auto e = ssh_end(host("n2"), "/x/pmd", 137, 0, true, "bash: line 1: 4242 Killed  /x/pmd");
  EXPECT_EQ(e.how, "the agent pmd on n2 was killed by SIGKILL");
  EXPECT_FALSE(e.retryable);
  e = ssh_end(host("n2"), "/x/pmd", 255, 0, true, "Connection to n2 closed by remote host.");
  EXPECT_EQ(e.how, "ssh exited with code 255: Connection to n2 closed by remote host.");
  EXPECT_FALSE(e.retryable);  // the job may have run: never again
  e = ssh_end(host("n2"), "/x/pmd", 1, 0, true, "");
  EXPECT_EQ(e.how, "the agent pmd on n2 exited with code 1");
  e = ssh_end(host("n2"), "/x/pmd", -1, 15, true, "");  // ssh itself got SIGTERM
  EXPECT_EQ(e.how, "ssh was killed by SIGTERM");
}

TEST(SshEnd, BeforeTheHelloOnlyABurstsFailureIsRetried) {
  using pm::ssh::ssh_end;
  auto e = ssh_end(host("n1", "", 2222), "/x/pmd", 255, 0, false,
                   "ssh: connect to host 10.0.0.1 port 2222: Connection refused");
  EXPECT_EQ(e.how,
            "ssh to n1 (port 2222) failed (unreachable, refused, or no key accepted: pmrun never "
            "asks for a password; ssh's message says why): ssh: connect to host 10.0.0.1 port "
            "2222: Connection refused");
  EXPECT_FALSE(e.retryable);
  for (const char* final_line :
       {"bob@10.0.0.1: Permission denied (publickey).",
        "ssh: Could not resolve hostname nosuch: Name or service not known",
        "ssh: connect to host 10.0.0.1 port 22: No route to host",
        "ssh: connect to host 10.0.0.1 port 22: Connection timed out",
        "Connection timed out during banner exchange", "Host key verification failed."}) {
    EXPECT_FALSE(ssh_end(host("n1"), "/x", 255, 0, false, final_line).retryable) << final_line;
  }
  for (const char* burst : {"kex_exchange_identification: read: Connection reset by peer",
                            "Connection closed by 10.0.0.1 port 22", ""}) {
    EXPECT_TRUE(ssh_end(host("n1"), "/x", 255, 0, false, burst).retryable) << burst;
  }
  EXPECT_FALSE(ssh_end(host("n1"), "/x", 127, 0, false, "").retryable);
}

// What a remote login shell does with the joined command when pmd is missing: status 127, which
// agent_start_failure turns into the line above.
TEST(RemoteAgentPath, AMissingAgentIs127ThroughAShell) {
  int status = 0;
  run({"/bin/sh", "-c", pm::ssh::shell_join({"/nonexistent dir/pmd", "--stdio"})}, status);
  EXPECT_EQ(status, 127);
}

// The remote command's first word is a program, never an assignment: "X=1 printf %s" would run
// printf; quoted, the shell looks for a program named "X=1" and fails (127) in dash and bash.
TEST(ShellQuote, AFirstWordWithEqualsIsNotAnAssignment) {
  for (const char* shell : {"/bin/dash", "/bin/bash"}) {
    int status = 0;
    run({shell, "-c", pm::ssh::shell_join({"X=1", "printf", "%s"})}, status);
    EXPECT_EQ(status, 127) << shell;
    run({shell, "-c", pm::ssh::shell_join({"~", "x"})}, status);
    EXPECT_EQ(status, 127) << shell;  // not the home directory (126)
  }
}

}  // namespace
