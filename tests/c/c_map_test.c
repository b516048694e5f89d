/* Jobs, app contexts (MPMD), mapping policies, placements, the map as text and JSON, and one
 * rank's environment with profiles, exports, -mca and an app's own variables. */
#include "check.h"

static pm_allocation* hosts(const char* list) {
  pm_allocation* a = NULL;
  CHECK_OK(pm_allocation_from_hosts(&a, list));
  return a;
}

static pm_job* job_of(int64_t np, const char* program) {
  pm_job* job = NULL;
  CHECK_OK(pm_job_new(&job));
  const char* argv[] = {program, "x", NULL};
  pm_app_options app = PM_APP_OPTIONS_INIT;
  app.argv = argv;
  app.np = np;
  CHECK_OK(pm_job_add_app(job, &app));
  return job;
}

static void check_place(const pm_map* map, uint32_t rank, uint32_t host, uint32_t local_rank,
                        uint32_t local_size, uint32_t node, const char* host_name) {
  pm_placement p = PM_PLACEMENT_INIT;
  CHECK_OK(pm_map_placement(map, rank, &p));
  CHECK(p.rank == rank);
  CHECK(p.host == host);
  CHECK(p.local_rank == local_rank);
  CHECK(p.local_size == local_size);
  CHECK(p.node == node);
  CHECK_STR(p.host_name, host_name);
}

static void by_slot(void) {
  pm_allocation* a = hosts("a:2,b:2");
  pm_job* job = job_of(3, "app");
  pm_map* map = NULL;
  CHECK_OK(pm_map_job(&map, job, a));
  uint32_t size = 0, nodes = 0;
  CHECK_OK(pm_map_size(map, &size));
  CHECK(size == 3);
  CHECK_OK(pm_map_node_count(map, &nodes));
  CHECK(nodes == 2);
  check_place(map, 0, 0, 0, 2, 0, "a");
  check_place(map, 1, 0, 1, 2, 0, "a");
  check_place(map, 2, 1, 0, 1, 1, "b");
  pm_placement p = PM_PLACEMENT_INIT;
  CHECK_FAILS(pm_map_placement(map, 3, &p), PM_E_INVALID, "rank 3 is outside the job (3 ranks)");

  const uint32_t* ranks = NULL;
  size_t count = 0;
  CHECK_OK(pm_map_ranks_on_host(map, 0, &ranks, &count));
  CHECK(count == 2 && ranks[0] == 0 && ranks[1] == 1);
  CHECK_OK(pm_map_ranks_on_host(map, 1, &ranks, &count));
  CHECK(count == 1 && ranks[0] == 2);
  CHECK_FAILS(pm_map_ranks_on_host(map, 2, &ranks, &count), PM_E_INVALID, "host 2 is outside");

  char* text = NULL;
  CHECK_OK(pm_map_text(&text, map, 7));
  CHECK_CONTAINS(text, "Data for JOB [7,1] offset 0 Total slots allocated 4");
  CHECK_CONTAINS(text, "Data for node: a\tNum slots: 2\tMax slots: 0\tNum procs: 2");
  CHECK_CONTAINS(text, "Process OMPI jobid: [7,1] App: 0 Process rank: 2 Bound: N/A");
  pm_free(text);
  CHECK_OK(pm_map_json(&text, map, 7));
  CHECK_CONTAINS(text, "\"jobid\": 7");
  CHECK_CONTAINS(text, "\"size\": 3");
  CHECK_CONTAINS(text, "\"name\": \"b\"");
  pm_free(text);
  pm_map_destroy(map);
  pm_job_destroy(job);
  pm_allocation_destroy(a);
}

