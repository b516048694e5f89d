/* Launching real processes on this machine through the C API: output through the callback and
 * to descriptors, rank state changes, the report of a failing rank, missing and non-executable
 * programs, signals, cancel, timeout, per-app env, and that nothing outlives a destroyed run.
 * argv[1] is the payload program (tests/payload/pm_payload.c); pmd comes from $PM_AGENT. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "local_map.h"

static const char* payload;

enum { max_lines = 64, max_ranks = 8 };

typedef struct capture {
  pm_run* run;
  char lines[max_lines][160];
  uint32_t line_rank[max_lines];
  pm_stream line_stream[max_lines];
  unsigned line_flags[max_lines];
  int line_count;
  int state_seen[max_ranks][PM_RANK_NOT_STARTED + 1]; /* how often each rank entered each state */
  int64_t pid[max_ranks];
  int ended_code[max_ranks];
  int messages;
  char first_message[512];
  char last_message[512];
  int finish_calls;
  int finish_exit_code;
  int reentry_rc;
} capture;

static void on_output(uint32_t rank, pm_stream stream, const char* line, size_t length,
                      unsigned flags, void* user_data) {
  capture* c = user_data;
  CHECK(strlen(line) == length); /* NUL-terminated, no newline */
  CHECK(strchr(line, '\n') == NULL);
  if (c->line_count < max_lines) {
    snprintf(c->lines[c->line_count], sizeof c->lines[0], "%s", line);
    c->line_rank[c->line_count] = rank;
    c->line_stream[c->line_count] = stream;
    c->line_flags[c->line_count] = flags;
    c->line_count++;
  }
  if (c->run != NULL) {
    int finished = 0;
    c->reentry_rc = pm_run_poll(c->run, 0, &finished); /* not allowed from a callback */
    pm_run_destroy(c->run); /* does nothing from a callback: the run stays valid (ASan checks) */
  }
}

static void on_message(const char* line, void* user_data) {
  capture* c = user_data;
  c->messages++;
  if (c->messages == 1) snprintf(c->first_message, sizeof c->first_message, "%s", line);
  snprintf(c->last_message, sizeof c->last_message, "%s", line);
}

static void on_rank_state(const pm_rank_info* rank, void* user_data) {
  capture* c = user_data;
  CHECK(rank->version == PM_RANK_INFO_VERSION);
  CHECK(rank->rank < max_ranks);
  CHECK(rank->state >= PM_RANK_PENDING && rank->state <= PM_RANK_NOT_STARTED);
  c->state_seen[rank->rank][rank->state]++;
  if (rank->pid != 0) c->pid[rank->rank] = rank->pid;
  if (rank->ended) c->ended_code[rank->rank] = rank->exit_code;
}

static void on_finish(const pm_report* report, void* user_data) {
  capture* c = user_data;
  pm_report_info info = PM_REPORT_INFO_INIT;
  CHECK_OK(pm_report_read(report, &info));
  c->finish_calls++;
  c->finish_exit_code = info.exit_code;
}

