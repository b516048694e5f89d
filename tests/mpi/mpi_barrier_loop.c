/* barrier loop: N barriers in a row (default 100), then rank 0 prints how many.
 *   mpi_barrier_loop [N]
 * Output (rank 0): "barriers N size S" */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int n = argc > 1 ? atoi(argv[1]) : 100;
  for (int i = 0; i < n; ++i) MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    printf("barriers %d size %d\n", n, size);
    fflush(stdout);
  }
  MPI_Finalize();
  return 0;
}
