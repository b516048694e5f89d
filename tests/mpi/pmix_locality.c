/* locality: a rank that asks its PMIx server where it was bound (PMIX_CPUSET,
 * PMIX_LOCALITY_STRING), and for the locality string of each local peer, as Open MPI's MPI_Init
 * does to tell which peers share a package or cache; then prints what the kernel says it may
 * run on.
 *   pmix_locality
 * Output, one line per rank and one per local peer:
 *   "locality rank R cpuset C locality L affinity A" (C, L "none" when the server has no value;
 *   A the cpus of sched_getaffinity, comma-separated)
 *   "peer R of P locality L" */
#define _GNU_SOURCE
#include <pmix.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The string value of KEY for PROC, or a copy of "none". Caller frees. */
static char* get_string(const pmix_proc_t* proc, const char* key) {
  pmix_value_t* v = NULL;
  /* Optional: not there is an answer, not a reason to ask the host. */
  pmix_info_t info;
  int optional = 1;
  PMIX_INFO_LOAD(&info, PMIX_OPTIONAL, &optional, PMIX_BOOL);
  char* out = NULL;
  if (PMIx_Get(proc, key, &info, 1, &v) == PMIX_SUCCESS && v != NULL && v->type == PMIX_STRING &&
      v->data.string != NULL) {
    out = strdup(v->data.string);
  }
  if (v != NULL) PMIX_VALUE_RELEASE(v);
  PMIX_INFO_DESTRUCT(&info);
  return out != NULL ? out : strdup("none");
}

int main(void) {
  pmix_proc_t me;
  if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS) {
    fprintf(stderr, "locality: PMIx_Init failed\n");
    return 1;
  }
  char* cpuset = get_string(&me, PMIX_CPUSET);
  char* locality = get_string(&me, PMIX_LOCALITY_STRING);
  char affinity[4096] = "";
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    size_t used = 0;
    for (int c = 0; c < CPU_SETSIZE && used + 8 < sizeof affinity; ++c) {
      if (CPU_ISSET(c, &set)) {
        used += (size_t)snprintf(affinity + used, sizeof affinity - used, "%s%d",
                                 used > 0 ? "," : "", c);
      }
    }
  }
  printf("locality rank %u cpuset %s locality %s affinity %s\n", me.rank, cpuset, locality,
         affinity);
  free(cpuset);
  free(locality);

  pmix_proc_t job;
  PMIX_PROC_LOAD(&job, me.nspace, PMIX_RANK_WILDCARD);
  char* peers = get_string(&job, PMIX_LOCAL_PEERS);
  if (strcmp(peers, "none") != 0) {
    char* save = NULL;
    for (char* p = strtok_r(peers, ",", &save); p != NULL; p = strtok_r(NULL, ",", &save)) {
      pmix_proc_t peer;
      PMIX_PROC_LOAD(&peer, me.nspace, (pmix_rank_t)strtoul(p, NULL, 10));
      char* theirs = get_string(&peer, PMIX_LOCALITY_STRING);
      printf("peer %u of %u locality %s\n", peer.rank, me.rank, theirs);
      free(theirs);
    }
  }
  free(peers);
  fflush(stdout);
  PMIx_Finalize(NULL, 0);
  return 0;
}
