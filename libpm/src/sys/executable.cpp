#include "sys/executable.hpp"

#include "pm/error.hpp"
#include "sys/local_files.hpp"
#include "sys/program_search.hpp"

namespace pm::sys {

std::string resolve_executable(std::string_view program, std::string_view path_env,
                               std::string_view wdir) {
  auto found = find_program(program, path_env, wdir, local_files{});
  if (auto* path = std::get_if<std::string>(&found)) return std::move(*path);
  const auto& refused = std::get<program_refusal>(found);
  throw error(refused.code == 127 ? errc::not_found : errc::not_executable, refused.reason);
}

}  // namespace pm::sys
