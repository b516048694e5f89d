#include "agent/host_facts.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string_view>

#include "sys/interface_addresses.hpp"
#include "topology/gpu_pci_class.hpp"

namespace pm::agent {

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

namespace {

bool has_entries(const char* dir) {
  DIR* d = ::opendir(dir);
  if (d == nullptr) return false;
  bool any = false;
  while (const dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) any = true;
  }
  ::closedir(d);
  return any;
}

}  // namespace

bool has_rdma_devices() {
  return has_entries("/sys/class/infiniband") || has_entries("/sys/class/cxi");
}

namespace {

// The hexadecimal number a sysfs attribute holds ("0x10de\n"); 0 when unreadable.
unsigned sysfs_hex(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) return 0;
  unsigned value = 0;
  if (std::fscanf(f, "%x", &value) != 1) value = 0;
  std::fclose(f);
  return value;
}

// Some entry of `dir` named `prefix` then a digit.
bool has_numbered(const char* dir, std::string_view prefix) {
  DIR* d = ::opendir(dir);
  if (d == nullptr) return false;
  bool any = false;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    if (name.size() > prefix.size() && name.substr(0, prefix.size()) == prefix &&
        std::isdigit(static_cast<unsigned char>(name[prefix.size()])) != 0) {
      any = true;
      break;
    }
  }
  ::closedir(d);
  return any;
}

}  // namespace

bool has_gpu_devices() {
  if (has_numbered("/dev", "nvidia") || ::access("/dev/kfd", F_OK) == 0) return true;
  DIR* d = ::opendir("/sys/class/drm");
  if (d == nullptr) return false;
  bool any = false;
  while (const dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, "card", 4) != 0 || std::strchr(e->d_name, '-') != nullptr) continue;
    const std::string dev = std::string("/sys/class/drm/") + e->d_name + "/device/";
    // class is 24 bits (class, subclass, programming interface): the first two are the rule's.
    if (topo::gpu_by_pci_class(sysfs_hex(dev + "vendor"), sysfs_hex(dev + "class") >> 8)) {
      any = true;
      break;
    }
  }
  ::closedir(d);
  return any;
}

std::vector<std::string> reachable_addresses() {
  std::vector<std::string> out;
  std::string via_ssh;
  if (const char* conn = std::getenv("SSH_CONNECTION"); conn != nullptr) {
    std::istringstream in(conn);
    std::string client, client_port, server;
    if (in >> client >> client_port >> server) via_ssh = server;
  }
  for (const auto& a : sys::interface_addresses()) {
    if (a.family != AF_INET || !a.up || a.loopback || a.address.starts_with("127.")) continue;
    std::string entry = a.address + "%" + a.interface;
    if (a.address == via_ssh) {
      out.insert(out.begin(), std::move(entry));
    } else {
      out.push_back(std::move(entry));
    }
  }
  return out;
}

std::uint16_t free_port(const std::vector<std::string>& addrs) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  if (!addrs.empty()) {
    const std::string addr = addrs.front().substr(0, addrs.front().find('%'));
    ::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr);
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  std::uint16_t port = 0;
  socklen_t len = sizeof sa;
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0) {
    port = ntohs(sa.sin_port);
  }
  ::close(fd);
  return port;
}

}  // namespace pm::agent