static pm_run_options options_for(capture* c) {
  pm_run_options o = PM_RUN_OPTIONS_INIT;
  o.on_output = on_output;
  o.on_message = on_message;
  o.on_rank_state = on_rank_state;
  o.on_finish = on_finish;
  o.user_data = c;
  o.kill_grace_ms = 500;
  return o;
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int find_line(const capture* c, uint32_t rank, const char* text) {
  for (int i = 0; i < c->line_count; ++i) {
    if (c->line_rank[i] == rank && strcmp(c->lines[i], text) == 0) return i;
  }
  return -1;
}

/* Three ranks echo; every line comes through the callback with its rank and stream. */
static void output_and_states(void) {
  const char* argv[] = {payload, "echo", "hello", "echo-err", "oops", "partial", "tail", NULL};
  pm_map* map = local_map(3, argv, NULL);
  capture c;
  memset(&c, 0, sizeof c);
  pm_run_options o = options_for(&c);
  pm_run* run = NULL;
  CHECK_OK(pm_run_start(&run, map, &o));
  c.run = run;
  int finished = 1;
  CHECK_OK(pm_run_finished(run, &finished));
  CHECK(finished == 0);
  pm_report* early = NULL;
  CHECK_OK(pm_run_report(&early, run));
  pm_report_info info = PM_REPORT_INFO_INIT;
  CHECK_OK(pm_report_read(early, &info));
  CHECK(info.ranks == 3);
  pm_report_destroy(early);

  int exit_code = -1;
  CHECK_OK(pm_run_wait(run, &exit_code));
  CHECK(exit_code == 0);
  CHECK(c.reentry_rc == PM_E_INVALID);
  CHECK_OK(pm_run_finished(run, &finished));
  CHECK(finished == 1);
  CHECK(c.finish_calls == 1);
  CHECK(c.finish_exit_code == 0);
  CHECK(c.line_count == 9);
  for (uint32_t r = 0; r < 3; ++r) {
    int i = find_line(&c, r, "hello");
    CHECK(i >= 0 && c.line_stream[i] == PM_STDOUT && c.line_flags[i] == 0);
    i = find_line(&c, r, "oops");
    CHECK(i >= 0 && c.line_stream[i] == PM_STDERR);
    i = find_line(&c, r, "tail");
    CHECK(i >= 0 && c.line_stream[i] == PM_STDOUT && c.line_flags[i] == PM_LINE_PARTIAL);
    CHECK(c.state_seen[r][PM_RANK_EXITED] == 1);
    CHECK(c.state_seen[r][PM_RANK_KILLED] == 0);
    CHECK(c.pid[r] > 0);
    /* It ended: nothing is left of it. */
    CHECK(kill((pid_t)c.pid[r], 0) == -1 && errno == ESRCH);
  }

  pm_report* report = NULL;
  CHECK_OK(pm_run_report(&report, run));
  CHECK_OK(pm_report_read(report, &info));
  CHECK(info.exit_code == 0);
  CHECK(info.cause == PM_CAUSE_NONE);
  CHECK(info.failed_rank == -1 && info.failed_host == -1 && info.failed_host_name == NULL);
  CHECK_STR(info.summary, "");
  CHECK(info.ranks == 3 && info.ranks_failed == 0 && info.ranks_killed == 0);
  pm_rank_info rank = PM_RANK_INFO_INIT;
  CHECK_OK(pm_report_rank(report, 1, &rank));
  CHECK(rank.rank == 1 && rank.state == PM_RANK_EXITED && rank.ended == 1);
  CHECK(rank.exit_code == 0 && rank.signal == 0 && rank.pid == c.pid[1]);
  CHECK_FAILS(pm_report_rank(report, 3, &rank), PM_E_INVALID, "rank 3 is outside the job");
  char* json = NULL;
  CHECK_OK(pm_report_json(&json, report));
  CHECK_CONTAINS(json, "\"exit_code\"");
  pm_free(json);
  pm_report_destroy(report);
  pm_run_destroy(run);
  pm_map_destroy(map);
}

/* Rank 2 exits 7: the job aborts, its exit code is 7 and the report names rank 2. */
static void failing_rank(void) {
  const char* argv[] = {payload, "if-rank", "2", "exit", "7", "sleep", "30", NULL};
  pm_map* map = local_map(4, argv, NULL);
  capture c;
  memset(&c, 0, sizeof c);
  pm_run_options o = options_for(&c);
  const double start = now_seconds();
  pm_report* report = NULL;
  CHECK_OK(pm_launch(&report, map, &o));
  CHECK(now_seconds() - start < 20.0); /* the others were killed, not waited for */
  pm_report_info info = PM_REPORT_INFO_INIT;
  CHECK_OK(pm_report_read(report, &info));
  CHECK(info.exit_code == 7);
  CHECK(info.cause == PM_CAUSE_RANK_FAILED);
  CHECK(info.failed_rank == 2);
  CHECK(info.failed_host == 0);
  CHECK(info.failed_code == 7 && info.failed_signal == 0);
  CHECK(info.ranks_failed == 1 && info.ranks_killed == 3);
  char hostname[256];
  CHECK(gethostname(hostname, sizeof hostname) == 0);
  CHECK_STR(info.failed_host_name, hostname);
  char expected[400];
  snprintf(expected, sizeof expected, "rank 2 on %s exited with code 7", hostname);
  CHECK_STR(info.summary, expected);
  CHECK(c.messages >= 1);
  CHECK_CONTAINS(c.last_message, "");
  CHECK(c.finish_calls == 1 && c.finish_exit_code == 7);
  CHECK(c.state_seen[2][PM_RANK_EXITED] == 1 && c.ended_code[2] == 7);
  for (uint32_t r = 0; r < 4; ++r) {
    if (r == 2) continue;
    CHECK(c.state_seen[r][PM_RANK_KILLED] == 1);
    pm_rank_info rank = PM_RANK_INFO_INIT;
    CHECK_OK(pm_report_rank(report, r, &rank));
    CHECK(rank.state == PM_RANK_KILLED && rank.signal == SIGTERM);
  }
  char* json = NULL;
  CHECK_OK(pm_report_json(&json, report));
  CHECK_CONTAINS(json, "\"rank_failed\"");
  CHECK_CONTAINS(json, expected);
  pm_free(json);
  pm_report_destroy(report);

  /* Without abort-on-failure the others run to their end. */
  const char* argv2[] = {payload, "if-rank", "0", "exit", "3", "sleep", "0.3", NULL};
  pm_map* map2 = local_map(2, argv2, NULL);
  memset(&c, 0, sizeof c);
  o = options_for(&c);
  o.no_abort_on_failure = 1;
  CHECK_OK(pm_launch(&report, map2, &o));
  CHECK_OK(pm_report_read(report, &info));
  CHECK(info.exit_code == 3 && info.failed_rank == 0 && info.ranks_killed == 0);
  pm_rank_info rank = PM_RANK_INFO_INIT;
  CHECK_OK(pm_report_rank(report, 1, &rank));
  CHECK(rank.state == PM_RANK_EXITED && rank.exit_code == 0);
  pm_report_destroy(report);
  pm_map_destroy(map2);
  pm_map_destroy(map);
}

/* A program that does not exist, or cannot be executed, starts nothing. */
static void bad_programs(void) {
  const char* missing[] = {"/nonexistent/pm_no_such_program", NULL};
  pm_map* map = local_map(2, missing, NULL);
  pm_run* run = NULL;
  CHECK_FAILS(pm_run_start(&run, map, NULL), PM_E_NOT_FOUND, "pm_no_such_program");
  CHECK(run == NULL);
  pm_report* report = NULL;
  CHECK_FAILS(pm_launch(&report, map, NULL), PM_E_NOT_FOUND, "pm_no_such_program");
  CHECK(report == NULL);
  pm_map_destroy(map);

  const char* in_path[] = {"pm_no_such_program_in_path", NULL};
  map = local_map(1, in_path, NULL);
  CHECK_FAILS(pm_run_start(&run, map, NULL), PM_E_NOT_FOUND, "pm_no_such_program_in_path");
  pm_map_destroy(map);

  /* The same when the app has its own env; and its own PATH is where its program is looked up. */
  const char* app_env[] = {"A=1", NULL};
  map = local_map(1, missing, app_env);
  CHECK_FAILS(pm_run_start(&run, map, NULL), PM_E_NOT_FOUND, "pm_no_such_program");
  pm_map_destroy(map);
  const char* sh[] = {"sh", "-c", "true", NULL};
  const char* empty_path[] = {"PATH=/pm-no-such-dir", NULL};
  map = local_map(1, sh, empty_path);
  CHECK_FAILS(pm_run_start(&run, map, NULL), PM_E_NOT_FOUND, "'sh'");
  CHECK(run == NULL);
  pm_map_destroy(map);

  char path[] = "/tmp/pm_c_noexec_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  CHECK(write(fd, "#!/bin/sh\n", 10) == 10);
  close(fd);
  CHECK(chmod(path, 0644) == 0);
  const char* noexec[] = {path, NULL};
  map = local_map(1, noexec, NULL);
  if (geteuid() != 0) { /* root may execute anything with an x bit; this one has none */
    CHECK_FAILS(pm_run_start(&run, map, NULL), PM_E_NOT_EXECUTABLE, path);
  } else {
    int rc = pm_run_start(&run, map, NULL);
    CHECK(rc == PM_E_NOT_EXECUTABLE);
  }
  pm_map_destroy(map);
  unlink(path);

  /* The local transport runs ranks on this machine only. */
  pm_allocation* a = NULL;
  CHECK_OK(pm_allocation_from_hosts(&a, "pm-remote-a:2"));
  pm_job* job = NULL;
  CHECK_OK(pm_job_new(&job));
  const char* echo[] = {"/bin/echo", NULL};
  pm_app_options app = PM_APP_OPTIONS_INIT;
  app.argv = echo;
  CHECK_OK(pm_job_add_app(job, &app));
  CHECK_OK(pm_map_job(&map, job, a));
  CHECK_FAILS(pm_run_start(&run, map, NULL), PM_E_LAUNCH, "'pm-remote-a'");
  pm_map_destroy(map);
  pm_job_destroy(job);
  pm_allocation_destroy(a);

  const char* sleeper[] = {"/bin/sleep", "1", NULL};
  map = local_map(1, sleeper, NULL);
  pm_run_options o = PM_RUN_OPTIONS_INIT;
  o.agent_path = "/nonexistent/pmd";
  CHECK(pm_run_start(&run, map, &o) < 0); /* the agent cannot start: an error, no crash */
  CHECK(run == NULL);
  CHECK(pm_last_error()[0] != '\0');
  pm_map_destroy(map);
}

/* Waits (polling) until `n` ranks run. */
static void wait_running(pm_run* run, capture* c, uint32_t n) {
  const double deadline = now_seconds() + 30.0;
  for (;;) {
    uint32_t running = 0;
    for (uint32_t r = 0; r < n; ++r) running += c->state_seen[r][PM_RANK_RUNNING] > 0;
    if (running == n) return;
    int finished = 0;
    CHECK_OK(pm_run_poll(run, 50, &finished));
    CHECK(finished == 0);
    CHECK(now_seconds() < deadline);
  }
}

static void signals_cancel_timeout(void) {
  const char* argv[] = {payload, "sleep", "30", NULL};
  pm_map* map = local_map(2, argv, NULL);
  capture c;

  /* SIGTERM to the launcher: every rank gets it, the job ends with cause "signal". */
  memset(&c, 0, sizeof c);
  pm_run_options o = options_for(&c);
  pm_run* run = NULL;
  CHECK_OK(pm_run_start(&run, map, &o));
  wait_running(run, &c, 2);
  CHECK_FAILS(pm_run_signal(run, 0), PM_E_INVALID, "not a signal");
  CHECK_FAILS(pm_run_signal(run, SIGKILL), PM_E_USAGE, "signal 9 is not one a job takes");
  CHECK_FAILS(pm_run_signal(run, SIGQUIT), PM_E_USAGE, "not one a job takes");
  CHECK_OK(pm_run_signal(run, SIGTERM));
  int exit_code = -1;
  CHECK_OK(pm_run_wait(run, &exit_code));
  pm_report* report = NULL;
  CHECK_OK(pm_run_report(&report, run));
  pm_report_info info = PM_REPORT_INFO_INIT;
  CHECK_OK(pm_report_read(report, &info));
  CHECK(info.cause == PM_CAUSE_SIGNAL);
  CHECK(info.signal == SIGTERM);
  CHECK(exit_code == 128 + SIGTERM && info.exit_code == exit_code);
  pm_report_destroy(report);
  pm_run_destroy(run);

  /* Cancel. */
  memset(&c, 0, sizeof c);
  o = options_for(&c);
  CHECK_OK(pm_run_start(&run, map, &o));
  wait_running(run, &c, 2);
  CHECK_OK(pm_run_cancel(run));
  CHECK_OK(pm_run_wait(run, &exit_code));
  CHECK_OK(pm_run_report(&report, run));
  CHECK_OK(pm_report_read(report, &info));
  CHECK(info.cause == PM_CAUSE_ABORT_REQUESTED);
  CHECK(exit_code == 1 && info.exit_code == 1); /* documented in pm.h and docs/c-api.md */
  CHECK(info.failed_rank == -1);
  CHECK_STR(info.summary, "the job was cancelled: cancelled");
  pm_report_destroy(report);
  pm_run_destroy(run);

  /* Timeout: 124, as coreutils' timeout. */
  memset(&c, 0, sizeof c);
  o = options_for(&c);
  o.timeout_ms = 300;
  const double start = now_seconds();
  CHECK_OK(pm_launch(&report, map, &o));
  CHECK(now_seconds() - start < 20.0);
  CHECK_OK(pm_report_read(report, &info));
  CHECK(info.cause == PM_CAUSE_TIMEOUT && info.exit_code == 124);
  pm_report_destroy(report);

  /* Polling with a timeout returns while the job runs. */
  memset(&c, 0, sizeof c);
  o = options_for(&c);
  CHECK_OK(pm_run_start(&run, map, &o));
  int finished = 1;
  CHECK_OK(pm_run_poll(run, 0, &finished));
  CHECK(finished == 0);
  CHECK_OK(pm_run_poll(run, 100, &finished));
  CHECK(finished == 0);
  CHECK_FAILS(pm_run_poll(run, -2, &finished), PM_E_INVALID, "timeout_ms");
  wait_running(run, &c, 2);

  /* Destroying a running job kills it: nothing outlives the run. */
  int64_t pids[2] = {c.pid[0], c.pid[1]};
  CHECK(pids[0] > 0 && pids[1] > 0);
  CHECK(kill((pid_t)pids[0], 0) == 0);
  const double before = now_seconds();
  pm_run_destroy(run);
  CHECK(now_seconds() - before < 10.0);
  CHECK(kill((pid_t)pids[0], 0) == -1 && errno == ESRCH);
  CHECK(kill((pid_t)pids[1], 0) == -1 && errno == ESRCH);
  pm_map_destroy(map);
}

/* Destroying a running job whose output goes to a pipe nobody reads: the destroy returns once
 * the rank is gone and a second has passed (it held the thread for a minute), and says how many
 * bytes were dropped. */
static void destroy_with_unread_output(void) {
  const char* argv[] = {"/bin/sh", "-c", "exec yes abcdefghijklmnopqrstuvwxyz", NULL};
  pm_map* map = local_map(1, argv, NULL);
  int p[2];
  CHECK(pipe(p) == 0);
  capture c;
  memset(&c, 0, sizeof c);
  pm_run_options o = options_for(&c);
  o.on_output = NULL;
  o.stdout_fd = p[1];
  o.kill_grace_ms = 300;
  pm_run* run = NULL;
  CHECK_OK(pm_run_start(&run, map, &o));
  wait_running(run, &c, 1);
  for (int i = 0; i < 10; ++i) { /* the pipe fills, the rank writes on */
    int finished = 0;
    CHECK_OK(pm_run_poll(run, 20, &finished));
    CHECK(finished == 0);
  }
  const pid_t pid = (pid_t)c.pid[0];
  CHECK(pid > 0);
  const double before = now_seconds();
  pm_run_destroy(run);
  CHECK(now_seconds() - before < 10.0);
  CHECK(kill(pid, 0) == -1 && errno == ESRCH);
  CHECK_CONTAINS(c.last_message, "were not written");
  close(p[0]);
  close(p[1]);
  pm_map_destroy(map);
}

/* pm_run_signal from another thread while this one runs the loop. */
static void* send_term(void* run) {
  struct timespec pause = {0, 100 * 1000 * 1000};
  nanosleep(&pause, NULL);
  CHECK_OK(pm_run_signal(run, SIGTERM));
  return NULL;
}

static void signal_from_another_thread(void) {
  const char* argv[] = {payload, "sleep", "30", NULL};
  pm_map* map = local_map(2, argv, NULL);
  capture c;
  memset(&c, 0, sizeof c);
  pm_run_options o = options_for(&c);
  pm_run* run = NULL;
  CHECK_OK(pm_run_start(&run, map, &o));
  wait_running(run, &c, 2);
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, send_term, run) == 0);
  const double start = now_seconds();
  int exit_code = -1;
  CHECK_OK(pm_run_wait(run, &exit_code));
  CHECK(pthread_join(thread, NULL) == 0);
  CHECK(now_seconds() - start < 20.0);
  CHECK(exit_code == 128 + SIGTERM);
  CHECK(c.state_seen[0][PM_RANK_KILLED] == 1 && c.state_seen[1][PM_RANK_KILLED] == 1);
  pm_run_destroy(run);
  pm_map_destroy(map);
}

