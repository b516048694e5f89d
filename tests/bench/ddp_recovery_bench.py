#!/usr/bin/python3
"""Training that survives a lost host: pmrun beside torchrun across fake hosts, in ONE run.

A PyTorch DDP training (tests/torch/ddp_train.py: gloo, CPU, 3 hosts x 2 ranks, a checkpoint
every K steps) runs on 4 fake hosts (tests/multihost/hosts.sh), node4 a spare; once the
checkpoint of step K is written, `hosts.sh crash node2` kills a host. Each contender must resume
on the spare from the last checkpoint and end with the parameters of an uninterrupted run (its
SHA-256, taken once at the start). Per run, from the kill (the crash command's start):
  running   until every rank of the new incarnation runs (its first line: before `import torch`)
  stepping  until every rank of the new incarnation has finished its first step

  pmrun     pmrun -H node1:2,node2:2,node3:2,node4:2 -np 6 --max-restarts 3 python3 ddp_train.py
  torchrun  one `torchrun --nnodes=3:3 --nproc_per_node=2 --max_restarts=3 --rdzv_backend=c10d
            --rdzv_endpoint=node1:29400` per host over ssh; node4's is started once the first
            rendezvous is complete (the training steps), so that it waits as a spare

Why --nnodes=3:3 and not 3:4: in torch 1.13 a node that comes while the rendezvous is complete
with fewer than max nodes goes on its wait list, and every running agent restarts its workers to
take it in (elastic/agent/server/api.py, `num_nodes_waiting`): the 4th host joins as a member (8
ranks) instead of waiting as a spare. With max = 3 it cannot join until the round is over: when a
host dies, the survivors' workers fail (gloo), their agents leave the round, the dead node's
heartbeat expires (3 x 5 s keep-alive, fixed), the next round starts and the spare takes the dead
node's place. `--torchrun-nnodes 3:4` runs it the other way, to see that.

Each round runs every contender once, in a shuffled order, each on a fresh fixture (the crash
kills a host); figures are medians, ratios are taken within a round (the machine is shared).
Usage: ddp_recovery_bench.py PMRUN [--rounds R] [--steps N] [--every K] [--sleep S]
                             [--only pmrun,torchrun] [--torchrun-nnodes 3:3]
                             [--monitor-interval SECONDS] [--keep]
Needs root, the fixture's tools (hosts.sh probe) and Debian's python3-torch (/usr/bin/python3,
/usr/bin/torchrun).
"""
import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import multihost_bench as mb  # noqa: E402  (the fixture and process helpers)

PYTHON = "/usr/bin/python3"
TORCHRUN = "/usr/bin/torchrun"
SCRIPT = os.path.realpath(os.path.join(HERE, "..", "torch", "ddp_train.py"))
HANG_S = 180.0
# Debian's torch 1.13 on Python 3.11: Std.from_str("0") (the default of --redirects and --tee)
# returns None, as iterating an IntFlag no longer yields NONE, and torchrun dies on it. A mapping
# for a local rank that does not exist means "no redirect, no tee" for every real one.
TORCHRUN_STD = ["--redirects", "9:0", "--tee", "9:0"]
START = re.compile(r"start rank (\d+) world (\d+) local \d+ restart \d+ host (\S+) pid (\d+) "
                   r"from (\d+) t0 ([\d.]+)")
STEP = re.compile(r"step (\d+) rank (\d+) world (\d+) pid (\d+) t ([\d.]+)")


def training(cfg, ckdir, interpreter=True):
    """The training's command line (torchrun runs the script with its own python3)."""
    return [PYTHON] * interpreter + [SCRIPT, "--dir", ckdir, "--steps", str(cfg.steps), "--every",
                                     str(cfg.every), "--sleep", str(cfg.sleep)]


def checkpoint(cfg, ckdir):
    return os.path.join(ckdir, "ckpt-%06d.pt" % cfg.every)


def wait_for(predicate, timeout, procs=()):
    """True once predicate() holds; False after timeout or once a proc in procs has exited."""
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if predicate():
            return True
        if any(p.poll() is not None for p in procs):
            return predicate()
        time.sleep(0.02)
    return False


def contains(path, text):
    try:
        with open(path, errors="replace") as f:
            return text in f.read()
    except OSError:
        return False


def pmrun_reference(cfg, tmp):
    """The parameters' SHA-256 of an uninterrupted run on 3 hosts."""
    fx = mb.Fixture(3)
    try:
        ckdir = tempfile.mkdtemp(dir=tmp)
        argv = [cfg.pmrun, "--allow-run-as-root", "-mca", "plm_rsh_agent",
                f"ssh -F {fx.ssh_config}", "-H", mb.host_list(fx, fx.hosts), "-np", "6"]
        t, rc = mb.run_to_end(mb.start(argv + training(cfg, ckdir)), HANG_S)
        if rc != 0:
            sys.exit(f"ddp_recovery_bench: the uninterrupted run failed ({rc})")
        with open(os.path.join(ckdir, "params.sha256")) as f:
            return f.read().strip()
    finally:
        fx.down()


