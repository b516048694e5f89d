# A host lost mid-run (pmrun --max-restarts, a spare host: docs/resilience.md): in incarnation 0
# every rank waits (the test crashes a host); in the next one, where the lost host's ranks run on
# the spare, every rank allreduces and says where it ran and what it saw.
#   mpi_spare.py
import os, time
from mpi4py import MPI
comm = MPI.COMM_WORLD
inc = os.environ.get("TORCHELASTIC_RESTART_COUNT", "?")
comm.Barrier()
if inc == "0":
    time.sleep(30)
total = comm.allreduce(comm.Get_rank() + 1)
print(f"inc {inc} rank {comm.Get_rank()} host {os.uname().nodename} size {comm.Get_size()} sum {total} nspace {os.environ.get('PMIX_NAMESPACE')}", flush=True)
