#include "sys/proc_sample.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <vector>

namespace pm::sys {

namespace {

// A small /proc file, whole (they are read in one call); empty when it cannot be read.
std::string slurp(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string text;
  char buf[4096];
  for (;;) {
    const auto n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > (1u << 20)) break;
  }
  ::close(fd);
  return text;
}

// The next blank-separated word from `at` as a number (0 when it is not one: tpgid is -1), and
// `at` past it.
std::uint64_t number_at(std::string_view text, std::size_t& at) {
  while (at < text.size() && text[at] == ' ') ++at;
  const auto begin = at;
  while (at < text.size() && text[at] != ' ' && text[at] != '\n') ++at;
  std::uint64_t v = 0;
  const auto [ptr, ec] = std::from_chars(text.data() + begin, text.data() + at, v);
  if (ec != std::errc() || ptr != text.data() + at) v = 0;
  return v;
}

std::uint64_t wchar_of(std::string_view io) {
  const auto at = io.find("wchar:");
  if (at == std::string_view::npos) return 0;
  std::size_t i = at + 6;
  return number_at(io, i);
}

std::string tree_of(pid_t pid, std::string_view proc) {
  return std::string(proc) + "/" + std::to_string(pid);
}

// Every child of every thread of `pid`.
void children_of(pid_t pid, std::string_view proc, std::vector<pid_t>& out) {
  const auto tasks = tree_of(pid, proc) + "/task";
  DIR* d = ::opendir(tasks.c_str());
  if (d == nullptr) return;
  while (const auto* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const auto list = slurp(tasks + "/" + e->d_name + "/children");
    std::size_t at = 0;
    while (at < list.size()) {
      while (at < list.size() && list[at] == ' ') ++at;
      if (at >= list.size() || list[at] < '0' || list[at] > '9') break;
      out.push_back(static_cast<pid_t>(number_at(list, at)));
    }
  }
  ::closedir(d);
}

}  // namespace

std::optional<stat_fields> parse_stat(std::string_view line) {
  // "PID (COMM) S ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
  // cutime cstime ...": COMM may hold anything, ')' included, so fields count from the last ')'.
  const auto close = line.rfind(')');
  if (close == std::string_view::npos || close + 2 >= line.size()) return std::nullopt;
  stat_fields f;
  f.state = line[close + 2];
  std::size_t at = close + 3;
  // Fields 4 to 13 (ppid .. cmajflt), then utime, stime, cutime, cstime.
  for (int field = 4; field <= 13; ++field) {
    number_at(line, at);
    if (at >= line.size()) return std::nullopt;
  }
  for (int field = 14; field <= 17; ++field) {
    f.ticks += number_at(line, at);
    if (at >= line.size() && field < 17) return std::nullopt;
  }
  return f;
}

std::optional<proc_activity> read_activity(pid_t pid, std::string_view proc) {
  const auto leader = parse_stat(slurp(tree_of(pid, proc) + "/stat"));
  if (!leader) return std::nullopt;
  static const long hz = [] {
    const long t = ::sysconf(_SC_CLK_TCK);
    return t > 0 ? t : 100;
  }();
  proc_activity a;
  a.state = leader->state;
  a.wchan = slurp(tree_of(pid, proc) + "/wchan");
  if (a.wchan == "0") a.wchan.clear();  // running, or not waiting anywhere
  std::uint64_t ticks = leader->ticks;
  a.written = wchar_of(slurp(tree_of(pid, proc) + "/io"));
  std::vector<pid_t> todo;
  children_of(pid, proc, todo);
  for (std::size_t i = 0; i < todo.size() && i < 4096; ++i) {
    const auto child = todo[i];
    const auto f = parse_stat(slurp(tree_of(child, proc) + "/stat"));
    if (!f) continue;  // ended meanwhile
    ticks += f->ticks;
    a.written += wchar_of(slurp(tree_of(child, proc) + "/io"));
    children_of(child, proc, todo);
  }
  a.cpu_ms = ticks * 1000 / static_cast<std::uint64_t>(hz);
  return a;
}

}  // namespace pm::sys
