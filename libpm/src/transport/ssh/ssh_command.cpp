// The ssh command line: POSIX quoting, agent splitting, argv order, the remote agent's path.
#include "transport/ssh/ssh_command.hpp"

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "pm/error.hpp"
#include "pm/exit_status.hpp"
#include "text/printable.hpp"

namespace pm::ssh {
namespace {

// Characters no POSIX shell (nor csh or fish) treats specially anywhere in a word. '=' is not
// one of them (a first word "A=b" is an assignment), nor '~' (tilde expansion), '%' or '^'.
bool safe_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '/' || c == ':' || c == ',' || c == '+' || c == '@' || c == '-';
}

bool blank(char c) {
  return c == ' ' || c == '\t' || c == '\n';
}

std::string where(const pm::host& h) {
  std::string s = h.user.empty() ? h.name : h.user + "@" + h.name;
  if (h.port != 0) s += " (port " + std::to_string(h.port) + ")";
  return s;
}

}  // namespace

std::string shell_quote(std::string_view word) {
  if (word.find('\0') != std::string_view::npos) {
    throw error(errc::usage, text::printable("a word with a NUL byte cannot be passed to a remote "
                                             "command: '" +
                                             std::string(word) + "'"));
  }
  if (word.empty()) return "''";
  bool safe = true;
  for (char c : word) safe = safe && safe_char(c);
  if (safe) return std::string(word);
  // Inside single quotes nothing is special but the closing quote, so a quote inside the word
  // closes the quotes, adds an escaped quote and opens them again: it's -> 'it'\''s'.
  std::string out;
  out.reserve(word.size() + 2);
  out += '\'';
  for (char c : word) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  out += '\'';
  return out;
}

std::string shell_join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) {
    if (!out.empty()) out += ' ';
    out += shell_quote(w);
  }
  return out;
}

