#include "own_process.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "pm/error.hpp"

namespace pmd {

std::optional<rlimit> become_agent_process() {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    throw pm::error(pm::errc::system,
                    std::string("cannot become a child subreaper: ") + std::strerror(errno));
  }
  // Under sshd pmd leads its own session already, and this fails harmlessly.
  ::setpgid(0, 0);
  ::signal(SIGPIPE, SIG_IGN);
  std::optional<rlimit> nofile;
  if (rlimit lim{}; ::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    nofile = lim;
    rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) != 0) nofile.reset();
  }
  return nofile;
}

pm::link::owned_fd signal_reader() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&set, s);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  return pm::link::owned_fd(::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC));
}

signals_read read_signals(int fd) {
  signals_read r;
  signalfd_siginfo si{};
  while (::read(fd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
    if (si.ssi_signo == SIGCHLD) {
      r.child = true;
    } else {
      r.others.push_back(static_cast<int>(si.ssi_signo));
    }
  }
  return r;
}

}  // namespace pmd
