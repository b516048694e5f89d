# A job restarted in place (pmrun --max-restarts, docs/resilience.md) runs as one new MPI job:
# in incarnation 0 rank 1 leaves MPI without MPI_Finalize (os._exit) while the others wait in a
# barrier it never joins; in the next one every rank allreduces and prints what it saw.
#   mpi_restart.py
import os

from mpi4py import MPI

comm = MPI.COMM_WORLD
incarnation = os.environ.get("TORCHELASTIC_RESTART_COUNT", "?")
if incarnation == "0":
    if comm.Get_rank() == 1:
        os._exit(3)
    comm.Barrier()
total = comm.allreduce(comm.Get_rank() + 1)
print(f"incarnation {incarnation} rank {comm.Get_rank()} size {comm.Get_size()} sum {total} "
      f"nspace {os.environ.get('PMIX_NAMESPACE')}", flush=True)