static char* read_file(const char* path) {
  static char buf[8192];
  int fd = open(path, O_RDONLY);
  CHECK(fd >= 0);
  ssize_t n = read(fd, buf, sizeof buf - 1);
  CHECK(n >= 0);
  buf[n] = '\0';
  close(fd);
  return buf;
}

/* Launches `map` with its tagged output into a new file made from the template `path`; the job
 * must succeed. Returns its report. */
static pm_report* launch_tagged_into(const pm_map* map, char* path) {
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  pm_run_options o = PM_RUN_OPTIONS_INIT;
  o.stdout_fd = fd;
  o.tag_output = 1;
  pm_report* report = NULL;
  CHECK_OK(pm_launch(&report, map, &o));
  close(fd);
  pm_report_info info = PM_REPORT_INFO_INIT;
  CHECK_OK(pm_report_read(report, &info));
  CHECK(info.exit_code == 0);
  return report;
}

/* Without on_output, lines go to the descriptors given, tagged if asked. */
static void output_to_descriptors(void) {
  const char* argv[] = {payload, "echo", "to-a-file", NULL};
  pm_map* map = local_map(2, argv, NULL);
  char path[] = "/tmp/pm_c_out_XXXXXX";
  pm_report* report = launch_tagged_into(map, path);
  const char* text = read_file(path);
  CHECK_CONTAINS(text, "[1,0]<stdout>:to-a-file\n");
  CHECK_CONTAINS(text, "[1,1]<stdout>:to-a-file\n");
  unlink(path);
  pm_report_destroy(report);
  pm_map_destroy(map);
}

