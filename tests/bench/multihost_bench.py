#!/usr/bin/python3
"""pmrun beside mpirun.openmpi across fake hosts (tests/multihost/hosts.sh), in ONE run.

Each round runs every contender once, in a shuffled order; figures are medians, and ratios are
taken within a round (the machines are shared and noisy: absolute times drift, ratios hold).

  launch     3 hosts x 2 ranks of /bin/true: wall time (beside 3 parallel `ssh nodeK /bin/true`)
  failure    6 ranks, rank 3 (node2) exits 7 after 1 s, the others sleep 30: failure -> exit
  crash      6 ranks sleep; `hosts.sh crash node3`: crash -> exit, anything left on node1/node2
  partition  6 ranks sleep; `hosts.sh partition node2`: cut -> exit (mpirun capped), leftovers
  output     2 hosts x 2 ranks x MiB of 100-byte lines into one file, beside the same writers
             under 4 parallel plain ssh (the floor); lines cut, lost or out of order per rank
  restart    6 ranks, rank 3 fails once (--max-restarts 1): failure -> every rank running again,
             against a fresh launch -> every rank running
  tree       8 and 16 hosts x 2 ranks of /bin/true: pmrun --launch flat, --launch tree with
             fan-out 4 and 2, and the default (auto), beside mpirun; ratios to flat and mpirun
  dvm        a DVM (docs/dvm.md): 3 hosts x 2 ranks of /bin/true on it beside a cold pmrun and
             mpirun; 1,000 one-rank jobs one after another on a DVM of this machine (jobs/s); 8
             submitters at once, 25 jobs each, every output line checked

crash and partition bring up a fresh fixture for every run (outside the timed part); the others
share one. Every fixture is torn down on exit, also on Ctrl-C or SIGTERM.
Usage: multihost_bench.py PMRUN [--payload PATH] [--rounds R]
                          [--only launch,failure,crash,partition,output,tree] [--output-mib M]
                          [--partition-cap SECONDS]
PMRUN is a built pmrun (pmd next to it); the payload defaults to PMRUN/../../tests/pm_payload.
Needs root, the fixture's tools (hosts.sh probe) and, for the mpirun column, mpirun.openmpi.
"""
import argparse
import collections
import os
import random
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
HOSTS_SH = os.path.join(HERE, "..", "multihost", "hosts.sh")
HANG_S = 30.0  # a launcher that has not exited by then is killed and counted as a hang
CLEAN_WITHIN_S = 5.0  # how long a host may take to be empty after the launcher exited

LIVE_PROCS = set()  # launchers and helpers running now: killed (by pid) on any way out
LIVE_FIXTURES = []  # fixtures up now: torn down on any way out


def say(text=""):
    print(text, flush=True)


def load():
    return "%.2f %.2f %.2f" % os.getloadavg()


# --- processes -----------------------------------------------------------------------------------


