// Connect-back: how an agent started by a resource manager (srun) reaches its launcher, and how
// the launcher knows it is one of its own (docs/slurm.md).
//
// The launcher listens on a TCP port and hands each agent, through the environment of the step
// that starts it (never argv: the token must not show in `ps`), the addresses to dial, the port
// and a per-job token: 256 random bits. The agent connects and writes one greeting line before
// anything else,
//
//     pmcb1 <token, 64 hex digits> <node name>\n
//
// then speaks the agent link (magic, hello, ...) on the same socket. The launcher reads the line
// (at most greeting_limit bytes, within a deadline), compares the token in constant time, and
// hands the socket to the link of the host with that name; a wrong token, garbage, a silent
// connection, a name that is not a host of the job or a host that has its agent already are
// dropped. The link's own nonce check (docs/agent-link.md) still applies behind it.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pm::srun {

/// Environment variables of the connect-back, read and removed by pmd before it composes any
/// rank's environment.
inline constexpr const char* env_addresses = "PM_AGENT_ADDRS";  ///< "10.0.0.1,10.1.0.1"
inline constexpr const char* env_port = "PM_AGENT_PORT";        ///< "41234"
inline constexpr const char* env_token = "PM_AGENT_TOKEN";      ///< 64 hex digits
/// The node name for the greeting, set by a DVM's host daemon (docs/dvm.md); else
/// SLURMD_NODENAME, else the host name.
inline constexpr const char* env_node = "PM_AGENT_NODE";
/// A 0600 file holding the token, for a site that prefers it to the environment.
inline constexpr const char* env_token_file = "PM_AGENT_TOKEN_FILE";

/// The longest greeting line the launcher reads, newline included.
inline constexpr std::size_t greeting_limit = 512;

/// 256 bits from getrandom(2), as 64 lowercase hex digits. Throws pm::error(errc::system).
std::string fresh_token();

/// The greeting line an agent writes: "pmcb1 TOKEN NODE\n".
std::string greeting(std::string_view token, std::string_view node);

struct parsed_greeting {
  std::string token;
  std::string node;
};

/// The greeting in `bytes` (what arrived so far): nullopt while no newline came and there is room
/// for more; a parsed_greeting once it is complete; `problem` set (and nullopt) when the bytes
/// cannot be a greeting (too long, wrong word, bad characters). Pure.
std::optional<parsed_greeting> parse_greeting(std::string_view bytes, std::string& problem);

/// True when `a` and `b` are equal, in time that depends only on their lengths.
bool same_token(std::string_view a, std::string_view b) noexcept;

/// "10.0.0.1,10.1.0.1" split at commas, empty items dropped.
std::vector<std::string> split_addresses(std::string_view text);

/// The agent's side: connects to the first of `addresses` that answers on `port` (each within
/// `per_address`), writes the greeting and returns the connected socket (blocking mode).
/// Throws pm::error(errc::launch) naming every address that failed and why.
int dial_launcher(const std::vector<std::string>& addresses, std::uint16_t port,
                  std::string_view token, std::string_view node,
                  std::chrono::milliseconds per_address = std::chrono::seconds(5));

/// pmd's connect-back set-up from its environment: reads the addresses, port and token (or token
/// file, which must be a regular file not readable by group or others) and removes those
/// variables from the process's environment, dials and greets. The node name is SLURMD_NODENAME
/// when Slurm set it, else the host name. Throws pm::error with one line.
int connect_from_environment();

}  // namespace pm::srun
