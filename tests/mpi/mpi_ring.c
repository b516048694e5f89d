/* ring: a token goes once around MPI_COMM_WORLD, each rank adding its rank to it; rank 0 prints
 * the sum, which must be size*(size-1)/2. Point-to-point messages between every neighbour pair.
 * Output (rank 0): "ring size S sum N" */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long token = 0;
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  if (size == 1) {
    token = 0;
  } else if (rank == 0) {
    MPI_Send(&token, 1, MPI_LONG, next, 7, MPI_COMM_WORLD);
    MPI_Recv(&token, 1, MPI_LONG, prev, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  } else {
    MPI_Recv(&token, 1, MPI_LONG, prev, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    token += rank;
    MPI_Send(&token, 1, MPI_LONG, next, 7, MPI_COMM_WORLD);
  }
  if (rank == 0) {
    printf("ring size %d sum %ld\n", size, token);
    fflush(stdout);
  }
  MPI_Finalize();
  return token == (long)size * (size - 1) / 2 || rank != 0 ? 0 : 4;
}
