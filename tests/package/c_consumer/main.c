/* A C program built against an installed libpm-c, as a C user builds it:
 *   cc -std=c11 main.c $(pkg-config --cflags --libs libpm-c) -o c_consumer
 * (tests/package/run_package_test.sh). It checks the version, an allocation, a mapping, a
 * simulation and a launch of two real ranks: the launch finds the installed pmd from libpm-c's
 * own location, with no PM_AGENT and nothing of libpm on PATH. Exit 0: every check held. */
#include <pm/pm.h>

#include <stdio.h>
#include <string.h>

static int failures = 0;

#define CHECK(cond)                                                                         \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      fprintf(stderr, "%s:%d: check failed: %s (last error: '%s')\n", __FILE__, __LINE__, \
              #cond, pm_last_error());                                                     \
      ++failures;                                                                           \
    }                                                                                       \
  } while (0)

#define STR2(x) #x
#define STR(x) STR2(x)

static void check_version(void) {
  /* The header and the library that is linked are the same release. */
  const char* header = STR(PM_C_VERSION_MAJOR) "." STR(PM_C_VERSION_MINOR) "." STR(
      PM_C_VERSION_PATCH);
  CHECK(strcmp(pm_version_string(), header) == 0);
  CHECK(pm_version() == PM_C_VERSION_NUMBER);
  printf("libpm-c %s (%u)\n", pm_version_string(), pm_version());
}

static void check_allocation_and_map(void) {
  pm_allocation* alloc = NULL;
  CHECK(pm_allocation_from_hosts(&alloc, "a:2,b:2") == PM_OK);
  size_t hosts = 0;
  uint64_t slots = 0;
  CHECK(pm_allocation_host_count(alloc, &hosts) == PM_OK && hosts == 2);
  CHECK(pm_allocation_total_slots(alloc, &slots) == PM_OK && slots == 4);
  pm_host h = PM_HOST_INIT;
  CHECK(pm_allocation_host(alloc, 1, &h) == PM_OK && h.name != NULL && strcmp(h.name, "b") == 0);
  CHECK(h.slots == 2);

  /* A malformed list fails with PM_E_PARSE and a message, and leaves the out-parameter alone. */
  pm_allocation* bad = NULL;
  CHECK(pm_allocation_from_hosts(&bad, "a:x") == PM_E_PARSE);
  CHECK(bad == NULL);
  CHECK(pm_last_error()[0] != '\0');

  /* 4 ranks by slot: ranks 2 and 3 on b. */
  const char* argv[] = {"/bin/true", NULL};
  pm_app_options app = PM_APP_OPTIONS_INIT;
  app.argv = argv;
  app.np = 4;
  pm_job* job = NULL;
  CHECK(pm_job_new(&job) == PM_OK);
  CHECK(pm_job_add_app(job, &app) == PM_OK);
  pm_map* map = NULL;
  CHECK(pm_map_job(&map, job, alloc) == PM_OK);
  uint32_t size = 0, nodes = 0;
  CHECK(pm_map_size(map, &size) == PM_OK && size == 4);
  CHECK(pm_map_node_count(map, &nodes) == PM_OK && nodes == 2);
  pm_placement p = PM_PLACEMENT_INIT;
  CHECK(pm_map_placement(map, 3, &p) == PM_OK);
  CHECK(p.host == 1 && p.local_rank == 1 && p.local_size == 2 && p.node == 1);
  CHECK(p.host_name != NULL && strcmp(p.host_name, "b") == 0);

  /* Five ranks do not fit four slots. */
  pm_job* big = NULL;
  app.np = 5;
  pm_map* none = NULL;
  CHECK(pm_job_new(&big) == PM_OK && pm_job_add_app(big, &app) == PM_OK);
  CHECK(pm_map_job(&none, big, alloc) == PM_E_MAPPING);
  CHECK(none == NULL);

  pm_job_destroy(big);
  pm_map_destroy(map);
  pm_job_destroy(job);
  pm_allocation_destroy(alloc);
}

static void check_simulation(void) {
  /* 4 hosts x 2 slots; rank 5 (on node2) exits 7 after a second: the job ends with code 7. */
  pm_sim_options o = PM_SIM_OPTIONS_INIT;
  o.hosts = 4;
  o.slots = 2;
  o.seed = 42;
  pm_sim* sim = NULL;
  CHECK(pm_sim_new(&sim, &o) == PM_OK);
  CHECK(pm_sim_set_script(sim, 5, "exit:7@1s") == PM_OK);
  pm_sim_result* result = NULL;
  CHECK(pm_sim_run(&result, sim, NULL) == PM_OK);
  pm_sim_result_info info = PM_SIM_RESULT_INFO_INIT;
  CHECK(pm_sim_result_read(result, &info) == PM_OK);
  CHECK(info.verdict == PM_SIM_OK && info.finished == 1);
  pm_report* report = NULL;
  CHECK(pm_sim_result_report(&report, result) == PM_OK);
  pm_report_info r = PM_REPORT_INFO_INIT;
  CHECK(pm_report_read(report, &r) == PM_OK);
  CHECK(r.exit_code == 7 && r.cause == PM_CAUSE_RANK_FAILED && r.failed_rank == 5);
  CHECK(r.summary != NULL && strcmp(r.summary, "rank 5 on node2 exited with code 7") == 0);
  printf("simulated: %s\n", r.summary != NULL ? r.summary : "(none)");
  pm_report_destroy(report);
  pm_sim_result_destroy(result);
  pm_sim_destroy(sim);
}

static void check_launch(void) {
  /* Two real ranks on this machine; rank 1 exits 3. */
  pm_allocation* alloc = NULL;
  CHECK(pm_allocation_local(&alloc) == PM_OK);
  const char* argv[] = {"/bin/sh", "-c", "exit $((OMPI_COMM_WORLD_RANK * 3))", NULL};
  pm_app_options app = PM_APP_OPTIONS_INIT;
  app.argv = argv;
  app.np = 2;
  pm_job* job = NULL;
  CHECK(pm_job_new(&job) == PM_OK && pm_job_add_app(job, &app) == PM_OK);
  pm_map* map = NULL;
  CHECK(pm_map_job(&map, job, alloc) == PM_OK);
  pm_run_options ro = PM_RUN_OPTIONS_INIT;
  ro.timeout_ms = 60000;
  pm_report* report = NULL;
  CHECK(pm_launch(&report, map, &ro) == PM_OK);
  pm_report_info r = PM_REPORT_INFO_INIT;
  CHECK(pm_report_read(report, &r) == PM_OK);
  CHECK(r.exit_code == 3 && r.cause == PM_CAUSE_RANK_FAILED && r.failed_rank == 1);
  printf("launched: %s\n", r.summary != NULL ? r.summary : "(none)");
  pm_report_destroy(report);
  pm_map_destroy(map);
  pm_job_destroy(job);
  pm_allocation_destroy(alloc);
}

int main(void) {
  check_version();
  check_allocation_and_map();
  check_simulation();
  check_launch();
  if (failures != 0) {
    fprintf(stderr, "c_consumer: %d check(s) failed\n", failures);
    return 1;
  }
  printf("c_consumer: ok\n");
  return 0;
}
