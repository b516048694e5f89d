/* The simulator through the C API: 64 hosts x 8 slots with a failing rank and a crashing host,
 * determinism (the trace hash), the replay command, callbacks, a liveness failure, and bad
 * scripts and faults. */
#include "check.h"

typedef struct counts {
  uint32_t spawned;
  uint32_t spawned_on_host[64];
  uint64_t trace_lines;
} counts;

static void on_spawn(uint32_t rank, uint32_t host, void* user_data) {
  counts* c = user_data;
  CHECK(rank < 512 && host < 64);
  c->spawned++;
  c->spawned_on_host[host]++;
}

static void on_trace(const char* line, size_t length, void* user_data) {
  counts* c = user_data;
  CHECK(strlen(line) == length);
  c->trace_lines++;
}

static pm_sim* cluster(uint32_t hosts, uint32_t slots, uint64_t seed) {
  pm_sim_options o = PM_SIM_OPTIONS_INIT;
  o.hosts = hosts;
  o.slots = slots;
  o.seed = seed;
  pm_sim* sim = NULL;
  CHECK_OK(pm_sim_new(&sim, &o));
  return sim;
}

static void failing_rank_and_crash(void) {
  pm_sim* sim = cluster(64, 8, 42);
  CHECK_OK(pm_sim_set_script(sim, 17, "exit:7@1s"));
  CHECK_OK(pm_sim_add_fault(sim, "crash:3@2s"));
  counts c;
  memset(&c, 0, sizeof c);
  pm_sim_run_options ro = PM_SIM_RUN_OPTIONS_INIT;
  ro.on_spawn = on_spawn;
  ro.trace = on_trace;
  ro.user_data = &c;
  pm_sim_result* result = NULL;
  CHECK_OK(pm_sim_run(&result, sim, &ro));
  pm_sim_result_info info = PM_SIM_RESULT_INFO_INIT;
  CHECK_OK(pm_sim_result_read(result, &info));
  if (info.verdict != PM_SIM_OK) {
    char* explain = NULL;
    CHECK_OK(pm_sim_result_explain(&explain, result));
    fprintf(stderr, "%s\n", explain);
    pm_free(explain);
  }
  CHECK(info.verdict == PM_SIM_OK);
  CHECK(info.finished == 1);
  CHECK(info.problems == 0);
  CHECK(info.lines >= 1);
  CHECK(info.events > 0);
  CHECK(info.finish_time_ns >= 1000000000); /* rank 17 fails at 1 s after its start */
  CHECK(c.spawned == 512);
  for (int h = 0; h < 64; ++h) CHECK(c.spawned_on_host[h] == 8);
  CHECK(c.trace_lines > 512);
  CHECK_CONTAINS(info.replay, "--hosts 64");
  CHECK_CONTAINS(info.replay, "--seed 42");
  const char* line = NULL;
  CHECK_OK(pm_sim_result_line(result, 0, &line));
  CHECK_CONTAINS(line, "rank 17 on node2 exited with code 7");
  CHECK_FAILS(pm_sim_result_line(result, info.lines, &line), PM_E_INVALID, "does not exist");
  CHECK_FAILS(pm_sim_result_problem(result, 0, &line), PM_E_INVALID, "(0 problems)");

  pm_report* report = NULL;
  CHECK_OK(pm_sim_result_report(&report, result));
  pm_report_info r = PM_REPORT_INFO_INIT;
  CHECK_OK(pm_report_read(report, &r));
  CHECK(r.exit_code == 7);
  CHECK(r.cause == PM_CAUSE_RANK_FAILED);
  CHECK(r.failed_rank == 17);
  CHECK(r.failed_host == 2);
  CHECK_STR(r.failed_host_name, "node2");
  CHECK(r.failed_code == 7);
  CHECK_STR(r.summary, "rank 17 on node2 exited with code 7");
  CHECK(r.ranks == 512);
  CHECK(r.ranks_failed == 1);
  CHECK(r.ranks_killed == 511);
  pm_rank_info rank = PM_RANK_INFO_INIT;
  CHECK_OK(pm_report_rank(report, 17, &rank));
  CHECK(rank.state == PM_RANK_EXITED && rank.exit_code == 7 && rank.host == 2);
  char* json = NULL;
  CHECK_OK(pm_report_json(&json, report));
  CHECK_CONTAINS(json, "rank 17 on node2 exited with code 7");
  pm_free(json);
  pm_report_destroy(report);

  /* The same scenario and seed replay exactly. */
  pm_sim_result* again = NULL;
  CHECK_OK(pm_sim_run(&again, sim, NULL));
  pm_sim_result_info info2 = PM_SIM_RESULT_INFO_INIT;
  CHECK_OK(pm_sim_result_read(again, &info2));
  CHECK(info2.trace_hash == info.trace_hash);
  CHECK(info2.finish_time_ns == info.finish_time_ns);
  CHECK_STR(info2.replay, info.replay);
  pm_sim_result_destroy(again);

  char* replay = NULL;
  CHECK_OK(pm_sim_replay_command(&replay, sim));
  CHECK_STR(replay, info.replay);
  pm_free(replay);
  char* explain = NULL;
  CHECK_OK(pm_sim_result_explain(&explain, result));
  CHECK_CONTAINS(explain, "42");
  pm_free(explain);
  pm_sim_result_destroy(result);
  pm_sim_destroy(sim);
}