def start(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=None):
    """Starts argv in a session of its own (its process group id is its pid), tracked in
    LIVE_PROCS until reaped."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                            env=env, start_new_session=True)
    LIVE_PROCS.add(proc)
    return proc


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def reap(proc):
    proc.wait()
    LIVE_PROCS.discard(proc)
    return proc.returncode


def wait_exit(proc, timeout):
    """The monotonic time at which proc exited, or None if it is still running after timeout
    seconds (then it is left running). Waits on a pidfd, so it wakes the moment proc exits:
    Popen.wait(timeout=...) polls with sleeps growing to 50 ms and would round every figure up."""
    if proc.returncode is not None:
        return None
    fd = os.pidfd_open(proc.pid)  # not reaped yet: the pid is still ours
    try:
        ready, _, _ = select.select([fd], [], [], max(0.0, timeout))
    finally:
        os.close(fd)
    if not ready:
        return None
    now = time.monotonic()
    reap(proc)
    return now


def run_to_end(proc, timeout=HANG_S):
    """(exit time, exit code); a proc still running after timeout is killed: (None, None)."""
    t = wait_exit(proc, timeout)
    if t is None:
        kill_group(proc)
        reap(proc)
        return None, None
    return t, proc.returncode


# --- the fixture ---------------------------------------------------------------------------------


class Fixture:
    """N fake hosts (hosts.sh up); the env keys of hosts.env in .env."""

    def __init__(self, hosts):
        self.state = tempfile.mkdtemp(prefix="pm-mhbench-", dir="/tmp")
        LIVE_FIXTURES.append(self)
        subprocess.run([HOSTS_SH, "up", "--hosts", str(hosts), "--state", self.state,
                        "--owner", str(os.getpid())], check=True, stdout=subprocess.DEVNULL)
        self.env = {}
        with open(os.path.join(self.state, "hosts.env")) as f:
            for line in f:
                key, eq, value = line.strip().partition("=")
                if eq and value.startswith('"'):
                    self.env[key] = value.strip('"')
        self.hosts = self.env["PM_MH_HOSTS"].split()
        self.ssh_config = self.env["PM_MH_SSH_CONFIG"]
        self.subnet = self.env["PM_MH_SUBNET"]

    def down(self):
        if self.state is None:
            return
        subprocess.run([HOSTS_SH, "down", "--state", self.state], stdout=subprocess.DEVNULL)
        self.state = None
        LIVE_FIXTURES.remove(self)

    def netns(self, host):
        return self.env["PM_MH_HOST%d_NETNS" % (self.hosts.index(host) + 1)]

    def action(self, verb, host):
        """Starts `hosts.sh VERB --state DIR HOST` without waiting for it."""
        return start([HOSTS_SH, verb, "--state", self.state, host])

    def pids(self, host):
        """What runs on the host apart from its sshd processes (hosts.sh pids)."""
        out = subprocess.run([HOSTS_SH, "pids", "--state", self.state, host],
                             stdout=subprocess.PIPE, text=True, check=True).stdout
        return [int(p) for p in out.split()]

    def count_exe(self, host, exe):
        """How many processes in the host's namespace run exe (a quick `ip netns pids`)."""
        out = subprocess.run(["ip", "netns", "pids", self.netns(host)], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True).stdout
        n = 0
        for pid in out.split():
            try:
                n += os.readlink(f"/proc/{pid}/exe") == exe
            except OSError:
                pass
        return n

    def leftovers(self, hosts, within):
        """(processes on hosts at once, processes still there after `within` seconds): pids and
        command lines, polled until the hosts are empty."""
        first = None
        until = time.monotonic() + within
        while True:
            left = {h: self.pids(h) for h in hosts}
            left = {h: p for h, p in left.items() if p}
            if first is None:
                first = left
            if not left or time.monotonic() > until:
                return first, left
            time.sleep(0.1)

    def clear(self, hosts):
        """Kills what a launcher left on the hosts (processes of this run's own jobs)."""
        for host in hosts:
            for pid in self.pids(host):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def describe(left):
    parts = []
    for host, pids in sorted(left.items()):
        names = []
        for pid in pids:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    names.append(f"{pid} " + os.path.basename(f.read().split(b"\0")[0].decode()))
            except OSError:
                names.append(str(pid))
        parts.append(f"{host}: " + ", ".join(names))
    return "; ".join(parts)


# --- contenders ----------------------------------------------------------------------------------


def host_list(fx, hosts, slots=2):
    return ",".join(f"{h}:{slots}" for h in hosts)


def contenders(cfg, fx, hosts, program):
    np_ = str(2 * len(hosts))
    out = {"pmrun": [cfg.pmrun, "--allow-run-as-root", "-mca", "plm_rsh_agent",
                     f"ssh -F {fx.ssh_config}", "-H", host_list(fx, hosts), "-np", np_] + program}
    if cfg.mpirun:
        out["mpirun"] = [cfg.mpirun, "--allow-run-as-root", "-mca", "plm_rsh_agent",
                         f"ssh -F {fx.ssh_config}", "-mca", "btl", "self,tcp",
                         "-mca", "btl_tcp_if_include", fx.subnet,
                         "-mca", "oob_tcp_if_include", fx.subnet,
                         "-H", host_list(fx, hosts), "-np", np_] + program
    return out


def med(values, fmt="{:.3f}"):
    return fmt.format(statistics.median(values)) if values else "-"


def first_line(path, needle=""):
    try:
        with open(path, errors="replace") as f:
            for line in f:
                if needle in line and line.strip():
                    return line.strip()
    except OSError:
        pass
    return ""


# --- 1. launch -----------------------------------------------------------------------------------


