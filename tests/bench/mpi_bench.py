#!/usr/bin/python3
"""Real MPI programs under pmrun beside mpirun.openmpi, in ONE run (docs/pmix.md, "Cost").

Each round runs every contender once, in a shuffled order; figures are medians, and ratios are
taken within a round (the machines are shared and noisy: absolute times drift, ratios hold).

  init      launcher start to exit of mpi_hello (MPI_Init + MPI_Finalize) at 1 and 8 ranks
  true      -np 1 /bin/true with the PMIx server on (the default) against --no-pmix
  abort     4 ranks, rank 1 calls MPI_Abort(42): the call -> the launcher's exit
  spawn     MPI_Comm_spawn: 1 parent spawns 2 children (mpi_spawn, and mpi4py's mpi_spawn.py),
            they exchange a value and disconnect: launcher start to exit
  memory    pmrun + its agent (not the ranks) for 128 ranks that connect to PMIx (pmix_touch)
  hosts     3 fake hosts x 2 ranks (tests/multihost/hosts.sh): an mpi4py hello, and MPI_Abort
            on a remote rank -> exit

Usage: mpi_bench.py BUILD_DIR [--rounds R] [--only init,true,abort,spawn,memory,hosts]
                  [--skel-bashrc]
--skel-bashrc: run in a mount namespace of its own where ~/.bashrc is Debian's default
(/etc/skel/.bashrc): bash sources ~/.bashrc for every command sshd runs, and a .bashrc that does
heavy work (pyenv init: 0.35 s on the development machine) adds to every ssh login of either
launcher; a fresh Debian 12 root has the default one.
Needs mpirun.openmpi; `hosts` needs root and the fixture's tools (hosts.sh probe).
"""
import argparse
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import peers_bench  # noqa: E402  (wait_exact, tree_rss_kb)

HOSTS_SH = os.path.join(HERE, "..", "multihost", "hosts.sh")
HANG_S = 60.0
PYTHON = "/usr/bin/python3"  # Debian's, where python3-mpi4py lives


def find(build, rel):
    return peers_bench.find(build, rel)


def launchers(build, ssh_config=None, hosts=None):
    """The two contenders' argv prefixes (before -np)."""
    pmrun = [find(build, "bin/pmrun"), "--allow-run-as-root"]
    mpirun = ["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
    if ssh_config:
        for argv in (pmrun, mpirun):
            argv += ["-mca", "plm_rsh_agent", "ssh -F " + ssh_config, "-H", hosts]
    return {"pmrun": pmrun, "mpirun": mpirun}


def run(argv, timeout=HANG_S):
    """(seconds, exit code, stdout, exit time on CLOCK_MONOTONIC in ns) or None on a hang."""
    out = tempfile.TemporaryFile()
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL, start_new_session=True)
    if not peers_bench.wait_exact(proc, timeout):
        return None
    ended_ns = time.monotonic_ns()
    seconds = time.perf_counter() - start
    out.seek(0)
    return seconds, proc.returncode, out.read().decode(errors="replace"), ended_ns


def rounds_of(contenders, rounds, check):
    """Runs each contender once per round in a shuffled order; returns {name: [value per round]}
    where check(name, result) turns a run into a value (None: the run is not counted)."""
    values = {name: [] for name in contenders}
    for _ in range(rounds):
        for name in random.sample(list(contenders), len(contenders)):
            result = run(contenders[name])
            value = check(name, result) if result else None
            values[name].append(value)
    return values


def ratio_line(values, a, b):
    pairs = [x / y for x, y in zip(values[a], values[b]) if x is not None and y]
    return statistics.median(pairs) if pairs else float("nan")


def med(values):
    good = [v for v in values if v is not None]
    return statistics.median(good) if good else float("nan")


def bench_init(build, rounds):
    print("\n## MPI_Init + MPI_Finalize (mpi_hello): launcher start to exit, ms")
    print("| ranks | pmrun | mpirun | pmrun/mpirun |")
    print("|---|---|---|---|")
    hello = find(build, "tests/mpi/mpi_hello")
    for n in (1, 8):
        cs = {k: v + ["-np", str(n), hello, str(n)] for k, v in launchers(build).items()}

        def check(name, r, n=n):
            ok = r[1] == 0 and r[2].count("hello rank") == n
            return r[0] if ok else None

        v = rounds_of(cs, rounds, check)
        print(f"| {n} | {med(v['pmrun']) * 1e3:.0f} | {med(v['mpirun']) * 1e3:.0f} | "
              f"{ratio_line(v, 'pmrun', 'mpirun'):.2f}x |")


