# mpi4py spawn: like mpi_spawn.c. "mpi_spawn.py [N]": MPI.COMM_SELF.Spawn of this script with N
# children (default 2) from each parent; one value each way over the intercommunicator
# (Allreduce of rank + 1), Disconnect. Lines: "parent R of P: children N" / "child R of N:
# parent size P", then "... sum S"; exit 3 when a sum is wrong. "mpi_spawn.py N SECONDS": every
# rank of both jobs waits SECONDS before the exchange (a job to look at with `pmrun --ps`).
import sys
import time

from mpi4py import MPI


def exchange(inter, who, rank, size, other):
    total = inter.allreduce(rank + 1, op=MPI.SUM)
    print(f"{who} {rank} of {size}: sum {total}", flush=True)
    return 0 if total == other * (other + 1) // 2 else 3


world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
if len(sys.argv) > 1 and sys.argv[1] == "child":
    parent = MPI.Comm.Get_parent()
    parents = parent.Get_remote_size()
    print(f"child {rank} of {size}: parent size {parents}", flush=True)
    time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 0)
    rc = exchange(parent, "child", rank, size, parents)
    parent.Disconnect()
else:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    hold = sys.argv[2:3]
    inter = MPI.COMM_SELF.Spawn(sys.executable, [__file__, "child"] + hold, maxprocs=n)
    children = inter.Get_remote_size()
    print(f"parent {rank} of {size}: children {children}", flush=True)
    time.sleep(float(hold[0]) if hold else 0)
    rc = exchange(inter, "parent", 0, 1, children)
    inter.Disconnect()
sys.exit(rc)
