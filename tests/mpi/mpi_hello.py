# mpi4py hello: like mpi_hello.c, "hello rank R size S universe U" per rank; with an argument the
# world size must equal it (exit 3 otherwise).
import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
universe = comm.Get_attr(MPI.UNIVERSE_SIZE)
print(f"hello rank {comm.Get_rank()} size {comm.Get_size()} universe {universe}", flush=True)
expected = int(sys.argv[1]) if len(sys.argv) > 1 else comm.Get_size()
sys.exit(0 if comm.Get_size() == expected else 3)
