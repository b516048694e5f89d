/* pm_rank_env looks up only the host names whose addresses a rank reads: rank 0's host for
 * MASTER_ADDR, every node only with the tf profile (TF_CONFIG), and each at most once per map.
 * This program replaces getaddrinfo to count the names libpm-c asks for; every name ending in
 * ".invalid" fails after a delay, as a name server that does not answer would. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netdb.h>
#include <time.h>

#include "check.h"

typedef int (*getaddrinfo_fn)(const char*, const char*, const struct addrinfo*, struct addrinfo**);

static int invalid_lookups = 0;
static char last_invalid[64];

static int ends_with(const char* s, const char* tail) {
  const size_t n = strlen(s), m = strlen(tail);
  return n >= m && strcmp(s + n - m, tail) == 0;
}

/* Exported (the tree builds with hidden visibility), so that libpm-c's calls come here. */
__attribute__((visibility("default"))) int getaddrinfo(const char* node, const char* service,
                                                       const struct addrinfo* hints,
                                                       struct addrinfo** res) {
  if (node != NULL && ends_with(node, ".invalid")) {
    ++invalid_lookups;
    snprintf(last_invalid, sizeof last_invalid, "%s", node);
    const struct timespec delay = {0, 50 * 1000 * 1000};
    nanosleep(&delay, NULL);
    return EAI_NONAME;
  }
  static getaddrinfo_fn real = NULL;
  if (real == NULL) {
    void* symbol = dlsym(RTLD_NEXT, "getaddrinfo");
    memcpy(&real, &symbol, sizeof real); /* ISO C has no cast from object to function pointer */
  }
  return real(node, service, hints, res);
}

/* `np` ranks by node over `hosts`, with env profiles `profiles` (NULL: the default). */
static pm_map* map_over(const char* hosts, int64_t np, const char* profiles) {
  pm_allocation* a = NULL;
  CHECK_OK(pm_allocation_from_hosts(&a, hosts));
  pm_job* job = NULL;
  CHECK_OK(pm_job_new(&job));
  const char* argv[] = {"true", NULL};
  pm_app_options app = PM_APP_OPTIONS_INIT;
  app.argv = argv;
  app.np = np;
  CHECK_OK(pm_job_add_app(job, &app));
  pm_mapping_options m = PM_MAPPING_OPTIONS_INIT;
  m.by = PM_MAP_BY_NODE;
  CHECK_OK(pm_job_set_mapping(job, &m));
  pm_env_options e = PM_ENV_OPTIONS_INIT;
  e.profiles = profiles;
  e.master_port = 29500;
  CHECK_OK(pm_job_set_env(job, &e));
  pm_map* map = NULL;
  CHECK_OK(pm_map_job(&map, job, a));
  pm_job_destroy(job);
  pm_allocation_destroy(a);
  return map;
}

static int has_entry(char** env, const char* entry) {
  for (char** e = env; *e != NULL; ++e) {
    if (strcmp(*e, entry) == 0) return 1;
  }
  return 0;
}

static const char many_hosts[] =
    "localhost,h1.invalid,h2.invalid,h3.invalid,h4.invalid,h5.invalid,h6.invalid,h7.invalid,"
    "h8.invalid,h9.invalid,h10.invalid,h11.invalid,h12.invalid,h13.invalid,h14.invalid,"
    "h15.invalid,h16.invalid,h17.invalid,h18.invalid,h19.invalid";

/* Rank 0 here, 19 other hosts: no name is looked up, for any rank's env. */
static void rank0_here_asks_nobody(void) {
  pm_map* map = map_over(many_hosts, 20, NULL);
  invalid_lookups = 0;
  char** env = NULL;
  CHECK_OK(pm_rank_env(&env, map, 7));
  pm_strings_free(env);
  CHECK_OK(pm_rank_env(&env, map, 0));
  CHECK(invalid_lookups == 0);
  pm_strings_free(env);
  pm_map_destroy(map);
}

/* Rank 0 on a remote host: its name alone, once per map. */
static void rank0_elsewhere_asks_once(void) {
  pm_map* map = map_over("r0.invalid,h1.invalid,h2.invalid,h3.invalid", 4, NULL);
  invalid_lookups = 0;
  char** env = NULL;
  CHECK_OK(pm_rank_env(&env, map, 2));
  CHECK(invalid_lookups == 1);
  CHECK_STR(last_invalid, "r0.invalid");
  CHECK(has_entry(env, "MASTER_ADDR=r0.invalid")); /* unresolved: its name, as documented */
  pm_strings_free(env);
  CHECK_OK(pm_rank_env(&env, map, 3));
  CHECK(invalid_lookups == 1);
  pm_strings_free(env);
  pm_map_destroy(map);
}

/* TF_CONFIG lists every worker's address: with the tf profile every node is looked up, once. */
static void tf_profile_asks_every_node_once(void) {
  pm_map* map = map_over("r0.invalid,h1.invalid,h2.invalid", 3, "default,tf");
  invalid_lookups = 0;
  char** env = NULL;
  CHECK_OK(pm_rank_env(&env, map, 1));
  CHECK(invalid_lookups == 3);
  pm_strings_free(env);
  CHECK_OK(pm_rank_env(&env, map, 2));
  CHECK(invalid_lookups == 3);
  pm_strings_free(env);
  pm_map_destroy(map);
}

int main(void) {
  rank0_here_asks_nobody();
  rank0_elsewhere_asks_once();
  tf_profile_asks_every_node_once();
  printf("c_resolve_test: ok\n");
  return 0;
}
