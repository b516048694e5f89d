/* abort: rank A (default 0) calls MPI_Abort(MPI_COMM_WORLD, 42) after MPI_Init; the others wait
 * in a barrier it never joins, so only the launcher can end them.
 *   mpi_abort [A]
 * Output (rank A): "aborting rank A size S at_ns T", T the monotonic time just before the call
 * (the benchmarks measure from it to the launcher's exit). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int aborter = argc > 1 ? atoi(argv[1]) : 0;
  if (rank == aborter) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    printf("aborting rank %d size %d at_ns %lld\n", rank, size,
           (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 42);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}