def bench_true(build, rounds):
    print("\n## -np 1 /bin/true: PMIx on (the default) against --no-pmix, ms")
    pmrun = [find(build, "bin/pmrun"), "--allow-run-as-root"]
    cs = {"pmix": pmrun + ["-np", "1", "/bin/true"],
          "no-pmix": pmrun + ["--no-pmix", "-np", "1", "/bin/true"]}
    v = rounds_of(cs, rounds * 20, lambda name, r: r[0] if r[1] == 0 else None)
    print("| pmix | no-pmix | pmix/no-pmix |")
    print("|---|---|---|")
    print(f"| {med(v['pmix']) * 1e3:.2f} | {med(v['no-pmix']) * 1e3:.2f} | "
          f"{ratio_line(v, 'pmix', 'no-pmix'):.2f}x |")


def abort_check(name, r):
    m = re.search(r"aborting rank \d+ size \d+ at_ns (\d+)", r[2])
    if r[1] != 42 or not m:
        print(f"  ({name}: exit {r[1]}, no abort line)" if not m else f"  ({name}: exit {r[1]})")
        return None
    return (r[3] - int(m.group(1))) / 1e9


def bench_abort(build, rounds):
    print("\n## MPI_Abort(42) -> launcher exit, 4 ranks on this host, ms")
    prog = find(build, "tests/mpi/mpi_abort")
    cs = {k: v + ["-np", "4", prog, "1"] for k, v in launchers(build).items()}
    v = rounds_of(cs, rounds, abort_check)
    print("| pmrun | mpirun | pmrun/mpirun |")
    print("|---|---|---|")
    print(f"| {med(v['pmrun']) * 1e3:.1f} | {med(v['mpirun']) * 1e3:.1f} | "
          f"{ratio_line(v, 'pmrun', 'mpirun'):.2f}x |")


def bench_spawn(build, rounds):
    print("\n## MPI_Comm_spawn: 1 parent + 2 children, launcher start to exit, ms")
    print("| program | pmrun | mpirun | pmrun/mpirun |")
    print("|---|---|---|---|")
    programs = {"mpi_spawn (C)": [find(build, "tests/mpi/mpi_spawn"), "2"],
                "mpi_spawn.py": [PYTHON, os.path.join(HERE, "..", "mpi", "mpi_spawn.py"), "2"]}
    for label, prog in programs.items():
        cs = {k: v + ["-np", "1"] + prog for k, v in launchers(build).items()}
        v = rounds_of(cs, rounds, lambda n, r: r[0] if r[1] == 0 and r[2].count("sum") == 3
                      else None)
        print(f"| {label} | {med(v['pmrun']) * 1e3:.0f} | {med(v['mpirun']) * 1e3:.0f} | "
              f"{ratio_line(v, 'pmrun', 'mpirun'):.2f}x |")


def bench_memory(build, rounds):
    print("\n## Memory: launcher + agent (not the ranks), 128 ranks that connect to PMIx, MB")
    touch = os.path.realpath(find(build, "tests/mpi/pmix_touch"))
    cs = {k: v + ["-np", "128", touch, "3"] for k, v in launchers(build).items()}
    print("| launcher | RSS MB (median of peaks) |")
    print("|---|---|")
    peaks = {k: [] for k in cs}
    for _ in range(rounds):
        for name in random.sample(list(cs), len(cs)):
            proc = subprocess.Popen(cs[name], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, start_new_session=True)
            peak = 0
            while proc.poll() is None:
                peak = max(peak, peers_bench.tree_rss_kb(proc.pid, touch))
                time.sleep(0.05)
            peaks[name].append(peak / 1024)
    for name in cs:
        print(f"| {name} | {statistics.median(peaks[name]):.1f} |")
    print("(hydra for 128 ranks of sleep: 5.7 MB, shared/BENCHMARKS.md)")


