#include "sys/spawner.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <string_view>

#include "pm/error.hpp"
#include "sys/pidfd.hpp"
#include "sys/sanitizers.hpp"
#include "text/printable.hpp"

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif

namespace pm::sys {

int exec_failure_code(int error_number) noexcept {
  return error_number == ENOENT ? 127 : 126;
}

namespace {

// Everything the child needs, prepared by the parent (the child may not allocate).
struct child_plan {
  const char* path;
  char* const* argv;
  char* const* envp;
  const char* wdir;  // nullptr: inherit
  int fds[3];        // -1: /dev/null
  bool new_group;
  bool restore_nofile;
  rlimit nofile;
  int parent_death_signal;
  const cpu_set_t* affinity;  // nullptr: inherit
  std::size_t affinity_size;
  pid_t parent;            // the spawner's pid, to notice that it died before the signal was armed
  volatile int error = 0;  // written by the child when it fails: errno
  volatile bool in_chdir = false;  // ... and whether it was the working directory that failed
};

// Moves a descriptor out of 0..2 so that the dup2 into 0..2 cannot clobber it.
int lift(int fd) {
  if (fd < 0 || fd > 2) return fd;
  return fcntl(fd, F_DUPFD, 3);
}

int child_main(void* arg) {
  auto* plan = static_cast<child_plan*>(arg);
  auto fail = [plan]() -> int {
    plan->error = errno;
    _exit(exec_failure_code(errno));
  };
  if (plan->new_group && setpgid(0, 0) != 0) return fail();
  if (plan->affinity != nullptr && sched_setaffinity(0, plan->affinity_size, plan->affinity) != 0) {
    return fail();
  }
  if (plan->parent_death_signal != 0) {
    if (prctl(PR_SET_PDEATHSIG, plan->parent_death_signal) != 0) return fail();
    if (getppid() != plan->parent) _exit(128 + plan->parent_death_signal);  // died meanwhile
  }
  // Default dispositions: a handler of the parent must not run in the child, an ignored signal
  // (SIGPIPE, SIGINT from nohup) must not stay ignored in the rank.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    sigaction(sig, &dfl, nullptr);  // fails harmlessly for the numbers glibc reserves
  }
  int fds[3];
  for (int i = 0; i < 3; ++i) {
    fds[i] =
        plan->fds[i] >= 0 ? lift(plan->fds[i]) : open("/dev/null", i == 0 ? O_RDONLY : O_WRONLY);
    if (fds[i] < 0) return fail();
  }
  for (int i = 0; i < 3; ++i) {
    if (fds[i] == i) {
      // Already in place (only when it was /dev/null opened into the free slot): keep it open.
      int flags = fcntl(i, F_GETFD);
      if (flags >= 0) fcntl(i, F_SETFD, flags & ~FD_CLOEXEC);
    } else if (dup2(fds[i], i) < 0) {
      return fail();
    }
  }
  if (plan->wdir != nullptr && chdir(plan->wdir) != 0) {
    plan->in_chdir = true;
    return fail();
  }
  if (plan->restore_nofile) setrlimit(RLIMIT_NOFILE, &plan->nofile);
  // Every other descriptor, also those the embedding program opened without O_CLOEXEC.
  if (syscall(SYS_close_range, 3U, ~0U, 0U) != 0) {
    for (int fd = 3; fd < 65536; ++fd) close(fd);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execve(plan->path, plan->argv, plan->envp);
  return fail();
}

std::vector<char*> c_strings(const std::vector<std::string>& list) {
  std::vector<char*> out;
  out.reserve(list.size() + 1);
  for (const auto& s : list) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// The interpreter a script's "#!" line names, when that interpreter does not exist: execve then
// fails with ENOENT though the script is there, and "No such file or directory" alone would send
// the user looking for the script. Read only on this failure path.
std::optional<std::string> missing_interpreter(const spawn_request& request) {
  std::string path = request.path;
  if (path.front() != '/' && !request.wdir.empty()) path = request.wdir + "/" + path;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char head[256];
  const auto n = read(fd, head, sizeof head);
  close(fd);
  if (n < 3 || head[0] != '#' || head[1] != '!') return std::nullopt;
  const std::string_view line(head + 2, static_cast<std::size_t>(n) - 2);
  const auto start = line.find_first_not_of(" \t");
  if (start == std::string_view::npos) return std::nullopt;
  const auto end = line.find_first_of(" \t\r\n", start);
  std::string interpreter(line.substr(start, end == std::string_view::npos ? end : end - start));
  struct stat st {};
  if (interpreter.empty() || stat(interpreter.c_str(), &st) == 0) return std::nullopt;
  return interpreter;
}

[[noreturn]] void exec_failed(const spawn_request& request, int error_number,
                              bool in_chdir = false) {
  const auto code = error_number == ENOENT ? errc::not_found : errc::not_executable;
  if (in_chdir) {
    // Not the program's fault ("cannot execute '/usr/bin/pwd': Not a directory" said it was).
    throw error(code, "cannot enter the working directory '" + text::printable(request.wdir) +
                          "': " + std::strerror(error_number));
  }
  if (error_number == ENOENT) {
    if (auto interpreter = missing_interpreter(request)) {
      const auto& shown = request.argv.empty() ? request.path : request.argv.front();
      throw error(errc::not_found, "cannot execute '" + text::printable(shown) +
                                       "': its interpreter '" + text::printable(*interpreter) +
                                       "' (#! line) does not exist");
    }
  }
  const std::string what = error_number == ENOENT && !request.wdir.empty()
                               ? "cannot execute '" + text::printable(request.path) + "' in '" +
                                     text::printable(request.wdir) + "'"
                               : "cannot execute '" + text::printable(request.path) + "'";
  throw error(code, what + ": " + std::strerror(error_number));
}

// posix_spawn + pidfd_open: for systems that refuse clone with CLONE_PIDFD.
spawned_process spawn_fallback(const spawn_request& request, child_plan& plan) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  for (int i = 0; i < 3; ++i) {
    if (plan.fds[i] >= 0)
      posix_spawn_file_actions_adddup2(&actions, plan.fds[i], i);
    else
      posix_spawn_file_actions_addopen(&actions, i, "/dev/null", i == 0 ? O_RDONLY : O_WRONLY, 0);
  }
  if (plan.wdir != nullptr) posix_spawn_file_actions_addchdir_np(&actions, plan.wdir);
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);
  short flags = POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK;
  if (plan.new_group) {
    flags |= POSIX_SPAWN_SETPGROUP;
    posix_spawnattr_setpgroup(&attr, 0);
  }
  posix_spawnattr_setflags(&attr, flags);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, plan.path, &actions, &attr, plan.argv, plan.envp);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    // posix_spawn does not say whether the chdir or the exec failed: a directory that cannot be
    // entered is the chdir's.
    struct stat st {};
    const bool bad_wdir =
        !request.wdir.empty() && (::stat(request.wdir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
                                  ::access(request.wdir.c_str(), X_OK) != 0);
    exec_failed(request, rc, bad_wdir);
  }
  // posix_spawn cannot bind: the new process is bound at once, before it can start a thread of
  // its own in all but the rarest interleaving (this path serves only kernels without CLONE_PIDFD).
  if (plan.affinity != nullptr) sched_setaffinity(pid, plan.affinity_size, plan.affinity);
  const int pidfd = open_pidfd(pid);
  if (pidfd < 0) {
    const int e = errno;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    throw error(errc::launch, std::string("pidfd_open: ") + std::strerror(e));
  }
  return {pid, pidfd};
}

}  // namespace

