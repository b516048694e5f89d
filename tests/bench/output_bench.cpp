// output_bench: throughput of the output layer against the floor of ranks writing straight into
// one file. 4 writer processes each write 64 MiB of 100-byte lines ("r<R> l<N> xxx...\n") in
// 4096-byte writes (chunks do not end at line ends).
//   floor:  writers -> one shared file description
//   plain:  writers -> pipes -> output_forwarder -> one file
//   tagged: same with --tag-output
//   pushed plain / pushed tagged: the same bytes handed to output_forwarder::push in frames of
//     4 KiB or 64 KiB, round-robin over the ranks, as the agent link does for remote ranks (the
//     lines are made before the clock starts; the frames do not end at line ends)
// Each output is checked: every line whole (no line cut) and every line present.
// Usage: output_bench [DIR] [MIB_PER_WRITER]   (DIR: where the output file goes, default /tmp)
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "io/output_forwarder.hpp"

namespace {

constexpr int writers = 4;
constexpr std::size_t chunk = 4096;

// Line `line` of `rank`: "r<R> l<N> " padded with 'x' to 99 bytes, then '\n'.
void make_line(char* text, int rank, long long line) {
  char head[64];
  const int n = std::snprintf(head, sizeof head, "r%d l%lld ", rank, line);
  std::memcpy(text, head, static_cast<std::size_t>(n));
  std::memset(text + n, 'x', static_cast<std::size_t>(99 - n));
  text[99] = '\n';
}

[[noreturn]] void write_lines(int fd, int rank, std::size_t bytes) {
  std::vector<char> buf(chunk + 128);
  std::size_t used = 0, written = 0;
  long long line = 0;
  while (written < bytes) {
    char text[100];
    make_line(text, rank, line++);
    std::memcpy(buf.data() + used, text, 100);
    used += 100;
    written += 100;
    while (used >= chunk || (written >= bytes && used > 0)) {
      const std::size_t len = used < chunk ? used : chunk;
      std::size_t done = 0;
      while (done < len) {
        const ssize_t r = ::write(fd, buf.data() + done, len - done);
        if (r < 0) ::_exit(3);
        done += static_cast<std::size_t>(r);
      }
      std::memmove(buf.data(), buf.data() + len, used - len);
      used -= len;
    }
  }
  ::_exit(0);
}

struct check_result {
  std::size_t lines = 0, cut = 0;
};

// Every line must be "[tag]r<R> l<N> " padded with 'x' to 100 bytes with its newline.
check_result check(const std::string& path, bool tagged) {
  check_result res;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return res;
  char* line = nullptr;
  std::size_t cap = 0;
  ssize_t n;
  while ((n = ::getline(&line, &cap, f)) > 0) {
    ++res.lines;
    const char* p = line;
    std::size_t len = static_cast<std::size_t>(n);
    if (tagged) {
      const char* end = std::strstr(p, "<stdout>:");
      if (std::strncmp(p, "[1,", 3) != 0 || end == nullptr) {
        ++res.cut;
        continue;
      }
      len -= static_cast<std::size_t>(end + 9 - p);
      p = end + 9;
    }
    int rank = -1;
    long long num = -1;
    if (len != 100 || p[99] != '\n' || std::sscanf(p, "r%d l%lld ", &rank, &num) != 2 ||
        p[98] != 'x') {
      ++res.cut;
    }
  }
  std::free(line);
  std::fclose(f);
  return res;
}

double run_floor(const std::string& path, std::size_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<pid_t> pids;
  for (int r = 0; r < writers; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) write_lines(fd, r, bytes);
    pids.push_back(pid);
  }
  for (pid_t p : pids) ::waitpid(p, nullptr, 0);
  ::fsync(fd);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(fd);
  return s;
}

double run_forwarder(const std::string& path, std::size_t bytes, bool tag) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const auto t0 = std::chrono::steady_clock::now();
  boost::asio::io_context io;
  pm::output_options opt;
  opt.tag = tag;
  opt.stdout_fd = fd;
  opt.stderr_fd = fd;
  pm::io::output_forwarder fwd(io, opt, writers);
  std::vector<pid_t> pids;
  for (int r = 0; r < writers; ++r) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return 0;
    const pid_t pid = ::fork();
    if (pid == 0) write_lines(p[1], r, bytes);
    ::close(p[1]);
    fwd.attach(static_cast<std::uint32_t>(r), pm::output_stream::out, p[0], nullptr);
    pids.push_back(pid);
  }
  fwd.async_drain([] {});
  io.run();
  for (pid_t p : pids) ::waitpid(p, nullptr, 0);
  ::fsync(fd);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(fd);
  return s;
}

