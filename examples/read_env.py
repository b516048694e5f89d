#!/usr/bin/python3
"""A PyTorch-style rank: reads RANK, WORLD_SIZE, LOCAL_RANK, NODE_RANK, MASTER_ADDR/PORT the way
torch.distributed's env:// init does, with no wrapper translating OMPI_COMM_WORLD_* variables.
Run it under pmrun: pmrun --allow-run-as-root -np 4 examples/read_env.py"""
import os
import socket
import sys

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
local_rank = int(os.environ["LOCAL_RANK"])
node_rank = int(os.environ["NODE_RANK"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
assert rank == int(os.environ["OMPI_COMM_WORLD_RANK"]), "RANK disagrees with Open MPI's"
assert 0 <= rank < world and 0 <= local_rank < int(os.environ["LOCAL_WORLD_SIZE"])
socket.inet_aton(addr)  # an address, not a name that might resolve to 127.0.1.1
print(f"rank {rank}/{world} local {local_rank} node {node_rank} master {addr}:{port}")
sys.exit(0)
