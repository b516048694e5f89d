/* Binding through the C API: pmrun's --bind-to / --gpus-per-rank / ... spellings as job setters,
 * each rank's cpus and GPUs in the report, checked against what the real ranks saw (their
 * Cpus_allowed_list, their CUDA_VISIBLE_DEVICES), and pm_rank_env_on_host with a host summary.
 * GPUs come from a fake host: HWLOC_XMLFILE (a DGX-2 of $PM_TEST_TOPOLOGIES) for this process's
 * pmd, and for `pmd --topology`, which prints the summary pm_rank_env_on_host reads.
 * argv[1] is the payload program (unused); pmd comes from $PM_AGENT. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

enum { max_ranks = 8 };

/* What each rank printed: one line, its rank's view. */
typedef struct seen {
  char line[max_ranks][256];
  int lines[max_ranks];
  int messages;
  char message[max_ranks][256];
} seen;

static void on_output(uint32_t rank, pm_stream stream, const char* line, size_t length,
                      unsigned flags, void* user_data) {
  (void)length;
  (void)flags;
  seen* s = user_data;
  if (stream != PM_STDOUT || rank >= max_ranks) return;
  snprintf(s->line[rank], sizeof s->line[0], "%s", line);
  s->lines[rank]++;
}

static void on_message(const char* line, void* user_data) {
  seen* s = user_data;
  if (s->messages < max_ranks) snprintf(s->message[s->messages], sizeof s->message[0], "%s", line);
  s->messages++;
}

static pm_job* shell_job(int64_t np, const char* script) {
  const char* argv[] = {"/bin/sh", "-c", script, NULL};
  pm_job* job = NULL;
  CHECK_OK(pm_job_new(&job));
  pm_app_options app = PM_APP_OPTIONS_INIT;
  app.argv = argv;
  app.np = np;
  CHECK_OK(pm_job_add_app(job, &app));
  return job;
}

static pm_map* map_on(const pm_job* job, const char* hosts) {
  pm_allocation* a = NULL;
  CHECK_OK(pm_allocation_from_hosts(&a, hosts));
  pm_map* map = NULL;
  CHECK_OK(pm_map_job(&map, job, a));
  pm_allocation_destroy(a);
  return map;
}

/* Runs the job to its end, which must be `exit_code`. */
static pm_report* launch(const pm_map* map, seen* s, int exit_code) {
  memset(s, 0, sizeof *s);
  pm_run_options o = PM_RUN_OPTIONS_INIT;
  o.on_output = on_output;
  o.on_message = on_message;
  o.user_data = s;
  pm_report* report = NULL;
  CHECK_OK(pm_launch(&report, map, &o));
  pm_report_info info = PM_REPORT_INFO_INIT;
  CHECK_OK(pm_report_read(report, &info));
  CHECK(info.exit_code == exit_code);
  return report;
}

/* Every bad spelling is PM_E_USAGE with one line naming the option and the value. */
static void bad_spellings(void) {
  pm_job* job = shell_job(1, "true");
  CHECK_FAILS(pm_job_set_bind_to(job, "corez"), PM_E_USAGE, "--bind-to corez");
  CHECK(strchr(pm_last_error(), '\n') == NULL);
  CHECK_FAILS(pm_job_set_map_by(job, "ppr:x:core"), PM_E_USAGE, "--map-by");
  CHECK_FAILS(pm_job_set_map_by(job, ""), PM_E_USAGE, "--map-by: empty value");
  CHECK_FAILS(pm_job_set_stall_timeout(job, 0.0004), PM_E_USAGE, "at least 0.001");
  CHECK_FAILS(pm_job_set_stall_timeout(job, 1e-300), PM_E_USAGE, "--stall-timeout");
  CHECK_FAILS(pm_job_set_rank_by(job, "bogus"), PM_E_USAGE, "--rank-by bogus");
  CHECK_FAILS(pm_job_set_cpus_per_rank(job, "0"), PM_E_USAGE, "--cpus-per-rank");
  CHECK_FAILS(pm_job_set_gpus_per_rank(job, "1:sharde"), PM_E_USAGE, "--gpus-per-rank");
  CHECK_FAILS(pm_job_set_bind_to(job, "core\nx"), PM_E_USAGE, "control character");
  CHECK(strchr(pm_last_error(), '\n') == NULL);
  CHECK_FAILS(pm_job_set_bind_to(job, NULL), PM_E_INVALID, "'value' is NULL");
  CHECK_FAILS(pm_job_set_bind_to(NULL, "core"), PM_E_INVALID, "'job' is NULL");
  CHECK_FAILS(pm_job_set_report_bindings(job, 2), PM_E_INVALID, "0 or 1");
  /* The good ones, pmrun's spellings. */
  CHECK_OK(pm_job_set_map_by(job, "ppr:1:core:pe=1"));
  CHECK_OK(pm_job_set_rank_by(job, "core"));
  CHECK_OK(pm_job_set_bind_to(job, "core:overload-allowed"));
  CHECK_OK(pm_job_set_cpus_per_rank(job, "1"));
  CHECK_OK(pm_job_set_gpus_per_rank(job, "1:shared:reorder"));
  CHECK_OK(pm_job_set_report_bindings(job, 1));
  pm_job_destroy(job);
}

