#!/usr/bin/python3
"""pmrun beside srun and mpirun.openmpi inside ONE Slurm allocation on fake hosts
(tests/multihost/hosts.sh + slurm.sh: Slurm 22.05, 3 nodes), docs/benchmarks.md.

The allocation is `salloc -N3 --ntasks-per-node=2`; this script runs itself inside it (on node1)
and times, in shuffled rounds (ratios within a round: the machine is shared and noisy):

  launch   6 ranks of /bin/true: pmrun (its srun step + connect-back) vs
           `srun -N3 --ntasks-per-node=2 /bin/true` vs mpirun.openmpi (plm slurm), and a job on a
           DVM started in the allocation (`pmrun --dvm start`: daemons by one srun step)
  failure  6 ranks; rank 4 (node3) exits 7 after 1 s, the others sleep 30: from that exit to
           pmrun's exit (pmrun only: srun waits 59 s or answers 143, see docs/failure-semantics.md)

Usage: slurm_bench.py PMRUN [--rounds R]
Needs root and the fixture's tools; the mpirun column needs mpirun.openmpi. Everything the run
brought up is torn down on exit, also on Ctrl-C.
"""
import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
HOSTS_SH = os.path.join(HERE, "..", "multihost", "hosts.sh")
SLURM_SH = os.path.join(HERE, "..", "multihost", "slurm.sh")


def timed(argv, env=None, limit=60):
    t0 = time.monotonic()
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, env=env, timeout=limit)
    return time.monotonic() - t0, p.returncode, p.stderr.decode(errors="replace")


def inner(args):
    """Inside the allocation, on node1."""
    pmrun = [args.pmrun, "--allow-run-as-root"]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    mpirun = shutil.which("mpirun.openmpi")
    contenders = {
        "pmrun": pmrun + ["/bin/true"],
        "srun": ["srun", "-N3", "--ntasks-per-node=2", "--overlap", "/bin/true"],
    }
    if mpirun:
        contenders["mpirun"] = [mpirun, "-mca", "oob_tcp_if_include", "eth0", "-mca", "btl",
                                "self,tcp", "-mca", "btl_tcp_if_include", "eth0", "/bin/true"]
    # A DVM in the allocation (docs/dvm.md): its jobs beside srun starting a step.
    dvm_dir = tempfile.mkdtemp(prefix="pm-slurm-dvm-")
    os.chmod(dvm_dir, 0o700)
    env["PM_STATUS_DIR"] = os.path.join(dvm_dir, "st")
    uri = os.path.join(dvm_dir, "uri")
    subprocess.run(pmrun + ["--dvm", "start", "--report-uri", uri], env=env, check=True)
    contenders["dvm"] = pmrun + ["--dvm-uri", "file:" + uri, "-np", "6", "/bin/true"]
    for argv in contenders.values():  # warm caches once
        timed(argv, env)
    times = {k: [] for k in contenders}
    ratios = {k: [] for k in contenders if k not in ("pmrun", "dvm")}
    for _ in range(args.rounds):
        order = list(contenders)
        random.shuffle(order)
        got = {}
        for k in order:
            t, rc, err = timed(contenders[k], env)
            if rc != 0:
                print("%s failed (%d): %s" % (k, rc, err.strip()[-300:]), flush=True)
            got[k] = t
            times[k].append(t)
        for k in ratios:
            ratios[k].append(got["pmrun"] / got[k])
    print("launch, 3 nodes x 2 ranks of /bin/true, %d rounds (median s; ratio pmrun/X median)"
          % args.rounds)
    for k in contenders:
        line = "  %-7s %.3f s" % (k, statistics.median(times[k]))
        if k in ratios:
            line += "   pmrun/%s = %.2f" % (k, statistics.median(ratios[k]))
        print(line, flush=True)
    dvm_srun = [a / b for a, b in zip(times["dvm"], times["srun"])]
    print("  dvm/srun = %.3f (goal <= 1.0), dvm/mpirun = %s" % (
        statistics.median(dvm_srun),
        "%.3f" % statistics.median([a / b for a, b in zip(times["dvm"], times["mpirun"])])
        if "mpirun" in times else "-"), flush=True)
    subprocess.run(pmrun + ["--dvm", "stop", "--dvm-uri", "file:" + uri], env=env)
    shutil.rmtree(dvm_dir, ignore_errors=True)
    del env["PM_STATUS_DIR"]

    stamp_dir = tempfile.mkdtemp(prefix="pm-slurm-bench-")
    lags = []
    codes = set()
    for i in range(max(3, args.rounds // 2)):
        stamp = os.path.join(stamp_dir, "exit%d" % i)
        script = ('if [ "$OMPI_COMM_WORLD_RANK" = 4 ]; then sleep 1; date +%%s.%%N > %s; exit 7; '
                  'fi; exec sleep 30' % stamp)
        p = subprocess.run(pmrun + ["sh", "-c", script], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        done = time.time()
        codes.add(p.returncode)
        with open(stamp) as f:
            lags.append(done - float(f.read()))
    shutil.rmtree(stamp_dir, ignore_errors=True)
    print("failure, rank 4 on node3 exits 7: exit code(s) %s; rank's exit -> pmrun's exit "
          "median %.3f s (max %.3f s, %d runs)" % (sorted(codes), statistics.median(lags),
                                                    max(lags), len(lags)), flush=True)
    return 0


def outer(args):
    state = tempfile.mkdtemp(prefix="pm-slurm-bench-")
    os.rmdir(state)
    up = False
    try:
        subprocess.run(["/bin/bash", HOSTS_SH, "up", "--hosts", "3", "--state", state, "--owner",
                        str(os.getpid())], check=True, stdout=subprocess.DEVNULL)
        up = True
        subprocess.run(["/bin/bash", SLURM_SH, "up", "--state", state], check=True,
                       stdout=subprocess.DEVNULL)
        print("load %.2f %.2f %.2f" % os.getloadavg(), flush=True)
        me = os.path.abspath(__file__)
        r = subprocess.run(["/bin/bash", SLURM_SH, "exec", "--state", state, "node1", "--",
                            "salloc", "-N3", "--ntasks-per-node=2", "--quiet", "/usr/bin/python3",
                            me, "--inner", args.pmrun, "--rounds", str(args.rounds)])
        return r.returncode
    finally:
        if up:
            subprocess.run(["/bin/bash", SLURM_SH, "down", "--state", state])
            subprocess.run(["/bin/bash", HOSTS_SH, "down", "--state", state])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pmrun")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.pmrun = os.path.abspath(args.pmrun)
    return inner(args) if args.inner else outer(args)


if __name__ == "__main__":
    sys.exit(main())
