#!/usr/bin/python3
"""Deterministic PyTorch DDP training on CPU (gloo) that checkpoints and resumes.

Launched by pmrun or torchrun: it takes its place from RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT (env:// init). A tiny model trains on a fixed synthetic data set for --steps steps;
every --every steps rank 0 saves the model, the optimizer and the step to DIR/ckpt-STEP.pt
(written to a temporary file, then renamed: a killed writer never leaves a torn checkpoint). On
start every rank resumes from the newest checkpoint in DIR (rank 0 names it to the others). At
the end rank 0 writes the SHA-256 of every parameter's bytes to DIR/params.sha256 (or --hash).

The global batch is the same at every world size: step S trains samples [S*G, S*G+G) of the data
set (mod its size), rank R of W taking the R-th of W equal slices (G must divide by W: 24 serves
1, 2, 3, 4, 6, 8 ranks). A resumed run at the same world size is bit-identical to an
uninterrupted one: same data, same parameters and momentum, the gradients summed in rank order
(ordered_mean). At another world size the mathematics is the same (the mean gradient over the
same 24 samples) but the floating-point sums are not, so the bits differ: a run that shrank is
compared with one of its new size resumed from the same checkpoint.

Lines (flushed), for the tests and tests/bench/ddp_recovery_bench.py:
  start rank R world W local L restart C host H pid P from S t0 T0
  step S rank R world W pid P t T
  done rank R world W steps N
  sha256 HEX                              (rank 0)
T0 is the process's start (before `import torch`), T the wall clock after the step.

  ddp_train.py --dir DIR [--steps 30] [--every 10] [--sleep 0.05] [--hash FILE]
"""
import time

T0 = time.time()  # before importing torch: "every rank running again" counts from here

import argparse  # noqa: E402
import glob  # noqa: E402
import hashlib  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
from datetime import timedelta  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

GLOBAL_BATCH = 24
SAMPLES = GLOBAL_BATCH * 8


def say(line):
    """One write per line: ranks that share a pipe (torchrun sets PYTHONUNBUFFERED) never cut
    into each other's lines."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def ordered_mean(_, bucket):
    """DDP's gradient reduction (a comm hook), summed in rank order: gather every rank's bucket,
    add them up rank 0 first, divide by the world size: every element is reduced the same way
    whatever its place in the bucket. With DDP's own allreduce, 6 ranks resumed from a checkpoint
    ended with other bits than an uninterrupted run (2 ranks did not): gloo's ring adds an
    element's terms in an order set by its offset in the bucket, and DDP lays its buckets out
    anew after the first step of every start (the likely cause)."""
    tensor = bucket.buffer()
    world = dist.get_world_size()
    parts = [torch.empty_like(tensor) for _ in range(world)]
    gathered = dist.all_gather(parts, tensor, async_op=True).get_future()

    def total(done):
        done.value()  # raises what the gather raised (a peer gone): never sum what did not come
        acc = parts[0].clone()
        for part in parts[1:]:
            acc.add_(part)
        return acc.div_(world)

    return gathered.then(total)


def checkpoints(directory):
    """(step, path) of every complete checkpoint in directory, oldest first."""
    found = []
    for path in glob.glob(os.path.join(directory, "ckpt-*.pt")):
        m = re.fullmatch(r"ckpt-(\d+)\.pt", os.path.basename(path))
        if m:
            found.append((int(m.group(1)), path))
    return sorted(found)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True, help="checkpoints (shared by every host)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--every", type=int, default=10, help="checkpoint every K steps")
    parser.add_argument("--sleep", type=float, default=0.05, help="seconds after each step")
    parser.add_argument("--hash", help="where rank 0 writes the parameters' SHA-256")
    args = parser.parse_args()

    torch.set_num_threads(1)  # deterministic CPU kernels, and 6 ranks on 2 cores
    torch.use_deterministic_algorithms(True)
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    if GLOBAL_BATCH % world:
        raise SystemExit(f"ddp_train: the global batch {GLOBAL_BATCH} does not divide by {world}")
    dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=60))

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32),
                                torch.nn.Tanh(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = torch.Generator().manual_seed(1)
    x = torch.randn(SAMPLES, 16, generator=data)
    y = torch.sin(x.sum(dim=1, keepdim=True)) + 0.1 * torch.randn(SAMPLES, 1, generator=data)

    # Rank 0 names the checkpoint, so that every rank resumes from the same one.
    found = checkpoints(args.dir) if rank == 0 else []
    newest = [found[-1][0] if found else 0]
    dist.broadcast_object_list(newest, src=0)
    start = newest[0]
    if start > 0:
        state = torch.load(os.path.join(args.dir, f"ckpt-{start:06d}.pt"))
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        assert state["step"] == start
    say(f"start rank {rank} world {world} local {local} restart {restart} "
        f"host {socket.gethostname()} pid {os.getpid()} from {start} t0 {T0:.6f}")
    ddp = DDP(model)  # broadcasts rank 0's parameters: every rank has loaded before anyone trains
    ddp.register_comm_hook(None, ordered_mean)
    share = GLOBAL_BATCH // world
    for step in range(start + 1, args.steps + 1):
        base = ((step - 1) * GLOBAL_BATCH) % SAMPLES + rank * share
        xb, yb = x[base:base + share], y[base:base + share]
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(ddp(xb), yb)
        loss.backward()
        optimizer.step()
        say(f"step {step} rank {rank} world {world} pid {os.getpid()} t {time.time():.6f}")
        if rank == 0 and step % args.every == 0:
            path = os.path.join(args.dir, f"ckpt-{step:06d}.pt")
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "step": step}, path + ".tmp")
            os.replace(path + ".tmp", path)
        if args.sleep > 0:
            time.sleep(args.sleep)
    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().contiguous().numpy().tobytes())
    dist.barrier()
    say(f"done rank {rank} world {world} steps {args.steps}")
    if rank == 0:
        say(f"sha256 {digest.hexdigest()}")
        out = args.hash or os.path.join(args.dir, "params.sha256")
        with open(out + ".tmp", "w") as f:
            f.write(digest.hexdigest() + "\n")
        os.replace(out + ".tmp", out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
