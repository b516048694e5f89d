// safe_path: opening the files a job writes (per-rank output files, --report, --display-map-json)
// so that no other local user can redirect them: a walk from "/" with openat, one component at a
// time, that never follows a link it does not trust and never enters a directory another user
// owns or can write to. docs/output.md ("Where the files may be") states the rules; in short:
//
//   - every directory walked through or created is owned by the job's user (the effective uid) or
//     by root;
//   - none is writable by other users: not by "other", not by its group unless that group is the
//     owner's private group (its only member is the owner: Debian's StrictModes rule), and not
//     through an access ACL. The one exception is a directory with the sticky bit (/tmp, /var/tmp,
//     /dev/shm) among those the user named: in it nobody can rename or remove what the job made.
//     Directories the job makes below the one named (DIR/1, DIR/1/rank.0) never get it;
//   - a symbolic link is followed only within the path the user named and only when it belongs to
//     the job's user or root (what Linux's fs.protected_symlinks allows in sticky directories),
//     40 at most; never below it, and never as the file itself;
//   - a file is created with O_CREAT|O_EXCL|O_NOFOLLOW; one that exists is reused (truncated) only
//     when it is a regular file of the job's user with one link (opened with O_NOFOLLOW|O_NONBLOCK,
//     so that a planted FIFO cannot hang the launcher);
//   - a relative path is walked from "/" through the working directory's physical path
//     (getcwd), so the working directory's ancestors are held to the same rules.
//
// Each step holds the descriptor of the directory it checked and continues from it (openat,
// mkdirat), so a directory swapped for a link or for another directory after it was checked is
// never entered: nothing is looked up twice by name. Not thread-safe where it reads the group and
// user databases (a group-writable directory only).
#pragma once

#include <sys/types.h>

#include <span>
#include <string>
#include <string_view>

namespace pm::io {

/// Why a walk stopped: a refusal (`why`, with `error` 0) or a failed system call (`error`).
struct path_problem {
  std::string target;  ///< what was to be opened or created
  std::string at;      ///< the component at fault (may equal target)
  std::string why;     ///< a refusal: "is a symbolic link", "is owned by bob (uid 1001), ..."
  int error = 0;       ///< errno of a failed call, when not a refusal

  bool refused() const { return error == 0; }
  /// One line: "refusing 'T': 'A' is a symbolic link" ("it is ..." when A is T), or
  /// "cannot VERB 'T': <strerror>" with " (at 'A')" when A is another path. Control characters
  /// of the paths are spelled out.
  std::string message(std::string_view verb = "write") const;
};

/// A directory reached by a safe walk, held open (O_PATH): later walks continue from it.
class safe_dir {
 public:
  safe_dir() = default;
  safe_dir(int fd, std::string path, bool created) noexcept
      : fd_(fd), path_(std::move(path)), created_(created) {}
  safe_dir(safe_dir&& o) noexcept;
  safe_dir& operator=(safe_dir&& o) noexcept;
  safe_dir(const safe_dir&) = delete;
  safe_dir& operator=(const safe_dir&) = delete;
  ~safe_dir();

  explicit operator bool() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  /// The path it was reached by, for messages (links the walk followed are resolved in it).
  const std::string& path() const { return path_; }
  /// The walk created its last component (so it is empty).
  bool created() const { return created_; }
  /// Another descriptor of the same directory.
  safe_dir duplicate() const;

 private:
  int fd_ = -1;
  std::string path_;
  bool created_ = false;
};

/// The directory `path` as the user named it (absolute, or relative to the working directory),
/// creating each missing component with mode 0755 when `create`. Links owned by the job's user or
/// root are followed; a sticky directory may be writable by others. Empty with `problem` set when
/// refused or failed.
safe_dir open_directory(std::string_view path, bool create, path_problem& problem);

/// `relative` ("1/rank.0": components without "." or "..") below `base`, created (0755) where
/// missing when `create`: no link is followed, no sticky exception. Empty with `problem` set.
safe_dir open_below(const safe_dir& base, std::string_view relative, bool create,
                    path_problem& problem);

/// Creates file `name` (one component) in `dir` for writing, mode `mode` (less the umask), or
/// truncates it when it exists and may be reused (a regular file of the job's user, one link).
/// Returns the descriptor (O_WRONLY, O_CLOEXEC, blocking), or -1 with `problem` set.
/// `keep`: an existing file of ours is opened for appending instead of truncated (a restarted
/// rank's output follows its earlier incarnation's).
int open_file_in(const safe_dir& dir, std::string_view name, mode_t mode, path_problem& problem,
                 bool keep = false);

/// The file `path` as the user named it: its directory walked as open_directory (never created),
/// then open_file_in. -1 with `problem` set ("cannot write 'x/r.json': No such file or directory
/// (at 'x')" for a missing directory).
int open_file(std::string_view path, mode_t mode, path_problem& problem);

/// Checks, creating and opening nothing, what already exists of `relative` below `base` and of
/// `files` in it, by the rules open_below and open_file_in would apply: a refusal found now is a
/// refusal before anything starts. True when nothing there would be refused (missing is fine).
bool check_below(const safe_dir& base, std::string_view relative,
                 std::span<const std::string_view> files, path_problem& problem);

}  // namespace pm::io
