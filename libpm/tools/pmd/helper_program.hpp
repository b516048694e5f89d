// Starting pmd-helper (helper_main.cpp), the program that does for pmd what would need the dynamic
// loader: beside pmd in the same bin directory (PM_PMD_HELPER names another).
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace pmd {

/// Where pmd-helper is.
std::string helper_path();

/// Starts `pmd-helper ARGS...` with each (from, to) of `fds` as its descriptor `to` (the sources
/// must be above every `to`), its signals those of a fresh program (pmd blocks the ones it reads
/// from a signalfd), pmd's environment. Returns its pid, or -1 with `why` set to one line.
pid_t spawn_helper(const std::vector<std::string>& args,
                   const std::vector<std::pair<int, int>>& fds, std::string& why);

}  // namespace pmd
