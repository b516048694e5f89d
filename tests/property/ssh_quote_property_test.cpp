// shell_join against real shells: for any words (quotes, backslashes, $(), backticks, ;, globs,
// ~, newlines, tabs, non-ASCII and invalid UTF-8, empty words, leading dashes), a POSIX shell
// that runs `printf '%s\0' <shell_join(words)>` prints exactly those words. This is what a remote
// login shell does with the command line ssh hands it (`$SHELL -c STRING`). Each case runs dash
// (/bin/sh here) and bash for real, and zsh when it is installed; rapidcheck's default 100 cases
// of 1-12 words keep the test to a second or two.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <string>
#include <vector>

#include "pm/error.hpp"
#include "transport/ssh/ssh_command.hpp"

extern char** environ;

namespace {

// Pieces that mean something to some shell, plus multi-byte and invalid UTF-8.
const std::vector<std::string> tricky = {
    " ",  "'",  "\"",   "\\", "$",    "$(",   ")",    "`",     ";",       "*",      "?",
    "~",  "\n", "\t",   "&",  "|",    "<",    ">",    "!",     "#",       "{",      "}",
    "[",  "]",  "=",    "%",  "^",    "-",    "--",   "$HOME", "${x:-y}", "$((1))", "'\\''",
    "\r", "\v", "a",    "Z",  "0",    "/",    ".",    ",",     "@",       ":",      "+",
    "_",  "é",  "日本", "🎉",  "\xff", "\xc3", "\x01", "\x7f",  "!!",      "\\n",    "*.cpp",
};

// Characters some shell treats specially only at the start or the end of a word.
const std::vector<std::string> edge_sensitive = {"~", "#", "=", "!", "%", "^", "{", "}", "-", "&"};

rc::Gen<std::string> word() {
  // Mostly plain characters with tricky pieces among them (so a single special character in an
  // otherwise plain word, such as "~/x" or "a=b", comes up often), sometimes any byte but NUL,
  // which no argv can carry.
  auto piece = rc::gen::weightedOneOf<std::string>({
      {4, rc::gen::map(rc::gen::elementOf(std::string("abcXYZ019_./:,+@-")),
                       [](char c) { return std::string(1, c); })},
      {4, rc::gen::elementOf(tricky)},
      {1, rc::gen::map(rc::gen::inRange<int>(1, 256),
                       [](int b) { return std::string(1, static_cast<char>(b)); })},
  });
  // Short words most of the time: a word is safe to leave bare only when all of it is.
  auto pieces = rc::gen::weightedOneOf<std::vector<std::string>>({
      {3, rc::gen::mapcat(rc::gen::inRange<std::size_t>(0, 4),
                          [piece](std::size_t n) {
                            return rc::gen::container<std::vector<std::string>>(n, piece);
                          })},
      {1, rc::gen::container<std::vector<std::string>>(piece)},
  });
  auto joined = rc::gen::map(pieces, [](const std::vector<std::string>& parts) {
    std::string w;
    for (const auto& p : parts) w += p;
    return w;
  });
  // One special character at the start or the end of a plain word: "~", "~/x", "x=", "#a", ...
  // (some shells treat a character specially only there).
  auto edged =
      rc::gen::apply([](const std::string& special, const std::string& plain,
                        bool at_start) { return at_start ? special + plain : plain + special; },
                     rc::gen::elementOf(edge_sensitive),
                     rc::gen::elementOf(std::vector<std::string>{"", "/", "/x", "a", "."}),
                     rc::gen::arbitrary<bool>());
  return rc::gen::weightedOneOf<std::string>({{2, joined}, {1, edged}});
}

// Runs `shell -c line` and returns its stdout; the exit status goes to `status`.
std::string run_shell(const std::string& shell, const std::string& line, int& status) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  const char* argv[] = {shell.c_str(), "-c", line.c_str(), nullptr};
  pid_t pid = -1;
  const int rc =
      posix_spawn(&pid, shell.c_str(), &actions, nullptr, const_cast<char**>(argv), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  std::string out;
  if (rc == 0) {
    char buf[4096];
    for (;;) {
      const ssize_t n = read(fds[0], buf, sizeof buf);
      if (n > 0) out.append(buf, static_cast<std::size_t>(n));
      if (n == 0 || (n < 0 && errno != EINTR)) break;
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

std::vector<std::string> shells() {
  std::vector<std::string> out = {"/bin/dash", "/bin/bash"};
  for (const char* zsh : {"/bin/zsh", "/usr/bin/zsh"}) {
    if (access(zsh, X_OK) == 0) {
      out.emplace_back(zsh);
      break;
    }
  }
  return out;
}

std::string nul_separated(const std::vector<std::string>& words) {
  std::string s;
  for (const auto& w : words) s += w + '\0';
  return s;
}

RC_GTEST_PROP(SshQuoteProperty, RealShellsGetTheWordsBack, ()) {
  const auto count = *rc::gen::inRange<std::size_t>(1, 13);
  const auto words = *rc::gen::container<std::vector<std::string>>(count, word());
  const std::string line = "printf '%s\\0' " + pm::ssh::shell_join(words);
  for (const auto& shell : shells()) {
    int status = 0;
    const auto out = run_shell(shell, line, status);
    RC_ASSERT(status == 0);
    RC_ASSERT(out == nul_separated(words));
  }
}

// The remote command is one argument to ssh; an agent string written the way shell_join writes
// it splits back into the same words.
RC_GTEST_PROP(SshQuoteProperty, SplitAgentCommandUndoesShellJoin, ()) {
  const auto words = *rc::gen::container<std::vector<std::string>>(word());
  RC_ASSERT(pm::ssh::split_agent_command(pm::ssh::shell_join(words)) == words);
}

// A quoted word is one shell word: it never starts a new one, whatever it holds.
RC_GTEST_PROP(SshQuoteProperty, QuotedWordsAreBareOrSingleQuoted, ()) {
  const auto w = *word();
  const auto q = pm::ssh::shell_quote(w);
  RC_ASSERT(!q.empty());
  if (q != w) {
    RC_ASSERT(q.front() == '\'');
    RC_ASSERT(q.back() == '\'');
  }
}

TEST(SshQuoteProperty, NulIsRefused) {
  EXPECT_THROW(pm::ssh::shell_quote(std::string("\0", 1)), pm::error);
  EXPECT_THROW(pm::ssh::shell_join({"ok", std::string("a\0", 2)}), pm::error);
}

TEST(SshQuoteProperty, TheShellsExist) {
  for (const auto& shell : shells()) EXPECT_EQ(access(shell.c_str(), X_OK), 0) << shell;
}

}  // namespace
