// All profiles agree on every rank of generated jobs.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <map>

#include "pm/env.hpp"
#include "pm/error.hpp"

RC_GTEST_PROP(EnvProperty, ProfilesAgree, ()) {
  pm::allocation a;
  a.source = pm::allocation_source::host_list;
  const auto hosts = *rc::gen::inRange(1, 12);
  for (int h = 0; h < hosts; ++h)
    a.hosts.push_back(pm::host{"h" + std::to_string(h), *rc::gen::inRange<std::uint32_t>(1, 6)});
  pm::job_spec j;
  j.apps.push_back(pm::app_context{
      {"app"},
      *rc::gen::inRange<std::uint32_t>(1, static_cast<std::uint32_t>(a.total_slots()) + 1),
      {},
      {}});
  j.mapping.by = *rc::gen::element(pm::map_by::slot, pm::map_by::node);
  const auto map = pm::map_job(j, a);
  const pm::env_map inherited = {{"RANK", "999"}, {"MASTER_ADDR", "outer"}, {"PATH", "/bin"}};
  const auto env = pm::make_job_env(inherited, {}, pm::env_profile::all & ~pm::env_profile::tf,
                                    {"10.1.1.1", 4242, {}});
  std::string master;
  for (std::uint32_t r = 0; r < map.size(); ++r) {
    std::map<std::string, std::string> v;
    for (const auto& s : pm::rank_environment(env, map, r))
      v[s.substr(0, s.find('='))] = s.substr(s.find('=') + 1);
    const auto p = map.at(r);
    RC_ASSERT(v["RANK"] == std::to_string(r));
    RC_ASSERT(v["RANK"] == v["OMPI_COMM_WORLD_RANK"] && v["RANK"] == v["SLURM_PROCID"] &&
              v["RANK"] == v["PMI_RANK"]);
    RC_ASSERT(v["LOCAL_RANK"] == std::to_string(p.local_rank));
    RC_ASSERT(v["LOCAL_RANK"] == v["OMPI_COMM_WORLD_LOCAL_RANK"] &&
              v["LOCAL_RANK"] == v["SLURM_LOCALID"] && v["LOCAL_RANK"] == v["MPI_LOCALRANKID"]);
    RC_ASSERT(v["WORLD_SIZE"] == v["OMPI_COMM_WORLD_SIZE"] && v["WORLD_SIZE"] == v["PMI_SIZE"]);
    RC_ASSERT(v["LOCAL_WORLD_SIZE"] == v["OMPI_COMM_WORLD_LOCAL_SIZE"]);
    RC_ASSERT(v["NODE_RANK"] == std::to_string(p.node) && v["NODE_RANK"] == v["SLURM_NODEID"] &&
              v["NODE_RANK"] == v["GROUP_RANK"]);
    const auto m = v["MASTER_ADDR"] + ":" + v["MASTER_PORT"];
    if (master.empty()) master = m;
    RC_ASSERT(m == master);
    RC_ASSERT(m == "10.1.1.1:4242");  // the inherited outer identity never leaks
  }
}