static void by_node_and_ppr(void) {
  pm_allocation* a = hosts("a:2,b:2,c:2");
  pm_job* job = job_of(4, "app");
  pm_mapping_options m = PM_MAPPING_OPTIONS_INIT;
  m.by = PM_MAP_BY_NODE;
  CHECK_OK(pm_job_set_mapping(job, &m));
  pm_map* map = NULL;
  CHECK_OK(pm_map_job(&map, job, a));
  check_place(map, 0, 0, 0, 2, 0, "a");
  check_place(map, 1, 1, 0, 1, 1, "b");
  check_place(map, 2, 2, 0, 1, 2, "c");
  check_place(map, 3, 0, 1, 2, 0, "a");
  pm_map_destroy(map);
  pm_job_destroy(job);

  /* ppr:1:node with one rank per host, np left to the policy. */
  job = job_of(PM_NP_PER_SLOT, "app");
  m.by = PM_MAP_BY_PPR_NODE;
  m.ppr = 1;
  CHECK_OK(pm_job_set_mapping(job, &m));
  CHECK_OK(pm_map_job(&map, job, a));
  uint32_t size = 0;
  CHECK_OK(pm_map_size(map, &size));
  CHECK(size == 3);
  check_place(map, 2, 2, 0, 1, 2, "c");
  pm_map_destroy(map);
  m.ppr = 0;
  CHECK_FAILS(pm_job_set_mapping(job, &m), PM_E_USAGE, "ppr:N:node");
  m.by = (pm_map_by)9;
  CHECK_FAILS(pm_job_set_mapping(job, &m), PM_E_INVALID, "unknown pm_map_by value 9");
  m.by = PM_MAP_BY_SLOT;
  m.oversubscribe = 2;
  CHECK_FAILS(pm_job_set_mapping(job, &m), PM_E_INVALID, "oversubscribe");
  CHECK_OK(pm_job_set_mapping(job, NULL)); /* back to the defaults */
  pm_job_destroy(job);
  pm_allocation_destroy(a);
}

static void mapping_errors(void) {
  pm_allocation* a = hosts("a:2,b:2");
  pm_job* job = job_of(6, "app");
  pm_map* map = NULL;
  CHECK_FAILS(pm_map_job(&map, job, a), PM_E_MAPPING, "not enough slots");
  CHECK(map == NULL);
  pm_mapping_options m = PM_MAPPING_OPTIONS_INIT;
  m.oversubscribe = 1;
  CHECK_OK(pm_job_set_mapping(job, &m));
  CHECK_OK(pm_map_job(&map, job, a));
  pm_map_destroy(map);
  pm_job_destroy(job);

  /* np 0 and a missing program are refused when the app is added. */
  CHECK_OK(pm_job_new(&job));
  const char* argv[] = {"app", NULL};
  const char* empty_argv[] = {NULL};
  pm_app_options app = PM_APP_OPTIONS_INIT;
  app.argv = argv;
  app.np = 0;
  CHECK_FAILS(pm_job_add_app(job, &app), PM_E_USAGE, "np 0: must be at least 1");
  app.np = -5;
  CHECK_FAILS(pm_job_add_app(job, &app), PM_E_USAGE, "np -5");
  app.np = 1;
  app.argv = NULL;
  CHECK_FAILS(pm_job_add_app(job, &app), PM_E_INVALID, "no program");
  app.argv = empty_argv;
  CHECK_FAILS(pm_job_add_app(job, &app), PM_E_INVALID, "no program");
  app.argv = argv;
  app.hosts = "a:";
  CHECK_FAILS(pm_job_add_app(job, &app), PM_E_PARSE, "-H");
  app.hosts = "zz";
  CHECK_OK(pm_job_add_app(job, &app));
  CHECK_FAILS(pm_map_job(&map, job, a), PM_E_ALLOCATION, "host 'zz' is not in the allocation");
  size_t apps = 0;
  CHECK_OK(pm_job_app_count(job, &apps));
  CHECK(apps == 1);
  pm_job_destroy(job);
  pm_allocation_destroy(a);
}

