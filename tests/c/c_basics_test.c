/* Versions, status names, the last error, memory, and every function's NULL and version checks. */
#include "check.h"

static void versions(void) {
  CHECK(PM_C_VERSION_NUMBER ==
        PM_C_VERSION_MAJOR * 10000 + PM_C_VERSION_MINOR * 100 + PM_C_VERSION_PATCH);
  CHECK(pm_version() == PM_C_VERSION_NUMBER);
  char expected[32];
  snprintf(expected, sizeof expected, "%d.%d.%d", PM_C_VERSION_MAJOR, PM_C_VERSION_MINOR,
           PM_C_VERSION_PATCH);
  CHECK_STR(pm_version_string(), expected);
}

static void status_names(void) {
  CHECK_STR(pm_status_name(PM_OK), "PM_OK");
  CHECK_STR(pm_status_name(PM_E_USAGE), "PM_E_USAGE");
  CHECK_STR(pm_status_name(PM_E_PARSE), "PM_E_PARSE");
  CHECK_STR(pm_status_name(PM_E_ALLOCATION), "PM_E_ALLOCATION");
  CHECK_STR(pm_status_name(PM_E_MAPPING), "PM_E_MAPPING");
  CHECK_STR(pm_status_name(PM_E_ENV), "PM_E_ENV");
  CHECK_STR(pm_status_name(PM_E_LAUNCH), "PM_E_LAUNCH");
  CHECK_STR(pm_status_name(PM_E_NOT_FOUND), "PM_E_NOT_FOUND");
  CHECK_STR(pm_status_name(PM_E_NOT_EXECUTABLE), "PM_E_NOT_EXECUTABLE");
  CHECK_STR(pm_status_name(PM_E_SYSTEM), "PM_E_SYSTEM");
  CHECK_STR(pm_status_name(PM_E_INTERNAL), "PM_E_INTERNAL");
  CHECK_STR(pm_status_name(PM_E_INVALID), "PM_E_INVALID");
  CHECK_STR(pm_status_name(PM_E_NOMEM), "PM_E_NOMEM");
  CHECK_STR(pm_status_name(PM_E_VERSION), "PM_E_VERSION");
  CHECK_STR(pm_status_name(-99), "unknown status");
  CHECK_STR(pm_status_name(5), "unknown status");
  CHECK_STR(pm_cause_name(PM_CAUSE_RANK_FAILED), "rank_failed");
  CHECK_STR(pm_cause_name(PM_CAUSE_STALLED), "stalled");
  CHECK_STR(pm_cause_name((pm_cause)77), "unknown");
  CHECK_STR(pm_rank_state_name(PM_RANK_SPAWN_FAILED), "spawn_failed");
  CHECK_STR(pm_rank_state_name(PM_RANK_NOT_STARTED), "not_started");
  CHECK_STR(pm_rank_state_name((pm_rank_state)-1), "unknown");
  CHECK_STR(pm_sim_verdict_name(PM_SIM_LIVENESS), "liveness failure");
  CHECK_STR(pm_sim_verdict_name((pm_sim_verdict)9), "unknown");
}

static void last_error(void) {
  CHECK(pm_last_error() != NULL);
  pm_allocation* a = NULL;
  CHECK_FAILS(pm_allocation_from_hosts(&a, NULL), PM_E_INVALID,
              "pm_allocation_from_hosts: 'hosts' is NULL");
  CHECK(a == NULL); /* out-parameters are left alone on failure */
  /* A successful call clears it. */
  CHECK_OK(pm_allocation_new(&a));
  CHECK_STR(pm_last_error(), "");
  pm_allocation_destroy(a);
}

/* A very long message is cut to the fixed buffer, never overflows it. */
static void long_message(void) {
  static char hosts[8192];
  memset(hosts, 'x', sizeof hosts - 3);
  hosts[sizeof hosts - 3] = ':';
  hosts[sizeof hosts - 2] = 'y';
  pm_allocation* a = NULL;
  CHECK_FAILS(pm_allocation_from_hosts(&a, hosts), PM_E_PARSE, "-H");
  CHECK(strlen(pm_last_error()) < 1024);
}

