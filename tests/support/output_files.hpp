// What the output forwarder's tests (tests/unit/output_forwarder*_test.cpp) write with and into: a
// forked writer process on a pipe, a directory removed with all in it, a file opened for writing
// as a destination, a file's bytes and lines.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

namespace output_forwarder_support {

namespace fs = std::filesystem;

// A forked writer: writes `data` to the pipe in chunks (cycled), then exits. Killed and reaped by
// the destructor if the test ends first.
struct writer {
  pid_t pid = -1;
  int read_fd = -1;
  writer(const std::string& data, std::vector<std::size_t> chunks) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return;
    pid = ::fork();
    if (pid == 0) {
      ::close(p[0]);
      std::size_t pos = 0, i = 0;
      while (pos < data.size()) {
        const std::size_t n = std::min(chunks[i++ % chunks.size()], data.size() - pos);
        std::size_t done = 0;
        while (done < n) {
          const ssize_t r = ::write(p[1], data.data() + pos + done, n - done);
          if (r < 0) ::_exit(3);
          done += static_cast<std::size_t>(r);
        }
        pos += n;
      }
      ::_exit(0);
    }
    ::close(p[1]);
    read_fd = p[0];
  }
  bool running() { return pid > 0 && ::waitpid(pid, nullptr, WNOHANG) == 0; }
  int wait() {
    int status = 0;
    if (pid > 0 && ::waitpid(pid, &status, 0) == pid) pid = -1;
    return status;
  }
  ~writer() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur)) out.push_back(cur);
  return out;
}

struct temp_dir {
  fs::path path;
  temp_dir() {
    char tmpl[] = "/tmp/pm_output_test.XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

inline int open_file(const std::string& path) {
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
}

}  // namespace output_forwarder_support
