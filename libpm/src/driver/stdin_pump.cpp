#include "driver/stdin_pump.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <cerrno>
#include <string>

namespace pm::driver {

namespace asio = boost::asio;

stdin_pump::stdin_pump(asio::io_context& io, std::uint32_t host, std::uint32_t rank, int source,
                       stdin_pump_hooks hooks)
    : io_(io), host_(host), rank_(rank), hooks_(std::move(hooks)) {
  fd_.reset(::fcntl(source, F_DUPFD_CLOEXEC, 3));
  struct stat st {};
  if (fd_ && ::fstat(fd_.get(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
    // A private non-blocking description, so that the launcher's own stays as it was.
    const std::string path = "/proc/self/fd/" + std::to_string(fd_.get());
    const int nfd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (nfd >= 0) {
      fd_.reset(nfd);
      waiter_.emplace(io_);
      waiter_->assign(::fcntl(nfd, F_DUPFD_CLOEXEC, 3));  // the waiter owns its own copy
    }
  }
}

stdin_pump::~stdin_pump() {
  *alive_ = false;
}

void stdin_pump::pump() {
  if (done_ || waiting_) return;
  if (!fd_ || !hooks_.open()) {
    done_ = true;
    return;
  }
  for (int round = 0; round < 16; ++round) {
    const auto credit = hooks_.credit();
    if (credit == 0) return;  // input_ready resumes
    const auto want = std::min<std::size_t>(buffer_.size(), credit);
    const ssize_t n = ::read(fd_.get(), buffer_.data(), want);
    if (n > 0) {
      hooks_.bytes({buffer_.data(), static_cast<std::size_t>(n)});
      if (!hooks_.open()) {
        done_ = true;
        return;
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN && waiter_) {
      waiting_ = true;
      waiter_->async_wait(asio::posix::descriptor_base::wait_read,
                          [this, alive = alive_](const boost::system::error_code& ec) {
                            if (!*alive || ec) return;
                            waiting_ = false;
                            pump();
                          });
      return;
    }
    // End of input (or an error: nothing more will come).
    done_ = true;
    hooks_.ended();
    return;
  }
  asio::post(io_, [this, alive = alive_] {
    if (*alive) pump();
  });
}

}  // namespace pm::driver
