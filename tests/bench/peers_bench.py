#!/usr/bin/python3
"""pmrun side by side with mpirun.openmpi, mpiexec.hydra and a posix_spawn floor, in ONE run.

Every round runs each contender once, in a shuffled order; figures are medians of the ratios taken
within a round (the machines are shared and noisy: absolute times drift, ratios hold).
Usage: peers_bench.py BUILD_DIR [--rounds R] [--only launch,abort,output,memory,restart]
"""
import argparse
import os
import random
import re
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HANG_S = 15.0


def find(build, rel):
    path = os.path.join(build, rel)
    if not os.path.exists(path):
        sys.exit(f"peers_bench: {path} is missing (build first)")
    return path


def wait_exact(proc, timeout):
    """Waits for proc to exit, waking the moment it does (a pidfd); True if it did in time, else
    kills its process group and returns False. Popen.wait(timeout=...) would not do: it polls
    with sleeps growing to 50 ms, which rounds every time it measures up to its next poll."""
    fd = os.pidfd_open(proc.pid)  # proc is not reaped yet: the pid is still ours
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
    finally:
        os.close(fd)
    if not ready:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return bool(ready)


def timed(argv, stdout=subprocess.DEVNULL, env=None, timeout=HANG_S):
    """Wall time of one command in seconds, or None when it hangs past the limit."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.DEVNULL, env=env,
                            start_new_session=True)
    if not wait_exact(proc, timeout):
        return None, None
    return time.perf_counter() - start, proc.returncode


def contenders(build, n, program):
    pmrun = find(build, "bin/pmrun")
    out = {
        "floor": [find(build, "bench/spawn_floor"), str(n)] + program,
        "pmrun": [pmrun, "--allow-run-as-root", "-np", str(n)] + program,
    }
    if shutil.which("mpiexec.hydra"):
        out["hydra"] = ["mpiexec.hydra", "-n", str(n)] + program
    if shutil.which("mpirun.openmpi"):
        out["mpirun"] = ["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe",
                         "--bind-to", "none", "-np", str(n)] + program
    return out


def bench_launch(build, rounds):
    print("\n## Launch: L -np N /bin/true (median of same-round ratios to the posix_spawn floor)")
    print("| N | floor ms | pmrun | hydra | mpirun | mpirun hangs |")
    print("|---|---|---|---|---|---|")
    for n in (1, 8, 32, 128):
        cs = contenders(build, n, ["/bin/true"])
        ratios = {k: [] for k in cs if k != "floor"}
        floors, hangs = [], 0
        for _ in range(rounds):
            order = list(cs)
            random.shuffle(order)
            times = {}
            for name in order:
                t, _rc = timed(cs[name], timeout=HANG_S if name != "mpirun" else 10.0)
                times[name] = t
            if times["floor"] is None:
                continue
            floors.append(times["floor"])
            for name in ratios:
                if times[name] is None:
                    hangs += name == "mpirun"
                else:
                    ratios[name].append(times[name] / times["floor"])
        med = {k: (f"{statistics.median(v):.2f}x" if v else "-") for k, v in ratios.items()}
        print(f"| {n} | {statistics.median(floors) * 1000:.1f} | {med.get('pmrun', '-')} | "
              f"{med.get('hydra', '-')} | {med.get('mpirun', '-')} | {hangs}/{rounds} |")


def bench_abort(build, rounds):
    print("\n## Abort: 8 ranks, rank 3 exits 7, the others sleep 60 s: exit code, failure → exit")
    payload = find(build, "tests/pm_payload")
    print("| launcher | exit code | ms from failure to launcher exit (median) |")
    print("|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        stamp = os.path.join(tmp, "stamp")
        program = [payload, "sleep", "0.2", "if-rank", "3", "stamp", stamp, "if-rank", "3",
                   "exit", "7", "sleep", "60"]
        cs = contenders(build, 8, program)
        del cs["floor"]
        results = {k: [] for k in cs}
        codes = {k: set() for k in cs}
        for _ in range(rounds):
            for name in random.sample(list(cs), len(cs)):
                if os.path.exists(stamp):
                    os.unlink(stamp)
                proc = subprocess.Popen(cs[name], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True)
                if wait_exact(proc, 5 if name == "hydra" else HANG_S):
                    end = time.monotonic_ns()
                    codes[name].add(proc.returncode)
                    with open(stamp) as f:
                        results[name].append((end - int(f.read())) / 1e6)
                else:
                    codes[name].add("no exit within 5 s")
        for name in cs:
            v = results[name]
            print(f"| {name} | {', '.join(map(str, sorted(codes[name], key=str)))} | "
                  f"{statistics.median(v):.1f} |" if v else f"| {name} | {codes[name]} | never |")


def count_cut_lines(path, tag):
    """Lines that are not one whole 100-byte payload line (after removing the tag, a regex)."""
    cut = total = 0
    pattern = re.compile(rb"^r\d+ l\d+ x+$")
    with open(path, "rb") as f:
        for line in f:
            total += 1
            body = line.rstrip(b"\n")
            if tag:
                body = re.sub(tag, b"", body)
            if len(body) != 99 or not pattern.match(body):
                cut += 1
    return cut, total


def bench_output(build, rounds, mib):
    print(f"\n## Output: 4 ranks x {mib} MiB of 100-byte lines in 4096-byte chunks, into one file")
    payload = find(build, "tests/pm_payload")
    size = (mib * 1024 * 1024 + 99) // 100 * 100  # whole lines, so that none is partial
    flood = [payload, "flood", str(size), "4096"]
    print("| contender | MB/s (median) | ratio to floor | lines cut |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out")
        runs = {
            "floor": None,
            "pmrun plain": [find(build, "bin/pmrun"), "--allow-run-as-root", "-np", "4"] + flood,
            "pmrun tagged": [find(build, "bin/pmrun"), "--allow-run-as-root", "--tag-output",
                             "-np", "4"] + flood,
        }
        if shutil.which("mpiexec.hydra"):
            runs["hydra plain"] = ["mpiexec.hydra", "-n", "4"] + flood
            runs["hydra tagged"] = ["mpiexec.hydra", "-prepend-rank", "-n", "4"] + flood
        if shutil.which("mpirun.openmpi"):
            runs["mpirun plain"] = ["mpirun.openmpi", "--allow-run-as-root", "--bind-to", "none",
                                    "--oversubscribe", "-np", "4"] + flood
            runs["mpirun tagged"] = runs["mpirun plain"][:1] + ["--tag-output"] + runs["mpirun plain"][1:]
        speeds = {k: [] for k in runs}
        ratios = {k: [] for k in runs}
        cut = {k: 0 for k in runs}
        for _ in range(rounds):
            this_round = {}
            for name in random.sample(list(runs), len(runs)):
                with open(out, "wb") as f:
                    start = time.perf_counter()
                    if name == "floor":
                        procs = [subprocess.Popen(flood, stdout=f,
                                                  env=dict(os.environ, OMPI_COMM_WORLD_RANK=str(r)))
                                 for r in range(4)]
                        for p in procs:
                            p.wait()
                    else:
                        proc = subprocess.Popen(runs[name], stdout=f, stderr=subprocess.DEVNULL,
                                                start_new_session=True)
                        if not wait_exact(proc, 120):
                            sys.exit(f"peers_bench: {name} did not finish the output run in 120 s")
                    elapsed = time.perf_counter() - start
                this_round[name] = 4 * size / elapsed / 1e6
                speeds[name].append(this_round[name])
                if name != "floor":
                    tag = None
                    if "tagged" in name:
                        tag = rb"^\[\d+\] " if "hydra" in name else rb"^\[\d+,\d+\]<stdout>:"
                    c, _t = count_cut_lines(out, tag)
                    cut[name] = max(cut[name], c)
            for name in runs:
                ratios[name].append(this_round[name] / this_round["floor"])
        for name in runs:
            print(f"| {name} | {statistics.median(speeds[name]):.0f} | "
                  f"{statistics.median(ratios[name]):.2f}x | {cut[name] if name != 'floor' else '-'} |")


def tree_rss_kb(root_pid, exclude_exe):
    """Sum of VmRSS of the launcher and its direct children (its helpers: pmd, hydra_pmi_proxy),
    leaving out the ranks (exclude_exe), plus pmd's own helper (pmd-helper: the PMIx server) a
    level deeper. Other deeper processes are ranks, or a rank between clone and exec, which still
    shows its parent's pages."""
    children = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(pid))
        except (OSError, IndexError, ValueError):
            pass
    total = 0
    helpers = []
    for child in children.get(root_pid, []):
        for grandchild in children.get(child, []):
            try:
                if os.path.basename(os.readlink(f"/proc/{grandchild}/exe")) == "pmd-helper":
                    helpers.append(grandchild)
            except OSError:
                pass
    for pid in [root_pid] + children.get(root_pid, []) + helpers:
        try:
            if os.readlink(f"/proc/{pid}/exe") == exclude_exe:
                continue
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def bench_memory(build, rounds):
    print("\n## Memory: launcher and its helpers (not the ranks) for 128 ranks of `sleep 2`, MB "
          "(pmrun --no-pmix)")
    sleep = os.path.realpath(shutil.which("sleep"))
    cs = contenders(build, 128, [sleep, "2"])
    del cs["floor"]
    cs["pmrun"].insert(1, "--no-pmix")  # the PMIx server off, as issue 14 measures it
    print("| launcher | RSS MB (median of peaks) |")
    print("|---|---|")
    peaks = {k: [] for k in cs}
    for _ in range(rounds):
        for name in random.sample(list(cs), len(cs)):
            proc = subprocess.Popen(cs[name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True)
            peak = 0
            while proc.poll() is None:
                peak = max(peak, tree_rss_kb(proc.pid, sleep))
                time.sleep(0.05)
            peaks[name].append(peak / 1024)
    for name in cs:
        print(f"| {name} | {statistics.median(peaks[name]):.1f} |")


def bench_restart(build, rounds):
    """Restarts in place (docs/resilience.md) against a fresh launch, in the same rounds, two
    ways. "to running": a fresh `pmrun -np N` from its start until its last rank runs, against a
    job whose rank 0 fails once every rank of incarnation 0 runs (`--max-restarts 1`), from rank
    0's stamp just before its exit 7 until the last rank of incarnation 1 runs (the abort of the
    others, every agent clearing the incarnation, the new ranks started). "to exit": the same,
    until pmrun exits (the ranks' run and the teardown included in both). Every rank writes its
    start time to one file: the last writer is (within a rank's write) the last to run."""
    print("\n## Restart in place: -np N, rank 0 fails once, vs a fresh launch")
    payload = find(build, "tests/pm_payload")
    pmrun = find(build, "bin/pmrun")
    print("| N | fresh to running ms | restart to running ms | ratio | fresh to exit ms | "
          "restart to exit ms | ratio |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        failed = os.path.join(tmp, "failed")
        running = os.path.join(tmp, "running")
        for n in (8, 128):
            fresh_argv = [pmrun, "--allow-run-as-root", "-np", str(n), payload, "stamp", running]
            # Incarnation 0: every rank is up (0.5 s), then rank 0 fails and the others wait to
            # be stopped by the abort; incarnation 1: every rank stamps and exits 0 at once.
            restart_argv = [pmrun, "--allow-run-as-root", "-np", str(n), "--max-restarts", "1",
                            payload, "if-restart", "0", "sleep", "0.5",
                            "if-restart", "0", "if-rank", "0", "stamp", failed,
                            "if-restart", "0", "if-rank", "0", "exit", "7",
                            "if-restart", "0", "sleep", "30", "stamp", running]
            rows = {k: [] for k in ("fr", "rr", "r1", "fe", "re", "r2")}
            for _ in range(rounds):
                for path in (failed, running):
                    if os.path.exists(path):
                        os.unlink(path)
                start = time.monotonic_ns()
                proc = subprocess.Popen(fresh_argv, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True)
                if not wait_exact(proc, HANG_S) or proc.returncode != 0:
                    continue
                fresh_exit = time.monotonic_ns() - start
                with open(running) as fh:
                    fresh_running = int(fh.read()) - start
                os.unlink(running)
                proc = subprocess.Popen(restart_argv, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True)
                if not wait_exact(proc, HANG_S) or proc.returncode != 0:
                    continue
                end = time.monotonic_ns()
                with open(failed) as fh:
                    failed_at = int(fh.read())
                with open(running) as fh:
                    restart_running = int(fh.read()) - failed_at
                restart_exit = end - failed_at
                rows["fr"].append(fresh_running / 1e6)
                rows["rr"].append(restart_running / 1e6)
                rows["r1"].append(restart_running / fresh_running)
                rows["fe"].append(fresh_exit / 1e6)
                rows["re"].append(restart_exit / 1e6)
                rows["r2"].append(restart_exit / fresh_exit)
            if rows["r1"]:
                m = {k: statistics.median(v) for k, v in rows.items()}
                print(f"| {n} | {m['fr']:.1f} | {m['rr']:.1f} | {m['r1']:.2f}x | {m['fe']:.1f} | "
                      f"{m['re']:.1f} | {m['r2']:.2f}x |")
            else:
                print(f"| {n} | - | - | no round completed | | | |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--only", default="launch,abort,output,memory,restart")
    parser.add_argument("--output-mib", type=int, default=64)
    args = parser.parse_args()
    random.seed(1)
    only = args.only.split(",")
    print(f"# pmrun vs peers ({args.rounds} rounds; ratios within rounds)")
    if "launch" in only:
        bench_launch(args.build, args.rounds)
    if "abort" in only:
        bench_abort(args.build, args.rounds)
    if "output" in only:
        bench_output(args.build, max(3, args.rounds // 2), args.output_mib)
    if "memory" in only:
        bench_memory(args.build, max(3, args.rounds // 2))
    if "restart" in only:
        bench_restart(args.build, args.rounds)


if __name__ == "__main__":
    main()