def bench_hosts(build, rounds):
    reason = subprocess.run([HOSTS_SH, "probe"], capture_output=True, text=True)
    if reason.returncode != 0:
        print(f"\n## Across hosts: skipped: {reason.stdout.strip() or reason.stderr.strip()}")
        return
    state = tempfile.mkdtemp(prefix="pm-mpi-bench.")
    os.rmdir(state)
    up = subprocess.run([HOSTS_SH, "up", "--hosts", "3", "--state", state],
                        capture_output=True, text=True)
    if up.returncode != 0:
        print(f"\n## Across hosts: the fixture did not come up: {up.stderr.strip()}")
        return
    try:
        hosts = ",".join(f"node{k}:2" for k in (1, 2, 3))
        ls = launchers(build, os.path.join(state, "ssh_config"), hosts)
        print("\n## 3 fake hosts x 2 ranks: mpi4py hello, launcher start to exit, ms")
        script = os.path.join(HERE, "..", "mpi", "mpi_hello.py")
        cs = {k: v + ["-np", "6", PYTHON, script, "6"] for k, v in ls.items()}
        v = rounds_of(cs, rounds, lambda n, r: r[0] if r[1] == 0 and r[2].count("hello") == 6
                      else None)
        print("| pmrun | mpirun | pmrun/mpirun |")
        print("|---|---|---|")
        print(f"| {med(v['pmrun']) * 1e3:.0f} | {med(v['mpirun']) * 1e3:.0f} | "
              f"{ratio_line(v, 'pmrun', 'mpirun'):.2f}x |")
        print("\n## 3 fake hosts: 3 parents (one per host) spawn 3 children, start to exit, ms")
        prog = find(build, "tests/mpi/mpi_spawn")
        cs = {k: v + ["--map-by", "node", "-np", "3", prog, "3"] for k, v in ls.items()}
        v = rounds_of(cs, rounds, lambda n, r: r[0] if r[1] == 0 and r[2].count("sum") == 6
                      else None)
        print("| pmrun | mpirun | pmrun/mpirun |")
        print("|---|---|---|")
        print(f"| {med(v['pmrun']) * 1e3:.0f} | {med(v['mpirun']) * 1e3:.0f} | "
              f"{ratio_line(v, 'pmrun', 'mpirun'):.2f}x |")
        print("\n## 3 fake hosts x 2 ranks: MPI_Abort(42) on node2 -> launcher exit, ms")
        prog = find(build, "tests/mpi/mpi_abort")
        cs = {k: v + ["-np", "6", prog, "3"] for k, v in ls.items()}
        v = rounds_of(cs, rounds, abort_check)
        print("| pmrun | mpirun | pmrun/mpirun |")
        print("|---|---|---|")
        print(f"| {med(v['pmrun']) * 1e3:.0f} | {med(v['mpirun']) * 1e3:.0f} | "
              f"{ratio_line(v, 'pmrun', 'mpirun'):.2f}x |")
    finally:
        subprocess.run([HOSTS_SH, "down", "--state", state], capture_output=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--only", default="init,true,abort,spawn,memory,hosts")
    parser.add_argument("--skel-bashrc", action="store_true")
    args = parser.parse_args()
    if args.skel_bashrc and not os.environ.get("PM_BENCH_SKEL_BASHRC"):
        home_rc = os.path.join(os.path.expanduser("~"), ".bashrc")
        os.environ["PM_BENCH_SKEL_BASHRC"] = "1"
        os.execvp("unshare", ["unshare", "-m", "--propagation", "private", "sh", "-c",
                              'mount --bind /etc/skel/.bashrc "$1" && shift && exec "$@"', "sh",
                              home_rc, sys.executable] + sys.argv)
    if not shutil.which("mpirun.openmpi"):
        sys.exit("mpi_bench: mpirun.openmpi is missing (apt install openmpi-bin)")
    random.seed(1)
    print(f"# MPI under pmrun vs mpirun ({args.rounds} rounds; load {os.getloadavg()[0]:.1f}"
          f"{'; ~/.bashrc: Debian default' if os.environ.get('PM_BENCH_SKEL_BASHRC') else ''})")
    benches = {"init": bench_init, "true": bench_true, "abort": bench_abort,
               "spawn": bench_spawn, "memory": bench_memory, "hosts": bench_hosts}
    for name in args.only.split(","):
        benches[name](args.build, args.rounds)
    print(f"\n(load at the end {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