/* --bind-to core -np 2 on this machine: each rank its own core, as the report says and as its
 * /proc/self/status says. Needs 2 cores (this project's CI machines have 2). */
static void bound_ranks_see_their_cpus(void) {
  pm_job* job = shell_job(2, "grep Cpus_allowed_list: /proc/self/status | cut -f2");
  CHECK_OK(pm_job_set_bind_to(job, "core"));
  CHECK_OK(pm_job_set_report_bindings(job, 1));
  pm_map* map = map_on(job, "localhost:2");
  seen s;
  pm_report* report = launch(map, &s, 0);
  pm_rank_resources r[2] = {PM_RANK_RESOURCES_INIT, PM_RANK_RESOURCES_INIT};
  for (uint32_t rank = 0; rank < 2; ++rank) {
    CHECK_OK(pm_report_resources(report, rank, &r[rank]));
    CHECK(r[rank].cpus[0] != '\0');
    CHECK(s.lines[rank] == 1);
    CHECK_STR(s.line[rank], r[rank].cpus); /* what the rank saw is what the report says */
    CHECK(r[rank].gpu_count == 0 && r[rank].gpus == NULL);
    CHECK_STR(r[rank].nic, "");
  }
  CHECK(strcmp(r[0].cpus, r[1].cpus) != 0);
  /* --report-bindings: Open MPI's line per rank, through on_message. */
  CHECK(s.messages == 2);
  CHECK_CONTAINS(s.message[0], "MCW rank 0 bound to");
  CHECK_CONTAINS(s.message[1], "MCW rank 1 bound to");
  pm_rank_resources other = PM_RANK_RESOURCES_INIT;
  CHECK_FAILS(pm_report_resources(report, 2, &other), PM_E_INVALID, "outside the job");
  other.version = 99;
  CHECK_FAILS(pm_report_resources(report, 0, &other), PM_E_VERSION, "pm_rank_resources");
  pm_report_destroy(report);
  pm_map_destroy(map);
  pm_job_destroy(job);

  /* Not asked, nothing planned: empty, not an error. */
  job = shell_job(1, "true");
  map = map_on(job, "localhost:1");
  report = launch(map, &s, 0);
  pm_rank_resources none = PM_RANK_RESOURCES_INIT;
  CHECK_OK(pm_report_resources(report, 0, &none));
  CHECK_STR(none.cpus, "");
  CHECK(none.gpu_count == 0 && none.gpus == NULL);
  pm_report_destroy(report);
  pm_map_destroy(map);
  pm_job_destroy(job);
}

/* --gpus-per-rank 1 on a fake DGX-2: a GPU of its own per rank, the one in its
 * CUDA_VISIBLE_DEVICES.
 */
static void fake_gpus_in_the_report(void) {
  pm_job* job = shell_job(4, "echo $CUDA_VISIBLE_DEVICES");
  CHECK_OK(pm_job_set_gpus_per_rank(job, "1"));
  pm_map* map = map_on(job, "localhost:4");
  seen s;
  pm_report* report = launch(map, &s, 0);
  uint32_t gpu[4];
  for (uint32_t rank = 0; rank < 4; ++rank) {
    pm_rank_resources r = PM_RANK_RESOURCES_INIT;
    CHECK_OK(pm_report_resources(report, rank, &r));
    CHECK(r.gpu_count == 1 && r.gpus != NULL);
    gpu[rank] = r.gpus[0];
    char expected[16];
    snprintf(expected, sizeof expected, "%u", (unsigned)gpu[rank]);
    CHECK_STR(s.line[rank], expected);
    for (uint32_t before = 0; before < rank; ++before) CHECK(gpu[before] != gpu[rank]);
  }
  pm_report_destroy(report);
  pm_map_destroy(map);

  /* 17 ranks on 16 GPUs: the job ends unstarted, exit code 2, one line. */
  pm_job* big = shell_job(17, "true");
  CHECK_OK(pm_job_set_gpus_per_rank(big, "1"));
  map = map_on(big, "localhost:17");
  report = launch(map, &s, 2);
  pm_report_info info = PM_REPORT_INFO_INIT;
  CHECK_OK(pm_report_read(report, &info));
  CHECK_CONTAINS(info.summary, "has 16 GPUs; 17 ranks x 1 GPU asked");
  pm_report_destroy(report);
  pm_map_destroy(map);
  pm_job_destroy(big);
  pm_job_destroy(job);
}

/* The summary `pmd --topology` prints with HWLOC_XMLFILE set (malloc'd). */
static char* fake_summary(void) {
  const char* agent = getenv("PM_AGENT");
  CHECK(agent != NULL);
  char command[4096];
  snprintf(command, sizeof command, "'%s' --topology", agent);
  FILE* p = popen(command, "r");
  CHECK(p != NULL);
  char* text = malloc(1 << 16);
  CHECK(text != NULL);
  CHECK(fgets(text, 1 << 16, p) != NULL);
  CHECK(pclose(p) == 0);
  CHECK(strncmp(text, "pmtopo1;", 8) == 0);
  /* Kept with its line end, as a caller that read the output would: the summary reads as well. */
  CHECK(text[strlen(text) - 1] == '\n');
  return text;
}

