/* Launching a parallel job from C with libpm-c (docs/c-api.md).
 *
 *   launch_from_c PROGRAM [ARGS...]
 *
 * Runs PROGRAM as 4 ranks on this machine, each bound to a core (pmrun's --bind-to), shows where
 * each rank runs and what it is told, prints every line the ranks write with its rank, reports
 * how the job ended and each rank's cpus, then simulates the
 * same kind of job on a 64-host cluster where one rank fails. Exits with the job's exit code.
 *
 * Build against an installed libpm:  cc launch_from_c.c $(pkg-config --cflags --libs libpm-c)
 */
#include <pm/pm.h>
#include <stdio.h>
#include <string.h>

/* Every failing call leaves a one-line message in pm_last_error(). */
#define TRY(call)                                                                        \
  do {                                                                                   \
    int rc_ = (call);                                                                    \
    if (rc_ != PM_OK) {                                                                  \
      fprintf(stderr, "launch_from_c: %s (%s)\n", pm_last_error(), pm_status_name(rc_)); \
      return 2;                                                                          \
    }                                                                                    \
  } while (0)

static void print_line(uint32_t rank, pm_stream stream, const char* line, size_t length,
                       unsigned flags, void* user_data) {
  (void)length;
  (void)flags;
  unsigned* lines = user_data;
  ++*lines;
  printf("[rank %u%s] %s\n", rank, stream == PM_STDERR ? " stderr" : "", line);
}

static void print_message(const char* line, void* user_data) {
  (void)user_data;
  fprintf(stderr, "[job] %s\n", line);
}

static int launch(char** argv, int* exit_code) {
  if (pm_version() / 10000 != PM_C_VERSION_MAJOR) {
    fprintf(stderr, "launch_from_c: built for libpm-c %d, running with %s\n", PM_C_VERSION_MAJOR,
            pm_version_string());
    return 2;
  }

  /* Where: this machine, 4 slots (pm_allocation_from_hosts takes what -H takes). */
  pm_allocation* allocation = NULL;
  TRY(pm_allocation_from_hosts(&allocation, "localhost:4"));

  /* What: one app context of 4 ranks, told the ompi and torch variables. */
  pm_job* job = NULL;
  TRY(pm_job_new(&job));
  pm_app_options app = PM_APP_OPTIONS_INIT;
  app.argv = (const char* const*)argv;
  app.np = 4;
  TRY(pm_job_add_app(job, &app));
  pm_env_options env = PM_ENV_OPTIONS_INIT;
  env.profiles = "ompi,torch";
  TRY(pm_job_set_env(job, &env));
  /* Within this machine: a core per rank, as pmrun --bind-to spells it (more ranks than cores
   * share them). */
  TRY(pm_job_set_bind_to(job, "core:overload-allowed"));

  /* The map: each rank's host and local rank, and what rank 0 will see. */
  pm_map* map = NULL;
  TRY(pm_map_job(&map, job, allocation));
  uint32_t size = 0;
  TRY(pm_map_size(map, &size));
  for (uint32_t r = 0; r < size; ++r) {
    pm_placement p = PM_PLACEMENT_INIT;
    TRY(pm_map_placement(map, r, &p));
    printf("rank %u on %s (local rank %u of %u, node %u)\n", p.rank, p.host_name, p.local_rank,
           p.local_size, p.node);
  }
  char** rank0 = NULL;
  TRY(pm_rank_env(&rank0, map, 0));
  static const char* const shown[] = {
      "OMPI_COMM_WORLD_RANK=", "OMPI_COMM_WORLD_SIZE=", "RANK=",
      "LOCAL_RANK=",           "MASTER_ADDR=",          "MASTER_PORT="};
  for (char** v = rank0; *v != NULL; ++v) {
    for (size_t i = 0; i < sizeof shown / sizeof shown[0]; ++i) {
      if (strncmp(*v, shown[i], strlen(shown[i])) == 0) printf("rank 0 gets %s\n", *v);
    }
  }
  pm_strings_free(rank0);

  /* Run it: lines come to print_line, human messages to print_message. */
  unsigned lines = 0;
  pm_run_options options = PM_RUN_OPTIONS_INIT;
  options.on_output = print_line;
  options.on_message = print_message;
  options.user_data = &lines;
  pm_report* report = NULL;
  TRY(pm_launch(&report, map, &options));

  pm_report_info info = PM_REPORT_INFO_INIT;
  TRY(pm_report_read(report, &info));
  printf("job ended: exit code %d, cause %s, %u lines%s%s\n", info.exit_code,
         pm_cause_name(info.cause), lines, info.summary[0] != '\0' ? ": " : "", info.summary);
  *exit_code = info.exit_code;
  for (uint32_t r = 0; r < info.ranks; ++r) {
    pm_rank_resources res = PM_RANK_RESOURCES_INIT;
    TRY(pm_report_resources(report, r, &res));
    printf("rank %u ran on cpus %s\n", r, res.cpus[0] != '\0' ? res.cpus : "(all)");
  }

  pm_report_destroy(report);
  pm_map_destroy(map);
  pm_job_destroy(job);
  pm_allocation_destroy(allocation);
  return 0;
}

/* The same API drives the simulator: 64 hosts x 8 slots, rank 17 exits 7 after 1 s. */
static int simulate(void) {
  pm_sim_options o = PM_SIM_OPTIONS_INIT;
  o.hosts = 64;
  o.slots = 8;
  o.seed = 42;
  pm_sim* sim = NULL;
  TRY(pm_sim_new(&sim, &o));
  TRY(pm_sim_set_script(sim, 17, "exit:7@1s"));
  pm_sim_result* result = NULL;
  TRY(pm_sim_run(&result, sim, NULL));
  pm_sim_result_info info = PM_SIM_RESULT_INFO_INIT;
  TRY(pm_sim_result_read(result, &info));
  pm_report* report = NULL;
  TRY(pm_sim_result_report(&report, result));
  pm_report_info r = PM_REPORT_INFO_INIT;
  TRY(pm_report_read(report, &r));
  printf("simulated %u ranks: %s, exit code %d (%s), ended at %.3f s virtual time\n", r.ranks,
         pm_sim_verdict_name(info.verdict), r.exit_code, r.summary,
         (double)info.finish_time_ns / 1e9);
  printf("replay: %s\n", info.replay);
  const int ok = info.verdict == PM_SIM_OK && r.exit_code == 7 && r.failed_rank == 17;
  pm_report_destroy(report);
  pm_sim_result_destroy(result);
  pm_sim_destroy(sim);
  return ok ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: launch_from_c PROGRAM [ARGS...]\n");
    return 2;
  }
  int exit_code = 0;
  const int rc = launch(argv + 1, &exit_code);
  if (rc != 0) return rc;
  if (simulate() != 0) return 1;
  return exit_code;
}
