#include "sys/local_files.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pm::sys {

file_facts local_files::look(const std::string& path) const {
  using kind = file_facts::kind;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {kind::missing, errno};
  if (S_ISDIR(st.st_mode)) return {kind::directory, 0};
  if (!S_ISREG(st.st_mode)) return {kind::not_executable, EACCES};
  if (::access(path.c_str(), X_OK) != 0) return {kind::not_executable, errno};
  return {kind::executable, 0};
}

std::string local_files::working_directory() const {
  std::string here(4096, '\0');
  if (::getcwd(here.data(), here.size()) == nullptr) return {};
  here.resize(std::strlen(here.c_str()));
  return here;
}

}  // namespace pm::sys
