// What a decoded message must satisfy beyond its fields' types: the `check` of each wire form
// that has one (wire_schema.hpp), run by the codec after the struct's fields are read.
#include <algorithm>
#include <string>

#include "link/codec/wire_codec.hpp"
#include "link/messages.hpp"
#include "pm/error.hpp"

namespace pm::link {

namespace {

using codec::fail;

std::string quoted(std::string_view type) {
  return "'" + std::string(type) + "'";
}

}  // namespace

void check_job_facts(const pmix_job& p, std::size_t apps, std::string_view type) {
  // Consistent, so that the agent can index with them (its PMIx component checks the rest). A
  // host may know a job it runs none of the ranks of (no_node): a spawned job's parents' host.
  const std::string what = quoted(type) + " message: ";
  if (p.nodes.empty() || (p.node >= p.nodes.size() && p.node != no_node)) {
    fail(what + "PMIx node out of range");
  }
  if (p.rank_node.empty() || p.rank_app.size() != p.rank_node.size() ||
      p.rank_local.size() != p.rank_node.size()) {
    fail(what + "PMIx rank arrays differ in length");
  }
  for (std::size_t i = 0; i < p.rank_node.size(); ++i) {
    if (p.rank_node[i] >= p.nodes.size() || p.rank_app[i] >= apps || p.rank_local[i] > 0xffff) {
      fail(what + "PMIx facts of rank " + std::to_string(i) + " out of range");
    }
  }
}

void app_spec::check(const app_spec& a, std::string_view type) {
  if (a.argv.empty()) fail("an app of a " + quoted(type) + " message has an empty argv");
  if (a.argv.front().empty()) {
    fail("an app of a " + quoted(type) + " message has an empty program name");
  }
}

void job_setup::check(const job_setup& m, std::string_view type) {
  if (m.apps.empty()) fail(quoted(type) + " message has no app");
  if (m.pmix) check_job_facts(*m.pmix, m.apps.size(), type);
}

void job_add::check(const job_add& m, std::string_view type) {
  if (m.apps.empty()) fail(quoted(type) + " message has no app");
  if (m.pmix) check_job_facts(*m.pmix, m.apps.size(), type);
}

void fence_members::check(const fence_members& m, std::string_view) {
  if (m.all && !m.ranks.empty()) fail("fence members are all ranks and listed ranks at once");
  if (!std::is_sorted(m.ranks.begin(), m.ranks.end())) fail("fence members are not sorted");
}

void spawn_app_spec::check(const spawn_app_spec& a, std::string_view type) {
  if (a.argv.empty() || a.argv.front().empty()) {
    fail("an app of a " + quoted(type) + " has no program");
  }
}

void pmix_spawn::check(const pmix_spawn& m, std::string_view type) {
  if (m.apps.empty()) fail(quoted(type) + " message has no app");
}

void started::check(const started& m, std::string_view type) {
  if (m.ranks.empty()) fail(quoted(type) + " message names no rank");
}

void exited::check(const exited& m, std::string_view type) {
  if (m.ranks.empty()) fail(quoted(type) + " message names no rank");
}

void stream_closed::check(const stream_closed& m, std::string_view type) {
  if (m.streams.empty()) fail(quoted(type) + " message names no stream");
}

void child_open::check(const child_open& m, std::string_view type) {
  if (m.argv.empty()) fail(quoted(type) + " message needs a command line");
}

}  // namespace pm::link