def bench_launch(cfg, fx, rounds, summary):
    say(f"\n## launch: 3 hosts x 2 ranks of /bin/true ({rounds} rounds; load {load()})")
    cs = contenders(cfg, fx, fx.hosts, ["/bin/true"])
    names = list(cs) + ["ssh x3"]
    times = {k: [] for k in names}
    ratio = []
    codes = {k: collections.Counter() for k in names}
    for _ in range(rounds):
        this = {}
        for name in random.sample(names, len(names)):
            t0 = time.monotonic()
            if name == "ssh x3":
                procs = [start(["ssh", "-F", fx.ssh_config, h, "/bin/true"]) for h in fx.hosts]
                ends = [run_to_end(p) for p in procs]
                t = None if any(e[0] is None for e in ends) else max(e[0] for e in ends)
                rc = max((e[1] or 0) for e in ends) if t is not None else None
            else:
                t, rc = run_to_end(start(cs[name]))
            codes[name][rc if t is not None else f"hang > {HANG_S:.0f} s"] += 1
            if t is not None:
                this[name] = t - t0
                times[name].append(this[name])
        if "pmrun" in this and "mpirun" in this:
            ratio.append(this["pmrun"] / this["mpirun"])
    say("| contender | wall s (median) | exit codes |")
    say("|---|---|---|")
    for name in names:
        say(f"| {name} | {med(times[name])} | {dict(codes[name])} |")
    over_ssh = (statistics.median(times["pmrun"]) - statistics.median(times["ssh x3"])
                if times["pmrun"] and times["ssh x3"] else None)
    if ratio:
        say(f"pmrun / mpirun: {med(ratio, '{:.2f}x')} (goal <= 0.50x)")
    if over_ssh is not None:
        say(f"pmrun - ssh x3: {over_ssh:+.3f} s")
    summary.append(("launch 3x2 /bin/true, s", med(times["pmrun"]), med(times.get("mpirun", [])),
                    med(ratio, "{:.2f}x") + (f" (3 parallel ssh: {med(times['ssh x3'])} s)"
                                             if times["ssh x3"] else ""), "<= 0.5x mpirun"))


# --- the DVM ------------------------------------------------------------------------------------


class Dvm:
    """pmrun --dvm start on `hosts` (a host list) in a status directory of its own."""

    def __init__(self, cfg, hosts, extra, tmp):
        self.dir = tempfile.mkdtemp(prefix="pm-dvmbench-", dir=tmp)
        os.chmod(self.dir, 0o700)
        self.env = dict(os.environ, PM_STATUS_DIR=os.path.join(self.dir, "st"))
        self.uri = os.path.join(self.dir, "uri")
        subprocess.run([cfg.pmrun, "--allow-run-as-root"] + extra +
                       ["--dvm", "start", "-H", hosts, "--report-uri", self.uri],
                       check=True, env=self.env)
        with open(self.uri) as f:
            self.server = int(f.read().rsplit("dvm.", 1)[1].split(".sock")[0])

    def job(self, cfg, args):
        return [cfg.pmrun, "--allow-run-as-root", "--dvm-uri", "file:" + self.uri] + args

    def stop(self, cfg):
        subprocess.run([cfg.pmrun, "--allow-run-as-root", "--dvm", "stop", "--dvm-uri",
                        "file:" + self.uri], env=self.env)
        try:
            os.kill(self.server, signal.SIGKILL)  # only if stop did not end it
        except ProcessLookupError:
            pass


def bench_dvm(cfg, fx, rounds, summary, tmp):
    say(f"\n## dvm: 3 hosts x 2 ranks of /bin/true on a warm DVM ({rounds} rounds; load {load()})")
    dvm = Dvm(cfg, host_list(fx, fx.hosts), ["-mca", "plm_rsh_agent", f"ssh -F {fx.ssh_config}"],
              tmp)
    try:
        cs = contenders(cfg, fx, fx.hosts, ["/bin/true"])
        cs["dvm"] = dvm.job(cfg, ["-np", "6", "/bin/true"])
        names = list(cs)
        times = {k: [] for k in names}
        ratio_mpirun, ratio_cold = [], []
        for _ in range(rounds):
            this = {}
            for name in random.sample(names, len(names)):
                t0 = time.monotonic()
                t, rc = run_to_end(start(cs[name], env=dvm.env))
                if t is not None and rc == 0:
                    this[name] = t - t0
                    times[name].append(this[name])
            if "dvm" in this and "mpirun" in this:
                ratio_mpirun.append(this["dvm"] / this["mpirun"])
            if "dvm" in this and "pmrun" in this:
                ratio_cold.append(this["dvm"] / this["pmrun"])
        say("| contender | wall s (median) |")
        say("|---|---|")
        for name in names:
            say(f"| {name} | {med(times[name], '{:.4f}')} |")
        say(f"dvm / mpirun: {med(ratio_mpirun, '{:.3f}x')} (goal <= 0.1x); "
            f"dvm / cold pmrun: {med(ratio_cold, '{:.3f}x')}")
        summary.append(("dvm job 3x2 /bin/true, s", med(times["dvm"], "{:.4f}"),
                        med(times.get("mpirun", [])), med(ratio_mpirun, "{:.3f}x") +
                        f" (cold pmrun {med(times['pmrun'])} s)", "<= 0.1x mpirun"))
    finally:
        dvm.stop(cfg)
    # One host: jobs one after another, then 8 submitters at once.
    local = Dvm(cfg, "localhost:8", [], tmp)
    try:
        jobs = 1000
        t0 = time.monotonic()
        failed = 0
        for _ in range(jobs):
            failed += subprocess.run(local.job(cfg, ["-np", "1", "/bin/true"]), env=local.env,
                                     stdout=subprocess.DEVNULL).returncode != 0
        rate = jobs / (time.monotonic() - t0)
        say(f"{jobs} one-rank jobs one after another: {rate:.0f} jobs/s, {failed} failed "
            f"(goal >= 200 jobs/s)")
        summary.append(("dvm one-rank jobs in a row, jobs/s", f"{rate:.0f}", "-", "-",
                        ">= 200 jobs/s"))
        submitters, each = 8, 25
        script = ("for i in $(seq %d); do %s -np 1 echo \"s$1 j$i\" || echo \"s$1 j$i FAILED\"; "
                  "done" % (each, " ".join(local.job(cfg, []))))
        procs = [start(["/bin/sh", "-c", script, "sh", str(k)], stdout=subprocess.PIPE,
                       env=local.env) for k in range(submitters)]
        lost = 0
        t0 = time.monotonic()
        for k, p in enumerate(procs):
            out = p.communicate(timeout=300)[0].decode(errors="replace").split("\n")
            reap(p)
            lost += sum(1 for i in range(1, each + 1) if f"s{k} j{i}" not in out)
        elapsed = time.monotonic() - t0
        say(f"{submitters} submitters x {each} jobs at once: {submitters * each / elapsed:.0f} "
            f"jobs/s, {lost} jobs lost or without their line (goal 0)")
        summary.append((f"dvm {submitters} submitters x {each} jobs, lost", str(lost), "-", "-",
                        "0"))
    finally:
        local.stop(cfg)


