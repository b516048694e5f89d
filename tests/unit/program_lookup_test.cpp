// Where a rank starts and what it executes (agent/program_lookup), from a modelled host's files.
#include "agent/program_lookup.hpp"

#include <cerrno>
#include <map>

#include <gtest/gtest.h>

namespace pm::agent {
namespace {

using kind = file_facts::kind;

class files final : public host_files {
 public:
  std::map<std::string, file_facts> known;
  file_facts look(const std::string& path) const override {
    std::string p = path;  // "dir/./app" is "dir/app"
    for (auto at = p.find("/./"); at != std::string::npos; at = p.find("/./")) p.erase(at, 2);
    const auto it = known.find(p);
    return it == known.end() ? file_facts{kind::missing, ENOENT} : it->second;
  }
  std::string working_directory() const override { return "/home/u"; }
};

files host() {
  files f;
  f.known["/home/u"] = {kind::directory, 0};
  f.known["/work"] = {kind::directory, 0};
  f.known["/usr/bin/python3"] = {kind::executable, 0};
  f.known["/opt/bin/python3"] = {kind::not_executable, EACCES};
  f.known["/opt/bin/tool"] = {kind::not_executable, EACCES};
  f.known["/work/app"] = {kind::executable, 0};
  f.known["/work/data"] = {kind::directory, 0};
  f.known["w1/app"] = {kind::executable, 0};
  f.known["/secret/app"] = {kind::missing, EACCES};
  return f;
}

std::string found(const std::variant<std::string, program_refusal>& r) {
  const auto* p = std::get_if<std::string>(&r);
  return p != nullptr ? *p : "refused: " + std::get<program_refusal>(r).reason;
}
program_refusal refused(const std::variant<std::string, program_refusal>& r) {
  const auto* p = std::get_if<program_refusal>(&r);
  return p != nullptr ? *p : program_refusal{0, "found " + std::get<std::string>(r)};
}

TEST(ProgramLookup, TheLaunchersDirectoryFallsBackToHomeWhereThisHostLacksIt) {
  const auto f = host();
  EXPECT_EQ(working_directory_of("/work", true, "/home/u", f), "/work");
  EXPECT_EQ(working_directory_of("/home/alice/proj", true, "/home/u", f), "/home/u");
  EXPECT_EQ(working_directory_of("/home/alice/proj", true, "", f), "/");
  // A directory the user named is kept: the rank fails there rather than runs elsewhere.
  EXPECT_EQ(working_directory_of("/home/alice/proj", false, "/home/u", f), "/home/alice/proj");
  EXPECT_EQ(working_directory_of("", true, "/home/u", f), "");
}

TEST(ProgramLookup, SearchesThePathAsExecvpDoes) {
  const auto f = host();
  EXPECT_EQ(found(find_program("python3", "/usr/bin:/opt/bin", "", f)), "/usr/bin/python3");
  // A match that is there but not executable is named when nothing better comes.
  EXPECT_EQ(found(find_program("python3", "/opt/bin:/usr/bin", "", f)), "/usr/bin/python3");
  const auto t = refused(find_program("tool", "/usr/bin:/opt/bin", "", f));
  EXPECT_EQ(t.code, 126);
  EXPECT_EQ(t.reason, "'/opt/bin/tool' is not executable (Permission denied)");
  const auto n = refused(find_program("nosuch", "/usr/bin", "", f));
  EXPECT_EQ(n.code, 127);
  EXPECT_EQ(n.reason, "program 'nosuch' not found in PATH");
  // No PATH: the shell's default; an empty entry is the working directory.
  EXPECT_EQ(found(find_program("python3", "", "", f)), "/usr/bin/python3");
  EXPECT_EQ(found(find_program("app", ":/usr/bin", "/work", f)), "/work/app");
  EXPECT_EQ(refused(find_program("", "/usr/bin", "", f)).code, 127);
}

TEST(ProgramLookup, APathIsTakenRelativeToTheWorkingDirectory) {
  const auto f = host();
  EXPECT_EQ(found(find_program("./app", "/usr/bin", "/work", f)), "/work/./app");
  // Found relative to the agent's own directory: named absolutely, since the rank changes into
  // its working directory before the exec.
  EXPECT_EQ(found(find_program("./app", "/usr/bin", "w1", f)), "/home/u/w1/./app");
  const auto m = refused(find_program("./gone", "/usr/bin", "/work", f));
  EXPECT_EQ(m.code, 127);
  EXPECT_EQ(m.reason, "'./gone' does not exist (in '/work')");
  const auto d = refused(find_program("/work/data", "/usr/bin", "", f));
  EXPECT_EQ(d.code, 126);
  EXPECT_EQ(d.reason, "'/work/data' is a directory");
  const auto p = refused(find_program("/secret/app", "/usr/bin", "", f));
  EXPECT_EQ(p.code, 126);
  EXPECT_EQ(p.reason, "'/secret/app': Permission denied");
}

}  // namespace
}  // namespace pm::agent