/* The variables pm_rank_env cannot know: their values are decided by the host's agent at launch
 * (docs/c-api.md). The list is the contract: a new one must be documented there too. */
static const char* const decided_at_launch[] = {"PMIX_NAMESPACE",
                                                "PMIX_SERVER_URI41",
                                                "PMIX_SERVER_URI4",
                                                "PMIX_SERVER_URI3",
                                                "PMIX_SERVER_URI2",
                                                "PMIX_SERVER_URI21",
                                                "PMIX_SERVER_TMPDIR",
                                                "PMIX_SYSTEM_TMPDIR",
                                                "OMPI_MCA_orte_tmpdir_base",
                                                "OMPI_MCA_btl_vader_backing_directory"};
enum { decided_count = sizeof decided_at_launch / sizeof decided_at_launch[0] };

static int is_decided(const char* entry) {
  for (int i = 0; i < decided_count; ++i) {
    const size_t n = strlen(decided_at_launch[i]);
    if (strncmp(entry, decided_at_launch[i], n) == 0 && entry[n] == '=') return 1;
  }
  return 0;
}

/* The entry of `name` (the part before '=' of `like`) in a NULL-terminated list, or NULL. */
static const char* same_name(char* const* list, const char* like) {
  const size_t n = (size_t)(strchr(like, '=') - like) + 1;
  for (; *list != NULL; ++list) {
    if (strncmp(*list, like, n) == 0) return *list;
  }
  return NULL;
}

