#include "agent/private_dir.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "pm/error.hpp"

namespace pm::agent {

namespace {

std::string parent_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Empties the directory `fd` (this user's, checked by the caller) and closes it. Depth-limited:
// nothing PMIx or Open MPI makes is deeper than a few levels.
bool empty_dir(int fd, uid_t me, int depth, std::string& why) {
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    why = std::string("cannot list a directory: ") + std::strerror(errno);
    ::close(fd);
    return false;
  }
  bool all = true;
  while (const dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    struct stat st {};
    if (::fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      why = std::string("cannot look at ") + e->d_name + ": " + std::strerror(errno);
      all = false;
      continue;
    }
    if (st.st_uid != me) {
      why = std::string(e->d_name) + " belongs to uid " + std::to_string(st.st_uid) + ": left";
      all = false;
      continue;
    }
    if (!S_ISDIR(st.st_mode)) {
      // A file, a socket, a link (removed, not followed).
      if (::unlinkat(fd, e->d_name, 0) != 0 && errno != ENOENT) {
        why = std::string("cannot remove ") + e->d_name + ": " + std::strerror(errno);
        all = false;
      }
      continue;
    }
    if (depth >= 32) {
      why = "directories nested too deeply: left";
      all = false;
      continue;
    }
    const int sub = ::openat(fd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) {
      if (errno == ENOENT) continue;
      why = std::string("cannot open ") + e->d_name + ": " + std::strerror(errno);
      all = false;
      continue;
    }
    struct stat sst {};
    if (::fstat(sub, &sst) != 0 || sst.st_uid != me || sst.st_dev != st.st_dev ||
        sst.st_ino != st.st_ino) {
      why = std::string(e->d_name) + " changed while it was removed: left";
      ::close(sub);
      all = false;
      continue;
    }
    if (!empty_dir(sub, me, depth + 1, why)) {
      all = false;
      continue;
    }
    if (::unlinkat(fd, e->d_name, AT_REMOVEDIR) != 0 && errno != ENOENT) {
      why = std::string("cannot remove ") + e->d_name + ": " + std::strerror(errno);
      all = false;
    }
  }
  ::closedir(d);  // closes fd
  return all;
}

// Removes the entry `name` of the directory `parent_fd`: a directory of this user's with what it
// holds, anything else (a link included) as an entry. Another user's directory is left.
bool remove_at(int parent_fd, const char* name, uid_t me, std::string& why) {
  const int fd = ::openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return true;
    if (errno == ENOTDIR || errno == ELOOP) {  // not a directory: a link or a file
      struct stat st {};
      if (::fstatat(parent_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_uid != me) {
        why = std::string(name) + " belongs to uid " + std::to_string(st.st_uid) + ": left";
        return false;
      }
      if (::unlinkat(parent_fd, name, 0) == 0 || errno == ENOENT) return true;
    }
    why = std::string("cannot open ") + name + ": " + std::strerror(errno);
    return false;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_uid != me) {
    why = std::string(name) + " belongs to uid " + std::to_string(st.st_uid) + ": left";
    ::close(fd);
    return false;
  }
  if (!empty_dir(fd, me, 0, why)) return false;
  if (::unlinkat(parent_fd, name, AT_REMOVEDIR) != 0 && errno != ENOENT) {
    why = std::string("cannot remove ") + name + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

}  // namespace

std::string unsafe_parent(const std::string& parent) {
  struct stat st {};
  if (::stat(parent.c_str(), &st) != 0) return parent + ": " + std::strerror(errno);
  if (!S_ISDIR(st.st_mode)) return parent + " is not a directory";
  const uid_t me = ::geteuid();
  if (st.st_uid != me && st.st_uid != 0) {
    return parent + " belongs to another user (uid " + std::to_string(st.st_uid) + ")";
  }
  const bool others_write =
      (st.st_mode & S_IWOTH) != 0 || ((st.st_mode & S_IWGRP) != 0 && st.st_gid != ::getegid());
  if (others_write && (st.st_mode & S_ISVTX) == 0) {
    return parent + " is writable by other users and has no sticky bit";
  }
  return {};
}

pm::link::owned_fd make_private_dir(const std::string& path) {
  const std::string parent = parent_of(path);
  if (const std::string why = unsafe_parent(parent); !why.empty()) {
    throw pm::error(pm::errc::system, "will not make a private directory in " + why);
  }
  if (::mkdir(path.c_str(), 0700) != 0) {
    throw pm::error(pm::errc::system, "cannot create " + path + ": " + std::strerror(errno));
  }
  pm::link::owned_fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0) {
    throw pm::error(pm::errc::system, "cannot open " + path + ": " + std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 0077) != 0) {
    // Not what mkdir made (someone replaced it): not ours to remove either.
    throw pm::error(pm::errc::system,
                    path + " is not a private directory of uid " + std::to_string(::geteuid()));
  }
  return fd;
}

bool remove_private_tree(const std::string& path, std::string* why) noexcept {
  std::string reason;
  bool ok = false;
  try {
    const std::string parent = parent_of(path);
    const std::string name = base_of(path);
    if (name.empty() || name == "." || name == "..") {
      reason = "not a directory entry";
    } else if (const int pfd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
               pfd < 0) {
      ok = errno == ENOENT;
      if (!ok) reason = "cannot open " + parent + ": " + std::strerror(errno);
    } else {
      ok = remove_at(pfd, name.c_str(), ::geteuid(), reason);
      ::close(pfd);
    }
  } catch (...) {
    reason = "out of memory";
    ok = false;
  }
  if (!ok && why != nullptr) *why = path + ": " + reason;
  return ok;
}

std::size_t remove_stale_private_dirs(const std::string& root, const std::string& prefix) noexcept {
  std::size_t removed = 0;
  const int rfd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (rfd < 0) return 0;
  const int lfd = ::dup(rfd);  // fdopendir takes one; the other stays for openat
  DIR* d = lfd < 0 ? nullptr : ::fdopendir(lfd);
  if (d == nullptr) {
    if (lfd >= 0) ::close(lfd);
    ::close(rfd);
    return 0;
  }
  const uid_t me = ::geteuid();
  try {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind(prefix, 0) != 0) continue;
      char* end = nullptr;
      const long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
      if (pid <= 0 || end == nullptr || *end != '.' || pid == ::getpid()) continue;
      if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
      // Opened without following a link, checked to be this user's: only then emptied.
      const int fd = ::openat(rfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) continue;
      struct stat st {};
      const bool mine = ::fstat(fd, &st) == 0 && st.st_uid == me;
      ::close(fd);
      if (!mine) continue;
      std::string why;
      if (remove_at(rfd, name.c_str(), me, why)) ++removed;
    }
  } catch (...) {
  }
  ::closedir(d);
  ::close(rfd);
  return removed;
}

}  // namespace pm::agent
