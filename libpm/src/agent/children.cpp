#include "agent/children.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace pm::agent {

namespace {

std::string read_small_file(const char* path, bool& ok) {
  std::string text;
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  ok = fd >= 0;
  if (!ok) return text;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return text;
}

std::vector<pid_t> parse_pids(const std::string& text) {
  std::vector<pid_t> pids;
  const char* p = text.c_str();
  for (;;) {
    char* end = nullptr;
    const long v = std::strtol(p, &end, 10);
    if (end == p) break;
    if (v > 0) pids.push_back(static_cast<pid_t>(v));
    p = end;
  }
  return pids;
}

// Fallback: every /proc/<pid>/stat whose 4th field (after the ")" of the name) is our pid.
std::vector<pid_t> scan_proc(pid_t self) {
  std::vector<pid_t> pids;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return pids;
  while (const dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    const std::string path = "/proc/" + std::string(e->d_name) + "/stat";
    bool ok = false;
    const std::string stat = read_small_file(path.c_str(), ok);
    const auto close_paren = stat.rfind(')');
    if (!ok || close_paren == std::string::npos) continue;
    // ") S PPID ..."
    const char* p = stat.c_str() + close_paren + 1;
    while (*p == ' ') ++p;
    while (*p != ' ' && *p != '\0') ++p;  // state
    if (std::strtol(p, nullptr, 10) == self) pids.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(d);
  return pids;
}

}  // namespace

std::vector<pid_t> list_children() {
  const pid_t self = ::getpid();
  const std::string path =
      "/proc/self/task/" + std::to_string(self) + "/children";  // single-threaded: tid == pid
  bool ok = false;
  const std::string text = read_small_file(path.c_str(), ok);
  if (ok) return parse_pids(text);
  return scan_proc(self);
}

int reap_all_ended() {
  int reaped = 0;
  for (;;) {
    siginfo_t info{};
    if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG) != 0) {
      if (errno == EINTR) continue;
      return reaped;  // ECHILD: no child at all
    }
    if (info.si_pid == 0) return reaped;  // children left, none ended
    ++reaped;
  }
}

void reap_ended(const std::vector<pid_t>& pids) {
  for (const pid_t pid : pids) {
    siginfo_t info{};
    while (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG) != 0 &&
           errno == EINTR) {
    }
  }
}

}  // namespace pm::agent