static void memory(void) {
  pm_free(NULL);
  pm_strings_free(NULL);
  pm_allocation_destroy(NULL);
  pm_job_destroy(NULL);
  pm_map_destroy(NULL);
  pm_report_destroy(NULL);
  pm_run_destroy(NULL);
  pm_sim_destroy(NULL);
  pm_sim_result_destroy(NULL);
}

/* Every function: a NULL handle or out-parameter is PM_E_INVALID with a message naming it. */
static void null_arguments(void) {
  pm_allocation* a = NULL;
  pm_job* job = NULL;
  pm_map* map = NULL;
  pm_report* report = NULL;
  pm_run* run = NULL;
  pm_sim* sim = NULL;
  pm_sim_result* result = NULL;
  char* text = NULL;
  char** strings = NULL;
  size_t n = 0;
  uint32_t u = 0, u2 = 0;
  uint64_t u64 = 0;
  int i = 0;
  const char* s = NULL;
  const uint32_t* ranks = NULL;
  pm_host host = PM_HOST_INIT;
  pm_allocation_source source;
  pm_placement placement = PM_PLACEMENT_INIT;
  pm_report_info info = PM_REPORT_INFO_INIT;
  pm_rank_info rank = PM_RANK_INFO_INIT;
  pm_sim_result_info sinfo = PM_SIM_RESULT_INFO_INIT;
  pm_app_options app = PM_APP_OPTIONS_INIT;

  CHECK_FAILS(pm_allocation_new(NULL), PM_E_INVALID, "'out' is NULL");
  CHECK_FAILS(pm_allocation_local(NULL), PM_E_INVALID, "'out' is NULL");
  CHECK_FAILS(pm_allocation_from_hosts(NULL, "a"), PM_E_INVALID, "'out' is NULL");
  CHECK_FAILS(pm_allocation_from_hostfile(NULL, "f"), PM_E_INVALID, "'out' is NULL");
  CHECK_FAILS(pm_allocation_from_hostfile(&a, NULL), PM_E_INVALID, "'path' is NULL");
  CHECK_FAILS(pm_allocation_from_hostfile_text(NULL, "a", "f"), PM_E_INVALID, "'out' is NULL");
  CHECK_FAILS(pm_allocation_from_hostfile_text(&a, NULL, "f"), PM_E_INVALID, "'text' is NULL");
  CHECK_FAILS(pm_allocation_from_environment(NULL, NULL), PM_E_INVALID, "'out' is NULL");
  CHECK_FAILS(pm_allocation_add_host(NULL, "a", 1, 0), PM_E_INVALID, "'allocation' is NULL");
  CHECK_FAILS(pm_allocation_host_count(NULL, &n), PM_E_INVALID, "'allocation' is NULL");
  CHECK_FAILS(pm_allocation_host(NULL, 0, &host), PM_E_INVALID, "'allocation' is NULL");
  CHECK_FAILS(pm_allocation_total_slots(NULL, &u64), PM_E_INVALID, "'allocation' is NULL");
  CHECK_FAILS(pm_allocation_source_of(NULL, &source), PM_E_INVALID, "'allocation' is NULL");
  CHECK_OK(pm_allocation_new(&a));
  CHECK_FAILS(pm_allocation_add_host(a, NULL, 1, 0), PM_E_INVALID, "'name' is NULL");
  CHECK_FAILS(pm_allocation_host_count(a, NULL), PM_E_INVALID, "'out' is NULL");
  CHECK_FAILS(pm_allocation_host(a, 0, NULL), PM_E_INVALID, "'out' is NULL");
  CHECK_FAILS(pm_allocation_total_slots(a, NULL), PM_E_INVALID, "'out' is NULL");
  CHECK_FAILS(pm_allocation_source_of(a, NULL), PM_E_INVALID, "'out' is NULL");

  CHECK_FAILS(pm_job_new(NULL), PM_E_INVALID, "'out' is NULL");
  CHECK_FAILS(pm_job_add_app(NULL, &app), PM_E_INVALID, "'job' is NULL");
  CHECK_FAILS(pm_job_app_count(NULL, &n), PM_E_INVALID, "'job' is NULL");
  CHECK_FAILS(pm_job_set_mapping(NULL, NULL), PM_E_INVALID, "'job' is NULL");
  CHECK_FAILS(pm_job_set_env(NULL, NULL), PM_E_INVALID, "'job' is NULL");
  CHECK_FAILS(pm_job_set_map_by(NULL, "core"), PM_E_INVALID, "'job' is NULL");
  CHECK_FAILS(pm_job_set_rank_by(NULL, "core"), PM_E_INVALID, "'job' is NULL");
  CHECK_FAILS(pm_job_set_bind_to(NULL, "core"), PM_E_INVALID, "'job' is NULL");
  CHECK_FAILS(pm_job_set_cpus_per_rank(NULL, "1"), PM_E_INVALID, "'job' is NULL");
  CHECK_FAILS(pm_job_set_gpus_per_rank(NULL, "1"), PM_E_INVALID, "'job' is NULL");
  CHECK_FAILS(pm_job_set_report_bindings(NULL, 1), PM_E_INVALID, "'job' is NULL");
  CHECK_OK(pm_job_new(&job));
  CHECK_FAILS(pm_job_add_app(job, NULL), PM_E_INVALID, "'app' is NULL");
  CHECK_FAILS(pm_job_app_count(job, NULL), PM_E_INVALID, "'out' is NULL");

  CHECK_FAILS(pm_map_job(NULL, job, a), PM_E_INVALID, "'out' is NULL");
  CHECK_FAILS(pm_map_job(&map, NULL, a), PM_E_INVALID, "'job' is NULL");
  CHECK_FAILS(pm_map_job(&map, job, NULL), PM_E_INVALID, "'allocation' is NULL");
  CHECK_FAILS(pm_map_job(&map, job, a), PM_E_INVALID, "the job has no app");
  CHECK(map == NULL);
  CHECK_FAILS(pm_map_size(NULL, &u), PM_E_INVALID, "'map' is NULL");
  CHECK_FAILS(pm_map_node_count(NULL, &u), PM_E_INVALID, "'map' is NULL");
  CHECK_FAILS(pm_map_app_ranks(NULL, 0, &u, &u2), PM_E_INVALID, "'map' is NULL");
  CHECK_FAILS(pm_map_placement(NULL, 0, &placement), PM_E_INVALID, "'map' is NULL");
  CHECK_FAILS(pm_map_ranks_on_host(NULL, 0, &ranks, &n), PM_E_INVALID, "'map' is NULL");
  CHECK_FAILS(pm_map_text(NULL, NULL, 1), PM_E_INVALID, "'out' is NULL");
  CHECK_FAILS(pm_map_text(&text, NULL, 1), PM_E_INVALID, "'map' is NULL");
  CHECK_FAILS(pm_map_json(&text, NULL, 1), PM_E_INVALID, "'map' is NULL");
  CHECK_FAILS(pm_rank_env(&strings, NULL, 0), PM_E_INVALID, "'map' is NULL");
  CHECK_FAILS(pm_rank_env(NULL, NULL, 0), PM_E_INVALID, "'out' is NULL");
  CHECK_FAILS(pm_rank_env_on_host(NULL, NULL, NULL, 0, ""), PM_E_INVALID, "'out' is NULL");
  CHECK_FAILS(pm_rank_env_on_host(&strings, NULL, NULL, 0, ""), PM_E_INVALID, "'map' is NULL");

  CHECK_FAILS(pm_report_read(NULL, &info), PM_E_INVALID, "'report' is NULL");
  CHECK_FAILS(pm_report_rank(NULL, 0, &rank), PM_E_INVALID, "'report' is NULL");
  pm_rank_resources resources = PM_RANK_RESOURCES_INIT;
  CHECK_FAILS(pm_report_resources(NULL, 0, &resources), PM_E_INVALID, "'report' is NULL");
  CHECK_FAILS(pm_report_json(&text, NULL), PM_E_INVALID, "'report' is NULL");
  CHECK_FAILS(pm_report_json(NULL, NULL), PM_E_INVALID, "'out' is NULL");

  CHECK_FAILS(pm_run_start(NULL, NULL, NULL), PM_E_INVALID, "'out' is NULL");
  CHECK_FAILS(pm_run_start(&run, NULL, NULL), PM_E_INVALID, "'map' is NULL");
  CHECK(run == NULL);
  CHECK_FAILS(pm_run_poll(NULL, 0, &i), PM_E_INVALID, "'run' is NULL");
  CHECK_FAILS(pm_run_wait(NULL, &i), PM_E_INVALID, "'run' is NULL");
  CHECK_FAILS(pm_run_signal(NULL, 15), PM_E_INVALID, "'run' is NULL");
  CHECK_FAILS(pm_run_cancel(NULL), PM_E_INVALID, "'run' is NULL");
  CHECK_FAILS(pm_run_finished(NULL, &i), PM_E_INVALID, "'run' is NULL");
  CHECK_FAILS(pm_run_report(&report, NULL), PM_E_INVALID, "'run' is NULL");
  CHECK_FAILS(pm_launch(NULL, NULL, NULL), PM_E_INVALID, "'out' is NULL");
  CHECK_FAILS(pm_launch(&report, NULL, NULL), PM_E_INVALID, "'map' is NULL");
  CHECK(report == NULL);

  CHECK_FAILS(pm_sim_new(NULL, NULL), PM_E_INVALID, "'out' is NULL");
  CHECK_FAILS(pm_sim_set_script(NULL, 0, "hang"), PM_E_INVALID, "'sim' is NULL");
  CHECK_FAILS(pm_sim_add_fault(NULL, "crash:1@1s"), PM_E_INVALID, "'sim' is NULL");
  CHECK_FAILS(pm_sim_replay_command(&text, NULL), PM_E_INVALID, "'sim' is NULL");
  CHECK_FAILS(pm_sim_run(&result, NULL, NULL), PM_E_INVALID, "'sim' is NULL");
  CHECK_OK(pm_sim_new(&sim, NULL));
  CHECK_FAILS(pm_sim_set_script(sim, 0, NULL), PM_E_INVALID, "'script' is NULL");
  CHECK_FAILS(pm_sim_add_fault(sim, NULL), PM_E_INVALID, "'fault' is NULL");
  CHECK_FAILS(pm_sim_run(NULL, sim, NULL), PM_E_INVALID, "'out' is NULL");
  CHECK_FAILS(pm_sim_result_read(NULL, &sinfo), PM_E_INVALID, "'result' is NULL");
  CHECK_FAILS(pm_sim_result_problem(NULL, 0, &s), PM_E_INVALID, "'result' is NULL");
  CHECK_FAILS(pm_sim_result_line(NULL, 0, &s), PM_E_INVALID, "'result' is NULL");
  CHECK_FAILS(pm_sim_result_report(&report, NULL), PM_E_INVALID, "'result' is NULL");
  CHECK_FAILS(pm_sim_result_explain(&text, NULL), PM_E_INVALID, "'result' is NULL");
  CHECK(text == NULL && strings == NULL && result == NULL);

  pm_sim_destroy(sim);
  pm_job_destroy(job);
  pm_allocation_destroy(a);
}