std::optional<std::string> system_home(std::string_view user) {
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (user.empty()) {
    if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') return home;
    if (::getpwuid_r(::getuid(), &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
      return std::nullopt;
    }
  } else {
    const std::string name(user);
    if (::getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
      return std::nullopt;
    }
  }
  if (found->pw_dir == nullptr || *found->pw_dir == '\0') return std::nullopt;
  return std::string(found->pw_dir);
}

std::vector<std::string> split_agent_command(std::string_view text, std::string_view what,
                                             const home_lookup& home) {
  auto fail = [&](std::string_view problem) {
    return error(errc::usage, text::printable(std::string(what) + " '" + std::string(text) +
                                              "': " + std::string(problem)));
  };
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;  // a word has started, even an empty one ('' is a word)
  std::size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (blank(c)) {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
      ++i;
    } else if (c == '\'') {
      const auto close = text.find('\'', i + 1);
      if (close == std::string_view::npos) throw fail("unterminated single quote");
      word.append(text.substr(i + 1, close - i - 1));
      in_word = true;
      i = close + 1;
    } else if (c == '"') {
      // Inside double quotes a backslash escapes only $ ` " \ and a newline (which it removes);
      // $ and ` stay literal here since nothing is expanded.
      ++i;
      bool closed = false;
      while (i < text.size()) {
        const char d = text[i];
        if (d == '"') {
          closed = true;
          ++i;
          break;
        }
        if (d == '\\' && i + 1 < text.size()) {
          const char e = text[i + 1];
          if (e == '$' || e == '`' || e == '"' || e == '\\') {
            word += e;
            i += 2;
            continue;
          }
          if (e == '\n') {
            i += 2;
            continue;
          }
        }
        word += d;
        ++i;
      }
      if (!closed) throw fail("unterminated double quote");
      in_word = true;
    } else if (c == '~' && !in_word && home) {
      // A tilde prefix: up to the first unquoted '/' or the word's end, with no quoting in it.
      std::size_t end = i + 1;
      while (end < text.size() && text[end] != '/' && !blank(text[end]) && text[end] != '\'' &&
             text[end] != '"' && text[end] != '\\') {
        ++end;
      }
      const bool unquoted = end == text.size() || text[end] == '/' || blank(text[end]);
      std::optional<std::string> dir;
      if (unquoted) dir = home(text.substr(i + 1, end - i - 1));
      if (dir) {
        word += *dir;
        i = end;
      } else {
        word += c;
        ++i;
      }
      in_word = true;
    } else if (c == '\\') {
      if (i + 1 >= text.size()) throw fail("ends with a backslash");
      if (text[i + 1] != '\n') {  // backslash-newline joins lines
        word += text[i + 1];
        in_word = true;
      }
      i += 2;
    } else {
      word += c;
      in_word = true;
      ++i;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

bool is_ssh_program(std::string_view program) {
  const auto slash = program.rfind('/');
  return program.substr(slash == std::string_view::npos ? 0 : slash + 1) == "ssh";
}

std::vector<std::string> ssh_argv(const ssh_settings& settings, const pm::host& h,
                                  const std::vector<std::string>& remote_argv) {
  if (settings.agent.empty() || settings.agent[0].empty()) {
    throw error(errc::usage, "the rsh agent (plm_rsh_agent) is empty");
  }
  if (h.name.empty() || h.name.front() == '-') {
    // ssh would read it as an option (-F..., -o...).
    throw error(errc::usage, text::printable("host name '" + h.name + "' cannot be passed to ssh"));
  }
  if (!h.user.empty() && h.user.front() == '-') {
    throw error(errc::usage, text::printable("user name '" + h.user + "' of host '" + h.name +
                                             "' cannot be passed to ssh"));
  }
  if (remote_argv.empty()) {
    throw error(errc::usage, "no remote command for host '" + h.name + "'");
  }
  const bool ssh = is_ssh_program(settings.agent[0]);
  std::vector<std::string> argv;
  argv.push_back(settings.agent[0]);
  // ssh keeps the first value of each setting: the host's own user and port come first so that
  // they win over the user's agent words and plm_rsh_args, which win over our defaults below.
  if (ssh && !h.user.empty()) {
    argv.push_back("-l");
    argv.push_back(h.user);
  }
  if (ssh && h.port != 0) {
    argv.push_back("-p");
    argv.push_back(std::to_string(h.port));
  }
  if (!ssh && h.port != 0) {
    throw error(errc::usage,
                text::printable("host '" + h.name + "' has port " + std::to_string(h.port) +
                                ", but the rsh agent '" + settings.agent[0] +
                                "' is not ssh: pmrun passes a port only to ssh"));
  }
  argv.insert(argv.end(), settings.agent.begin() + 1, settings.agent.end());
  argv.insert(argv.end(), settings.extra_args.begin(), settings.extra_args.end());
  if (ssh) {
    // Never wait for a human (password, passphrase, unknown host key): fail, and say so.
    argv.insert(argv.end(), {"-o", "BatchMode=yes"});
    argv.insert(argv.end(),
                {"-o", "ConnectTimeout=" + std::to_string(settings.connect_timeout.count())});
    argv.insert(argv.end(), {"-o", "ServerAliveInterval=" +
                                       std::to_string(settings.server_alive_interval.count())});
    argv.insert(argv.end(),
                {"-o", "ServerAliveCountMax=" + std::to_string(settings.server_alive_count)});
    argv.push_back("-T");  // no terminal: the agent link is a byte stream, not a tty
    argv.push_back(h.name);
  } else {
    argv.push_back(h.user.empty() ? h.name : h.user + "@" + h.name);
  }
  // ONE argument: ssh would join several with spaces anyway and lose where words end. For ssh,
  // "; exit" keeps the remote shell as the agent's parent, so that a signal that kills the agent
  // comes back as 128+N (sh, bash, dash, zsh, ksh, csh and fish all take it; ssh drops the
  // exit-signal the server sends and would say 255).
  argv.push_back(ssh ? shell_join(remote_argv) + "; exit" : shell_join(remote_argv));
  return argv;
}

std::string remote_agent_path(const std::optional<std::string>& launch_agent,
                              const std::optional<std::string>& prefix,
                              std::string_view local_pmd) {
  if (launch_agent && !launch_agent->empty()) return *launch_agent;
  if (prefix && !prefix->empty()) {
    std::string dir = *prefix;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    return (dir == "/" ? std::string() : dir) + "/bin/pmd";
  }
  if (local_pmd.empty() || local_pmd.front() != '/') {
    throw error(errc::internal, text::printable("the local pmd path '" + std::string(local_pmd) +
                                                "' is not absolute"));
  }
  return std::string(local_pmd);
}

std::string agent_start_failure(const pm::host& h, std::string_view agent_path, int exit_status) {
  const std::string at = " on " + h.name + " at " + std::string(agent_path) +
                         " (install it there, or use --prefix or "
                         "--launch-agent)";
  switch (exit_status) {
    case 127:
      return text::printable("pmd was not found" + at);
    case 126:
      return text::printable("pmd is not executable" + at);
    case 255:
      return text::printable("ssh to " + where(h) +
                             " failed (unreachable, refused, or no key accepted: pmrun never "
                             "asks for a password; ssh's message says why)");
    default:
      if (exit_status > 128 && exit_status <= 128 + 64) {
        return text::printable("pmd on " + h.name + " (" + std::string(agent_path) +
                               ") was killed by " + signal_name(exit_status - 128) +
                               " before it answered");
      }
      return text::printable("the agent on " + h.name + " (" + std::string(agent_path) +
                             ") exited with status " + std::to_string(exit_status) +
                             " before it answered");
  }
}

bool ssh_failure_is_final(std::string_view said) {
  static constexpr std::string_view final_words[] = {
      "Connection refused",
      "Permission denied",
      "Could not resolve hostname",
      "Name or service not known",
      "Temporary failure in name resolution",
      "No route to host",
      "Network is unreachable",
      "Connection timed out",
      "Operation timed out",
      "Host key verification failed",
      "REMOTE HOST IDENTIFICATION HAS CHANGED",
      "Too many authentication failures",
      "Bad configuration option",
      "Bad owner or permissions",
      "no matching",  // no matching host key type, cipher, key exchange method
      "Can't open user config file",
      "Unsupported option",
      "Invalid user",
      "command-line line",  // a malformed -o option
  };
  for (const auto w : final_words) {
    if (said.find(w) != std::string_view::npos) return true;
  }
  return false;
}

agent_end ssh_end(const pm::host& h, std::string_view agent_path, int code, int signo,
                  bool established, std::string_view said) {
  agent_end e;
  if (code == 0 && signo == 0) return e;
  const bool killed_remotely = code > 128 && code <= 128 + 64;
  if (signo != 0) {
    e.how = "ssh was killed by " + signal_name(signo);
  } else if (!established) {
    e.how = agent_start_failure(h, agent_path, code);
  } else if (killed_remotely) {
    // The shell's own note ("bash: line 1: 123 Killed ...") says no more than this line.
    e.how =
        text::printable("the agent pmd on " + h.name + " was killed by " + signal_name(code - 128));
    return e;
  } else if (code == 255) {
    e.how = "ssh exited with code 255";
  } else {
    e.how =
        text::printable("the agent pmd on " + h.name + " exited with code " + std::to_string(code));
  }
  if (!said.empty() && !(killed_remotely && !established)) e.how += ": " + std::string(said);
  e.retryable = signo == 0 && code == 255 && !established && !ssh_failure_is_final(said);
  return e;
}

}  // namespace pm::ssh