/* pm_rank_env_on_host gives each rank the device variables a launch gives it. */
static void rank_env_with_a_summary(void) {
  char* summary = fake_summary();
  pm_job* job = shell_job(4, "echo $CUDA_VISIBLE_DEVICES");
  CHECK_OK(pm_job_set_gpus_per_rank(job, "1"));
  pm_map* map = map_on(job, "localhost:4");
  seen s;
  pm_report* report = launch(map, &s, 0);
  for (uint32_t rank = 0; rank < 4; ++rank) {
    char** env = NULL;
    char* cpus = NULL;
    CHECK_OK(pm_rank_env_on_host(&env, &cpus, map, rank, summary));
    CHECK_STR(env_value(env, "CUDA_VISIBLE_DEVICES"), s.line[rank]); /* what the rank saw */
    CHECK_STR(env_value(env, "CUDA_DEVICE_ORDER"), "PCI_BUS_ID");
    CHECK_STR(cpus, ""); /* no --bind-to: unbound */
    pm_rank_resources r = PM_RANK_RESOURCES_INIT;
    CHECK_OK(pm_report_resources(report, rank, &r));
    CHECK(r.gpu_count == 1);
    char gpu[16];
    snprintf(gpu, sizeof gpu, "%u", (unsigned)r.gpus[0]);
    CHECK_STR(gpu, s.line[rank]); /* the report's GPU is the one the rank saw */
    pm_strings_free(env);
    pm_free(cpus);
  }
  /* pm_rank_env alone cannot know them. */
  char** plain = NULL;
  CHECK_OK(pm_rank_env(&plain, map, 0));
  CHECK(env_value(plain, "CUDA_VISIBLE_DEVICES") == NULL);
  pm_strings_free(plain);
  char** env = NULL;
  CHECK_FAILS(pm_rank_env_on_host(&env, NULL, map, 0, "pmtopo1;p=x"), PM_E_PARSE,
              "host topology text");
  CHECK(strchr(pm_last_error(), '\n') == NULL);
  CHECK(env == NULL);
  CHECK_FAILS(pm_rank_env_on_host(&env, NULL, map, 4, summary), PM_E_INVALID, "outside the job");
  CHECK_FAILS(pm_rank_env_on_host(&env, NULL, map, 0, NULL), PM_E_INVALID, "'summary' is NULL");
  pm_report_destroy(report);
  pm_map_destroy(map);
  pm_job_destroy(job);

  /* An -x export of the same name wins, as at launch; --bind-to core gives cpus. */
  job = shell_job(2, "true");
  CHECK_OK(pm_job_set_gpus_per_rank(job, "1"));
  CHECK_OK(pm_job_set_bind_to(job, "core"));
  const char* exports[] = {"CUDA_VISIBLE_DEVICES=7", NULL};
  pm_env_options e = PM_ENV_OPTIONS_INIT;
  e.exports = exports;
  CHECK_OK(pm_job_set_env(job, &e));
  map = map_on(job, "localhost:2");
  char* cpus = NULL;
  CHECK_OK(pm_rank_env_on_host(&env, &cpus, map, 1, summary));
  CHECK_STR(env_value(env, "CUDA_VISIBLE_DEVICES"), "7");
  CHECK_STR(env_value(env, "CUDA_DEVICE_ORDER"), "PCI_BUS_ID");
  CHECK(cpus[0] != '\0');
  pm_strings_free(env);
  pm_free(cpus);
  pm_map_destroy(map);
  pm_job_destroy(job);

  /* A host that cannot meet the job: PM_E_MAPPING, one line. */
  job = shell_job(17, "true");
  CHECK_OK(pm_job_set_gpus_per_rank(job, "1"));
  map = map_on(job, "localhost:17");
  env = NULL;
  CHECK_FAILS(pm_rank_env_on_host(&env, NULL, map, 0, summary), PM_E_MAPPING, "has 16 GPUs");
  CHECK(env == NULL);
  pm_map_destroy(map);
  pm_job_destroy(job);
  free(summary);
}

int main(int argc, char** argv) {
  CHECK(argc == 2 && argv[1] != NULL);
  bad_spellings();
  bound_ranks_see_their_cpus();
  const char* dir = getenv("PM_TEST_TOPOLOGIES");
  CHECK(dir != NULL);
  char xml[4096];
  snprintf(xml, sizeof xml, "%s/nvidiaDGX2.xml", dir);
  FILE* f = fopen(xml, "r");
  CHECK(f != NULL);
  fclose(f);
  /* This process's pmd and `pmd --topology` inherit it. */
  CHECK(setenv("HWLOC_XMLFILE", xml, 1) == 0);
  fake_gpus_in_the_report();
  rank_env_with_a_summary();
  printf("c_binding_test: ok\n");
  return 0;
}
