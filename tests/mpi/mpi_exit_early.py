# A rank that leaves MPI without MPI_Finalize: rank 1 exits at once with CODE (os._exit skips
# mpi4py's finalize), the others wait in a barrier it never joins.
#   mpi_exit_early.py CODE
import os
import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
if comm.Get_rank() == 1:
    os._exit(int(sys.argv[1]))
comm.Barrier()
print("passed the barrier", flush=True)