# --- 2. a remote rank fails ----------------------------------------------------------------------


def bench_failure(cfg, fx, rounds, summary, tmp):
    say(f"\n## failure: 6 ranks, rank 3 on node2 exits 7 after 1 s, the others sleep 30 "
        f"({rounds} rounds; load {load()})")
    stamp = os.path.join(tmp, "stamp")
    program = [cfg.payload, "if-rank", "3", "sleep", "1", "if-rank", "3", "stamp", stamp,
               "if-rank", "3", "exit", "7", "sleep", "30"]
    cs = contenders(cfg, fx, fx.hosts, program)
    after = {k: [] for k in cs}
    codes = {k: collections.Counter() for k in cs}
    left = {k: [] for k in cs}
    ratio = []
    message = ""
    for _ in range(rounds):
        this = {}
        for name in random.sample(list(cs), len(cs)):
            if os.path.exists(stamp):
                os.unlink(stamp)
            err = os.path.join(tmp, f"{name}.err")
            with open(err, "wb") as e:
                proc = start(cs[name], stderr=e)
            t, rc = run_to_end(proc)
            codes[name][rc if t is not None else f"hang > {HANG_S:.0f} s"] += 1
            if t is not None and os.path.exists(stamp):
                with open(stamp) as f:
                    this[name] = t - int(f.read()) / 1e9
                after[name].append(this[name])
            if name == "pmrun" and not message:
                message = first_line(err, "rank 3")
            at_once, later = fx.leftovers(fx.hosts, CLEAN_WITHIN_S)
            if later:
                left[name].append(describe(later))
                fx.clear(fx.hosts)
        if len(this) == 2:
            ratio.append(this["pmrun"] / this["mpirun"])
    say("| launcher | failure -> exit, s (median) | min..max | exit codes | left after 5 s |")
    say("|---|---|---|---|---|")
    for name in cs:
        v = after[name]
        rng = f"{min(v):.3f}..{max(v):.3f}" if v else "-"
        say(f"| {name} | {med(v)} | {rng} | {dict(codes[name])} | "
            f"{'; '.join(left[name]) or 'nothing'} |")
    say(f"pmrun said: {message}")
    if ratio:
        say(f"pmrun / mpirun: {med(ratio, '{:.2f}x')} (goal: pmrun <= 0.3 s)")
    summary.append(("remote rank fails: failure -> exit, s", med(after["pmrun"]),
                    med(after.get("mpirun", [])), med(ratio, "{:.2f}x"), "<= 0.3 s"))
    summary.append(("  exit codes (want 7)", str(dict(codes["pmrun"])),
                    str(dict(codes.get("mpirun", {}))), "", ""))


# --- 2b. a restart in place --------------------------------------------------------------------


