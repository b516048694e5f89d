#include "command_line.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "link/endpoint.hpp"
#include "pm/version.hpp"

namespace pmd {

namespace {

constexpr const char* usage =
    "usage: pmd --stdio --nonce HEX [--grace-ms MS] [--hello-ms MS]\n"
    "       pmd --connect --nonce HEX [--grace-ms MS] [--hello-ms MS]   (dial back: "
    "PM_AGENT_ADDRS,\n"
    "                         PM_AGENT_PORT, PM_AGENT_TOKEN or PM_AGENT_TOKEN_FILE)\n"
    "       pmd --dvm-host   (a DVM's daemon on this host: docs/dvm.md)\n"
    "       pmd --topology   (print this host's summary, pm::topo::to_text, and exit)\n"
    "  the libpm node agent; started by the launcher, not by hand (docs/agent.md)\n"
    "  --hello-ms MS  how long to wait for the launcher's hello (default 20000, the launcher's\n"
    "                 own hello timeout; 300000 on a socket of a launcher on this machine,\n"
    "                 which may start pmd before it knows the job; 0: for ever)\n";

// The launcher's hello must come this long after pmd started (--hello-ms): as long as the
// launcher waits for pmd's (remote_launch::hello_timeout). Over ssh (pipes) the launcher wrote
// its hello before pmd even ran, so only a stream that is not a launcher's (a silent pipe, a
// terminal) ever meets the bound. A launcher on this machine (a socket pair) may start pmd early,
// before it has read the allocation and mapped the job (pm::early_agent), and write its hello
// only then: it gets longer (a dead launcher closes the socket anyway, which ends pmd at once).
constexpr std::chrono::milliseconds default_hello_bound{20000};
constexpr std::chrono::milliseconds default_socket_hello_bound{300000};

bool parse_hex(const char* text, std::uint64_t& out) {
  char* end = nullptr;
  errno = 0;
  out = std::strtoull(text, &end, 16);
  return errno == 0 && end != text && *end == '\0';
}

}  // namespace

std::chrono::milliseconds command_line::hello_wait(bool socket) const {
  return hello_bound.value_or(socket ? default_socket_hello_bound : default_hello_bound);
}

std::variant<command_line, int> parse_command_line(int argc, char** argv) {
  command_line c;
  bool stdio = false;
  std::optional<std::uint64_t> nonce;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--stdio") {
      stdio = true;
    } else if (a == "--connect") {
      c.connect = true;
    } else if (a == "--nonce" && i + 1 < argc) {
      std::uint64_t v = 0;
      if (!parse_hex(argv[++i], v)) {
        std::fprintf(stderr, "pmd: --nonce needs a hexadecimal number, not '%s'\n", argv[i]);
        return 2;
      }
      nonce = v;
    } else if (a == "--grace-ms" && i + 1 < argc) {
      char* end = nullptr;
      const long v = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || v < 0 || v > 3'600'000) {
        std::fprintf(stderr, "pmd: --grace-ms needs milliseconds, not '%s'\n", argv[i]);
        return 2;
      }
      c.grace = std::chrono::milliseconds(v);
    } else if (a == "--hello-ms" && i + 1 < argc) {
      char* end = nullptr;
      const long v = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || v < 0 || v > 86'400'000) {
        std::fprintf(stderr, "pmd: --hello-ms needs milliseconds, not '%s'\n", argv[i]);
        return 2;
      }
      c.hello_bound = std::chrono::milliseconds(v);
    } else if (a == "--version") {
      std::printf("pmd %s (agent link version %u)\n", PM_VERSION_STRING,
                  pm::link::protocol_version);
      return 0;
    } else if (a == "--topology") {
      c.topology = true;
    } else if (a == "--dvm-host") {
      c.dvm_host = true;
    } else if (a == "--help" || a == "-h") {
      std::fputs(usage, stdout);
      return 0;
    } else {
      std::fprintf(stderr, "pmd: unknown argument '%s'\n%s", argv[i], usage);
      return 2;
    }
  }
  if (c.topology || c.dvm_host) return c;
  if (stdio == c.connect || !nonce) {
    std::fprintf(stderr, "pmd: --stdio or --connect, and --nonce, are required\n%s", usage);
    return 2;
  }
  c.nonce = *nonce;
  return c;
}

}  // namespace pmd
