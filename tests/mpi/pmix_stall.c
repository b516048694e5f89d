/* stall: a PMIx job with one rank stuck (--stall-timeout, docs/resilience.md "Stalls"): rank
 * STUCK blocks in read() on a pipe nobody writes to, the others wait for it in PMIx_Fence (which
 * blocks in a condition wait, using no CPU, unlike Open MPI's spinning MPI_Barrier).
 *   pmix_stall [STUCK]   (default 1)
 * Output: "stall rank R pid P", once, before it blocks. */
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char** argv) {
  pmix_proc_t me;
  if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS) {
    fprintf(stderr, "stall: PMIx_Init failed\n");
    return 1;
  }
  const unsigned stuck = argc > 1 ? (unsigned)atoi(argv[1]) : 1u;
  printf("stall rank %u pid %ld\n", me.rank, (long)getpid());
  fflush(stdout);
  if (me.rank == stuck) {
    int p[2];
    if (pipe(p) != 0) return 1;
    char c;
    if (read(p[0], &c, 1) < 0) return 1; /* never returns: nobody writes */
    return 1;
  }
  const pmix_status_t rc = PMIx_Fence(NULL, 0, NULL, 0);
  if (rc != PMIX_SUCCESS) fprintf(stderr, "stall: PMIx_Fence: %s\n", PMIx_Error_string(rc));
  PMIx_Finalize(NULL, 0);
  return rc == PMIX_SUCCESS ? 0 : 1;
}