def bench_restart(cfg, fx, rounds, summary, tmp):
    """pmrun --max-restarts 1 across the 3 hosts: rank 3 (node2) fails once every rank runs; from
    its stamp until the last rank of incarnation 1 runs (the abort, every agent clearing it, the
    new ranks started: no ssh), against a fresh launch of the same job from pmrun's start until
    its last rank runs, in the same rounds (docs/resilience.md)."""
    say(f"\n## restart: 3 hosts x 2 ranks, rank 3 fails once; failure -> every rank running again, "
        f"beside a fresh launch -> every rank running ({rounds} rounds; load {load()})")
    failed = os.path.join(tmp, "failed")
    running = os.path.join(tmp, "running")  # every rank writes it; the last writer counts
    base = contenders(cfg, fx, fx.hosts, [])["pmrun"]
    fresh = base + [cfg.payload, "stamp", running]
    restart = base + ["--max-restarts", "1", cfg.payload, "if-restart", "0", "sleep", "0.5",
                      "if-restart", "0", "if-rank", "3", "stamp", failed, "if-restart", "0",
                      "if-rank", "3", "exit", "7", "if-restart", "0", "sleep", "30", "stamp",
                      running]
    f_times, r_times, ratio = [], [], []
    for _ in range(rounds):
        for path in (failed, running):
            if os.path.exists(path):
                os.unlink(path)
        t0 = time.monotonic_ns()
        t, rc = run_to_end(start(fresh))
        if t is None or rc != 0 or not os.path.exists(running):
            continue
        with open(running) as f:
            fresh_s = (int(f.read()) - t0) / 1e9
        os.unlink(running)
        t, rc = run_to_end(start(restart))
        if t is None or rc != 0 or not os.path.exists(running) or not os.path.exists(failed):
            continue
        with open(failed) as f:
            at = int(f.read())
        with open(running) as f:
            restart_s = (int(f.read()) - at) / 1e9
        f_times.append(fresh_s)
        r_times.append(restart_s)
        ratio.append(restart_s / fresh_s)
    say("| fresh launch -> running, s | restart -> running again, s | restart / fresh |")
    say("|---|---|---|")
    say(f"| {med(f_times)} | {med(r_times)} | {med(ratio, '{:.2f}x')} |")
    summary.append(("restart in place (3x2): failure -> running again, s", med(r_times), "",
                    med(ratio, "{:.2f}x") + " of a fresh launch", "<= 0.3x a fresh launch"))


def runs_of(found):
    """'nothing', or the first run's finding and in how many runs something was found."""
    if not found:
        return "nothing"
    return found[0] + (f" (something in {len(found)} runs)" if len(found) > 1 else "")


# --- 3. and 4. a host is killed or cut off -------------------------------------------------------