/* Rank `rank`'s lines of a tagged output file ("[1,R]<stdout>:NAME=value"), NULL-terminated. */
static char** rank_lines(const char* path, uint32_t rank) {
  FILE* f = fopen(path, "r");
  CHECK(f != NULL);
  char tag[32];
  snprintf(tag, sizeof tag, "[1,%u]<stdout>:", rank);
  size_t count = 0;
  char** out = calloc(1, sizeof *out);
  char* line = NULL;
  size_t cap = 0;
  ssize_t n;
  while ((n = getline(&line, &cap, f)) > 0) {
    if (line[n - 1] == '\n') line[n - 1] = '\0';
    if (strncmp(line, tag, strlen(tag)) != 0) continue;
    out = realloc(out, (count + 2) * sizeof *out);
    CHECK(out != NULL);
    out[count] = malloc(strlen(line) + 1);
    CHECK(out[count] != NULL);
    strcpy(out[count], line + strlen(tag));
    out[++count] = NULL;
  }
  free(line);
  fclose(f);
  return out;
}

static void free_lines(char** lines) {
  for (char** l = lines; *l != NULL; ++l) free(*l);
  free(lines);
}

extern char** environ;

/* Rank `r`'s variables as the launched rank printed them (its tagged lines in `path`), checked
 * against what pm_rank_env told: the same names, the same values but for the ones decided at
 * launch. Returns the lines (free_lines). */
