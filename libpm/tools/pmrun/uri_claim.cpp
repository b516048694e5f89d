#include "uri_claim.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "io/safe_path.hpp"
#include "pm/error.hpp"
#include "text/printable.hpp"

namespace pmrun {

namespace {

struct closer {
  int fd = -1;
  ~closer() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

uri_claim claim_uri_file(const std::string& path, const std::string& text, const char* option,
                         const std::function<std::string(const std::string&)>& live,
                         std::string& holder) {
  const auto fail = [&](const std::string& why) {
    return pm::error(pm::errc::system, std::string(option) + ": cannot write '" +
                                           pm::text::printable(path) + "': " + why);
  };
  const auto slash = path.rfind('/');
  const std::string dir_path = slash == std::string::npos ? "."
                               : slash == 0               ? "/"
                                                          : path.substr(0, slash);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name.empty() || name == "." || name == "..") throw fail("not a file name");
  pm::io::path_problem problem;
  const auto dir = pm::io::open_directory(dir_path, false, problem);
  if (!dir) throw pm::error(pm::errc::system, std::string(option) + ": " + problem.message());
  // The whole text first, under a name of this process's, then linked into place: a reader never
  // sees half a URI.
  const std::string temp = "." + name + ".claim." + std::to_string(::getpid());
  {
    closer out{pm::io::open_file_in(dir, temp, 0600, problem)};
    if (out.fd < 0)
      throw pm::error(pm::errc::system, std::string(option) + ": " + problem.message());
    if (::write(out.fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      const int e = errno;
      ::unlinkat(dir.fd(), temp.c_str(), 0);
      throw fail(std::strerror(e));
    }
  }
  const auto drop_temp = [&] { ::unlinkat(dir.fd(), temp.c_str(), 0); };
  // A few rounds at most: each is lost only to another start that replaced the file meanwhile.
  for (int round = 0; round < 50; ++round) {
    if (::linkat(dir.fd(), temp.c_str(), dir.fd(), name.c_str(), 0) == 0) {
      drop_temp();
      return uri_claim::written;
    }
    if (errno != EEXIST) {
      const int e = errno;
      drop_temp();
      throw fail(std::strerror(e));
    }
    // It exists: the one who holds its lock decides about it; the others wait, then see the
    // file that decision left.
    closer held{::openat(dir.fd(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)};
    if (held.fd < 0) {
      if (errno == ENOENT) continue;  // removed meanwhile (its DVM stopped): link again
      const int e = errno;
      drop_temp();
      throw fail(std::strerror(e));
    }
    struct stat mine {
    }, now{};
    if (::fstat(held.fd, &mine) != 0 || !S_ISREG(mine.st_mode) || mine.st_uid != ::geteuid()) {
      drop_temp();
      throw fail("it is not a regular file of this user");
    }
    while (::flock(held.fd, LOCK_EX) != 0 && errno == EINTR) {
    }
    // Replaced while this waited for the lock: look again.
    if (::fstatat(dir.fd(), name.c_str(), &now, AT_SYMLINK_NOFOLLOW) != 0 ||
        now.st_ino != mine.st_ino || now.st_dev != mine.st_dev) {
      continue;
    }
    holder = live(path);
    if (!holder.empty()) {
      drop_temp();
      return uri_claim::taken;
    }
    // Its DVM is gone: the file is this start's (the lock goes with the old file's descriptor).
    if (::renameat(dir.fd(), temp.c_str(), dir.fd(), name.c_str()) != 0) {
      const int e = errno;
      drop_temp();
      throw fail(std::strerror(e));
    }
    return uri_claim::written;
  }
  drop_temp();
  throw fail("other starts kept replacing it");
}

}  // namespace pmrun