def bench_fault(cfg, rounds, summary, tmp, verb, victim, cap):
    """verb is crash or partition. A fresh fixture per run; the fault is injected 2 s after the
    launch (and not before all 6 ranks run); the time is from the fault command's start to the
    launcher's exit."""
    what = "killed" if verb == "crash" else "partitioned"
    say(f"\n## {verb}: 6 ranks sleep; {victim} {what} 2 s after the start ({rounds} rounds, "
        f"a fresh fixture each; launcher waits capped at {cap:.0f} s; load {load()})")
    program = [cfg.payload, "sleep", "60"]
    names = ["pmrun"] + (["mpirun"] if cfg.mpirun else [])
    after = {k: [] for k in names}
    capped = {k: 0 for k in names}
    codes = {k: collections.Counter() for k in names}
    left_at_exit = {k: [] for k in names}
    left_later = {k: [] for k in names}
    messages = []
    ratio = []
    for _ in range(rounds):
        this = {}
        for name in random.sample(names, len(names)):
            fx = Fixture(3)
            try:
                cs = contenders(cfg, fx, fx.hosts, program)
                err = os.path.join(tmp, f"{name}.err")
                with open(err, "wb") as e:
                    proc = start(cs[name], stderr=e)
                t_launch = time.monotonic()
                until = t_launch + 30
                while (any(fx.count_exe(h, cfg.payload) < 2 for h in fx.hosts)
                       and time.monotonic() < until and proc.poll() is None):
                    time.sleep(0.05)
                if proc.returncode is not None:
                    LIVE_PROCS.discard(proc)
                    codes[name][f"exited {proc.returncode} before the fault"] += 1
                    continue
                time.sleep(max(0.0, t_launch + 2 - time.monotonic()))
                t0 = time.monotonic()
                fault = fx.action(verb, victim)
                t = wait_exit(proc, cap)
                if reap(fault) != 0:
                    sys.exit(f"multihost_bench: hosts.sh {verb} {victim} failed")
                others = [h for h in fx.hosts if h != victim]
                if t is None:
                    capped[name] += 1
                    codes[name][f"still running after {cap:.0f} s"] += 1
                    running = {h: fx.pids(h) for h in fx.hosts}
                    left_at_exit[name].append("running at the cap: " + describe(
                        {h: p for h, p in running.items() if p}))
                    kill_group(proc)
                    reap(proc)
                else:
                    this[name] = t - t0
                    after[name].append(this[name])
                    codes[name][proc.returncode] += 1
                    # the cut host's agent has to notice the silence too: give it longer
                    watched = others if verb == "crash" else fx.hosts
                    at_once, later = fx.leftovers(watched, CLEAN_WITHIN_S * (1 + (verb != "crash")))
                    if at_once:
                        left_at_exit[name].append(describe(at_once))
                    if later:
                        left_later[name].append(describe(later))
                    if name == "pmrun" and len(messages) < 1:
                        messages.append(first_line(err, victim))
                if verb == "partition":
                    reap(fx.action("heal", victim))
            finally:
                fx.down()
        if len(this) == 2:
            ratio.append(this["pmrun"] / this["mpirun"])
    say(f"| launcher | {verb} -> exit, s (median) | min..max | exit codes | "
        f"left at the launcher's exit | left {CLEAN_WITHIN_S * (1 + (verb != 'crash')):.0f} s later |")
    say("|---|---|---|---|---|---|")
    for name in names:
        v = after[name]
        fig = med(v) if v else f"> {cap:.0f}"
        if v and capped[name]:
            fig += f" ({capped[name]} runs > {cap:.0f})"
        rng = f"{min(v):.3f}..{max(v):.3f}" if v else "-"
        say(f"| {name} | {fig} | {rng} | {dict(codes[name])} | {runs_of(left_at_exit[name])} | "
            f"{runs_of(left_later[name])} |")
    say(f"pmrun said: {messages[0] if messages else ''}")
    mp = after.get("mpirun", [])
    mp_fig = "-" if not cfg.mpirun else (med(mp) if len(mp) > rounds // 2 else f"> {cap:.0f}")
    ratio_fig = med(ratio, "{:.2f}x") if len(ratio) > rounds // 2 else (
        f"< {statistics.median(after['pmrun']) / cap:.2f}x" if after["pmrun"] and cfg.mpirun else "-")
    goal = "<= 1 s" if verb == "crash" else "<= 3 s"
    summary.append((f"host {what}: fault -> exit, s", med(after["pmrun"]), mp_fig, ratio_fig, goal))
    summary.append((f"  left on hosts {CLEAN_WITHIN_S * (1 + (verb != 'crash')):.0f} s after exit"
                    " (or running at the cap)",
                    f"{len(left_later['pmrun'])}/{rounds} runs",
                    f"{len(left_later['mpirun']) + capped['mpirun']}/{rounds} runs" if cfg.mpirun else "-",
                    "", "nothing"))


# --- 5. output -----------------------------------------------------------------------------------


def check_lines(path, ranks, per_rank):
    """(cut, lost, out of order) for a file of flood lines "r<R> l<N> xxx...\\n" (100 bytes):
    a cut line is any line that is not one whole payload line; lost counts the whole lines of
    each rank that are missing; out of order counts lines whose number does not follow the
    previous line of the same rank."""
    xs = b"x" * 100
    nxt = collections.defaultdict(int)
    good = collections.Counter()
    cut = disorder = 0
    with open(path, "rb", buffering=1 << 20) as f:
        for line in f:
            if len(line) != 100 or line[0] != 114 or line[-1] != 10:  # 'r' ... '\n'
                cut += 1
                continue
            parts = line[1:-1].split(b" ", 2)
            if (len(parts) != 3 or not parts[0].isdigit() or parts[1][:1] != b"l"
                    or not parts[1][1:].isdigit() or parts[2] != xs[:len(parts[2])]):
                cut += 1
                continue
            rank, n = int(parts[0]), int(parts[1][1:])
            if n != nxt[rank]:
                disorder += 1
            nxt[rank] = n + 1
            good[rank] += 1
    lost = sum(max(0, per_rank - good[r]) for r in range(ranks))
    return cut, lost, disorder


