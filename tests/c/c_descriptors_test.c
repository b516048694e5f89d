/* Where a run's output goes when the embedder's descriptors are unusual: a daemon that closed 1
 * and 2, an output descriptor that is not open, a destination that stops reading; and a poll for
 * "what is ready" while ranks write without pause. Each case runs in a child process of its own,
 * since closing the standard descriptors changes the process. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "local_map.h"

static const char* payload;

typedef struct seen {
  int messages;
  char message[512];
  long lines;
} seen;

static void on_message(const char* line, void* user_data) {
  seen* s = user_data;
  if (s->messages++ == 0) snprintf(s->message, sizeof s->message, "%s", line);
}

static void on_output(uint32_t rank, pm_stream stream, const char* line, size_t length,
                      unsigned flags, void* user_data) {
  (void)rank, (void)stream, (void)line, (void)length, (void)flags;
  ((seen*)user_data)->lines++;
}

/* Runs `body` in a child; the case passed when the child exits 0. */
static void in_child(void (*body)(void)) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    body();
    _exit(0);
  }
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* A daemon with 1 and 2 closed: the ranks' output goes nowhere (/dev/null takes their place),
 * never into a descriptor of the run's own (its event loop's eventfd took 1, and a rank writing
 * more than one line was killed by SIGPIPE). */
static void closed_standard_descriptors(void) {
  int err = dup(2); /* where this child still reports */
  CHECK(err > 2);
  CHECK(fcntl(err, F_SETFD, FD_CLOEXEC) == 0);
  close(1);
  close(2);
  const char* argv[] = {payload,     "echo",     "one-line", "echo",
                        "two-lines", "echo-err", "three",    NULL};
  pm_map* map = local_map(2, argv, NULL);
  pm_report* report = NULL;
  pm_run_options o = PM_RUN_OPTIONS_INIT;
  if (pm_launch(&report, map, &o) != PM_OK) {
    dprintf(err, "pm_launch: %s\n", pm_last_error());
    _exit(1);
  }
  pm_report_info info = PM_REPORT_INFO_INIT;
  CHECK_OK(pm_report_read(report, &info));
  if (info.exit_code != 0) {
    dprintf(err, "exit %d: %s\n", info.exit_code, info.summary);
    _exit(1);
  }
  char where[64] = {0};
  if (readlink("/proc/self/fd/1", where, sizeof where - 1) < 0 || strcmp(where, "/dev/null") != 0) {
    dprintf(err, "descriptor 1 is '%s', not /dev/null\n", where);
    _exit(1);
  }
  pm_report_destroy(report);
  pm_map_destroy(map);
}

/* An output descriptor that is not open is refused at the start, by name. */
static void output_descriptor_not_open(void) {
  const char* argv[] = {payload, "echo", "x", NULL};
  pm_map* map = local_map(1, argv, NULL);
  pm_run* run = NULL;
  pm_run_options o = PM_RUN_OPTIONS_INIT;
  o.stdout_fd = 999;
  CHECK_FAILS(pm_run_start(&run, map, &o), PM_E_INVALID, "stdout_fd 999 is not an open descriptor");
  o.stdout_fd = 1;
  o.stderr_fd = -1;
  CHECK_FAILS(pm_run_start(&run, map, &o), PM_E_INVALID, "stderr_fd -1 is not an open descriptor");
  o.merge_stderr = 1; /* stderr goes to stdout: its descriptor is not used */
  o.stdout_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  CHECK(o.stdout_fd >= 0);
  pm_report* report = NULL;
  CHECK_OK(pm_launch(&report, map, &o));
  close(o.stdout_fd);
  pm_report_destroy(report);
  pm_map_destroy(map);
}

/* A destination whose reader went away is named through on_message (it was said nowhere); the
 * rank gets SIGPIPE at its next write after that, as the writer of a shell pipeline does
 * (docs/output.md). It writes until then. */
static void destination_that_fails(void) {
  int p[2];
  CHECK(pipe(p) == 0);
  close(p[0]);
  signal(SIGPIPE, SIG_IGN);
  const char* argv[] = {"/bin/sh", "-c", "while :; do echo a; sleep 0.05; done", NULL};
  pm_map* map = local_map(1, argv, NULL);
  seen s;
  memset(&s, 0, sizeof s);
  pm_run_options o = PM_RUN_OPTIONS_INIT;
  o.stdout_fd = p[1];
  o.on_message = on_message;
  o.user_data = &s;
  pm_report* report = NULL;
  CHECK_OK(pm_launch(&report, map, &o));
  pm_report_info info = PM_REPORT_INFO_INIT;
  CHECK_OK(pm_report_read(report, &info));
  CHECK(info.exit_code == 141);
  CHECK(s.messages >= 1);
  CHECK_CONTAINS(s.message, "cannot write to standard output: Broken pipe");
  close(p[1]);
  pm_report_destroy(report);
  pm_map_destroy(map);
}

/* pm_run_poll(run, 0) returns while ranks write without pause: it took every handler that
 * became ready, which was the job's whole life. */
static void ready_poll_returns(void) {
  const char* argv[] = {"/usr/bin/yes", NULL};
  pm_map* map = local_map(2, argv, NULL);
  seen s;
  memset(&s, 0, sizeof s);
  pm_run_options o = PM_RUN_OPTIONS_INIT;
  o.on_output = on_output;
  o.user_data = &s;
  o.timeout_ms = 60000; /* a safety net: the bug let the poll return only at the job's end */
  pm_run* run = NULL;
  CHECK_OK(pm_run_start(&run, map, &o));
  int finished = 0;
  while (s.lines < 2000) {
    CHECK_OK(pm_run_poll(run, 0, &finished));
    CHECK(!finished);
    /* Not a spin (it starved the ranks under ASan): a short wait between the ready-only polls,
     * which itself ends by its deadline. */
    CHECK_OK(pm_run_poll(run, 10, &finished));
    CHECK(!finished);
  }
  CHECK_OK(pm_run_cancel(run));
  int code = 0;
  CHECK_OK(pm_run_wait(run, &code));
  CHECK(code == 1);
  pm_run_destroy(run);
  pm_map_destroy(map);
}

int main(int argc, char** argv) {
  CHECK(argc == 2);
  payload = argv[1];
  in_child(closed_standard_descriptors);
  in_child(output_descriptor_not_open);
  in_child(destination_that_fails);
  in_child(ready_poll_returns);
  printf("c_descriptors_test: ok\n");
  return 0;
}
