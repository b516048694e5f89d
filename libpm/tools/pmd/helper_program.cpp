#include "helper_program.hpp"

#include <signal.h>
#include <spawn.h>

#include <cstring>

#include "module_path.hpp"

extern char** environ;

namespace pmd {

std::string helper_path() {
  return module_path("PM_PMD_HELPER", ".", "pmd-helper");
}

pid_t spawn_helper(const std::vector<std::string>& args,
                   const std::vector<std::pair<int, int>>& fds, std::string& why) {
  const std::string path = helper_path();
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(path.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  ::posix_spawn_file_actions_init(&fa);
  ::posix_spawnattr_init(&attr);
  for (const auto& [from, to] : fds) ::posix_spawn_file_actions_adddup2(&fa, from, to);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  ::posix_spawnattr_setsigmask(&attr, &none);
  ::posix_spawnattr_setsigdefault(&attr, &all);
  ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, path.c_str(), &fa, &attr, argv.data(), ::environ);
  ::posix_spawn_file_actions_destroy(&fa);
  ::posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    why = "cannot start " + path + ": " + std::strerror(rc);
    return -1;
  }
  return pid;
}

}  // namespace pmd
