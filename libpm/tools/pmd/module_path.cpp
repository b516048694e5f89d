#include "module_path.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

namespace pmd {

std::string module_path(const char* env_variable, const std::string& dirs, const char* file) {
  namespace fs = std::filesystem;
  if (const char* p = std::getenv(env_variable); p != nullptr && *p != '\0') return p;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return file;
  std::size_t at = 0;
  while (at <= dirs.size()) {
    const auto end = std::min(dirs.find(':', at), dirs.size());
    const fs::path candidate = exe.parent_path() / dirs.substr(at, end - at) / file;
    if (fs::exists(candidate, ec)) return candidate.lexically_normal().string();
    at = end + 1;
  }
  return file;
}

}  // namespace pmd
