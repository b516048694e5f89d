/* A tiny check library for the C tests: a failed check prints where, what and pm_last_error(),
 * then exits 1. */
#ifndef PM_TESTS_C_CHECK_H
#define PM_TESTS_C_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pm/pm.h>

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: CHECK(%s) failed; pm_last_error: '%s'\n", __FILE__, __LINE__, #cond, \
              pm_last_error());                                                                    \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

/* The call returns PM_OK and leaves no error message. */
#define CHECK_OK(call)                                                          \
  do {                                                                          \
    int check_rc_ = (call);                                                     \
    if (check_rc_ != PM_OK) {                                                   \
      fprintf(stderr, "%s:%d: %s returned %s: %s\n", __FILE__, __LINE__, #call, \
              pm_status_name(check_rc_), pm_last_error());                      \
      exit(1);                                                                  \
    }                                                                           \
    CHECK(pm_last_error()[0] == '\0');                                          \
  } while (0)

/* The call returns `status` and leaves a message containing `part` (a non-empty one if ""). */
#define CHECK_FAILS(call, status, part)                                                          \
  do {                                                                                           \
    int check_rc_ = (call);                                                                      \
    if (check_rc_ != (status)) {                                                                 \
      fprintf(stderr, "%s:%d: %s returned %s, expected %s (message '%s')\n", __FILE__, __LINE__, \
              #call, pm_status_name(check_rc_), pm_status_name(status), pm_last_error());        \
      exit(1);                                                                                   \
    }                                                                                            \
    if (pm_last_error()[0] == '\0' || strstr(pm_last_error(), (part)) == NULL) {                 \
      fprintf(stderr, "%s:%d: %s: message '%s' does not contain '%s'\n", __FILE__, __LINE__,     \
              #call, pm_last_error(), (part));                                                   \
      exit(1);                                                                                   \
    }                                                                                            \
  } while (0)

#define CHECK_STR(a, b)                                                                     \
  do {                                                                                      \
    const char *check_a_ = (a), *check_b_ = (b);                                            \
    if (check_a_ == NULL || check_b_ == NULL || strcmp(check_a_, check_b_) != 0) {          \
      fprintf(stderr, "%s:%d: %s == %s failed: '%s' vs '%s'\n", __FILE__, __LINE__, #a, #b, \
              check_a_ ? check_a_ : "(null)", check_b_ ? check_b_ : "(null)");              \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

#define CHECK_CONTAINS(haystack, needle)                                         \
  do {                                                                           \
    const char *check_h_ = (haystack), *check_n_ = (needle);                     \
    if (check_h_ == NULL || strstr(check_h_, check_n_) == NULL) {                \
      fprintf(stderr, "%s:%d: '%s' does not contain '%s'\n", __FILE__, __LINE__, \
              check_h_ ? check_h_ : "(null)", check_n_);                         \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

/* The value of NAME in a NULL-terminated "NAME=value" array, or NULL. */
static inline const char* env_value(char** env, const char* name) {
  size_t n = strlen(name);
  for (; env != NULL && *env != NULL; ++env) {
    if (strncmp(*env, name, n) == 0 && (*env)[n] == '=') return *env + n + 1;
  }
  return NULL;
}

#endif