def bench_output(cfg, fx, rounds, summary, tmp, mib):
    hosts = fx.hosts[:2]
    size = (mib * 1024 * 1024 + 99) // 100 * 100  # whole lines
    per_rank = size // 100
    total_mb = 4 * size / 1e6
    say(f"\n## output: 2 hosts x 2 ranks x {mib} MiB of 100-byte lines (4096-byte writes) into "
        f"one file ({rounds} rounds; load {load()})")
    flood = [cfg.payload, "flood", str(size), "4096"]
    cs = contenders(cfg, fx, hosts, flood)
    names = ["floor"] + list(cs)
    speed = {k: [] for k in names}
    ratio = {k: [] for k in cs}
    bad = {k: [0, 0, 0, 0] for k in cs}  # worst cut, lost, out of order, bytes missing
    codes = {k: collections.Counter() for k in names}
    out = os.path.join(tmp, "out")
    for _ in range(rounds):
        this = {}
        for name in random.sample(names, len(names)):
            t0 = time.monotonic()
            if name == "floor":
                files, procs = [], []
                for r in range(4):
                    files.append(open(os.path.join(tmp, f"floor{r}"), "wb"))
                    procs.append(start(["ssh", "-F", fx.ssh_config, hosts[r // 2],
                                        f"OMPI_COMM_WORLD_RANK={r}"] + flood, stdout=files[-1]))
                ends = [run_to_end(p, 120) for p in procs]
                for f in files:
                    f.close()
                t = None if any(e[0] is None for e in ends) else max(e[0] for e in ends)
                rc = max(e[1] or 0 for e in ends)
                sizes = [os.path.getsize(os.path.join(tmp, f"floor{r}")) for r in range(4)]
                if sizes != [size] * 4:
                    sys.exit(f"multihost_bench: the ssh floor wrote {sizes}, not {size} each")
            else:
                with open(out, "wb") as f:
                    t, rc = run_to_end(start(cs[name], stdout=f), 120)
            codes[name][rc if t is not None else "no exit within 120 s"] += 1
            if t is None:
                continue
            this[name] = total_mb / (t - t0)
            speed[name].append(this[name])
            if name != "floor":
                found = check_lines(out, 4, per_rank) + (4 * size - os.path.getsize(out),)
                for i, v in enumerate(found):
                    bad[name][i] = max(bad[name][i], v)
        for name in cs:
            if name in this and "floor" in this:
                ratio[name].append(this[name] / this["floor"])
    say("| contender | MB/s (median) | ratio to the ssh floor | exit codes | "
        "lines cut | whole lines missing | out of order | bytes missing (worst round) |")
    say("|---|---|---|---|---|---|---|---|")
    for name in names:
        b = bad.get(name, ["-"] * 4)
        say(f"| {name} | {med(speed[name], '{:.0f}')} | "
            f"{med(ratio[name], '{:.2f}x') if name != 'floor' else '1'} | {dict(codes[name])} | "
            f"{b[0]} | {b[1]} | {b[2]} | {b[3]} |")
    summary.append(("output 2x2x%d MiB, MB/s" % mib, med(speed["pmrun"], "{:.0f}"),
                    med(speed.get("mpirun", []), "{:.0f}"),
                    "floor %s; pmrun %s, mpirun %s of it" % (
                        med(speed["floor"], "{:.0f}"), med(ratio["pmrun"], "{:.2f}x"),
                        med(ratio.get("mpirun", []), "{:.2f}x")), ">= 0.8x floor"))
    summary.append(("  lines cut / whole lines missing / bytes missing (worst round)",
                    "%d / %d / %d" % (bad["pmrun"][0], bad["pmrun"][1], bad["pmrun"][3]),
                    ("%d / %d / %d" % (bad["mpirun"][0], bad["mpirun"][1], bad["mpirun"][3]))
                    if "mpirun" in bad else "-", "", "0 / 0 / 0"))


# --- main ----------------------------------------------------------------------------------------


# --- 6. tree launch ------------------------------------------------------------------------------


def bench_tree(cfg, rounds, summary):
    shapes = {"flat": ["--launch", "flat"], "tree k=4": ["--launch", "tree", "--tree-fanout", "4"],
              "tree k=2": ["--launch", "tree", "--tree-fanout", "2"], "auto": []}
    for hosts in (8, 16):
        fx = Fixture(hosts)
        try:
            say(f"\n## tree: {hosts} hosts x 2 ranks of /bin/true ({rounds} rounds; load {load()})")
            base = contenders(cfg, fx, fx.hosts, ["/bin/true"])
            cs = {}
            for name, extra in shapes.items():
                argv = list(base["pmrun"])
                cs[name] = argv[:1] + extra + argv[1:]
            if "mpirun" in base:
                cs["mpirun"] = base["mpirun"]
            times = {k: [] for k in cs}
            ratios = {k: [] for k in cs}  # per round: to flat
            to_mpirun = {k: [] for k in cs}
            codes = {k: collections.Counter() for k in cs}
            for _ in range(rounds):
                this = {}
                for name in random.sample(list(cs), len(cs)):
                    t0 = time.monotonic()
                    t, rc = run_to_end(start(cs[name]))
                    codes[name][rc if t is not None else f"hang > {HANG_S:.0f} s"] += 1
                    if t is not None:
                        this[name] = t - t0
                        times[name].append(this[name])
                for name, t in this.items():
                    if "flat" in this:
                        ratios[name].append(t / this["flat"])
                    if "mpirun" in this:
                        to_mpirun[name].append(t / this["mpirun"])
            say("| contender | wall s (median) | / flat | / mpirun | exit codes |")
            say("|---|---|---|---|---|")
            for name in cs:
                say(f"| {name} | {med(times[name])} | {med(ratios[name], '{:.2f}x')} | "
                    f"{med(to_mpirun[name], '{:.2f}x')} | {dict(codes[name])} |")
            summary.append((f"launch {hosts}x2 tree k=4, s", med(times["tree k=4"]),
                            med(times.get("mpirun", [])), med(to_mpirun["tree k=4"], "{:.2f}x") +
                            f" (flat {med(times['flat'])} s, tree/flat "
                            f"{med(ratios['tree k=4'], '{:.2f}x')})", "-"))
        finally:
            fx.down()


def on_signal(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("pmrun")
    parser.add_argument("--payload")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="launch,failure,crash,partition,output,restart,dvm")
    parser.add_argument("--output-mib", type=int, default=64)
    parser.add_argument("--partition-cap", type=float, default=20.0)
    args = parser.parse_args()
    cfg = argparse.Namespace()
    cfg.pmrun = os.path.realpath(args.pmrun)
    cfg.payload = os.path.realpath(args.payload or os.path.join(
        os.path.dirname(cfg.pmrun), "..", "tests", "pm_payload"))
    cfg.mpirun = shutil.which("mpirun.openmpi")
    for path in (cfg.pmrun, cfg.payload, os.path.join(os.path.dirname(cfg.pmrun), "pmd")):
        if not os.access(path, os.X_OK):
            sys.exit(f"multihost_bench: {path} is missing (build pmrun, pmd and pm_payload)")
    probe = subprocess.run([HOSTS_SH, "probe"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    if probe.returncode != 0:
        sys.exit(f"multihost_bench: no fake hosts here: {probe.stdout.strip()}")
    only = args.only.split(",")
    unknown = set(only) - {"launch", "failure", "crash", "partition", "output", "tree", "restart",
                           "dvm"}
    if unknown:
        sys.exit(f"multihost_bench: unknown part(s) {','.join(sorted(unknown))}")
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    random.seed()
    say(f"# pmrun vs mpirun across fake hosts ({args.rounds} rounds; ratios within rounds)")
    say(f"# {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, load average at the start "
        f"{load()}; pmrun {cfg.pmrun}; mpirun {cfg.mpirun or 'not installed'}")
    summary = []
    started = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="pm-mhbench-files-", dir="/tmp")
    fx = None
    try:
        if {"launch", "failure", "output", "restart", "dvm"} & set(only):
            fx = Fixture(3)
        if "launch" in only:
            bench_launch(cfg, fx, 2 * args.rounds, summary)
        if "failure" in only:
            bench_failure(cfg, fx, args.rounds, summary, tmp)
        if "output" in only:
            bench_output(cfg, fx, args.rounds, summary, tmp, args.output_mib)
        if "restart" in only:
            bench_restart(cfg, fx, args.rounds, summary, tmp)
        if "dvm" in only:
            bench_dvm(cfg, fx, 2 * args.rounds, summary, tmp)
        if fx:
            fx.down()
        if "crash" in only:
            bench_fault(cfg, args.rounds, summary, tmp, "crash", "node3", HANG_S)
        if "partition" in only:
            bench_fault(cfg, args.rounds, summary, tmp, "partition", "node2", args.partition_cap)
        if "tree" in only:
            bench_tree(cfg, 2 * args.rounds, summary)
        say(f"\n## Summary (medians; {args.rounds} rounds, launch {2 * args.rounds}; "
            f"{time.monotonic() - started:.0f} s; load average at the end {load()})")
        say("| what | pmrun | mpirun | ratio pmrun/mpirun | goal |")
        say("|---|---|---|---|---|")
        for row in summary:
            say("| " + " | ".join(row) + " |")
    except KeyboardInterrupt:
        say("\nmultihost_bench: interrupted; cleaning up")
        raise SystemExit(130)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # a second ^C must not cut the cleanup short
        for proc in list(LIVE_PROCS):
            kill_group(proc)
            reap(proc)
        for f in list(LIVE_FIXTURES):
            f.down()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
