#include "sys/program_search.hpp"

#include <cerrno>
#include <cstring>

#include "text/printable.hpp"

namespace pm::sys {
namespace {

constexpr std::string_view default_path = "/usr/local/bin:/usr/bin:/bin";

std::string join(std::string_view dir, std::string_view name) {
  if (dir.empty()) return std::string(name);
  std::string out(dir);
  if (out.back() != '/') out += '/';
  out += name;
  return out;
}

// The rank execs its program after its chdir into `wdir`: a path found relative to the agent's
// directory (a relative -wdir, `-wdir w1 ./app`) is made absolute, or the exec would look for
// w1/w1/app.
std::string usable_after_chdir(std::string path, std::string_view wdir, const host_files& files) {
  if (wdir.empty() || path.front() == '/') return path;
  const std::string here = files.working_directory();
  return here.empty() ? path : join(here, path);
}

}  // namespace

std::variant<std::string, program_refusal> find_program(std::string_view program,
                                                        std::string_view path,
                                                        std::string_view wdir,
                                                        const host_files& files) {
  using kind = file_facts::kind;
  if (program.empty()) return program_refusal{127, "empty program name"};
  const std::string shown = "'" + text::printable(program) + "'";
  if (program.find('/') != std::string_view::npos) {
    const std::string candidate =
        program.front() == '/' ? std::string(program) : join(wdir, program);
    const file_facts f = files.look(candidate);
    switch (f.what) {
      case kind::executable:
        return usable_after_chdir(candidate, wdir, files);
      case kind::missing:
        return program_refusal{
            f.error == ENOENT ? 127 : 126,
            shown +
                (f.error == ENOENT ? " does not exist"
                                   : std::string(": ") + std::strerror(f.error)) +
                (wdir.empty() || program.front() == '/' ? ""
                                                        : " (in '" + text::printable(wdir) + "')")};
      case kind::directory:
        return program_refusal{126, shown + " is a directory"};
      case kind::not_executable:
        return program_refusal{126, shown + " is not executable (" + std::strerror(f.error) + ")"};
    }
  }
  // Search PATH like execvp; remember a match that is there but not executable.
  if (path.empty()) path = default_path;
  std::string not_executable;
  std::size_t start = 0;
  while (start <= path.size()) {
    auto end = path.find(':', start);
    if (end == std::string_view::npos) end = path.size();
    const auto dir = path.substr(start, end - start);
    const std::string base =
        dir.empty() ? std::string(wdir.empty() ? "." : wdir) : std::string(dir);
    const std::string candidate = join(base, program);
    const file_facts f = files.look(candidate);
    if (f.what == kind::executable) return usable_after_chdir(candidate, wdir, files);
    if (f.what == kind::not_executable && not_executable.empty()) not_executable = candidate;
    start = end + 1;
  }
  if (!not_executable.empty()) {
    return program_refusal{
        126, "'" + text::printable(not_executable) + "' is not executable (Permission denied)"};
  }
  return program_refusal{127, "program " + shown + " not found in PATH"};
}

}  // namespace pm::sys
