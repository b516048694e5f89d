/* A scheduler that keeps a DVM and runs a stream of jobs on it through libpm-c (docs/dvm.md).
 *
 *   dvm_scheduler [HOSTS [JOBS]]
 *
 * Starts a DVM on HOSTS (what -H takes; default "localhost:4": this machine, 4 slots), then runs
 * JOBS short jobs (default 20) on it, two at a time so that they share its slots: each job is
 * 1 to 4 ranks of `sh -c 'echo job J rank R of N'`, and every line is checked to come back. Job
 * 7 fails on purpose (its rank 0 exits 3 after writing): the failure ends that job only, and the
 * stream goes on. Prints one line per job and a summary; exits 0 when every job ended as planned.
 *
 * Build against an installed libpm:  cc dvm_scheduler.c $(pkg-config --cflags --libs libpm-c)
 */
#include <pm/pm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRY(call)                                                                        \
  do {                                                                                   \
    int rc_ = (call);                                                                    \
    if (rc_ != PM_OK) {                                                                  \
      fprintf(stderr, "dvm_scheduler: %s (%s)\n", pm_last_error(), pm_status_name(rc_)); \
      return 2;                                                                          \
    }                                                                                    \
  } while (0)

/* One job of the stream: its number, size, run, and the lines its ranks wrote. */
typedef struct job_slot {
  int number;
  int ranks;
  pm_run* run;
  int lines;
} job_slot;

static void count_line(uint32_t rank, pm_stream stream, const char* line, size_t length,
                       unsigned flags, void* user_data) {
  (void)rank;
  (void)stream;
  (void)length;
  (void)flags;
  job_slot* slot = user_data;
  char expected[64];
  snprintf(expected, sizeof expected, "job %d rank ", slot->number);
  if (strncmp(line, expected, strlen(expected)) == 0) ++slot->lines;
}

static void print_dvm_message(const char* line, void* user_data) {
  (void)user_data;
  fprintf(stderr, "[dvm] %s\n", line);
}

/* Starts job `number` on the DVM. With `wait` 0 it returns 1 when other jobs hold the slots it
 * needs (PM_E_MAPPING): waiting would block this thread, which also drives those jobs. */
static int start_job(const char* uri, job_slot* slot, int number, int wait) {
  slot->number = number;
  slot->ranks = 1 + number % 4;
  slot->lines = 0;
  pm_job* job = NULL;
  TRY(pm_job_new(&job));
  char script[128];
  snprintf(script, sizeof script,
           "echo job %d rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE%s", number,
           number == 7 ? "; [ $OMPI_COMM_WORLD_RANK != 0 ] || exit 3" : "");
  const char* argv[] = {"sh", "-c", script, NULL};
  pm_app_options app = PM_APP_OPTIONS_INIT;
  app.argv = argv;
  app.np = slot->ranks;
  TRY(pm_job_add_app(job, &app));
  pm_run_options options = PM_RUN_OPTIONS_INIT;
  options.on_output = count_line;
  options.user_data = slot;
  const int rc = pm_dvm_run_start(&slot->run, uri, job, wait, &options);
  pm_job_destroy(job);
  if (rc == PM_E_MAPPING && !wait) return 1;
  TRY(rc);
  return 0;
}

/* Waits for the job in `slot`; 1 when it ended as planned. */
static int finish_job(job_slot* slot) {
  int exit_code = -1;
  if (pm_run_wait(slot->run, &exit_code) != PM_OK) {
    fprintf(stderr, "dvm_scheduler: %s\n", pm_last_error());
    pm_run_destroy(slot->run);
    return 0;
  }
  pm_run_destroy(slot->run);
  slot->run = NULL;
  /* Job 7's other ranks may be ended (the failure policy) before they write. */
  const int ok = slot->number == 7 ? exit_code == 3 && slot->lines >= 1
                                   : exit_code == 0 && slot->lines == slot->ranks;
  printf("job %2d: %d rank(s), exit code %d, %d of %d lines%s\n", slot->number, slot->ranks,
         exit_code, slot->lines, slot->ranks, ok ? "" : "  <- not as planned");
  return ok;
}

int main(int argc, char** argv) {
  const char* hosts = argc > 1 ? argv[1] : "localhost:4";
  const int jobs = argc > 2 ? atoi(argv[2]) : 20;
  pm_allocation* allocation = NULL;
  TRY(pm_allocation_from_hosts(&allocation, hosts));
  pm_dvm_options dvm_options = PM_DVM_OPTIONS_INIT;
  dvm_options.on_message = print_dvm_message;
  pm_dvm* dvm = NULL;
  const int started = pm_dvm_start(&dvm, allocation, &dvm_options);
  pm_allocation_destroy(allocation);
  TRY(started);
  char* uri = NULL;
  TRY(pm_dvm_uri(dvm, &uri));
  printf("DVM at %s\n", uri);

  /* Two jobs in flight: the next starts as soon as the older one ended. */
  job_slot slots[2] = {{0, 0, NULL, 0}, {0, 0, NULL, 0}};
  int as_planned = 0;
  for (int j = 0; j < jobs; ++j) {
    job_slot* slot = &slots[j % 2];
    job_slot* other = &slots[(j + 1) % 2];
    if (slot->run != NULL) as_planned += finish_job(slot);
    int rc = start_job(uri, slot, j, 0);
    if (rc == 1 && other->run != NULL) {
      /* The other job holds the slots: let it end, then wait for them (nothing else holds any). */
      as_planned += finish_job(other);
      rc = start_job(uri, slot, j, 1);
    }
    if (rc != 0) break;
  }
  for (int s = 0; s < 2; ++s) {
    if (slots[s].run != NULL) as_planned += finish_job(&slots[s]);
  }
  int running = 0;
  TRY(pm_dvm_running(dvm, &running));
  printf("%d of %d jobs ended as planned; the DVM %s\n", as_planned, jobs,
         running ? "still runs" : "stopped");
  pm_free(uri);
  pm_dvm_destroy(dvm);
  return as_planned == jobs && running ? 0 : 1;
}
