// A DVM on fake hosts (docs/dvm.md) for the tests that run jobs on one: `pmrun --dvm start` over
// the fixture's ssh in a status directory of its own, ended by its server's pid whatever the test
// did.
#pragma once

#include <signal.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "support/command.hpp"
#include "support/multihost.hpp"
#include "support/processes.hpp"

namespace pm::test {

// A DVM on the fixture's hosts, ended by its server's pid whatever the test did.
class dvm_on_hosts {
 public:
  explicit dvm_on_hosts(const multihost_fixture& f, int slots = 2) {
    char tmpl[] = "/tmp/pm-dvm-hosts.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp");
    root_ = tmpl;
    setenv("PM_STATUS_DIR", (root_ + "/st").c_str(), 1);
    const auto r = run_command({pm::test::pmrun_path(), "--allow-run-as-root", "-mca",
                                "plm_rsh_agent", "ssh -F " + f.ssh_config(), "--dvm", "start", "-H",
                                hosts_with_slots(f, slots), "--report-uri", uri_file()},
                               std::chrono::seconds(60));
    started = r;
    std::smatch m;
    std::ifstream in(uri_file());
    const std::string uri((std::istreambuf_iterator<char>(in)), {});
    if (std::regex_search(uri, m, std::regex(R"(dvm\.(\d+)\.sock)"))) server = std::stoi(m[1]);
  }
  ~dvm_on_hosts() {
    if (server > 0 && pm::test::alive(server)) {
      ::kill(server, SIGTERM);
      if (!pm::test::all_gone({server}, std::chrono::seconds(10))) ::kill(server, SIGKILL);
    }
    unsetenv("PM_STATUS_DIR");
    std::filesystem::remove_all(root_);
  }
  std::string uri_file() const { return root_ + "/uri"; }
  std::vector<std::string> job(std::vector<std::string> args) const {
    std::vector<std::string> argv = {pm::test::pmrun_path(), "--allow-run-as-root", "--dvm-uri",
                                     "file:" + uri_file()};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
  nlohmann::json ps() const {
    const auto r =
        run_command({pm::test::pmrun_path(), "--ps", "--dvm-uri", "file:" + uri_file(), "--json"},
                    std::chrono::seconds(10));
    return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
  }
  std::string root_;
  pm::test::command_result started;
  pid_t server = -1;
};

}  // namespace pm::test
