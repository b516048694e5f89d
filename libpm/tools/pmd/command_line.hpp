// pmd's command line: how it reaches its launcher and how long it waits for the launcher's hello.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <variant>

namespace pmd {

struct command_line {
  bool connect = false;  ///< --connect: dial the launcher back (srun, docs/slurm.md); else --stdio
  /// --topology: print this host's summary (pm::topo::to_text) and exit; what pmrun
  /// --do-not-launch plans from, and how an hwloc XML becomes a summary (HWLOC_XMLFILE).
  bool topology = false;
  /// --dvm-host: a DVM's daemon on this host (dvm_host.hpp), driven over stdin and stdout.
  bool dvm_host = false;
  std::uint64_t nonce = 0;
  std::optional<std::chrono::milliseconds> grace;        ///< --grace-ms
  std::optional<std::chrono::milliseconds> hello_bound;  ///< --hello-ms
  /// The launcher's hello must come this long after pmd started: --hello-ms, else as long as the
  /// launcher waits for pmd's; longer on a socket (a launcher on this machine).
  std::chrono::milliseconds hello_wait(bool socket) const;
};

/// The command line, or the exit code when pmd is done already (--help, --version: 0, after
/// printing; a mistake: 2, after saying it on stderr).
std::variant<command_line, int> parse_command_line(int argc, char** argv);

}  // namespace pmd
