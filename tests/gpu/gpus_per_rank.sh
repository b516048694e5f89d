#!/bin/bash
# pmrun --gpus-per-rank 1 on a machine with NVIDIA GPUs (issue 23, docs/gpus.md): one rank per
# GPU, each sees exactly one GPU, a different one; with PyTorch, an NCCL all-reduce across them
# (DDP's collective) gives the right sum. Exit 77 (ctest SKIP) where there is no GPU or no pmrun.
#   tests/gpu/gpus_per_rank.sh [BUILD_DIR]      (default: build)
set -u
build=${1:-build}
pmrun=$build/bin/pmrun
[ -x "$pmrun" ] || pmrun=$(command -v pmrun || true)
[ -n "$pmrun" ] && [ -x "$pmrun" ] || { echo "SKIP: no pmrun"; exit 77; }
command -v nvidia-smi >/dev/null || { echo "SKIP: no nvidia-smi"; exit 77; }
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
[ "$gpus" -ge 1 ] || { echo "SKIP: no GPU"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
echo "$gpus GPU(s); pmrun: $pmrun"

# 1. Each rank sees exactly one GPU, a different one (its UUID), through CUDA_VISIBLE_DEVICES.
out=$("$pmrun" --allow-run-as-root -np "$gpus" --gpus-per-rank 1 --report-bindings \
  sh -c 'echo "R$OMPI_COMM_WORLD_RANK $CUDA_VISIBLE_DEVICES $(nvidia-smi -L | grep -c "^GPU ") $(nvidia-smi -L | sed -n "s/.*UUID: \(GPU-[^)]*\)).*/\1/p")"') ||
  fail "pmrun exited $?: $out"
echo "$out"
[ "$(echo "$out" | grep -c '^R')" -eq "$gpus" ] || fail "expected $gpus ranks"
echo "$out" | awk '/^R/ && $3 != 1 { bad = 1 } END { exit bad }' || fail "a rank sees more than one GPU"
[ "$(echo "$out" | awk '/^R/ { print $4 }' | sort -u | wc -l)" -eq "$gpus" ] || fail "two ranks share a GPU"

# 2. One GPU more than the machine has: refused before start, one line, exit 2.
err=$("$pmrun" --allow-run-as-root -np $((gpus + 1)) --gpus-per-rank 1 /bin/true 2>&1)
code=$?
[ $code -eq 2 ] || fail "more GPUs than the host has: exit $code ($err)"
echo "refused: $err"

# 3. PyTorch, where it is installed: NCCL all-reduce across the ranks, each on its cuda:0.
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  script=$(mktemp /tmp/pm-ddp-XXXXXX.py)
  trap 'rm -f "$script"' EXIT
  cat >"$script" <<'PY'
import os, sys, time, torch, torch.distributed as dist
t0 = time.time()
dist.init_process_group("nccl")  # MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE from the launcher
if sys.argv[1] == "pmrun":  # --gpus-per-rank 1: the rank sees its own GPU only, as cuda:0
    assert torch.cuda.device_count() == 1, torch.cuda.device_count()
    dev = 0
else:  # torchrun shows every GPU: the script picks its own from LOCAL_RANK, by hand
    dev = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(dev)
rank, size = dist.get_rank(), dist.get_world_size()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1).cuda(), device_ids=[dev])
model(torch.ones(2, 4, device="cuda")).sum().backward()  # DDP's gradient all-reduce
x = torch.tensor([rank + 1.0], device="cuda")
dist.all_reduce(x)
assert x.item() == size * (size + 1) / 2, x.item()
print(f"{sys.argv[1]} DDP rank {rank}/{size} ok on {torch.cuda.get_device_name(dev)} "
      f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}), "
      f"process group + step in {time.time() - t0:.2f} s")
dist.destroy_process_group()
PY
  # Beside torchrun on the same machine, in turns: the launch-to-exit time of the same job.
  elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }
  torchrun=$(command -v torchrun || true)
  for round in 1 2 3; do
    start=$(date +%s.%N)
    "$pmrun" --allow-run-as-root -np "$gpus" --gpus-per-rank 1 python3 "$script" pmrun ||
      fail "NCCL DDP under pmrun"
    p=$(elapsed "$start")
    t=-
    if [ -n "$torchrun" ]; then
      start=$(date +%s.%N)
      "$torchrun" --standalone --nproc-per-node "$gpus" "$script" torchrun ||
        fail "NCCL DDP under torchrun (the reference)"
      t=$(elapsed "$start")
    fi
    echo "round $round: pmrun $p s, torchrun $t s"
  done
else
  echo "PyTorch with CUDA not available: DDP check skipped"
fi
echo "PASS"
