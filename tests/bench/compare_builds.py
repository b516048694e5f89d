#!/usr/bin/python3
"""Two builds of libpm side by side in the same rounds (docs/benchmarks.md, "pmd without the
loader"): what a change did to the local launch and to the launcher's and agent's memory.

  tests/bench/compare_builds.py OLD_BUILD NEW_BUILD [--rounds N] [--only launch,memory]

launch: `pmrun -np N /bin/true` (N = 1, 8; PMIx on and --no-pmix) and the posix_spawn floor
(NEW_BUILD's bench/spawn_floor), all three shuffled in each round; prints each build's median
ratio to the floor and the median of the within-round new/old ratios. memory: the peak RSS of
pmrun, pmd and pmd-helper (peers_bench.tree_rss_kb) for 128 × `sleep 2` with --no-pmix and 128
ranks calling PMIx_Init (NEW_BUILD's tests/mpi/pmix_touch), the builds in shuffled order.
Ratios, not absolute times: the machines are shared and noisy."""
import argparse
import os
import random
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers_bench as pb  # noqa: E402


def launch(builds, floor, rounds):
    for n in (1, 8):
        for extra in ([], ["--no-pmix"]):
            ratios = {k: [] for k in builds}
            for _ in range(rounds):
                cs = {"floor": [floor, str(n), "/bin/true"]}
                for k, b in builds.items():
                    cs[k] = [os.path.join(b, "bin/pmrun"), "--allow-run-as-root"] + extra + \
                        ["-np", str(n), "/bin/true"]
                t = {}
                for k in random.sample(list(cs), len(cs)):
                    t[k], _ = pb.timed(cs[k])
                if any(v is None for v in t.values()):
                    continue  # a hang: pb.timed says so by None; the round does not count
                for k in builds:
                    ratios[k].append(t[k] / t["floor"])
            within = statistics.median(a / b for a, b in zip(ratios["new"], ratios["old"]))
            print(f"| -np {n} {' '.join(extra) or '(PMIx on)'} | "
                  f"{statistics.median(ratios['old']):.2f}x | "
                  f"{statistics.median(ratios['new']):.2f}x | {within:.2f} |", flush=True)


def memory(builds, touch, rounds):
    sleep = os.path.realpath("/bin/sleep")
    jobs = [("128 x sleep 2, --no-pmix", ["--no-pmix", "-np", "128", sleep, "2"], sleep)]
    if os.path.exists(touch):
        jobs.append(("128 ranks calling PMIx_Init", ["-np", "128", touch, "3"], touch))
    for label, args, ranks in jobs:
        peaks = {k: [] for k in builds}
        for _ in range(rounds):
            for k in random.sample(list(builds), len(builds)):
                proc = subprocess.Popen(
                    [os.path.join(builds[k], "bin/pmrun"), "--allow-run-as-root"] + args,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
                peak = 0
                while proc.poll() is None:
                    peak = max(peak, pb.tree_rss_kb(proc.pid, ranks))
                    time.sleep(0.05)
                peaks[k].append(peak / 1024)
        old, new = statistics.median(peaks["old"]), statistics.median(peaks["new"])
        print(f"| {label} | {old:.2f} MB | {new:.2f} MB | {new / old:.2f} |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--only", default="launch,memory")
    a = ap.parse_args()
    builds = {"old": os.path.abspath(a.old), "new": os.path.abspath(a.new)}
    only = a.only.split(",")
    print("| figure | old | new | new/old (same rounds) |")
    print("|---|---|---|---|")
    if "launch" in only:
        launch(builds, os.path.join(builds["new"], "bench/spawn_floor"), a.rounds)
    if "memory" in only:
        memory(builds, os.path.join(builds["new"], "tests/mpi/pmix_touch"),
               max(3, a.rounds // 4))


if __name__ == "__main__":
    main()