static char** launched_as_told(const char* path, uint32_t r, char** told) {
  char** got = rank_lines(path, r);
  size_t told_count = 0, got_count = 0, decided = 0;
  for (char** e = told; *e != NULL; ++e, ++told_count) {
    const char* launched = same_name(got, *e);
    if (launched == NULL) {
      fprintf(stderr, "rank %u: pm_rank_env has %s, the launched rank does not\n", r, *e);
      CHECK(launched != NULL);
    }
    if (is_decided(*e)) {
      ++decided;
      CHECK_STR(strchr(*e, '=') + 1, PM_ENV_DECIDED_AT_LAUNCH);
      CHECK(strcmp(strchr(launched, '=') + 1, PM_ENV_DECIDED_AT_LAUNCH) != 0);
    } else {
      CHECK_STR(launched, *e);
    }
  }
  for (char** e = got; *e != NULL; ++e, ++got_count) {
    if (same_name(told, *e) == NULL) {
      fprintf(stderr, "rank %u got %s, which pm_rank_env does not have\n", r, *e);
      CHECK(same_name(told, *e) != NULL);
    }
  }
  CHECK(told_count == got_count);
  CHECK(decided == decided_count);
  return got;
}

/* A launched rank gets exactly what pm_rank_env shows: every variable, with the same value but
 * for the ones only its agent decides at launch (present in both; pm_rank_env shows
 * PM_ENV_DECIDED_AT_LAUNCH). It starts from this process's environment (entries holding a newline
 * left out: the output is read line by line) with an outer job's identity in it, -x, -mca and
 * its app's own variables. */
static void launched_environment(void) {
  size_t own = 0;
  while (environ[own] != NULL) ++own;
  const char** inherited = calloc(own + 5, sizeof *inherited);
  CHECK(inherited != NULL);
  size_t k = 0;
  for (size_t i = 0; i < own; ++i) {
    if (strchr(environ[i], '\n') == NULL) inherited[k++] = environ[i];
  }
  inherited[k++] = "RANK=9";      /* an outer job's: removed */
  inherited[k++] = "PMIX_RANK=9"; /* likewise; PMIx's own wins anyway */
  inherited[k++] = "PM_C_TEST_EQ=a=b";

  const char* argv[] = {payload, "env-all", NULL};
  const char* app_env[] = {"GREETING=hello from C", "PM_C_TEST_X=app", NULL};
  const char* exports[] = {"PM_C_TEST_X=x", "PM_C_TEST_ONLY_X=x", NULL};
  const char* mca[] = {"pml", "cm", NULL}; /* the user's choice beats the host's ob1 */
  pm_env_options eo = PM_ENV_OPTIONS_INIT;
  eo.exports = exports;
  eo.mca = mca;
  eo.inherited = inherited;
  pm_map* map = local_map_with_env(2, argv, app_env, &eo);
  free(inherited);

  char* said[2] = {NULL, NULL};
  char** told[2];
  for (uint32_t r = 0; r < 2; ++r) CHECK_OK(pm_rank_env(&told[r], map, r));

  char path[] = "/tmp/pm_c_env_XXXXXX";
  pm_report* report = launch_tagged_into(map, path);

  for (uint32_t r = 0; r < 2; ++r) {
    char** got = launched_as_told(path, r, told[r]);
    /* What this job set, as the launched rank saw it. */
    CHECK(same_name(got, "RANK=") != NULL);
    CHECK_STR(same_name(got, "RANK="), r == 0 ? "RANK=0" : "RANK=1");
    CHECK_STR(same_name(got, "PMIX_RANK="), r == 0 ? "PMIX_RANK=0" : "PMIX_RANK=1");
    CHECK_STR(same_name(got, "PM_C_TEST_X="), "PM_C_TEST_X=app");
    CHECK_STR(same_name(got, "PM_C_TEST_ONLY_X="), "PM_C_TEST_ONLY_X=x");
    CHECK_STR(same_name(got, "PM_C_TEST_EQ="), "PM_C_TEST_EQ=a=b");
    CHECK_STR(same_name(got, "GREETING="), "GREETING=hello from C");
    CHECK_STR(same_name(got, "OMPI_MCA_pml="), "OMPI_MCA_pml=cm");
    CHECK(same_name(got, "MASTER_PORT=") != NULL);
    said[r] = strdup(same_name(got, "MASTER_PORT="));
    free_lines(got);
    pm_strings_free(told[r]);
  }
  CHECK_STR(said[0], said[1]); /* one port per map */
  free(said[0]);
  free(said[1]);
  unlink(path);
  pm_report_destroy(report);
  pm_map_destroy(map);
}

/* An empty inherited list is an empty start, not this process's environment: a secret of the
 * embedder's reaches no rank, and the rank gets exactly what pm_rank_env shows. */
