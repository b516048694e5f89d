/* allreduce: the sum of rank+1 over MPI_COMM_WORLD, which must be size*(size+1)/2 on every rank.
 * Output, one line per rank: "allreduce rank R size S sum N" */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long mine = rank + 1, sum = 0;
  MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  printf("allreduce rank %d size %d sum %ld\n", rank, size, sum);
  fflush(stdout);
  MPI_Finalize();
  return sum == (long)size * (size + 1) / 2 ? 0 : 4;
}