/* Options and output structs whose version this library does not know. */
static void versions_of_structs(void) {
  pm_allocation* a = NULL;
  pm_job* job = NULL;
  pm_sim* sim = NULL;
  CHECK_OK(pm_allocation_from_hosts(&a, "a:2"));
  CHECK_OK(pm_job_new(&job));

  pm_host host = PM_HOST_INIT;
  host.version = 0;
  CHECK_FAILS(pm_allocation_host(a, 0, &host), PM_E_VERSION, "pm_host version 0");
  host.version = PM_HOST_VERSION + 1;
  CHECK_FAILS(pm_allocation_host(a, 0, &host), PM_E_VERSION, "start from the *_INIT macro");

  const char* argv[] = {"/bin/true", NULL};
  pm_app_options app = PM_APP_OPTIONS_INIT;
  app.argv = argv;
  app.version = 2;
  CHECK_FAILS(pm_job_add_app(job, &app), PM_E_VERSION, "pm_app_options version 2");
  pm_mapping_options mapping = PM_MAPPING_OPTIONS_INIT;
  mapping.version = 99;
  CHECK_FAILS(pm_job_set_mapping(job, &mapping), PM_E_VERSION, "pm_mapping_options");
  pm_env_options env = PM_ENV_OPTIONS_INIT;
  env.version = 0;
  CHECK_FAILS(pm_job_set_env(job, &env), PM_E_VERSION, "pm_env_options");

  app.version = PM_APP_OPTIONS_VERSION;
  app.np = 2;
  CHECK_OK(pm_job_add_app(job, &app));
  pm_map* map = NULL;
  CHECK_OK(pm_map_job(&map, job, a));
  pm_placement placement = PM_PLACEMENT_INIT;
  placement.version = 7;
  CHECK_FAILS(pm_map_placement(map, 0, &placement), PM_E_VERSION, "pm_placement");
  pm_run_options run = PM_RUN_OPTIONS_INIT;
  run.version = 1000;
  pm_run* r = NULL;
  CHECK_FAILS(pm_run_start(&r, map, &run), PM_E_VERSION, "pm_run_options version 1000");
  CHECK(r == NULL);

  pm_sim_options so = PM_SIM_OPTIONS_INIT;
  so.version = 3;
  CHECK_FAILS(pm_sim_new(&sim, &so), PM_E_VERSION, "pm_sim_options");
  CHECK(sim == NULL);
  CHECK_OK(pm_sim_new(&sim, NULL));
  pm_sim_run_options ro = PM_SIM_RUN_OPTIONS_INIT;
  ro.version = 0;
  pm_sim_result* result = NULL;
  CHECK_FAILS(pm_sim_run(&result, sim, &ro), PM_E_VERSION, "pm_sim_run_options");
  CHECK_OK(pm_sim_run(&result, sim, NULL));
  pm_sim_result_info sinfo = PM_SIM_RESULT_INFO_INIT;
  sinfo.version = 2;
  CHECK_FAILS(pm_sim_result_read(result, &sinfo), PM_E_VERSION, "pm_sim_result_info");
  pm_report* report = NULL;
  CHECK_OK(pm_sim_result_report(&report, result));
  pm_report_info info = PM_REPORT_INFO_INIT;
  info.version = 0;
  CHECK_FAILS(pm_report_read(report, &info), PM_E_VERSION, "pm_report_info");
  pm_rank_info rank = PM_RANK_INFO_INIT;
  rank.version = 5;
  CHECK_FAILS(pm_report_rank(report, 0, &rank), PM_E_VERSION, "pm_rank_info");

  pm_report_destroy(report);
  pm_sim_result_destroy(result);
  pm_sim_destroy(sim);
  pm_map_destroy(map);
  pm_job_destroy(job);
  pm_allocation_destroy(a);
}

int main(void) {
  versions();
  status_names();
  last_error();
  long_message();
  memory();
  null_arguments();
  versions_of_structs();
  printf("c_basics_test: ok\n");
  return 0;
}
