#include "pm/allocation.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>

#include "pm/error.hpp"
#include "text/printable.hpp"

namespace pm {

const char* to_string(allocation_source source) noexcept {
  switch (source) {
    case allocation_source::implicit_local:
      return "implicit_local";
    case allocation_source::host_list:
      return "host_list";
    case allocation_source::hostfile:
      return "hostfile";
    case allocation_source::slurm:
      return "slurm";
    case allocation_source::pbs:
      return "pbs";
    case allocation_source::api:
      return "api";
  }
  return "unknown";
}

std::uint64_t allocation::total_slots() const noexcept {
  std::uint64_t total = 0;
  for (const auto& h : hosts) total += h.slots;
  return total;
}

std::optional<std::uint32_t> allocation::find(std::string_view name) const noexcept {
  for (std::uint32_t i = 0; i < hosts.size(); ++i) {
    if (hosts[i].name == name) return i;
  }
  return std::nullopt;
}

std::string read_text_file(const std::string& path) {
  // POSIX calls rather than ifstream: errno is then the real reason, and a directory fails
  // (EISDIR) instead of reading as an empty file.
  auto fail = [&](int err) -> std::string {
    throw error(errc::parse, text::printable("cannot read '" + path + "': " + std::strerror(err)));
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(errno);
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return fail(err);
    }
    if (n == 0) break;
    if (text.size() + static_cast<std::size_t>(n) > max_text_file_bytes) {
      ::close(fd);
      throw error(errc::parse, "'" + text::printable(path) + "' holds more than " +
                                   std::to_string(max_text_file_bytes >> 20) +
                                   " MiB (is it the file you meant?)");
    }
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return text;
}

}  // namespace pm
