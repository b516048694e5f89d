/* A DVM through the C API (docs/dvm.md): started on this machine, jobs on it with their output
 * and exit codes, a job that never fits, one whose slots are taken (wait = 0), bad input, and
 * that it no longer answers once destroyed. pmd comes from $PM_AGENT. */
#define _POSIX_C_SOURCE 200809L

#include "check.h"

typedef struct lines {
  int count;
  char first[128];
} lines;

static void on_output(uint32_t rank, pm_stream stream, const char* line, size_t length,
                      unsigned flags, void* user_data) {
  (void)rank;
  (void)stream;
  (void)length;
  (void)flags;
  lines* l = user_data;
  if (l->count++ == 0) snprintf(l->first, sizeof l->first, "%s", line);
}

static pm_job* job_of(const char* script, int64_t np) {
  pm_job* job = NULL;
  CHECK_OK(pm_job_new(&job));
  const char* argv[] = {"sh", "-c", script, NULL};
  pm_app_options app = PM_APP_OPTIONS_INIT;
  app.argv = argv;
  app.np = np;
  CHECK_OK(pm_job_add_app(job, &app));
  return job;
}

int main(void) {
  pm_allocation* hosts = NULL;
  CHECK_OK(pm_allocation_from_hosts(&hosts, "localhost:2"));
  pm_dvm* dvm = NULL;
  CHECK_OK(pm_dvm_start(&dvm, hosts, NULL));
  char* uri = NULL;
  CHECK_OK(pm_dvm_uri(dvm, &uri));
  CHECK(strncmp(uri, "unix:", 5) == 0);
  int running = 0;
  CHECK_OK(pm_dvm_running(dvm, &running));
  CHECK(running == 1);

  /* Jobs with their output, their size and their exit code. */
  for (int round = 0; round < 3; ++round) {
    pm_job* job = job_of("echo size=$OMPI_COMM_WORLD_SIZE; exit $OMPI_COMM_WORLD_RANK", 2);
    lines got = {0, ""};
    pm_run_options options = PM_RUN_OPTIONS_INIT;
    options.on_output = on_output;
    options.user_data = &got;
    options.no_abort_on_failure = 1;
    pm_report* report = NULL;
    CHECK_OK(pm_dvm_launch(&report, uri, job, 1, &options));
    pm_report_info info = PM_REPORT_INFO_INIT;
    CHECK_OK(pm_report_read(report, &info));
    CHECK(info.exit_code == 1); /* rank 1 exited 1 */
    CHECK(got.count == 2);
    CHECK(strcmp(got.first, "size=2") == 0);
    pm_report_destroy(report);
    pm_job_destroy(job);
  }

  /* Never fits: at once, whatever `wait` says. */
  pm_job* big = job_of("true", 3);
  pm_report* report = NULL;
  CHECK_FAILS(pm_dvm_launch(&report, uri, big, 1, NULL), PM_E_MAPPING, "not enough slots");
  pm_job_destroy(big);

  /* Slots taken by a running job: wait = 0 says what is free. */
  pm_job* holder = job_of("sleep 1", 2);
  pm_run* run = NULL;
  CHECK_OK(pm_dvm_run_start(&run, uri, holder, 0, NULL));
  pm_job* second = job_of("true", 1);
  CHECK_FAILS(pm_dvm_launch(&report, uri, second, 0, NULL), PM_E_MAPPING, "0 free slots now");
  int exit_code = -1;
  CHECK_OK(pm_run_wait(run, &exit_code));
  CHECK(exit_code == 0);
  pm_run_destroy(run);
  CHECK_OK(pm_dvm_launch(&report, uri, second, 0, NULL));
  pm_report_destroy(report);
  pm_job_destroy(second);
  pm_job_destroy(holder);

  /* Bad input is one line. */
  pm_job* one = job_of("true", 1);
  CHECK_FAILS(pm_dvm_launch(&report, "unix:/nonexistent/dvm.sock", one, 1, NULL), PM_E_LAUNCH,
              "no DVM answers at");
  CHECK_FAILS(pm_dvm_launch(&report, "tcp://x", one, 1, NULL), PM_E_USAGE,
              "file:PATH or unix:PATH");
  CHECK_FAILS(pm_dvm_launch(&report, NULL, one, 1, NULL), PM_E_INVALID, "uri");
  pm_allocation* none = NULL;
  CHECK_OK(pm_allocation_new(&none));
  pm_dvm* empty = NULL;
  CHECK_FAILS(pm_dvm_start(&empty, none, NULL), PM_E_INVALID, "no host");
  pm_allocation_destroy(none);
  pm_job_destroy(one);

  /* Destroyed: the socket no longer answers. */
  pm_dvm_destroy(dvm);
  pm_job* after = job_of("true", 1);
  CHECK_FAILS(pm_dvm_launch(&report, uri, after, 1, NULL), PM_E_LAUNCH, "no DVM answers at");
  pm_job_destroy(after);
  pm_free(uri);
  pm_allocation_destroy(hosts);
  printf("c_dvm_test: ok\n");
  return 0;
}
