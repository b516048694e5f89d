// The remote options: agent words, interface lists, the environment's say, the launch shape.
#include "cli/remote_options.hpp"

#include <arpa/inet.h>

#include <charconv>
#include <string>

#include "pm/command_line.hpp"
#include "pm/error.hpp"
#include "text/printable.hpp"
#include "transport/ssh/ssh_command.hpp"

namespace pm {
namespace cli {

namespace {

error bad_words(std::string_view what, std::string_view text, std::string_view problem) {
  return error(errc::usage, text::printable(std::string(what) + " '" + std::string(text) +
                                            "': " + std::string(problem)));
}

// A quoted empty word ("" or '') would reach ssh as an empty argument, which no option takes:
// refused here rather than by ssh on every host (fuzz_exports found one).
void refuse_empty_words(std::string_view what, std::string_view text,
                        const std::vector<std::string>& words) {
  for (const auto& w : words) {
    if (w.empty()) throw bad_words(what, text, "an empty word ('' or \"\")");
  }
}

}  // namespace

std::vector<std::string> agent_words(std::string_view what, std::string_view text) {
  auto words = ssh::split_agent_command(text, what, ssh::system_home);
  if (words.empty() || words[0].empty()) throw bad_words(what, text, "no agent command");
  refuse_empty_words(what, text, words);
  for (const auto& w : words) {
    // Open MPI's default "ssh : rsh" means "the first one found in PATH"; pmrun takes one agent.
    if (w == ":") {
      throw bad_words(what, text, "alternatives ('ssh : rsh') are not supported; name one agent");
    }
  }
  return words;
}

std::vector<std::string> ssh_args(std::string_view what, std::string_view text) {
  auto words = ssh::split_agent_command(text, what, ssh::system_home);
  refuse_empty_words(what, text, words);
  return words;
}

std::vector<std::string> agent_args(std::string_view what, std::string_view text) {
  auto words = ssh::split_agent_command(text, what);
  refuse_empty_words(what, text, words);
  return words;
}

bool valid_interface_spec(std::string_view item) {
  const auto slash = item.find('/');
  if (slash == std::string_view::npos) {
    // Linux interface names: 1..15 bytes, no '/', ':' or blanks, not "." or "..".
    if (item.empty() || item.size() > 15 || item == "." || item == "..") return false;
    for (char c : item) {
      const auto u = static_cast<unsigned char>(c);
      if (c == ':' || c == '/' || u <= 0x20 || u == 0x7f) return false;
    }
    return true;
  }
  const std::string address(item.substr(0, slash));
  const auto bits_text = item.substr(slash + 1);
  unsigned bits = 0;
  auto [ptr, ec] = std::from_chars(bits_text.data(), bits_text.data() + bits_text.size(), bits);
  if (bits_text.empty() || ec != std::errc() || ptr != bits_text.data() + bits_text.size())
    return false;
  unsigned char buf[16];
  if (inet_pton(AF_INET, address.c_str(), buf) == 1) return bits <= 32;
  if (inet_pton(AF_INET6, address.c_str(), buf) == 1) return bits <= 128;
  return false;
}

}  // namespace cli

namespace {
const std::string* first_set(const env_map& env, std::initializer_list<const char*> names,
                             std::string& which) {
  for (const char* name : names) {
    if (auto it = env.find(name); it != env.end()) {
      which = name;
      return &it->second;
    }
  }
  return nullptr;
}
}  // namespace

remote_options resolve_remote_options(const remote_options& given, const env_map& env) {
  remote_options out = given;
  std::string which;
  if (out.rsh_agent.empty()) {
    // PM_RSH_AGENT is pmrun's own; the others are what mpirun (4, then 5) would read.
    if (const auto* text = first_set(
            env, {"PM_RSH_AGENT", "OMPI_MCA_plm_rsh_agent", "PRTE_MCA_plm_ssh_agent"}, which)) {
      out.rsh_agent = cli::agent_words(which, *text);
    } else {
      out.rsh_agent = {"ssh"};
    }
  }
  if (!out.rsh_args) {
    if (const auto* text =
            first_set(env, {"OMPI_MCA_plm_rsh_args", "PRTE_MCA_plm_ssh_args"}, which)) {
      out.rsh_args = cli::ssh_args(which, *text);
    } else {
      out.rsh_args.emplace();
    }
  }
  return out;
}

launch_shape choose_launch_shape(const remote_options& options, std::size_t remote_hosts) {
  if (options.launch != launch_shape::automatic) return options.launch;
  // A tree whose first level holds every host is a flat launch.
  return remote_hosts <= options.tree_fanout ? launch_shape::flat : launch_shape::tree;
}

}  // namespace pm
