/* touch: a rank that connects to its PMIx server (PMIx_Init), reads the job size, stays SECONDS
 * and leaves; what the memory benchmark runs 128 of, so that the server is started and serves
 * every rank without MPI's own cost.
 *   pmix_touch [SECONDS]
 * Output: "touch rank R size S" */
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char** argv) {
  pmix_proc_t me;
  if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS) {
    fprintf(stderr, "touch: PMIx_Init failed\n");
    return 1;
  }
  pmix_proc_t job;
  PMIX_PROC_LOAD(&job, me.nspace, PMIX_RANK_WILDCARD);
  pmix_value_t* size = NULL;
  unsigned int n = 0;
  if (PMIx_Get(&job, PMIX_JOB_SIZE, NULL, 0, &size) == PMIX_SUCCESS) {
    n = size->data.uint32;
    PMIX_VALUE_RELEASE(size);
  }
  printf("touch rank %u size %u\n", me.rank, n);
  fflush(stdout);
  if (argc > 1) sleep((unsigned)atoi(argv[1]));
  PMIx_Finalize(NULL, 0);
  return 0;
}
