// A scratch tree for the tests in which another local user plants links and directories where
// root will write (issue 20, item 6): pmrun's files (tests/integration/pmrun_files_test.cpp) and
// the walk they go through (tests/unit/safe_path_test.cpp). The second user is the one of
// other_user.hpp.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "command.hpp"
#include "other_user.hpp"

namespace pm::test {

/// /tmp/<prefix>-XXXXXX, mode 0755 (another user can reach what the test opens to them), with
/// `shared` inside: a sticky, world-writable directory like /tmp, and `victim`, a file of root's
/// that a planted link points at. Removed with all in it when the object goes.
struct playground {
  std::string root;
  explicit playground(const std::string& prefix) {
    std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
    root = ::mkdtemp(tmpl.data());
    ::chmod(root.c_str(), 0755);
    ::mkdir(shared().c_str(), 0755);
    ::chmod(shared().c_str(), 01777);
    std::ofstream(victim()) << "precious\n";
  }
  playground(const playground&) = delete;
  playground& operator=(const playground&) = delete;
  ~playground() {
    std::error_code ec;
    std::filesystem::remove_all(root, ec);
  }
  std::string operator/(const std::string& name) const { return root + "/" + name; }
  std::string shared() const { return root + "/shared"; }
  std::string victim() const { return root + "/victim"; }
};

/// The whole text of the file at `path` ("" if it cannot be read).
inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Runs a shell command as `user`; true when it succeeded (a failure is also a test failure).
inline bool as(const other_user& user, const std::string& script) {
  const auto r = run_command(user.as({"/bin/sh", "-c", script}));
  EXPECT_EQ(r.exit_code, 0) << script << ": " << r.err;
  return r.exit_code == 0;
}

}  // namespace pm::test
