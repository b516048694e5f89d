#include "pm/standard_descriptors.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace pm {

void open_missing_standard_descriptors() noexcept {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
    // The lowest free number: this one, unless another thread of the embedding program took it
    // meanwhile; then it is that thread's, left alone.
    const int got = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);  // NOLINT(*-cloexec-*)
    if (got >= 0 && got != fd) ::close(got);
  }
}

}  // namespace pm
