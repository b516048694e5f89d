/* spawn: MPI_Comm_spawn of itself from rank 0 of MPI_COMM_WORLD, then one value each way over
 * the intercommunicator (MPI_Allreduce: every rank adds rank + 1, so each side gets the other
 * side's n(n+1)/2), MPI_Comm_disconnect and MPI_Finalize.
 *   mpi_spawn [N] [child-fails]   the parents (N children, default 2)
 *   mpi_spawn N twice             the parents spawn and exchange twice, the first children
 *                                 still there (they disconnect at the end, with the second)
 *   mpi_spawn child [fails]       a child (as the parents start it)
 * Output: "parent R of P: children N", then "parent R of P: sum S";
 *         "child R of N: parent size P", then "child R of N: sum S".
 * Exit 3 when a sum is wrong. With child-fails the last child exits 5 right after its first
 * line, without MPI_Finalize (the others wait in the exchange until they are ended). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int exchange(MPI_Comm inter, const char* who, int rank, int size, int other_size) {
  long mine = rank + 1, sum = 0;
  MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, inter);
  printf("%s %d of %d: sum %ld\n", who, rank, size, sum);
  fflush(stdout);
  return sum == (long)other_size * (other_size + 1) / 2 ? 0 : 3;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0, rc = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm parent = MPI_COMM_NULL;
  MPI_Comm_get_parent(&parent);
  if (argc > 1 && strcmp(argv[1], "child") == 0) {
    if (parent == MPI_COMM_NULL) {
      fprintf(stderr, "spawn: a child without a parent\n");
      MPI_Finalize();
      return 2;
    }
    int parents = 0;
    MPI_Comm_remote_size(parent, &parents);
    printf("child %d of %d: parent size %d\n", rank, size, parents);
    fflush(stdout);
    if (argc > 2 && strcmp(argv[2], "fails") == 0 && rank == size - 1) _exit(5);
    rc = exchange(parent, "child", rank, size, parents);
    MPI_Comm_disconnect(&parent);
  } else {
    const int n = argc > 1 ? atoi(argv[1]) : 2;
    if (n < 1) {
      fprintf(stderr, "spawn: N must be at least 1\n");
      MPI_Finalize();
      return 2;
    }
    static char child[] = "child", fails[] = "fails";
    char* child_argv[] = {child, NULL, NULL};
    if (argc > 2 && strcmp(argv[2], "child-fails") == 0) child_argv[1] = fails;
    // twice: the first children stay (in their disconnect) while the second ones are spawned.
    const int rounds = argc > 2 && strcmp(argv[2], "twice") == 0 ? 2 : 1;
    MPI_Comm inters[2] = {MPI_COMM_NULL, MPI_COMM_NULL};
    for (int round = 0; round < rounds && rc == 0; ++round) {
      MPI_Comm_spawn(argv[0], child_argv, n, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inters[round],
                     MPI_ERRCODES_IGNORE);
      int children = 0;
      MPI_Comm_remote_size(inters[round], &children);
      printf("parent %d of %d: children %d\n", rank, size, children);
      fflush(stdout);
      rc = exchange(inters[round], "parent", rank, size, children);
    }
    for (int round = 0; round < rounds; ++round) {
      if (inters[round] != MPI_COMM_NULL) MPI_Comm_disconnect(&inters[round]);
    }
  }
  MPI_Finalize();
  return rc;
}
