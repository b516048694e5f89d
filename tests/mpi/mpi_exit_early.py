# A rank that leaves MPI without MPI_Finalize: rank 1 exits at once with CODE (os._exit skips
# mpi4py's finalize), or kills itself with SIGKILL for CODE "kill"; the others wait in a barrier
# it never joins.
#   mpi_exit_early.py CODE|kill
import os
import signal
import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
if comm.Get_rank() == 1:
    if sys.argv[1] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(int(sys.argv[1]))
comm.Barrier()
print("passed the barrier", flush=True)