// Pushed input: each rank's bytes (ceil(bytes / 100) lines, as write_lines writes) cycle through a
// 4 MiB buffer of its lines made beforehand; frames go round-robin over the ranks.
double run_pushed(const std::string& path, std::size_t bytes, bool tag, std::size_t frame) {
  constexpr std::size_t buffer_lines = 40000;
  std::vector<std::vector<char>> lines(writers, std::vector<char>(buffer_lines * 100));
  for (int r = 0; r < writers; ++r) {
    for (std::size_t i = 0; i < buffer_lines; ++i) {
      make_line(lines[static_cast<std::size_t>(r)].data() + i * 100, r, static_cast<long long>(i));
    }
  }
  const std::size_t total = (bytes + 99) / 100 * 100;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const auto t0 = std::chrono::steady_clock::now();
  boost::asio::io_context io;
  pm::output_options opt;
  opt.tag = tag;
  opt.stdout_fd = fd;
  opt.stderr_fd = fd;
  pm::io::output_forwarder fwd(io, opt, writers);
  for (int r = 0; r < writers; ++r) {
    fwd.open_stream(static_cast<std::uint32_t>(r), pm::output_stream::out, nullptr);
  }
  std::vector<std::size_t> sent(writers, 0);
  for (bool more = true; more;) {
    more = false;
    for (int r = 0; r < writers; ++r) {
      std::size_t& done = sent[static_cast<std::size_t>(r)];
      if (done == total) continue;
      const std::vector<char>& buf = lines[static_cast<std::size_t>(r)];
      const std::size_t at = done % buf.size();
      const std::size_t n = std::min({frame, total - done, buf.size() - at});
      fwd.push(static_cast<std::uint32_t>(r), pm::output_stream::out,
               std::span<const char>(buf.data() + at, n));
      done += n;
      more = true;
    }
  }
  for (int r = 0; r < writers; ++r) {
    fwd.close_stream(static_cast<std::uint32_t>(r), pm::output_stream::out);
  }
  fwd.async_drain([] {});
  io.run();
  ::fsync(fd);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(fd);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "/tmp";
  const std::size_t mib = argc > 2 ? std::stoul(argv[2]) : 64;
  const std::size_t bytes = mib << 20;
  const double total_mb = static_cast<double>(bytes) * writers / 1e6;
  const std::string path = dir + "/pm_output_bench.out";
  std::printf("output_bench: %d writers x %zu MiB of 100-byte lines in %zu-byte writes -> %s\n",
              writers, mib, chunk, path.c_str());
  const std::size_t expect_lines = writers * ((bytes + 99) / 100);
  int bad = 0;
  auto report = [&](const char* name, double secs, bool tagged, double floor_mbs,
                    double pipe_mbs = 0) {
    const auto c = check(path, tagged);
    const double mbs = total_mb / secs;
    std::printf("%-19s %8.1f MB/s", name, mbs);
    if (floor_mbs > 0) std::printf("  %.2fx floor", mbs / floor_mbs);
    if (pipe_mbs > 0) std::printf("  %.2fx pipe", mbs / pipe_mbs);
    std::printf("  lines %zu/%zu, cut %zu\n", c.lines, expect_lines, c.cut);
    if (c.lines != expect_lines) ++bad;
    if (tagged && c.cut != 0) ++bad;
    if (std::strcmp(name, "floor") != 0 && c.cut != 0) ++bad;
    return mbs;
  };
  // Best of three each, to smooth out the shared machine.
  double floor_s = 1e9, plain_s = 1e9, tagged_s = 1e9;
  for (int i = 0; i < 3; ++i) floor_s = std::min(floor_s, run_floor(path, bytes));
  const double floor_mbs = report("floor", floor_s, false, 0);
  for (int i = 0; i < 3; ++i) plain_s = std::min(plain_s, run_forwarder(path, bytes, false));
  const double plain_mbs = report("plain", plain_s, false, floor_mbs);
  for (int i = 0; i < 3; ++i) tagged_s = std::min(tagged_s, run_forwarder(path, bytes, true));
  const double tagged_mbs = report("tagged", tagged_s, true, floor_mbs);
  for (const std::size_t frame : {std::size_t{4096}, std::size_t{65536}}) {
    for (const bool tag : {false, true}) {
      double secs = 1e9;
      for (int i = 0; i < 3; ++i) secs = std::min(secs, run_pushed(path, bytes, tag, frame));
      const std::string name = std::string("pushed ") + (tag ? "tagged " : "plain ") +
                               std::to_string(frame / 1024) + "K";
      report(name.c_str(), secs, tag, floor_mbs, tag ? tagged_mbs : plain_mbs);
    }
  }
  ::unlink(path.c_str());
  return bad == 0 ? 0 : 1;
}