/* MPMD: -np 1 master : -np 3 worker, the workers only on the second host. The hosts of the
 * tests that ask for an environment are numeric addresses (TEST-NET-2): rank 0's MASTER_ADDR is
 * its host's name resolved (docs/env-contract.md), and a made-up name would go to the DNS server.
 */
static void mpmd(void) {
  pm_allocation* a = hosts("198.51.100.1:2,198.51.100.2:3");
  pm_job* job = NULL;
  CHECK_OK(pm_job_new(&job));
  const char* master[] = {"master", NULL};
  const char* worker[] = {"worker", "--fast", NULL};
  const char* worker_env[] = {"ROLE=worker", "EMPTY=", NULL};
  pm_app_options app = PM_APP_OPTIONS_INIT;
  app.argv = master;
  app.np = 1;
  CHECK_OK(pm_job_add_app(job, &app));
  app.argv = worker;
  app.np = 3;
  app.hosts = "198.51.100.2";
  app.env = worker_env;
  CHECK_OK(pm_job_add_app(job, &app));
  size_t apps = 0;
  CHECK_OK(pm_job_app_count(job, &apps));
  CHECK(apps == 2);
  pm_map* map = NULL;
  CHECK_OK(pm_map_job(&map, job, a));
  uint32_t first = 0, count = 0;
  CHECK_OK(pm_map_app_ranks(map, 0, &first, &count));
  CHECK(first == 0 && count == 1);
  CHECK_OK(pm_map_app_ranks(map, 1, &first, &count));
  CHECK(first == 1 && count == 3);
  CHECK_FAILS(pm_map_app_ranks(map, 2, &first, &count), PM_E_INVALID, "app 2 is outside");
  check_place(map, 0, 0, 0, 1, 0, "198.51.100.1");
  check_place(map, 1, 1, 0, 3, 1, "198.51.100.2");
  check_place(map, 3, 1, 2, 3, 1, "198.51.100.2");
  pm_placement p = PM_PLACEMENT_INIT;
  CHECK_OK(pm_map_placement(map, 3, &p));
  CHECK(p.app == 1);

  char** env = NULL;
  CHECK_OK(pm_rank_env(&env, map, 3));
  CHECK_STR(env_value(env, "OMPI_COMM_WORLD_RANK"), "3");
  CHECK_STR(env_value(env, "OMPI_COMM_WORLD_SIZE"), "4");
  CHECK_STR(env_value(env, "OMPI_COMM_WORLD_LOCAL_RANK"), "2");
  CHECK_STR(env_value(env, "NODE_RANK"), "1");
  CHECK_STR(env_value(env, "ROLE"), "worker");
  CHECK_STR(env_value(env, "EMPTY"), "");
  pm_strings_free(env);
  CHECK_OK(pm_rank_env(&env, map, 0));
  CHECK(env_value(env, "ROLE") == NULL); /* the master app has no ROLE */
  pm_strings_free(env);
  env = NULL;
  CHECK_FAILS(pm_rank_env(&env, map, 4), PM_E_INVALID, "rank 4 is outside the job (4 ranks)");
  CHECK(env == NULL);
  pm_map_destroy(map);

  const char* bad_env[] = {"1BAD=x", NULL};
  app.env = bad_env;
  CHECK_FAILS(pm_job_add_app(job, &app), PM_E_ENV, "invalid variable name '1BAD'");
  const char* no_value[] = {"NOVALUE", NULL};
  app.env = no_value;
  CHECK_FAILS(pm_job_add_app(job, &app), PM_E_ENV, "is not NAME=value");
  pm_job_destroy(job);
  pm_allocation_destroy(a);
}

