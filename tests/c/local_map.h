/* The C tests' job on this machine: a map of `np` ranks of argv (each with `app_env`, may be
 * NULL) on "localhost:8". Fails the test (check.h) where a call fails. */
#ifndef PM_TESTS_C_LOCAL_MAP_H
#define PM_TESTS_C_LOCAL_MAP_H

#include "check.h"

/* The same with the job's environment options (pm_job_set_env); `env_options` may be NULL. */
static pm_map* local_map_with_env(int64_t np, const char* const* argv, const char* const* app_env,
                                  const pm_env_options* env_options) {
  pm_allocation* a = NULL;
  CHECK_OK(pm_allocation_from_hosts(&a, "localhost:8"));
  pm_job* job = NULL;
  CHECK_OK(pm_job_new(&job));
  pm_app_options app = PM_APP_OPTIONS_INIT;
  app.argv = argv;
  app.np = np;
  app.env = app_env;
  CHECK_OK(pm_job_add_app(job, &app));
  if (env_options != NULL) CHECK_OK(pm_job_set_env(job, env_options));
  pm_map* map = NULL;
  CHECK_OK(pm_map_job(&map, job, a));
  pm_job_destroy(job);
  pm_allocation_destroy(a);
  return map;
}

static pm_map* local_map(int64_t np, const char* const* argv, const char* const* app_env) {
  return local_map_with_env(np, argv, app_env, NULL);
}

#endif
