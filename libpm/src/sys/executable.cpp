#include "sys/executable.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "pm/error.hpp"

namespace pm::sys {
namespace {

std::string join(std::string_view dir, std::string_view name) {
  if (dir.empty()) return std::string(name);
  std::string out(dir);
  if (out.back() != '/') out += '/';
  out += name;
  return out;
}

enum class check { ok, missing, directory, not_executable };

check check_file(const std::string& path, int& error_number) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    error_number = errno;
    return check::missing;
  }
  if (S_ISDIR(st.st_mode)) return check::directory;
  if (!S_ISREG(st.st_mode) || access(path.c_str(), X_OK) != 0) {
    error_number = S_ISREG(st.st_mode) ? errno : EACCES;
    return check::not_executable;
  }
  return check::ok;
}

// The rank execs its program after its chdir into `wdir`: a path found relative to this
// process's directory (a relative -wdir, `-wdir w1 ./app`) is made absolute, or the exec would
// look for w1/w1/app.
std::string usable_after_chdir(std::string path, std::string_view wdir) {
  if (wdir.empty() || path.front() == '/') return path;
  std::string here(4096, '\0');
  if (getcwd(here.data(), here.size()) == nullptr) return path;
  here.resize(std::strlen(here.c_str()));
  return join(here, path);
}

}  // namespace

std::string resolve_executable(std::string_view program, std::string_view path_env,
                               std::string_view wdir) {
  if (program.empty()) throw error(errc::not_found, "empty program name");
  const std::string shown = "'" + std::string(program) + "'";
  if (program.find('/') != std::string_view::npos) {
    const std::string path = program.front() == '/' ? std::string(program) : join(wdir, program);
    int e = 0;
    switch (check_file(path, e)) {
      case check::ok:
        return usable_after_chdir(path, wdir);
      case check::missing:
        throw error(
            e == ENOENT ? errc::not_found : errc::not_executable,
            shown + (e == ENOENT ? " does not exist" : std::string(": ") + std::strerror(e)) +
                (wdir.empty() || program.front() == '/' ? ""
                                                        : " (in '" + std::string(wdir) + "')"));
      case check::directory:
        throw error(errc::not_executable, shown + " is a directory");
      case check::not_executable:
        throw error(errc::not_executable, shown + " is not executable (" + std::strerror(e) + ")");
    }
  }
  // Search PATH like execvp; remember a match that is there but not executable.
  std::string not_executable;
  std::size_t start = 0;
  while (start <= path_env.size()) {
    auto end = path_env.find(':', start);
    if (end == std::string_view::npos) end = path_env.size();
    const auto dir = path_env.substr(start, end - start);
    const std::string base =
        dir.empty() ? std::string(wdir.empty() ? "." : wdir) : std::string(dir);
    const std::string candidate = join(base, program);
    int e = 0;
    const auto result = check_file(candidate, e);
    if (result == check::ok) return usable_after_chdir(candidate, wdir);
    if (result == check::not_executable && not_executable.empty()) not_executable = candidate;
    start = end + 1;
  }
  if (!not_executable.empty()) {
    throw error(errc::not_executable,
                "'" + not_executable + "' is not executable (Permission denied)");
  }
  throw error(errc::not_found, "program " + shown + " not found in PATH");
}

}  // namespace pm::sys