/* A host that crashes before anything fails: the job ends as host lost (213). */
static void host_crash(void) {
  pm_sim* sim = cluster(64, 8, 7);
  CHECK_OK(pm_sim_add_fault(sim, "crash:5@2s"));
  pm_sim_result* result = NULL;
  CHECK_OK(pm_sim_run(&result, sim, NULL));
  pm_sim_result_info info = PM_SIM_RESULT_INFO_INIT;
  CHECK_OK(pm_sim_result_read(result, &info));
  CHECK(info.verdict == PM_SIM_OK);
  pm_report* report = NULL;
  CHECK_OK(pm_sim_result_report(&report, result));
  pm_report_info r = PM_REPORT_INFO_INIT;
  CHECK_OK(pm_report_read(report, &r));
  CHECK(r.cause == PM_CAUSE_HOST_LOST);
  CHECK(r.exit_code == 213);
  CHECK(r.failed_host == 5);
  CHECK_STR(r.failed_host_name, "node5");
  CHECK(r.failed_rank == 40); /* the lowest rank on node5 */
  pm_rank_info rank = PM_RANK_INFO_INIT;
  CHECK_OK(pm_report_rank(report, 41, &rank));
  CHECK(rank.state == PM_RANK_LOST);
  CHECK(rank.reason[0] != '\0');
  pm_report_destroy(report);
  pm_sim_result_destroy(result);
  pm_sim_destroy(sim);
}

/* The defaults: 4 hosts x 2 slots, every rank exits 0. */
static void defaults(void) {
  pm_sim* sim = NULL;
  CHECK_OK(pm_sim_new(&sim, NULL));
  pm_sim_result* result = NULL;
  CHECK_OK(pm_sim_run(&result, sim, NULL));
  pm_sim_result_info info = PM_SIM_RESULT_INFO_INIT;
  CHECK_OK(pm_sim_result_read(result, &info));
  CHECK(info.verdict == PM_SIM_OK && info.finished == 1 && info.lines == 0);
  pm_report* report = NULL;
  CHECK_OK(pm_sim_result_report(&report, result));
  pm_report_info r = PM_REPORT_INFO_INIT;
  CHECK_OK(pm_report_read(report, &r));
  CHECK(r.exit_code == 0 && r.cause == PM_CAUSE_NONE && r.ranks == 8);
  pm_report_destroy(report);
  pm_sim_result_destroy(result);
  pm_sim_destroy(sim);
}

/* A lost exit notification: the job never finishes, and the result says so (liveness), with the
 * problem line, the verdict's name and the replay command in the explanation. */
static void liveness_failure(void) {
  pm_sim* sim = cluster(2, 2, 5);
  CHECK_OK(pm_sim_add_fault(sim, "lost-exit:1"));
  pm_sim_result* result = NULL;
  CHECK_OK(pm_sim_run(&result, sim, NULL));
  pm_sim_result_info info = PM_SIM_RESULT_INFO_INIT;
  CHECK_OK(pm_sim_result_read(result, &info));
  CHECK(info.verdict == PM_SIM_LIVENESS);
  CHECK(info.finished == 0);
  CHECK(info.problems >= 1);
  CHECK_STR(pm_sim_verdict_name(info.verdict), "liveness failure");
  const char* problem = NULL;
  CHECK_OK(pm_sim_result_problem(result, 0, &problem));
  CHECK_CONTAINS(problem, "no events left, but the job is not finished");
  CHECK_CONTAINS(problem, "rank 1");
  CHECK_FAILS(pm_sim_result_problem(result, info.problems, &problem), PM_E_INVALID,
              "does not exist");
  char* explain = NULL;
  CHECK_OK(pm_sim_result_explain(&explain, result));
  CHECK_CONTAINS(explain, "no events left, but the job is not finished");
  CHECK_CONTAINS(explain,
                 "replay: build/bin/pmsim --hosts 2 --slots 2 --fault lost-exit:1 --seed 5");
  pm_free(explain);
  /* The report is the state so far: rank 1 still running as the controller sees it. */
  pm_report* report = NULL;
  CHECK_OK(pm_sim_result_report(&report, result));
  pm_rank_info rank = PM_RANK_INFO_INIT;
  CHECK_OK(pm_report_rank(report, 1, &rank));
  CHECK(rank.state == PM_RANK_RUNNING);
  pm_report_destroy(report);
  pm_sim_result_destroy(result);
  pm_sim_destroy(sim);
}