def run_pmrun(cfg, fx, ckdir, out, err):
    argv = [cfg.pmrun, "--allow-run-as-root", "-mca", "plm_rsh_agent", f"ssh -F {fx.ssh_config}",
            "-H", mb.host_list(fx, fx.hosts), "-np", "6", "--max-restarts", "3"]
    with open(out, "wb") as o, open(err, "wb") as e:
        procs = [mb.start(argv + training(cfg, ckdir), stdout=o, stderr=e)]
    ok = wait_for(lambda: os.path.exists(checkpoint(cfg, ckdir)), HANG_S, procs)
    return procs, ok


def run_torchrun(cfg, fx, ckdir, out, err, rdzv_id):
    def command(env=""):
        return (f"{env}{TORCHRUN} --nnodes={cfg.torchrun_nnodes} --nproc_per_node=2 "
                f"--max_restarts=3 --rdzv_backend=c10d --rdzv_endpoint=node1:29400 "
                f"--rdzv_id={rdzv_id} --rdzv_conf=join_timeout=600,last_call_timeout=1 "
                f"--monitor_interval={cfg.monitor_interval} " + " ".join(TORCHRUN_STD) + " " +
                " ".join(training(cfg, ckdir, interpreter=False)))

    procs = []
    with open(out, "ab") as o, open(err, "ab") as e:
        for host in fx.hosts[:3]:
            procs.append(mb.start(["ssh", "-F", fx.ssh_config, host, command()], stdout=o,
                                  stderr=e))
    # the first rendezvous is complete once the training steps: then the spare comes
    if not wait_for(lambda: contains(out, "step 1 "), HANG_S, procs):
        return procs, False
    spare_err = err + ".node4"
    with open(out, "ab") as o, open(spare_err, "wb") as e:
        procs.append(mb.start(["ssh", "-F", fx.ssh_config, fx.hosts[3], command("LOGLEVEL=INFO ")],
                              stdout=o, stderr=e))
    # it waits once its agent went to the rendezvous (the round is full: it waits for the next)
    ok = wait_for(lambda: contains(spare_err, "Rendezvous'ing worker group"), 60, procs)
    time.sleep(0.5)
    ok = ok and wait_for(lambda: os.path.exists(checkpoint(cfg, ckdir)), HANG_S, procs)
    return procs, ok


def measure(out, t_kill):
    """(running, stepping, the program's own start, worlds, hosts of the new incarnation by
    rank), from the lines."""
    with open(out, errors="replace") as f:
        text = f.read()
    new = {}  # rank -> (pid, t0, host, world)
    for m in START.finditer(text):
        rank, world, host, pid, t0 = int(m[1]), int(m[2]), m[3], int(m[4]), float(m[6])
        if t0 > t_kill and rank not in new:
            new[rank] = (pid, t0, host, world)
    first = {}
    for m in STEP.finditer(text):
        rank, pid, t = int(m[2]), int(m[4]), float(m[5])
        if rank in new and new[rank][0] == pid and rank not in first:
            first[rank] = t
    worlds = sorted({v[3] for v in new.values()})
    if len(new) != 6 or len(first) != 6:
        return None, None, None, worlds, {}
    running = max(v[1] for v in new.values()) - t_kill
    stepping = max(first.values()) - t_kill
    own = max(first[r] - new[r][1] for r in new)  # the program's own start, the slowest rank's
    return running, stepping, own, worlds, {r: v[2] for r, v in new.items()}