static void environment(void) {
  pm_allocation* a = hosts("198.51.100.1:2,198.51.100.2:2");
  pm_job* job = job_of(4, "app");
  const char* inherited[] = {"PATH=/usr/bin:/bin",
                             "HOME=/home/u",
                             "OMPI_COMM_WORLD_RANK=99",
                             "RANK=98",
                             "OMPI_MCA_btl=tcp",
                             "KEEP=me",
                             NULL};
  const char* exports[] = {"KEEP", "NEW=value", "UNSET_ONE", NULL};
  const char* mca[] = {"pml", "ob1", NULL};
  pm_env_options e = PM_ENV_OPTIONS_INIT;
  e.profiles = "ompi,torch";
  e.inherited = inherited;
  e.exports = exports;
  e.mca = mca;
  e.master_port = 29500;
  CHECK_OK(pm_job_set_env(job, &e));
  pm_map* map = NULL;
  CHECK_OK(pm_map_job(&map, job, a));
  char** env = NULL;
  CHECK_OK(pm_rank_env(&env, map, 2));
  CHECK_STR(env_value(env, "OMPI_COMM_WORLD_RANK"), "2"); /* the outer job's 99 is gone */
  CHECK_STR(env_value(env, "RANK"), "2");
  CHECK_STR(env_value(env, "WORLD_SIZE"), "4");
  CHECK_STR(env_value(env, "LOCAL_RANK"), "0");
  CHECK_STR(env_value(env, "NODE_RANK"), "1");
  CHECK_STR(env_value(env, "MASTER_PORT"), "29500");
  CHECK(env_value(env, "MASTER_ADDR") != NULL);
  CHECK_STR(env_value(env, "HOME"), "/home/u");
  CHECK_STR(env_value(env, "KEEP"), "me");
  CHECK_STR(env_value(env, "NEW"), "value");
  CHECK(env_value(env, "UNSET_ONE") == NULL);
  CHECK_STR(env_value(env, "OMPI_MCA_btl"), "tcp");
  CHECK_STR(env_value(env, "OMPI_MCA_pml"), "ob1");
  CHECK(env_value(env, "SLURM_PROCID") == NULL); /* the slurm profile is off */
  CHECK(env_value(env, "TF_CONFIG") == NULL);
  pm_strings_free(env);
  pm_map_destroy(map);

  /* Every rank of one map gets the same MASTER_PORT, also when it is chosen. */
  e.master_port = 0;
  e.profiles = "default";
  CHECK_OK(pm_job_set_env(job, &e));
  CHECK_OK(pm_map_job(&map, job, a));
  char **env0 = NULL, **env3 = NULL;
  CHECK_OK(pm_rank_env(&env0, map, 0));
  CHECK_OK(pm_rank_env(&env3, map, 3));
  CHECK(env_value(env0, "MASTER_PORT") != NULL);
  CHECK_STR(env_value(env0, "MASTER_PORT"), env_value(env3, "MASTER_PORT"));
  CHECK_STR(env_value(env3, "SLURM_PROCID"), "3");
  pm_strings_free(env0);
  pm_strings_free(env3);
  pm_map_destroy(map);

  /* Errors: an unknown profile, a bad export name, an odd -mca list. */
  e.profiles = "ompi,nosuch";
  CHECK_FAILS(pm_job_set_env(job, &e), PM_E_USAGE, "nosuch");
  e.profiles = NULL;
  const char* bad_export[] = {"1BAD=x", NULL};
  e.exports = bad_export;
  CHECK_OK(pm_job_set_env(job, &e)); /* exports are checked by pm_map_job, as pmrun does */
  map = NULL;
  CHECK_FAILS(pm_map_job(&map, job, a), PM_E_ENV, "'1BAD'");
  CHECK(map == NULL);
  e.exports = NULL;
  const char* odd_mca[] = {"pml", NULL};
  e.mca = odd_mca;
  CHECK_FAILS(pm_job_set_env(job, &e), PM_E_INVALID, "mca holds a key without a value");
  CHECK_OK(pm_job_set_env(job, NULL));
  pm_job_destroy(job);
  pm_allocation_destroy(a);
}

int main(void) {
  by_slot();
  by_node_and_ppr();
  mapping_errors();
  mpmd();
  environment();
  printf("c_map_test: ok\n");
  return 0;
}
