// Where a rank starts and which file it executes, decided from facts about the host's files
// (host_files.hpp): the working-directory fallback and the PATH search as execvp does it. Pure
// but for the questions it asks `files`.
#pragma once

#include <string>
#include <string_view>
#include <variant>

#include "agent/host_files.hpp"
#include "sys/program_search.hpp"

namespace pm::agent {

using sys::find_program;
using sys::program_refusal;

/// What a rank runs, and where.
struct program_place {
  std::string path;  ///< what execve runs
  std::string wdir;  ///< where the rank starts ("" the agent's own directory)
};

/// The working directory: `wdir`, or where it is the launcher's directory (`may_fall_back`) and
/// not a directory on this host, `home` (the rank's HOME; "/" without one), as Open MPI does.
std::string working_directory_of(const std::string& wdir, bool may_fall_back, std::string_view home,
                                 const host_files& files);

}  // namespace pm::agent