spawned_process spawn(const spawn_request& request) {
  auto argv = c_strings(request.argv);
  auto envp = c_strings(request.env);
  child_plan plan{};
  plan.path = request.path.c_str();
  plan.argv = argv.data();
  plan.envp = envp.data();
  plan.wdir = request.wdir.empty() ? nullptr : request.wdir.c_str();
  plan.fds[0] = request.stdin_fd;
  plan.fds[1] = request.stdout_fd;
  plan.fds[2] = request.stderr_fd;
  plan.new_group = request.new_process_group;
  plan.restore_nofile = request.nofile.has_value();
  if (request.nofile) plan.nofile = *request.nofile;
  plan.parent_death_signal = request.parent_death_signal;
  plan.parent = getpid();
  // The mask is built here: the child may not allocate.
  std::unique_ptr<cpu_set_t, void (*)(cpu_set_t*)> mask(nullptr, [](cpu_set_t* m) { CPU_FREE(m); });
  if (!request.cpus.empty()) {
    std::uint32_t top = 0;
    for (const auto c : request.cpus) top = std::max(top, c);
    mask.reset(CPU_ALLOC(top + 1));
    if (!mask) throw error(errc::launch, "cannot allocate a cpu mask");
    plan.affinity_size = CPU_ALLOC_SIZE(top + 1);
    CPU_ZERO_S(plan.affinity_size, mask.get());
    for (const auto c : request.cpus) CPU_SET_S(c, plan.affinity_size, mask.get());
    plan.affinity = mask.get();
  }

  // Remembered: the fallback is taken without retrying. ThreadSanitizer does not model a CLONE_VM
  // child running on the caller's memory (from a thread other than the main one, a DVM's from
  // pm_dvm_start, it reports the thread's teardown as racing with the joiner): its builds take
  // posix_spawn, which it knows, from the start.
#if defined(PM_THREAD_SANITIZER)
  static bool clone_refused = true;
#else
  static bool clone_refused = false;
#endif
  if (!clone_refused) {
    // The child runs on this stack while we are suspended (CLONE_VFORK), until it execs or exits.
    // Allocated at the first spawn, not zero-filled: a thread_local array lived in the static TLS
    // block, which the loader zero-fills at every program start (16 page faults and 64 KB
    // resident in pmrun and pmd, on every launch); the child touches only the top page or two.
    constexpr std::size_t stack_size = 64 * 1024;
    static thread_local std::unique_ptr<char[]> stack_memory;
    if (!stack_memory) stack_memory.reset(new char[stack_size]);
    char* const stack = stack_memory.get();
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);  // no handler of ours may run in the child
    int pidfd = -1;
    const pid_t pid = clone(child_main, stack + stack_size,
                            CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD, &plan, &pidfd);
    const int clone_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (pid > 0) {
      if (plan.error != 0) {
        wait_exit(pidfd);
        close(pidfd);
        exec_failed(request, plan.error, plan.in_chdir);
      }
      return {pid, pidfd};
    }
    if (clone_errno != EINVAL && clone_errno != ENOSYS && clone_errno != EPERM) {
      throw error(errc::launch,
                  std::string("cannot start a process: ") + std::strerror(clone_errno));
    }
    clone_refused = true;
  }
  return spawn_fallback(request, plan);
}

}  // namespace pm::sys
