#include "driver/decision_log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>

#include "launch/launcher.hpp"
#include "link/socket.hpp"

namespace pm::driver {

std::function<void(std::uint32_t, const std::string&)> decision_log_from_environment() {
  const char* path = std::getenv("PM_TEST_DECISION_LOG");
  if (path == nullptr || *path == '\0') return {};
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return {};
  auto file = std::make_shared<link::owned_fd>(fd);
  return [file](std::uint32_t host, const std::string& decision) {
    const std::string line = (host == launch::job_wide ? std::string("*") : std::to_string(host)) +
                             " " + decision + "\n";
    [[maybe_unused]] const auto n = ::write(file->get(), line.data(), line.size());
  };
}

}  // namespace pm::driver
