#include "transport/srun/connect_back.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "agent/host_facts.hpp"
#include "pm/error.hpp"

namespace pm::srun {

namespace {

constexpr std::string_view magic_word = "pmcb1";

bool is_hex(std::string_view s) {
  return !s.empty() && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

// A node name as Slurm and DNS write them: no blanks, no control characters.
bool is_node_name(std::string_view s) {
  if (s.empty() || s.size() > 255) return false;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f) return false;
  }
  return true;
}

std::string take_variable(const char* name) {
  const char* v = std::getenv(name);
  std::string out = v != nullptr ? v : "";
  ::unsetenv(name);
  return out;
}

// Connects to address:port within `limit`; returns the socket or -1 with `why` set.
int connect_one(const std::string& address, std::uint16_t port, std::chrono::milliseconds limit,
                std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(address.c_str(), service.c_str(), &hints, &found); rc != 0) {
    why = ::gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = ::poll(&p, 1, static_cast<int>(limit.count()));
      if (rc == 0) {
        why = "no answer within " + std::to_string(limit.count()) + " ms";
        rc = -1;
      } else if (rc > 0) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        if (err != 0) why = std::strerror(err);
      } else {
        why = std::strerror(errno);
      }
    } else if (rc != 0) {
      why = std::strerror(errno);
    }
    if (rc != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  return fd;
}

}  // namespace

std::string fresh_token() {
  unsigned char bytes[32];
  std::size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw error(errc::system, std::string("getrandom: ") + std::strerror(errno));
    got += static_cast<std::size_t>(n);
  }
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (const unsigned char b : bytes) {
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 15]);
  }
  return out;
}

std::string greeting(std::string_view token, std::string_view node) {
  std::string s;
  s.append(magic_word).push_back(' ');
  s.append(token).push_back(' ');
  s.append(node).push_back('\n');
  return s;
}

std::optional<parsed_greeting> parse_greeting(std::string_view bytes, std::string& problem) {
  problem.clear();
  // The first bytes must be the magic word as far as they go: garbage is refused at once.
  const auto head = bytes.substr(0, magic_word.size() + 1);
  if (std::string(magic_word).append(" ").compare(0, head.size(), head) != 0) {
    problem = "not an agent's greeting";
    return std::nullopt;
  }
  const auto nl = bytes.find('\n');
  if (nl == std::string_view::npos) {
    if (bytes.size() >= greeting_limit) problem = "greeting longer than 512 bytes";
    return std::nullopt;
  }
  if (nl + 1 > greeting_limit) {
    problem = "greeting longer than 512 bytes";
    return std::nullopt;
  }
  const auto line = bytes.substr(magic_word.size() + 1, nl - magic_word.size() - 1);
  const auto space = line.find(' ');
  if (space == std::string_view::npos) {
    problem = "greeting without a node name";
    return std::nullopt;
  }
  parsed_greeting g{std::string(line.substr(0, space)), std::string(line.substr(space + 1))};
  if (!is_hex(g.token) || g.token.size() != 64) {
    problem = "malformed token";
    return std::nullopt;
  }
  if (!is_node_name(g.node)) {
    problem = "malformed node name";
    return std::nullopt;
  }
  return g;
}

bool same_token(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

std::vector<std::string> split_addresses(std::string_view text) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const auto comma = text.find(',', pos);
    const auto item =
        text.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    if (!item.empty()) out.emplace_back(item);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return out;
}

int dial_launcher(const std::vector<std::string>& addresses, std::uint16_t port,
                  std::string_view token, std::string_view node,
                  std::chrono::milliseconds per_address) {
  std::string failures;
  for (const auto& address : addresses) {
    std::string why;
    const int fd = connect_one(address, port, per_address, why);
    if (fd < 0) {
      failures += (failures.empty() ? "" : ", ") + address + ": " + why;
      continue;
    }
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    const std::string line = greeting(token, node);
    std::size_t sent = 0;
    while (sent < line.size()) {
      const ssize_t n = ::send(fd, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      sent += static_cast<std::size_t>(n);
    }
    if (sent == line.size()) return fd;
    failures += (failures.empty() ? "" : ", ") + address + ": " + std::strerror(errno);
    ::close(fd);
  }
  throw error(errc::launch, "cannot reach the launcher at port " + std::to_string(port) + " (" +
                                (failures.empty() ? std::string("no address given") : failures) +
                                ")");
}

int connect_from_environment() {
  const std::string addresses = take_variable(env_addresses);
  const std::string port_text = take_variable(env_port);
  std::string token = take_variable(env_token);
  const std::string token_file = take_variable(env_token_file);
  if (token.empty() && !token_file.empty()) {
    struct stat st {};
    if (::stat(token_file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      throw error(errc::launch, "the token file '" + token_file + "' is not a regular file");
    }
    if ((st.st_mode & 077) != 0) {
      throw error(errc::launch, "the token file '" + token_file +
                                    "' is readable by others (it must be mode 0600)");
    }
    std::ifstream in(token_file);
    std::getline(in, token);
  }
  if (addresses.empty() || port_text.empty() || token.empty()) {
    throw error(errc::usage, std::string("--connect needs ") + env_addresses + ", " + env_port +
                                 " and " + env_token + " (or " + env_token_file +
                                 ") in the environment");
  }
  unsigned port = 0;
  const auto [end, ec] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port == 0 ||
      port > 65535) {
    throw error(errc::usage, std::string(env_port) + " '" + port_text + "' is not a port");
  }
  // A DVM's daemon names the host as the DVM knows it; else Slurm's name, else the host name.
  std::string node = take_variable(env_node);
  const char* slurm_name = std::getenv("SLURMD_NODENAME");
  if (node.empty()) {
    node = slurm_name != nullptr && *slurm_name != '\0' ? slurm_name : agent::host_name();
  }
  return dial_launcher(split_addresses(addresses), static_cast<std::uint16_t>(port), token, node);
}

}  // namespace pm::srun