def bench(cfg, rounds, tmp, want):
    names = [n for n in ("pmrun", "torchrun") if n in cfg.only]
    runs = {n: {"running": [], "stepping": [], "own": [], "bits": 0, "codes": [], "placement": None,
                "worlds": set()} for n in names}
    ratio = []
    said = ""
    for r in range(rounds):
        this = {}
        for name in random.sample(names, len(names)):
            fx = mb.Fixture(4)
            procs = []
            try:
                ckdir = tempfile.mkdtemp(dir=tmp)
                out = os.path.join(tmp, f"{name}-{r}.out")
                err = os.path.join(tmp, f"{name}-{r}.err")
                if name == "pmrun":
                    procs, ok = run_pmrun(cfg, fx, ckdir, out, err)
                else:
                    procs, ok = run_torchrun(cfg, fx, ckdir, out, err, f"bench{os.getpid()}r{r}")
                if not ok:
                    runs[name]["codes"].append("no kill (the training ended or never started)")
                    continue
                t_kill = time.time()
                crash = fx.action("crash", "node2")
                if mb.reap(crash) != 0:
                    sys.exit("ddp_recovery_bench: hosts.sh crash node2 failed")
                codes = []
                for p in procs:
                    _, rc = mb.run_to_end(p, HANG_S)
                    codes.append(rc)
                # torchrun: node2's ssh ends with the host (255); the others' codes count
                runs[name]["codes"].append(codes[0] if name == "pmrun" else
                                           max(c if c is not None else 999
                                               for i, c in enumerate(codes) if i != 1))
                running, stepping, own, worlds, placement = measure(out, t_kill)
                runs[name]["worlds"].update(worlds)
                if running is None:
                    continue
                runs[name]["running"].append(running)
                runs[name]["stepping"].append(stepping)
                runs[name]["own"].append(own)
                runs[name]["placement"] = placement
                try:
                    with open(os.path.join(ckdir, "params.sha256")) as f:
                        runs[name]["bits"] += f.read().strip() == want
                except OSError:
                    pass
                this[name] = stepping
                if name == "pmrun" and not said:
                    said = mb.first_line(err, "restarting the job")
            finally:
                for p in procs:  # a run cut short: what it left (reaped ones are gone)
                    if p.returncode is None:
                        mb.kill_group(p)
                        mb.reap(p)
                fx.down()
        if len(this) == 2:
            ratio.append(this["pmrun"] / this["torchrun"])
        mb.say(f"round {r + 1}: " + ", ".join(
            f"{n} running {runs[n]['running'][-1]:.2f} s stepping {this[n]:.2f} s"
            for n in names if n in this))
    mb.say(f"\n## kill of node2 -> the training on node1, node3, node4 ({rounds} rounds, a fresh "
           f"fixture each; {cfg.steps} steps, a checkpoint every {cfg.every}, {cfg.sleep} s a "
           f"step; load {mb.load()})")
    mb.say("| launcher | kill -> every rank running again, s | kill -> every rank stepping again, "
           "s | min..max stepping | the program's own start, s | bit-identical | exit codes | "
           "WORLD_SIZE after | ranks by host |")
    mb.say("|---|---|---|---|---|---|---|---|---|")
    for n in names:
        v = runs[n]
        rng = f"{min(v['stepping']):.2f}..{max(v['stepping']):.2f}" if v["stepping"] else "-"
        placement = v["placement"] or {}
        by_host = {}
        for rank, host in sorted(placement.items()):
            by_host.setdefault(host, []).append(str(rank))
        hosts = " ".join(f"{h}:{','.join(rs)}" for h, rs in sorted(by_host.items()))
        mb.say(f"| {n} | {mb.med(v['running'], '{:.2f}')} | {mb.med(v['stepping'], '{:.2f}')} | "
               f"{rng} | {mb.med(v['own'], '{:.2f}')} | {v['bits']}/{rounds} | {v['codes']} | "
               f"{sorted(v['worlds'])} | {hosts} |")
    mb.say(f"pmrun said: {said}")
    mb.say(f"ratio pmrun/torchrun, kill -> stepping again (median of {len(ratio)} rounds): "
           f"{mb.med(ratio, '{:.2f}x')} (goal <= 0.3x)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("pmrun")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--sleep", type=float, default=0.1)
    parser.add_argument("--only", default="pmrun,torchrun")
    parser.add_argument("--torchrun-nnodes", default="3:3")
    parser.add_argument("--keep", action="store_true", help="keep the runs' output (says where)")
    parser.add_argument("--monitor-interval", type=float, default=0.1,
                        help="torchrun's (its default is 5 s: 0.1 s favours it)")
    cfg = parser.parse_args()
    cfg.pmrun = os.path.realpath(cfg.pmrun)
    cfg.only = cfg.only.split(",")
    if set(cfg.only) - {"pmrun", "torchrun"}:
        sys.exit("ddp_recovery_bench: --only takes pmrun,torchrun")
    for path in (cfg.pmrun, os.path.join(os.path.dirname(cfg.pmrun), "pmd"), PYTHON, TORCHRUN):
        if not os.access(path, os.X_OK):
            sys.exit(f"ddp_recovery_bench: {path} is missing (build pmrun and pmd; "
                     "apt-get install python3-torch)")
    probe = subprocess.run([mb.HOSTS_SH, "probe"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    if probe.returncode != 0:
        sys.exit(f"ddp_recovery_bench: no fake hosts here: {probe.stdout.strip()}")
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, mb.on_signal)
    random.seed()
    mb.say(f"# DDP training through a lost host: pmrun beside torchrun ({cfg.rounds} rounds)")
    mb.say(f"# {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, load average at the "
           f"start {mb.load()}; pmrun {cfg.pmrun}; torchrun --nnodes={cfg.torchrun_nnodes} "
           f"--monitor_interval={cfg.monitor_interval}")
    tmp = tempfile.mkdtemp(prefix="pm-ddpbench-", dir="/tmp")
    started = time.monotonic()
    try:
        want = pmrun_reference(cfg, tmp)
        mb.say(f"uninterrupted run (pmrun, 3 hosts x 2 ranks): sha256 {want[:16]}...")
        bench(cfg, cfg.rounds, tmp, want)
        mb.say(f"({time.monotonic() - started:.0f} s; load average at the end {mb.load()})")
    except KeyboardInterrupt:
        mb.say("\nddp_recovery_bench: interrupted; cleaning up")
        raise SystemExit(130)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        for proc in list(mb.LIVE_PROCS):
            mb.kill_group(proc)
            mb.reap(proc)
        for f in list(mb.LIVE_FIXTURES):
            f.down()
        if cfg.keep:
            mb.say(f"output kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
