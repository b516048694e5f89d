#include "io/safe_path.hpp"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "text/printable.hpp"

namespace pm::io {

namespace {

// Links followed in one walk at most (Linux's own limit for a path lookup).
constexpr int max_links = 40;

std::string quoted(std::string_view path) {
  return "'" + text::printable(path) + "'";
}

std::string user_name(uid_t uid) {
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
    return found->pw_name;
  }
  return {};
}

std::string group_name(gid_t gid) {
  std::vector<char> buf(65536);
  group gr{};
  group* found = nullptr;
  if (::getgrgid_r(gid, &gr, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
    return found->gr_name;
  }
  return {};
}

// "bob (uid 1001)", or "uid 1001" when the user has no name.
std::string who(uid_t uid) {
  const auto name = user_name(uid);
  return name.empty() ? "uid " + std::to_string(uid) : name + " (uid " + std::to_string(uid) + ")";
}

// Who may own what the job walks through: "root", or "alice (uid 1000) or root".
std::string allowed_owners() {
  const uid_t me = ::geteuid();
  return me == 0 ? std::string("root") : who(me) + " or root";
}

std::string mode_text(mode_t mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

const char* kind_of(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "of an unknown kind";
}

// The group's only member is `owner` (Debian's StrictModes rule for "user private groups"): no
// other user has it as primary group or is listed in it, and the owner is in it one way or the
// other. Reads the user database (all of it): only asked for a group-writable directory.
bool private_group_uncached(gid_t gid, uid_t owner) {
  const std::string owner_name = user_name(owner);
  if (owner_name.empty()) return false;
  std::vector<char> buf(65536);
  group gr{};
  group* found = nullptr;
  if (::getgrgid_r(gid, &gr, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
    return false;
  }
  int members = 0;
  for (char** m = found->gr_mem; m != nullptr && *m != nullptr; ++m) {
    if (owner_name != *m) return false;
    ++members;
  }
  std::vector<char> pbuf(16384);
  passwd pw{};
  passwd* p = nullptr;
  bool others = false;
  ::setpwent();
  while (::getpwent_r(&pw, pbuf.data(), pbuf.size(), &p) == 0 && p != nullptr) {
    if (p->pw_gid != gid) continue;
    if (p->pw_uid != owner) {
      others = true;
      break;
    }
    ++members;
  }
  ::endpwent();
  return !others && members > 0;
}

// The answer is kept for the process's life (rank directories made under a umask of 002 are all
// group-writable: one reading of the user database, not one per rank).
bool private_group(gid_t gid, uid_t owner) {
  static std::mutex lock;
  static std::map<std::pair<gid_t, uid_t>, bool> known;
  const std::lock_guard<std::mutex> hold(lock);
  const auto key = std::make_pair(gid, owner);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  const bool answer = private_group_uncached(gid, owner);
  known.emplace(key, answer);
  return answer;
}

// An access ACL beyond the mode bits (then the group bits are the ACL's mask, and a named user or
// group may be the one that can write).
bool has_access_acl(int fd) {
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);  // an O_PATH descriptor
  const ssize_t n = ::getxattr(proc.c_str(), "system.posix_acl_access", nullptr, 0);
  return n > 0;
}

// Why directory `st` (open as `fd`) may not be walked through, or "" when it may. `sticky_ok`: a
// sticky directory the user named may be writable by others.
std::string directory_refusal(const struct stat& st, int fd, bool sticky_ok) {
  if (!S_ISDIR(st.st_mode)) return std::string("is ") + kind_of(st.st_mode) + ", not a directory";
  const uid_t me = ::geteuid();
  if (st.st_uid != me && st.st_uid != 0) {
    return "is owned by " + who(st.st_uid) + ", not by " + allowed_owners();
  }
  const bool sticky = (st.st_mode & S_ISVTX) != 0;
  if (sticky_ok && sticky) return {};
  if ((st.st_mode & S_IWOTH) != 0) {
    return "is writable by every user (mode " + mode_text(st.st_mode) + ")";
  }
  if ((st.st_mode & S_IWGRP) != 0) {
    if (has_access_acl(fd)) {
      return "has an access ACL that lets others write (mode " + mode_text(st.st_mode) + ")";
    }
    if (!private_group(st.st_gid, st.st_uid)) {
      const auto g = group_name(st.st_gid);
      return "is writable by its group " + (g.empty() ? std::string() : g + " ") + "(gid " +
             std::to_string(st.st_gid) + ", mode " + mode_text(st.st_mode) +
             "), which has other members than its owner";
    }
  }
  return {};
}

// Why existing file `st` may not be truncated and written, or "".
std::string file_refusal(const struct stat& st) {
  if (S_ISLNK(st.st_mode)) return "is a symbolic link";
  if (!S_ISREG(st.st_mode))
    return std::string("is ") + kind_of(st.st_mode) + ", not a regular file";
  const uid_t me = ::geteuid();
  if (st.st_uid != me) {
    return "is owned by " + who(st.st_uid) + ", not by " + (me == 0 ? "root" : who(me));
  }
  if (st.st_nlink != 1) {
    return "has " + std::to_string(st.st_nlink) + " hard links (another name may be someone's)";
  }
  return {};
}

std::string join(const std::string& dir, std::string_view name) {
  if (dir.empty()) return std::string(name);
  if (dir.back() == '/') return dir + std::string(name);
  return dir + "/" + std::string(name);
}

// The parent of `path` lexically ("/a/b" -> "/a", "/a" -> "/").
std::string parent_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos || slash == 0) return "/";
  return path.substr(0, slash);
}

void split_into(std::string_view path, std::deque<std::string>& out, bool front) {
  std::vector<std::string> parts;
  std::size_t pos = 0;
  while (pos <= path.size()) {
    const auto slash = path.find('/', pos);
    const auto part =
        path.substr(pos, slash == std::string_view::npos ? std::string_view::npos : slash - pos);
    if (!part.empty() && part != ".") parts.emplace_back(part);
    if (slash == std::string_view::npos) break;
    pos = slash + 1;
  }
  if (front) {
    out.insert(out.begin(), parts.begin(), parts.end());
  } else {
    out.insert(out.end(), parts.begin(), parts.end());
  }
}

bool set_error(path_problem& p, std::string at, int err) {
  p.at = std::move(at);
  p.why.clear();
  p.error = err == 0 ? EIO : err;
  return false;
}

bool set_refusal(path_problem& p, std::string at, std::string why) {
  p.at = std::move(at);
  p.why = std::move(why);
  p.error = 0;
  return false;
}

class fd_guard {
 public:
  explicit fd_guard(int fd = -1) : fd_(fd) {}
  ~fd_guard() {
    if (fd_ >= 0) ::close(fd_);
  }
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  int get() const { return fd_; }
  void reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

constexpr int dir_flags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

// Opens "/" and checks it.
bool open_root(fd_guard& cur, path_problem& p, bool sticky_ok) {
  cur.reset(::open("/", dir_flags));
  if (cur.get() < 0) return set_error(p, "/", errno);
  struct stat st {};
  if (::fstat(cur.get(), &st) != 0) return set_error(p, "/", errno);
  if (auto why = directory_refusal(st, cur.get(), sticky_ok); !why.empty()) {
    return set_refusal(p, "/", std::move(why));
  }
  return true;
}

// Walks `todo` from `cur` (whose path is `shown`): the shared step of open_directory (named:
// trusted links followed, sticky exception) and open_below (neither).
bool walk(fd_guard& cur, std::string& shown, std::deque<std::string> todo, bool named, bool create,
          bool& created, path_problem& p) {
  int links = 0;
  int races = 0;
  created = false;
  while (!todo.empty()) {
    const std::string name = std::move(todo.front());
    todo.pop_front();
    const std::string next = name == ".." ? parent_of(shown) : join(shown, name);
    int fd = ::openat(cur.get(), name.c_str(), dir_flags);
    bool made = false;
    if (fd < 0 && errno == ENOENT && create) {
      if (::mkdirat(cur.get(), name.c_str(), 0755) == 0) {
        made = true;
      } else if (errno != EEXIST) {
        return set_error(p, next, errno);
      }
      fd = ::openat(cur.get(), name.c_str(), dir_flags);
      if (fd < 0 && errno == ENOENT && ++races < 8) {  // removed meanwhile: try again
        todo.push_front(name);
        continue;
      }
    }
    if (fd < 0) {
      const int e = errno;
      if (e != ELOOP && e != ENOTDIR) return set_error(p, next, e);
      struct stat ls {};
      if (::fstatat(cur.get(), name.c_str(), &ls, AT_SYMLINK_NOFOLLOW) != 0) {
        return set_error(p, next, errno);
      }
      if (!S_ISLNK(ls.st_mode)) {
        return set_refusal(p, next, std::string("is ") + kind_of(ls.st_mode) + ", not a directory");
      }
      if (!named) return set_refusal(p, next, "is a symbolic link");
      const uid_t me = ::geteuid();
      if (ls.st_uid != me && ls.st_uid != 0) {
        return set_refusal(
            p, next,
            "is a symbolic link owned by " + who(ls.st_uid) + ", not by " + allowed_owners());
      }
      if (++links > max_links) return set_error(p, next, ELOOP);
      std::vector<char> target(PATH_MAX + 1);
      const ssize_t n = ::readlinkat(cur.get(), name.c_str(), target.data(), target.size() - 1);
      if (n < 0) return set_error(p, next, errno);
      const std::string_view text(target.data(), static_cast<std::size_t>(n));
      split_into(text, todo, true);
      if (!text.empty() && text.front() == '/') {
        shown = "/";
        if (!open_root(cur, p, named)) return false;
      }
      continue;
    }
    fd_guard child(fd);
    struct stat st {};
    if (::fstat(child.get(), &st) != 0) return set_error(p, next, errno);
    if (auto why = directory_refusal(st, child.get(), named); !why.empty()) {
      return set_refusal(p, next, std::move(why));
    }
    cur.reset(child.release());
    shown = next;
    created = made;
  }
  return true;
}

}  // namespace

std::string path_problem::message(std::string_view verb) const {
  if (refused()) {
    return "refusing " + quoted(target) + ": " + (at == target ? "it" : quoted(at)) + " " + why;
  }
  std::string out = "cannot " + std::string(verb) + " " + quoted(target) + ": " +
                    std::error_code(error, std::generic_category()).message();
  if (!at.empty() && at != target) out += " (at " + quoted(at) + ")";
  return out;
}

safe_dir::safe_dir(safe_dir&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), path_(std::move(o.path_)), created_(o.created_) {}

safe_dir& safe_dir::operator=(safe_dir&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::move(o.path_);
    created_ = o.created_;
  }
  return *this;
}