/* --stall-timeout in the simulator: rank 5 stops at 1 s; once the others ended, the only host
 * with a live rank is quiet, the job is named stalled and ends with 214. */
static void stalled_rank(void) {
  pm_sim* sim = cluster(4, 2, 3);
  CHECK_FAILS(pm_sim_set_stall_timeout(sim, -1), PM_E_USAGE, "--stall-timeout '-1'");
  CHECK_FAILS(pm_sim_set_stall_timeout(NULL, 2), PM_E_INVALID, "'sim' is NULL");
  CHECK_OK(pm_sim_set_stall_timeout(sim, 2));
  CHECK_OK(pm_sim_add_fault(sim, "stall:5@1s"));
  pm_sim_result* result = NULL;
  CHECK_OK(pm_sim_run(&result, sim, NULL));
  pm_sim_result_info info = PM_SIM_RESULT_INFO_INIT;
  CHECK_OK(pm_sim_result_read(result, &info));
  CHECK(info.verdict == PM_SIM_OK);
  CHECK_CONTAINS(info.replay, "--stall-timeout 2s");
  CHECK_CONTAINS(info.replay, "--fault stall:5@1s");
  int named = 0;
  for (size_t i = 0; i < info.lines; ++i) {
    const char* line = NULL;
    CHECK_OK(pm_sim_result_line(result, i, &line));
    if (strstr(line, "stalled on node2: rank 5 (pid ") == line) named = 1;
  }
  CHECK(named);
  pm_report* report = NULL;
  CHECK_OK(pm_sim_result_report(&report, result));
  pm_report_info r = PM_REPORT_INFO_INIT;
  CHECK_OK(pm_report_read(report, &r));
  CHECK(r.exit_code == 214);
  CHECK(r.cause == PM_CAUSE_STALLED);
  pm_report_destroy(report);
  pm_sim_result_destroy(result);
  pm_sim_destroy(sim);

  pm_job* job = NULL;
  CHECK_OK(pm_job_new(&job));
  CHECK_OK(pm_job_set_stall_timeout(job, 0.5));
  CHECK_OK(pm_job_set_stall_timeout(job, 0)); /* off again */
  CHECK_FAILS(pm_job_set_stall_timeout(job, -2), PM_E_USAGE, "expected a positive number");
  CHECK_FAILS(pm_job_set_stall_timeout(NULL, 1), PM_E_INVALID, "'job' is NULL");
  pm_job_destroy(job);
}

static void errors(void) {
  pm_sim* sim = NULL;
  pm_sim_options o = PM_SIM_OPTIONS_INIT;
  o.hosts = 0;
  CHECK_FAILS(pm_sim_new(&sim, &o), PM_E_INVALID, "at least one host");
  o.hosts = 2;
  o.slots = 0;
  CHECK_FAILS(pm_sim_new(&sim, &o), PM_E_INVALID, "slots");
  o.slots = 2;
  o.np = 0;
  CHECK_FAILS(pm_sim_new(&sim, &o), PM_E_USAGE, "np 0");
  o.np = PM_NP_PER_SLOT;
  o.default_script = "exit:x";
  CHECK_FAILS(pm_sim_new(&sim, &o), PM_E_USAGE, "exit:x");
  o.default_script = NULL;
  o.map_by = PM_MAP_BY_PPR_NODE;
  CHECK_FAILS(pm_sim_new(&sim, &o), PM_E_USAGE, "ppr");
  o.map_by = (pm_map_by)5;
  CHECK_FAILS(pm_sim_new(&sim, &o), PM_E_INVALID, "pm_map_by");
  CHECK(sim == NULL);

  o.map_by = PM_MAP_BY_SLOT;
  o.np = 9; /* 2 x 2 slots, no oversubscription */
  CHECK_OK(pm_sim_new(&sim, &o));
  pm_sim_result* result = NULL;
  CHECK_FAILS(pm_sim_run(&result, sim, NULL), PM_E_MAPPING, "not enough slots");
  CHECK(result == NULL);
  pm_sim_destroy(sim);

  CHECK_OK(pm_sim_new(&sim, NULL));
  CHECK_FAILS(pm_sim_set_script(sim, 0, "explode"), PM_E_USAGE, "explode");
  CHECK_FAILS(pm_sim_add_fault(sim, "crash:abc"), PM_E_USAGE, "crash:abc");
  CHECK_FAILS(pm_sim_add_fault(sim, "meteor:1@1s"), PM_E_USAGE, "meteor");
  CHECK_OK(pm_sim_add_fault(sim, "crash:99@1s")); /* well-formed; the cluster has 4 hosts */
  CHECK_FAILS(pm_sim_run(&result, sim, NULL), PM_E_USAGE, "99");
  CHECK(result == NULL);
  pm_sim_destroy(sim);
}

int main(void) {
  failing_rank_and_crash();
  host_crash();
  defaults();
  liveness_failure();
  stalled_rank();
  errors();
  printf("c_sim_test: ok\n");
  return 0;
}
