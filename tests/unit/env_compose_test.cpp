// The one composer of a rank's environment (env/compose.hpp): its precedence, exact outputs,
// and that every caller (pm::rank_environment, the agent, the launcher's PATH and spawned
// profiles, the C API's host layers) gets the same answer from it.
#include "env/compose.hpp"

#include <gtest/gtest.h>

#include <set>

#include "agent/pmix/predicted_env.hpp"
#include "agent/rank_env.hpp"
#include "pm/env.hpp"

namespace {

using strings = std::vector<std::string>;

pm::rank_map two_hosts(std::uint32_t slots = 2) {  // a, b; -np 4 --map-by node: a 0,2 · b 1,3
  pm::allocation a;
  a.source = pm::allocation_source::host_list;
  a.hosts = {pm::host{"a", slots}, pm::host{"b", slots}};
  pm::job_spec j;
  j.apps.push_back(pm::app_context{{"app"}, 4, {}, {}});
  j.mapping.by = pm::map_by::node;
  return pm::map_job(j, a);
}

std::string value_in(const strings& env, const std::string& name) {
  std::string found = "(unset)";
  for (const auto& e : env) {
    if (e.rfind(name + "=", 0) == 0) found = e.substr(name.size() + 1);
  }
  return found;
}

TEST(EnvCompose, EveryLayerInItsPlace) {
  const strings base = {"A=base", "B=base", "C=base", "D=base", "E=base", "F=base", "Z=base"};
  const strings profile = {"B=profile", "C=profile", "D=profile", "E=profile", "P=profile"};
  const strings exports = {"C=x", "D=x", "E=x", "X=x"};
  const strings app = {"D=app", "E=app", "Y=app"};
  const strings host = {"E=host", "H=host"};
  const strings defaults = {"A=default", "P=default", "Q=default"};
  pm::env_layers l{base, profile, exports, app, host, defaults};
  // Base entries that survive keep their order; each later name stands where it wins; a default
  // comes only for a name nobody set.
  EXPECT_EQ(pm::compose_environment(l),
            (strings{"A=base", "F=base", "Z=base", "B=profile", "P=profile", "C=x", "X=x", "D=app",
                     "Y=app", "E=host", "H=host", "Q=default"}));
  for (const char* name : {"A", "B", "C", "D", "E", "F", "H", "P", "Q", "X", "Y", "Z"}) {
    EXPECT_EQ(std::string(pm::composed_value(l, name).value()),
              value_in(pm::compose_environment(l), name))
        << name;
  }
  EXPECT_FALSE(pm::composed_value(l, "NOPE"));
}

// Past 64 later entries the composer looks names up in a hash map instead of scanning (thousands
// of -x exports were quadratic): the same answer as the scans give.
TEST(EnvCompose, ManyExportsComposeAsAFew) {
  const strings base = {"A=base", "B=base", "C=base", "D=base", "E=base", "F=base", "Z=base"};
  const strings profile = {"B=profile", "C=profile", "D=profile", "E=profile", "P=profile"};
  strings exports = {"C=x", "D=x", "E=x", "X=x"};
  strings pads;
  for (int i = 0; i < 100; ++i) pads.push_back("PAD" + std::to_string(i) + "=x");
  exports.insert(exports.end(), pads.begin(), pads.end());
  exports.push_back("X=x2");  // repeated: stands at its last place
  const strings app = {"D=app", "E=app", "Y=app"};
  const strings host = {"E=host", "H=host"};
  const strings defaults = {"A=default", "P=default", "Q=default", "PAD7=default"};
  pm::env_layers l{base, profile, exports, app, host, defaults};
  strings expected = {"A=base", "F=base", "Z=base", "B=profile", "P=profile", "C=x"};
  expected.insert(expected.end(), pads.begin(), pads.end());
  for (const char* e : {"X=x2", "D=app", "Y=app", "E=host", "H=host", "Q=default"})
    expected.emplace_back(e);
  EXPECT_EQ(pm::compose_environment(l), expected);
}

TEST(EnvCompose, ARepeatedNameStandsWhereItsLastEntryIs) {
  const strings base = {"B=1", "A=1", "B=2"};  // not sorted: the last B wins, at its place
  const strings profile = {"P=1", "Q=1"};
  const strings exports = {"P=2", "R=1", "P=3"};
  pm::env_layers l;
  l.base = base;
  l.profile = profile;
  l.exports = exports;
  EXPECT_EQ(pm::compose_environment(l), (strings{"A=1", "B=2", "Q=1", "R=1", "P=3"}));
}

TEST(EnvCompose, NamelessEntriesAndEmptyValues) {
  const strings base = {"JUNK", "=nameless", "EMPTY=", "K=v=w"};
  const strings defaults = {"EMPTY=default", "NEW=1", "NEW=2"};
  pm::env_layers l;
  l.base = base;
  l.defaults = defaults;
  // Set empty is set: the default does not replace it. The first of a repeated default counts.
  EXPECT_EQ(pm::compose_environment(l), (strings{"EMPTY=", "K=v=w", "NEW=1"}));
  EXPECT_EQ(pm::composed_value(l, "EMPTY"), std::optional<std::string_view>(""));
  EXPECT_EQ(pm::composed_value(l, "K"), std::optional<std::string_view>("v=w"));
  EXPECT_FALSE(pm::composed_value(l, ""));
}

TEST(EnvCompose, JobBaseDropsOuterIdentityAndTheMcaExportsReplace) {
  const strings own = {
      "PATH=/bin",         "OMPI_COMM_WORLD_RANK=5", "RANK=5",         "PMIX_RANK=5",
      "PMIX_MCA_gds=hash", "OMPI_MCA_btl=tcp",       "SLURM_JOB_ID=9", "SLURM_PROCID=5",
      "MASTER_PORT=1",     "not a variable",         "HOME=/h"};
  const strings mca = {"OMPI_MCA_btl=self", "OMPI_MCA_pml=ob1", "OMPI_MCA_btl=vader"};
  const auto base = pm::job_base(own, mca);
  strings joined;
  for (const auto& v : base) joined.push_back(v.name + "=" + v.value);
  EXPECT_EQ(joined, (strings{"HOME=/h", "OMPI_MCA_btl=vader", "OMPI_MCA_pml=ob1", "PATH=/bin",
                             "PMIX_MCA_gds=hash", "SLURM_JOB_ID=9"}));
  // The agent's base is the same, as strings.
  EXPECT_EQ(pm::agent::base_environment(own, mca), joined);
}

TEST(EnvCompose, ExportsBeatInheritedAndProfilesTheAppBeatsExports) {
  pm::env_map inherited = {
      {"PATH", "/inherited"}, {"MASTER_PORT", "1"}, {"KEEP", "k"}, {"FOO", "inherited"}};
  pm::env_exports ex;
  ex.x = {"FOO=x", "MASTER_PORT=1234", "RANK=7", "PATH=/x"};
  auto env = pm::make_job_env(inherited, ex, pm::env_profile::ompi | pm::env_profile::torch,
                              pm::launch_facts{"10.0.0.1", 29500, {}});
  env.app_overrides = {{{"FOO", "app"}}};
  const auto map = two_hosts();
  const auto rank3 = pm::rank_environment(env, map, 3);
  EXPECT_EQ(value_in(rank3, "FOO"), "app");           // app over -x over inherited
  EXPECT_EQ(value_in(rank3, "MASTER_PORT"), "1234");  // -x over the decided port
  EXPECT_EQ(value_in(rank3, "RANK"), "7");            // -x over the computed rank
  EXPECT_EQ(value_in(rank3, "KEEP"), "k");
  EXPECT_EQ(value_in(rank3, "OMPI_COMM_WORLD_RANK"), "3");
  EXPECT_EQ(value_in(rank3, "PATH"), "/x");
  EXPECT_EQ(pm::program_path(env, 0), "/x");
  env.app_overrides[0].push_back({"PATH", "/app"});
  EXPECT_EQ(pm::program_path(env, 0), "/app");
  EXPECT_EQ(pm::program_path(env, 1), "/x");  // app 1 has no variables of its own
  env.overrides.clear();
  EXPECT_EQ(pm::program_path(env, 1), "/inherited");
  env.base.clear();
  EXPECT_EQ(pm::program_path(env, 1), "/usr/local/bin:/usr/bin:/bin");
}

// The agent composes from strings what pm::rank_environment composes from the job's env: for a
// job on this machine they must agree entry for entry.
TEST(EnvCompose, TheAgentComposesWhatTheLauncherSays) {
  pm::env_map inherited = {{"PATH", "/bin"}, {"RANK", "9"}, {"HOME", "/h"}};
  pm::env_exports ex;
  ex.x = {"FOO=x", "NODE_RANK=5"};
  ex.mca = {{"btl", "self"}};
  auto env = pm::make_job_env(inherited, ex, pm::default_env_profiles,
                              pm::launch_facts{"10.0.0.1", 29500, {}});
  env.app_overrides = {{{"FOO", "app"}, {"BAR", "b"}}};
  const auto map = two_hosts();
  auto join = [](const std::vector<pm::env_var>& vars) {
    strings s;
    for (const auto& v : vars) s.push_back(v.name + "=" + v.value);
    return s;
  };
  const strings own = {"PATH=/bin", "RANK=9", "HOME=/h"};
  const auto agent_base = pm::agent::base_environment(own, {"OMPI_MCA_btl=self"});
  for (std::uint32_t r = 0; r < map.size(); ++r) {
    const auto profile = join(pm::rank_profile(map, r, env));
    EXPECT_EQ(pm::agent::compose_rank_environment(agent_base, profile, join(env.overrides),
                                                  join(env.app_variables(0))),
              pm::rank_environment(env, map, r))
        << "rank " << r;
  }
}

TEST(EnvCompose, ASpawnedJobsUniverseIsTheAllocations) {
  const auto map = two_hosts();
  pm::job_env env;
  env.profiles = pm::env_profile::ompi;
  auto universe = [&](std::optional<std::uint64_t> slots) {
    for (const auto& v : pm::rank_profile(map, 1, env, slots)) {
      if (v.name == "OMPI_UNIVERSE_SIZE") return v.value;
    }
    return std::string("(unset)");
  };
  EXPECT_EQ(universe(std::nullopt), "4");
  EXPECT_EQ(universe(64), "64");
}

// What the host adds: the PMIx server's variables win over everything, even -x; the settings only
// where nothing set them (-mca pml cm stays).
TEST(EnvCompose, TheHostsVariablesAndSettings) {
  pm::env_exports ex;
  ex.x = {"PMIX_RANK=99", "OMPI_MCA_btl=self,tcp"};
  ex.mca = {{"pml", "cm"}};
  auto env = pm::make_job_env({}, ex, pm::env_profile::none, {});
  pm::host_env host;
  host.server = {{"PMIX_RANK", "2"}, {"PMIX_NAMESPACE", "ns"}};
  for (const auto& e : pm::agent::pmix::host_settings({})) {
    host.defaults.push_back({e.substr(0, e.find('=')), e.substr(e.find('=') + 1)});
  }
  const auto map = two_hosts();
  const auto v = pm::rank_environment(env, map, 2, host);
  EXPECT_EQ(
      v, (strings{"OMPI_MCA_pml=cm", "OMPI_MCA_btl=self,tcp", "PMIX_RANK=2", "PMIX_NAMESPACE=ns"}));
  // The agent's second pass gives the same.
  const auto first = pm::rank_environment(env, map, 2);
  EXPECT_EQ(pm::agent::add_host_variables(first, {"PMIX_RANK=2", "PMIX_NAMESPACE=ns"},
                                          pm::agent::pmix::host_settings({})),
            v);
  EXPECT_EQ(pm::agent::pmix::host_settings({.oversubscribed = true, .rdma = true}),
            strings{"OMPI_MCA_mpi_yield_when_idle=1"});
  // GPUs without RDMA: no ob1/tcp either (CUDA-aware transports must stay open).
  EXPECT_EQ(pm::agent::pmix::host_settings({.gpus = true}), strings{});
  EXPECT_EQ(pm::agent::pmix::host_settings({.oversubscribed = true, .gpus = true}),
            strings{"OMPI_MCA_mpi_yield_when_idle=1"});
  EXPECT_EQ(pm::agent::pmix::host_settings({}),
            (strings{"OMPI_MCA_pml=ob1", "OMPI_MCA_btl=self,vader,tcp"}));
}

// The variables pm_rank_env cannot know are exactly those the agent's choices make: two agents
// with different pids, ports, directories and namespaces differ in those and no other.
TEST(EnvCompose, DecidedAtLaunchAreExactlyWhatTheAgentChooses) {
  namespace px = pm::agent::pmix;
  const px::server_place one{"/tmp/pm-pmix.1.aaaa", "/dev/shm/pm-pmix.1.aaaa", "b", 4001, 11};
  const px::server_place two{"/tmp/pm-pmix.2.bbbb", "", "b", 4002, 22};
  const auto x = px::predicted_rank_env(one, "pmrun.1.0001", 3);
  const auto y = px::predicted_rank_env(two, "pmrun.2.0002", 3);
  ASSERT_EQ(x.size(), y.size());
  std::set<std::string> differ, decided;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const auto name = x[i].substr(0, x[i].find('='));
    ASSERT_EQ(name, y[i].substr(0, y[i].find('=')));
    if (x[i] != y[i]) differ.insert(name);
    if (pm::is_decided_at_launch(name)) decided.insert(name);
  }
  EXPECT_EQ(differ, decided);
  EXPECT_EQ(decided.size(), 10u);

  const auto map = two_hosts();
  const auto predicted = pm::predicted_host_env(map, 3);
  ASSERT_EQ(predicted.server.size(), x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const auto& v = predicted.server[i];
    EXPECT_EQ(v.name, x[i].substr(0, x[i].find('=')));
    if (pm::is_decided_at_launch(v.name)) {
      EXPECT_EQ(v.value, pm::decided_at_launch) << v.name;
    } else {
      EXPECT_EQ(v.name + "=" + v.value, x[i]);  // PMIX_RANK=3, PMIX_HOSTNAME=b (rank 3's host)
    }
  }
  EXPECT_EQ(value_in(pm::rank_environment({}, map, 3, predicted), "PMIX_HOSTNAME"), "b");
}

}  // namespace