safe_dir::~safe_dir() {
  if (fd_ >= 0) ::close(fd_);
}

safe_dir safe_dir::duplicate() const {
  if (fd_ < 0) return {};
  return safe_dir(::fcntl(fd_, F_DUPFD_CLOEXEC, 3), path_, created_);
}

safe_dir open_directory(std::string_view path, bool create, path_problem& problem) {
  problem = {};
  problem.target = std::string(path);
  if (path.empty()) {
    set_error(problem, {}, ENOENT);
    return {};
  }
  std::deque<std::string> todo;
  if (path.front() != '/') {
    // The working directory's physical path: its ancestors are walked and checked too.
    std::vector<char> cwd(PATH_MAX + 1);
    if (::getcwd(cwd.data(), cwd.size()) == nullptr) {
      set_error(problem, ".", errno);
      return {};
    }
    split_into(cwd.data(), todo, false);
  }
  split_into(path, todo, false);
  fd_guard cur;
  std::string shown = "/";
  if (!open_root(cur, problem, true)) return {};
  bool created = false;
  if (!walk(cur, shown, std::move(todo), true, create, created, problem)) return {};
  return safe_dir(cur.release(), shown, created);
}

safe_dir open_below(const safe_dir& base, std::string_view relative, bool create,
                    path_problem& problem) {
  problem = {};
  problem.target = join(base.path(), relative);
  std::deque<std::string> todo;
  split_into(relative, todo, false);
  for (const auto& part : todo) {
    if (part == "..") {
      set_refusal(problem, problem.target, "leaves its directory ('..')");
      return {};
    }
  }
  fd_guard cur(::fcntl(base.fd(), F_DUPFD_CLOEXEC, 3));
  if (cur.get() < 0) {
    set_error(problem, base.path(), errno);
    return {};
  }
  std::string shown = base.path();
  bool created = false;
  if (!walk(cur, shown, std::move(todo), false, create, created, problem)) return {};
  return safe_dir(cur.release(), shown, created);
}

