/* hello: every rank prints its place in MPI_COMM_WORLD and the monotonic time at which it got past
 * MPI_Init (the launch benchmarks compare it with the launcher's start). With an argument, the
 * world size must equal it: a rank that finds itself a singleton exits with 3.
 *   mpi_hello [expected-size]
 * Output, one line per rank: "hello rank R size S universe U appnum A init_ns T" */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long long monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const long long init_ns = monotonic_ns();
  int rank = -1, size = -1, flag = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int* universe = NULL;
  int* appnum = NULL;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &universe, &flag);
  const int universe_size = flag ? *universe : -1;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &appnum, &flag);
  const int app = flag ? *appnum : -1;
  printf("hello rank %d size %d universe %d appnum %d init_ns %lld\n", rank, size, universe_size,
         app, init_ns);
  fflush(stdout);
  const int expected = argc > 1 ? atoi(argv[1]) : size;
  MPI_Finalize();
  return size == expected ? 0 : 3;
}
