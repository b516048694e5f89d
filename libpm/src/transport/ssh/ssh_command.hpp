// The command line that starts a host's agent over the system ssh, built by pure functions.
//
// ssh hands its remote command to the remote user's login shell as ONE string: it joins every
// argument after the host name with spaces and runs `$SHELL -c STRING` there. So pmrun never
// passes words to ssh: it quotes each word for a POSIX shell (shell_quote) and passes the joined
// line as one argument (ssh_argv). Nothing the user wrote (spaces, quotes, `$()`, `;`, `*`,
// newlines, non-ASCII) is then interpreted by the remote shell. docs/multihost.md has the why.
//
// Shells: single quotes mean the same in sh, dash, bash, ksh and zsh (no escapes inside, no
// expansion), which tests/property/ssh_quote_property_test.cpp checks through real dash and
// bash. csh/tcsh (history `!`, newlines) and fish (`\` inside quotes) read them differently: a
// remote login shell of that kind is not supported for words that need quoting. Words made of
// safe characters only ([A-Za-z0-9_./:,+@-], e.g. an agent path and its flags) stay bare and so
// read the same in every shell.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pm/allocation.hpp"
#include "pm/transport.hpp"

namespace pm::ssh {

/// `word` quoted for a POSIX shell: itself when it holds only [A-Za-z0-9_./:,+@-], else in single
/// quotes with each ' written as '\'' ; "" gives ''. Throws pm::error(errc::usage) for a word
/// with a NUL byte, which no argv can carry.
std::string shell_quote(std::string_view word);

/// The words quoted and joined by single spaces: a command line a POSIX shell splits back into
/// exactly these words.
std::string shell_join(const std::vector<std::string>& words);

/// Where `~` (user "") and `~user` lead: that user's home directory, or nullopt (the word then
/// stays as it is, as in a shell).
using home_lookup = std::function<std::optional<std::string>(std::string_view user)>;

/// This process's answer: $HOME for `~` (the password database's entry of the real uid when HOME is
/// unset or empty), the password database for `~user`.
std::optional<std::string> system_home(std::string_view user);

/// A user's agent command ("ssh -F '/a b/cfg' -x") split into words as a POSIX shell would for
/// blanks, quotes and backslashes. $VAR, `cmd` and globs stay as they are. With `home`, a word
/// that starts with an unquoted `~` has its tilde prefix expanded as a shell does for an unquoted
/// word: `~` and `~/cfg` become the home directory (`/home/me/cfg`), `~bob/x` bob's; a quoted or
/// escaped tilde (`'~/x'`, `\~/x`), a prefix with a quoted character (`~"bob"/x`), a tilde inside
/// a word (`-oIdentityFile=~/k`) and an unknown user stay as written. Without `home` nothing is
/// expanded. Throws pm::error(errc::usage) naming `what` and the text for an unterminated quote
/// or a trailing backslash. Blank text gives no words.
std::vector<std::string> split_agent_command(std::string_view text,
                                             std::string_view what = "plm_rsh_agent",
                                             const home_lookup& home = {});

/// True when the agent program is OpenSSH's client (its base name is `ssh`): only then does
/// ssh_argv add ssh's own options.
bool is_ssh_program(std::string_view program);

/// How pmrun runs ssh. The defaults make ssh fail instead of waiting for a human: BatchMode (no
/// password or passphrase prompt, no host-key question), ConnectTimeout (an unreachable host),
/// ServerAlive* (a session whose peer vanished; the agent link's heartbeats notice it first).
struct ssh_settings {
  std::vector<std::string> agent = {"ssh"};  ///< plm_rsh_agent, split into words
  std::vector<std::string> extra_args;       ///< plm_rsh_args, split into words
  std::chrono::seconds connect_timeout{10};
  std::chrono::seconds server_alive_interval{5};
  int server_alive_count = 3;
};

/// The argv to exec to run `remote_argv` on host `h`:
///   agent[0]  [-l USER] [-p PORT]  agent[1..]  extra_args
///   [-o BatchMode=yes -o ConnectTimeout=N -o ServerAliveInterval=N -o ServerAliveCountMax=N -T]
///   HOST  shell_join(remote_argv) ["; exit"]
/// ssh takes the FIRST value it sees for each setting (command line before config files, and
/// among -o/-p/-l the first one; checked with `ssh -G` of OpenSSH 9.2), so the order is the
/// precedence: the host's own user and port (hostfile, -H) over the user's agent words and
/// plm_rsh_args, those over pmrun's defaults. The bracketed ssh options are added only when
/// is_ssh_program(agent[0]); for another agent (rsh, a wrapper script) the words are passed as
/// they are, a user goes in `user@host` form, and a port is an error (how that agent takes one
/// is unknown). For ssh the remote command ends in "; exit": the remote shell then runs the
/// agent as its child instead of exec'ing it, and reports a signal that killed it as 128+N,
/// which ssh passes on (ssh itself drops the exit-signal and exits 255; ssh_end names it). Throws
/// pm::error(errc::usage) for an empty agent, a host name or user starting with '-', or an empty
/// remote_argv.
std::vector<std::string> ssh_argv(const ssh_settings& settings, const pm::host& h,
                                  const std::vector<std::string>& remote_argv);

/// Where the agent (pmd) is on a remote host: `--launch-agent PATH` when given (as it is: a bare
/// name is looked up in the remote PATH), else `--prefix DIR` as DIR/bin/pmd (mpirun's rule),
/// else the same absolute path as this machine's pmd (`local_pmd`, which must be absolute:
/// pm::error(errc::internal) otherwise).
std::string remote_agent_path(const std::optional<std::string>& launch_agent,
                              const std::optional<std::string>& prefix, std::string_view local_pmd);

/// One line for an ssh that ended before the agent said hello, from its exit status (ssh returns
/// the remote command's status, or 255 for its own failures):
///   127: "pmd was not found on node1 at /opt/pm/bin/pmd (install it there, or use --prefix or
///         --launch-agent)"
///   126: "... is not executable ...", 255: "ssh to node1 failed (...)", other: "... exited ...".
std::string agent_start_failure(const pm::host& h, std::string_view agent_path, int exit_status);

/// True when ssh's last line (`said`) names a failure that trying again at once will not mend:
/// a refused connection, a key not accepted, a name that does not resolve, no route, a connect
/// timeout, a host key that does not match, a bad configuration. The retries are for what a
/// burst causes (sshd's MaxStartups dropping a connection: "Connection closed", "Connection reset
/// by peer", "kex_exchange_identification"), and for a 255 without a word.
bool ssh_failure_is_final(std::string_view said);

/// How an ssh that carried a host's agent link ended (docs/multihost.md, "Failures across
/// hosts"): one line, and whether a retry may help. `code` is ssh's exit status (the remote
/// command's, or 255 for ssh's own failures), `signo` non-zero when ssh itself was killed, `said`
/// ssh's last stderr line, `established` whether the agent had said hello.
///   - before the hello: agent_start_failure's line plus ssh's; retryable for 255 unless
///     ssh_failure_is_final(said); 128+N: "pmd on n1 (PATH) was killed by SIGN before it
///     answered";
///   - after it: 128+N (the remote shell's status for a command killed by signal N, which the
///     `; exit` that ssh_argv adds makes it report): "the agent pmd on n1 was killed by SIGKILL";
///     255: "ssh exited with code 255" plus ssh's line (a connection that broke); another code:
///     "the agent pmd on n1 exited with code N".
/// Empty for a clean end (0).
agent_end ssh_end(const pm::host& h, std::string_view agent_path, int code, int signo,
                  bool established, std::string_view said);

}  // namespace pm::ssh