int open_file_in(const safe_dir& dir, std::string_view name, mode_t mode, path_problem& problem,
                 bool keep) {
  problem = {};
  const std::string file(name);
  problem.target = join(dir.path(), name);
  if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos) {
    set_refusal(problem, problem.target, "is not a file name");
    return -1;
  }
  for (int attempt = 0; attempt < 8; ++attempt) {
    const int fd = ::openat(dir.fd(), file.c_str(),
                            O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, mode);
    if (fd >= 0) return fd;  // new: ours, in a directory only we (or root) can change
    if (errno != EEXIST) {
      set_error(problem, problem.target, errno);
      return -1;
    }
    // It exists (perhaps as a link, which O_EXCL never follows): reused only if it is ours.
    struct stat ls {};
    if (::fstatat(dir.fd(), file.c_str(), &ls, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      set_error(problem, problem.target, errno);
      return -1;
    }
    if (auto why = file_refusal(ls); !why.empty()) {
      set_refusal(problem, problem.target, std::move(why));
      return -1;
    }
    fd_guard existing(::openat(dir.fd(), file.c_str(),
                               O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
    if (existing.get() < 0) {
      const int e = errno;
      if (e == ENOENT) continue;
      if (e == ELOOP) {
        set_refusal(problem, problem.target, "is a symbolic link");
      } else {
        set_error(problem, problem.target, e);
      }
      return -1;
    }
    struct stat st {};
    if (::fstat(existing.get(), &st) != 0) {
      set_error(problem, problem.target, errno);
      return -1;
    }
    if (auto why = file_refusal(st); !why.empty()) {  // swapped since the look above
      set_refusal(problem, problem.target, std::move(why));
      return -1;
    }
    if (keep) {
      if (::lseek(existing.get(), 0, SEEK_END) < 0) {
        set_error(problem, problem.target, errno);
        return -1;
      }
    } else if (::ftruncate(existing.get(), 0) != 0) {
      set_error(problem, problem.target, errno);
      return -1;
    }
    const int flags = ::fcntl(existing.get(), F_GETFL);
    if (flags >= 0) ::fcntl(existing.get(), F_SETFL, flags & ~O_NONBLOCK);
    return existing.release();
  }
  set_error(problem, problem.target, EAGAIN);
  return -1;
}

int open_file(std::string_view path, mode_t mode, path_problem& problem) {
  problem = {};
  problem.target = std::string(path);
  const auto slash = path.find_last_of('/');
  const std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
  std::string_view dir_path = slash == std::string_view::npos ? std::string_view(".")
                              : slash == 0                    ? std::string_view("/")
                                                              : path.substr(0, slash);
  if (name.empty() || name == "." || name == "..") {
    set_refusal(problem, problem.target, "is not a file name");
    return -1;
  }
  path_problem dir_problem;
  const safe_dir dir = open_directory(dir_path, false, dir_problem);
  if (!dir) {
    problem.at = dir_problem.at;
    problem.why = dir_problem.why;
    problem.error = dir_problem.error;
    return -1;
  }
  const int fd = open_file_in(dir, name, mode, problem);
  problem.target = std::string(path);  // as the user wrote it
  if (fd < 0 && problem.at == join(dir.path(), name)) problem.at = problem.target;
  return fd;
}

bool check_below(const safe_dir& base, std::string_view relative,
                 std::span<const std::string_view> files, path_problem& problem) {
  problem = {};
  problem.target = join(base.path(), relative);
  std::deque<std::string> todo;
  split_into(relative, todo, false);
  fd_guard cur(::fcntl(base.fd(), F_DUPFD_CLOEXEC, 3));
  if (cur.get() < 0) return set_error(problem, base.path(), errno);
  std::string shown = base.path();
  for (const auto& name : todo) {
    const std::string next = join(shown, name);
    struct stat ls {};
    if (::fstatat(cur.get(), name.c_str(), &ls, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) return true;  // made by the job later, checked then
      return set_error(problem, next, errno);
    }
    if (S_ISLNK(ls.st_mode)) return set_refusal(problem, next, "is a symbolic link");
    fd_guard child(::openat(cur.get(), name.c_str(), dir_flags));
    if (child.get() < 0) {
      if (errno == ENOENT) return true;
      if (errno == ELOOP) return set_refusal(problem, next, "is a symbolic link");
      if (errno == ENOTDIR) {
        return set_refusal(problem, next,
                           std::string("is ") + kind_of(ls.st_mode) + ", not a directory");
      }
      return set_error(problem, next, errno);
    }
    struct stat st {};
    if (::fstat(child.get(), &st) != 0) return set_error(problem, next, errno);
    if (auto why = directory_refusal(st, child.get(), false); !why.empty()) {
      return set_refusal(problem, next, std::move(why));
    }
    cur.reset(child.release());
    shown = next;
  }
  for (const auto file : files) {
    const std::string name(file);
    struct stat ls {};
    if (::fstatat(cur.get(), name.c_str(), &ls, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      problem.target = join(shown, name);
      return set_error(problem, problem.target, errno);
    }
    if (auto why = file_refusal(ls); !why.empty()) {
      problem.target = join(shown, name);
      return set_refusal(problem, problem.target, std::move(why));
    }
  }
  return true;
}

}  // namespace pm::io