static void empty_inherited_environment(void) {
  CHECK(setenv("PM_C_TEST_SECRET", "hunter2", 1) == 0);
  const char* argv[] = {payload, "env-all", NULL};
  const char* inherited[] = {NULL};
  pm_env_options eo = PM_ENV_OPTIONS_INIT;
  eo.inherited = inherited;
  pm_map* map = local_map_with_env(1, argv, NULL, &eo);
  char** told = NULL;
  CHECK_OK(pm_rank_env(&told, map, 0));
  CHECK(same_name(told, "PM_C_TEST_SECRET=") == NULL);
  char path[] = "/tmp/pm_c_env_XXXXXX";
  pm_report* report = launch_tagged_into(map, path);
  char** got = launched_as_told(path, 0, told);
  CHECK(same_name(got, "PM_C_TEST_SECRET=") == NULL);
  CHECK(same_name(got, "HOME=") == NULL);
  CHECK_STR(same_name(got, "RANK="), "RANK=0");
  free_lines(got);
  pm_strings_free(told);
  unlink(path);
  pm_report_destroy(report);
  pm_map_destroy(map);
  CHECK(unsetenv("PM_C_TEST_SECRET") == 0);
}

/* The last callback of a run makes a call that fails; the pm_run_wait around it succeeds and
 * must leave no stale message behind (pm_last_error() is "" after a successful call). */
static void on_finish_failing_call(const pm_report* report, void* user_data) {
  (void)report;
  int* inner_rc = user_data;
  *inner_rc = pm_map_size(NULL, NULL);
  CHECK(pm_last_error()[0] != '\0');
}

static void no_stale_error_after_reentrant_failure(void) {
  const char* argv[] = {payload, "exit", "0", NULL};
  pm_map* map = local_map(1, argv, NULL);
  int inner_rc = PM_OK;
  pm_run_options o = PM_RUN_OPTIONS_INIT;
  o.on_finish = on_finish_failing_call;
  o.user_data = &inner_rc;
  pm_run* run = NULL;
  CHECK_OK(pm_run_start(&run, map, &o));
  int exit_code = -1;
  CHECK_OK(pm_run_wait(run, &exit_code)); /* checks pm_last_error() is "" */
  CHECK(inner_rc == PM_E_INVALID);
  CHECK(exit_code == 0);
  pm_run_destroy(run);
  pm_map_destroy(map);
}

/* Restarts in place (pm_run_options version 2): rank 1 fails in incarnation 0 only; the job
 * restarts once and succeeds; on_restart names the failed incarnation; the report counts it. */
typedef struct restarts_seen {
  int calls;
  uint32_t ended;
  int exit_code;
  char summary[256];
} restarts_seen;

static void on_restart(uint32_t ended, int exit_code, const char* summary, void* user_data) {
  restarts_seen* r = user_data;
  ++r->calls;
  r->ended = ended;
  r->exit_code = exit_code;
  snprintf(r->summary, sizeof r->summary, "%s", summary);
}

static void restart_in_place(void) {
  const char* argv[] = {"/bin/sh", "-c",
                        "[ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && [ \"$RANK\" = 1 ] && exit 7; "
                        "[ \"$TORCHELASTIC_MAX_RESTARTS\" = 2 ] || exit 9; exit 0",
                        NULL};
  pm_map* map = local_map(3, argv, NULL);
  restarts_seen seen;
  memset(&seen, 0, sizeof seen);
  pm_run_options o = PM_RUN_OPTIONS_INIT;
  o.max_restarts = 2;
  o.on_restart = on_restart;
  o.user_data = &seen;
  pm_report* report = NULL;
  CHECK_OK(pm_launch(&report, map, &o));
  pm_report_info info = PM_REPORT_INFO_INIT;
  CHECK_OK(pm_report_read(report, &info));
  CHECK(info.exit_code == 0);
  uint32_t restarts = 99;
  CHECK_OK(pm_report_restarts(report, &restarts));
  CHECK(restarts == 1);
  CHECK(seen.calls == 1 && seen.ended == 0 && seen.exit_code == 7);
  CHECK_CONTAINS(seen.summary, "rank 1 on ");
  CHECK_CONTAINS(seen.summary, "exited with code 7");
  pm_report_destroy(report);

  /* A version 1 caller (before restarts) still runs, and never restarts; without restarts the
   * ranks get no TORCHELASTIC_* variables (so every rank exits 9 here). */
  pm_run_options v1 = PM_RUN_OPTIONS_INIT;
  v1.version = 1;
  CHECK_OK(pm_launch(&report, map, &v1));
  CHECK_OK(pm_report_read(report, &info));
  CHECK(info.exit_code == 9);
  CHECK_OK(pm_report_restarts(report, &restarts));
  CHECK(restarts == 0);
  pm_report_destroy(report);
  pm_map_destroy(map);
}

/* Recovery of single ranks (pm_run_options version 3): rank 2 fails in its first process only;
 * it alone starts again and the run succeeds; on_rank_restart names it; the report counts it. */
typedef struct rank_restarts_seen {
  int calls;
  uint32_t rank, count, number;
  char summary[256];
} rank_restarts_seen;

