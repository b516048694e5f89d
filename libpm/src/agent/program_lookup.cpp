#include "agent/program_lookup.hpp"

namespace pm::agent {
std::string working_directory_of(const std::string& wdir, bool may_fall_back, std::string_view home,
                                 const host_files& files) {
  if (!may_fall_back || wdir.empty()) return wdir;
  if (files.look(wdir).what == file_facts::kind::directory) return wdir;
  return home.empty() ? std::string("/") : std::string(home);
}

}  // namespace pm::agent
