/* Out of memory through the C API: this program replaces malloc so that the n-th allocation from
 * some point on fails, and sweeps n over every allocation a call makes. Each call must then
 * return PM_E_NOMEM with "out of memory" (reading that message allocates nothing), leave its
 * out-parameter alone, and work again once memory is back: never crash, abort or terminate.
 * Not built under the sanitizers, whose allocators a replaced malloc would bypass. */
#include <stdint.h>

#include "check.h"

extern void* __libc_malloc(size_t size);

/* -1: no failure; otherwise the number of allocations still allowed before every one fails. */
static long allowed = -1;
static long calls_while_armed = 0;

/* Exported (the tree builds with hidden visibility), so that libpm-c's and libstdc++'s calls of
 * malloc come here. */
__attribute__((visibility("default"))) void* malloc(size_t size) {
  if (allowed >= 0) {
    ++calls_while_armed;
    if (allowed == 0) return NULL;
    --allowed;
  }
  return __libc_malloc(size);
}

static void arm(long n) {
  calls_while_armed = 0;
  allowed = n;
}
static void disarm(void) {
  allowed = -1;
}

typedef int (*call_fn)(void* state);

/* Runs `call` with the first n allocations allowed, n = 0, 1, ... until it succeeds; every
 * failure must be a clean PM_E_NOMEM. Returns how many failure points were swept. */
static long sweep(const char* name, call_fn call, void* state) {
  for (long n = 0; n < 100000; ++n) {
    arm(n);
    const int rc = call(state);
    disarm();
    if (rc == PM_OK) return n;
    if (rc != PM_E_NOMEM || strcmp(pm_last_error(), "out of memory") != 0) {
      fprintf(stderr, "%s with %ld allocations allowed: %s '%s'\n", name, n, pm_status_name(rc),
              pm_last_error());
      exit(1);
    }
    /* Reading the error allocates nothing. */
    arm(0);
    const char* message = pm_last_error();
    const char* status = pm_status_name(rc);
    disarm();
    CHECK(calls_while_armed == 0);
    CHECK(message[0] != '\0' && status != NULL);
  }
  fprintf(stderr, "%s never succeeded\n", name);
  exit(1);
}

/* The hosts are numeric addresses (TEST-NET-2): rank 0's MASTER_ADDR is its host's name resolved
 * (docs/env-contract.md), and a made-up name would go to the DNS server. */
static int hosts_call(void* state) {
  pm_allocation** out = state;
  pm_allocation* a = NULL;
  const int rc = pm_allocation_from_hosts(&a, "198.51.100.1:40,198.51.100.2:40,198.51.100.3:40");
  if (rc != PM_OK) {
    CHECK(a == NULL);
    return rc;
  }
  *out = a;
  return rc;
}

typedef struct map_state {
  pm_job* job;
  pm_allocation* allocation;
  pm_map* map;
} map_state;

static int map_call(void* state) {
  map_state* s = state;
  pm_map* m = NULL;
  const int rc = pm_map_job(&m, s->job, s->allocation);
  if (rc != PM_OK) {
    CHECK(m == NULL);
    return rc;
  }
  s->map = m;
  return rc;
}

static int json_call(void* state) {
  map_state* s = state;
  char* text = NULL;
  const int rc = pm_map_json(&text, s->map, 7);
  if (rc != PM_OK) {
    CHECK(text == NULL);
    return rc;
  }
  CHECK(strstr(text, "198.51.100.1") != NULL);
  pm_free(text);
  return rc;
}

static int env_call(void* state) {
  map_state* s = state;
  char** env = NULL;
  const int rc = pm_rank_env(&env, s->map, 5);
  if (rc != PM_OK) {
    CHECK(env == NULL);
    return rc;
  }
  int found = 0;
  for (char** e = env; *e != NULL; ++e) found |= strcmp(*e, "OMPI_COMM_WORLD_RANK=5") == 0;
  CHECK(found);
  pm_strings_free(env);
  return rc;
}

/* A simulated job (rank 3 exits 7); with a non-NULL state, its report is stored there. */
static int sim_call(void* state) {
  pm_report** report = state;
  pm_sim_options o = PM_SIM_OPTIONS_INIT;
  o.hosts = 8;
  o.slots = 2;
  pm_sim* sim = NULL;
  int rc = pm_sim_new(&sim, &o);
  if (rc != PM_OK) return rc;
  rc = pm_sim_set_script(sim, 3, "exit:7@1s");
  pm_sim_result* result = NULL;
  if (rc == PM_OK) rc = pm_sim_run(&result, sim, NULL);
  if (rc == PM_OK) {
    pm_sim_result_info info = PM_SIM_RESULT_INFO_INIT;
    CHECK_OK(pm_sim_result_read(result, &info));
    CHECK(info.verdict == PM_SIM_OK);
    if (report != NULL) rc = pm_sim_result_report(report, result);
  } else {
    CHECK(result == NULL);
  }
  pm_sim_result_destroy(result);
  pm_sim_destroy(sim);
  return rc;
}

static int report_json_call(void* state) {
  const pm_report* report = state;
  char* text = NULL;
  const int rc = pm_report_json(&text, report);
  if (rc != PM_OK) {
    CHECK(text == NULL);
    return rc;
  }
  CHECK(strstr(text, "rank 3 on node1 exited with code 7") != NULL);
  pm_free(text);
  return rc;
}

int main(void) {
  pm_allocation* a = NULL;
  const long hosts_points = sweep("pm_allocation_from_hosts", hosts_call, &a);
  CHECK(a != NULL);
  size_t count = 0;
  CHECK_OK(pm_allocation_host_count(a, &count));
  CHECK(count == 3);

  map_state s = {NULL, a, NULL};
  CHECK_OK(pm_job_new(&s.job));
  const char* argv[] = {"/bin/true", NULL};
  pm_app_options app = PM_APP_OPTIONS_INIT;
  app.argv = argv;
  app.np = 100;
  CHECK_OK(pm_job_add_app(s.job, &app));
  const long map_points = sweep("pm_map_job", map_call, &s);
  const long json_points = sweep("pm_map_json", json_call, &s);
  /* MASTER_ADDR/MASTER_PORT are decided at the first pm_rank_env (a free port, the address):
   * system calls whose own failures are not what this test is about. */
  char** first = NULL;
  CHECK_OK(pm_rank_env(&first, s.map, 0));
  pm_strings_free(first);
  const long env_points = sweep("pm_rank_env", env_call, &s);
  const long sim_points = sweep("pm_sim_new/run", sim_call, NULL);
  pm_report* report = NULL; /* made while memory is plentiful */
  CHECK_OK(sim_call(&report));
  const long report_points = sweep("pm_report_json", report_json_call, report);
  pm_report_destroy(report);

  /* A sweep that never failed would test nothing. */
  CHECK(hosts_points > 0 && map_points > 0 && json_points > 0 && env_points > 0 && sim_points > 0 &&
        report_points > 0);
  printf(
      "c_oom_test: ok (failure points: hosts %ld, map %ld, map json %ld, env %ld, sim %ld, "
      "report json %ld)\n",
      hosts_points, map_points, json_points, env_points, sim_points, report_points);
  pm_map_destroy(s.map);
  pm_job_destroy(s.job);
  pm_allocation_destroy(a);
  return 0;
}