static void on_rank_restart(uint32_t rank, uint32_t count, uint32_t number, const char* summary,
                            void* user_data) {
  rank_restarts_seen* r = user_data;
  ++r->calls;
  r->rank = rank;
  r->count = count;
  r->number = number;
  snprintf(r->summary, sizeof r->summary, "%s", summary);
}

static void recover_one_rank(void) {
  const char* argv[] = {"/bin/sh", "-c",
                        "[ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && [ \"$RANK\" = 2 ] && exit 5; "
                        "exit 0",
                        NULL};
  pm_map* map = local_map(3, argv, NULL);
  rank_restarts_seen seen;
  memset(&seen, 0, sizeof seen);
  pm_run_options o = PM_RUN_OPTIONS_INIT;
  CHECK(o.version == 3);
  o.max_restarts = 4;
  o.enable_recovery = 1;
  o.on_rank_restart = on_rank_restart;
  o.user_data = &seen;
  pm_report* report = NULL;
  CHECK_OK(pm_launch(&report, map, &o));
  pm_report_info info = PM_REPORT_INFO_INIT;
  CHECK_OK(pm_report_read(report, &info));
  CHECK(info.exit_code == 0);
  uint32_t restarts = 99;
  CHECK_OK(pm_report_restarts(report, &restarts));
  CHECK(restarts == 1);
  CHECK(seen.calls == 1 && seen.rank == 2 && seen.count == 1 && seen.number == 1);
  CHECK_CONTAINS(seen.summary, "rank 2 on ");
  CHECK_CONTAINS(seen.summary, "exited with code 5");
  pm_report_destroy(report);

  /* A version 2 caller (before recovery) restarts the whole job as before. */
  pm_run_options v2 = PM_RUN_OPTIONS_INIT;
  v2.version = 2;
  v2.max_restarts = 1;
  v2.enable_recovery = 1; /* not read: beyond a version 2 struct */
  CHECK_OK(pm_launch(&report, map, &v2));
  CHECK_OK(pm_report_read(report, &info));
  CHECK(info.exit_code == 0);
  CHECK_OK(pm_report_restarts(report, &restarts));
  CHECK(restarts == 1);
  pm_report_destroy(report);
  pm_map_destroy(map);
}

/* pm_job_set_stall_timeout: two ranks that sleep use no CPU and write nothing; after 0.5 s the
 * run names them (one line for this host) and ends the job with 214, PM_CAUSE_STALLED. */
static void stalled_job(void) {
  pm_allocation* a = NULL;
  CHECK_OK(pm_allocation_from_hosts(&a, "localhost:8"));
  pm_job* job = NULL;
  CHECK_OK(pm_job_new(&job));
  const char* argv[] = {payload, "sleep", "30", NULL};
  pm_app_options app = PM_APP_OPTIONS_INIT;
  app.argv = argv;
  app.np = 2;
  CHECK_OK(pm_job_add_app(job, &app));
  CHECK_FAILS(pm_job_set_stall_timeout(job, -1), PM_E_USAGE, "--stall-timeout");
  CHECK_OK(pm_job_set_stall_timeout(job, 0.5));
  pm_map* map = NULL;
  CHECK_OK(pm_map_job(&map, job, a));
  pm_job_destroy(job);
  pm_allocation_destroy(a);
  capture c;
  memset(&c, 0, sizeof c);
  pm_run_options o = options_for(&c);
  const double start = now_seconds();
  pm_report* report = NULL;
  CHECK_OK(pm_launch(&report, map, &o));
  CHECK(now_seconds() - start < 10.0);
  pm_report_info info = PM_REPORT_INFO_INIT;
  CHECK_OK(pm_report_read(report, &info));
  CHECK(info.exit_code == 214);
  CHECK(info.cause == PM_CAUSE_STALLED);
  CHECK_STR(info.summary, "no rank progressed for 0.5 s (--stall-timeout)");
  CHECK(info.ranks_killed == 2);
  CHECK(c.messages == 2);
  CHECK(strncmp(c.first_message, "stalled on ", 11) == 0);
  CHECK_CONTAINS(c.first_message, "rank 0 (pid ");
  CHECK_CONTAINS(c.first_message, "rank 1 (pid ");
  CHECK_CONTAINS(c.last_message, "no rank progressed for 0.5 s (--stall-timeout); aborting");
  for (uint32_t r = 0; r < 2; ++r) CHECK(kill((pid_t)c.pid[r], 0) == -1 && errno == ESRCH);
  pm_report_destroy(report);
  pm_map_destroy(map);
}

int main(int argc, char** argv) {
  CHECK(argc == 2);
  payload = argv[1];
  output_and_states();
  failing_rank();
  bad_programs();
  signals_cancel_timeout();
  signal_from_another_thread();
  output_to_descriptors();
  destroy_with_unread_output();
  launched_environment();
  empty_inherited_environment();
  no_stale_error_after_reentrant_failure();
  restart_in_place();
  recover_one_rank();
  stalled_job();
  printf("c_launch_test: ok\n");
  return 0;
}
