#!/usr/bin/python3
"""Writes pmrun.order, pmd.order and libpm-pmix.so.order beside this script: the functions pmrun,
pmd and pmd-helper's PMIx module run in ordinary local jobs, which the linker (lld's
--symbol-ordering-file, pm_order_code in libpm/CMakeLists.txt) puts next to each other at the
start of the code.

Why: the kernel maps a program's code into memory a folio or a 64 KiB window at a time around
each page the program first runs, so a resident set counts every window that holds any code that
ran. In the default order that code (about 0.6 MB of pmrun's 3.4 MB) lies in nearly every
window and the whole text ends up resident; grouped, only its own pages are (docs/benchmarks.md,
issue 21). A stale list costs memory, never correctness: functions it does not name keep the
default order, after the listed ones.

How: runs the jobs below under valgrind's callgrind (pmrun and pmd, not the ranks), takes every
instruction address that ran in each binary, maps the addresses to symbols with nm, and writes
the names sorted (sorted, so that a refresh shows as a small diff). glibc picks a string and
memory function's variant (sse2, avx2, evex...) by CPU at start, and valgrind's CPU is not the
host's, so each variant of a family that ran is listed. And the child of a spawn runs in the
spawner's memory (clone with CLONE_VM) until it execs, where callgrind does not see it: the
child's function and what it calls (objdump) are listed too.

Usage: libpm/tools/order/code_order.py BUILD_DIR   (after building pmrun, pmd, pm_pmix_module
and, for the PMIx job, tests/mpi/pmix_touch; needs valgrind. Rerun when their code changes much,
rebuild, and commit the lists)
"""
import bisect
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
# glibc's multi-architecture variants: __memmove_avx512_unaligned_erms, __strlen_evex, ...
VARIANT = re.compile(r"^(__\w+?)_(sse2|ssse3|sse4_1|sse4_2|avx2|avx|evex|avx512|erms)(_|$)")
# What a spawned child runs before its exec (sys/spawner.cpp): roots of a call closure.
CHILD = re.compile(r"child_main|^__?clone3?$")


def jobs(build):
    sleep = os.path.realpath(shutil.which("sleep"))
    sh = os.path.realpath("/bin/sh")
    out = [
        # what bench_memory measures, and the plain launch of bench_launch
        (["--no-pmix", "-np", "128", sleep, "2"], [sleep]),
        (["-np", "8", "/bin/true"], ["/bin/true", os.path.realpath("/bin/true")]),
        # output forwarding, tagged and plain, and a rank that fails
        (["-np", "4", "--tag-output", sh, "-c", "seq 1 2000; echo err >&2"], [sh]),
        (["-np", "2", sh, "-c", "seq 1 2000; exit 3"], [sh]),
    ]
    touch = os.path.join(build, "tests/mpi/pmix_touch")
    if os.path.exists(touch):
        out.append((["-np", "8", os.path.realpath(touch), "1"], [os.path.realpath(touch)]))
    else:
        print(f"code_order: {touch} is missing: no PMIx job", file=sys.stderr)
    return out


def executed(cg_file, binary):
    """Instruction addresses of `binary` that ran, from a callgrind file."""
    addrs, names, ob = set(), {}, None
    with open(cg_file) as f:
        for line in f:
            if line.startswith(("ob=", "cob=")):
                m = re.match(r"c?ob=\((\d+)\)(?: (.*))?", line.strip())
                if m.group(2):
                    names[m.group(1)] = m.group(2)
                if line.startswith("ob="):
                    ob = names.get(m.group(1))
            elif line.startswith("0x") and ob is not None and os.path.realpath(ob) == binary:
                addrs.add(int(line.split()[0], 16))
    return addrs


def symbols(binary):
    out = []
    nm = subprocess.run(["nm", "-S", "-n", binary], capture_output=True, text=True, check=True)
    for line in nm.stdout.splitlines():
        p = line.split()
        if len(p) == 4 and p[2] in "tTwWiI":
            out.append((int(p[0], 16), int(p[1], 16), p[3]))
    return out


def callees(binary, syms, roots, depth=4):
    """Names of roots and of the functions they call, directly or through up to depth calls."""
    by_addr = {}
    for s in syms:
        by_addr.setdefault(s[0], []).append(s)
    out, todo = set(), [(s, 0) for s in roots]
    while todo:
        (start, size, name), level = todo.pop()
        if name in out:
            continue
        out.add(name)
        if level == depth or size == 0:
            continue
        asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", f"--start-address={start}",
                              f"--stop-address={start + size}", binary],
                             capture_output=True, text=True, check=True).stdout
        for m in re.finditer(r"\s(?:call|jmp)\s+([0-9a-f]+) <", asm):
            for callee in by_addr.get(int(m.group(1), 16), []):
                todo.append((callee, level + 1))
    return out


def order(binary, addrs):
    syms = symbols(binary)
    starts = [s[0] for s in syms]
    names = set()
    for a in addrs:
        i = bisect.bisect_right(starts, a) - 1
        j = i
        while j >= 0 and syms[j][0] == syms[i][0]:  # aliases share the address
            if a < syms[j][0] + max(syms[j][1], 1):
                names.add(syms[j][2])
            j -= 1
    names |= callees(binary, syms, [s for s in syms if CHILD.search(s[2])])
    families = {m.group(1) for n in names if (m := VARIANT.match(n))}
    names |= {s[2] for s in syms if (m := VARIANT.match(s[2])) and m.group(1) in families}
    return sorted(names)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    build = os.path.abspath(sys.argv[1])
    pmrun = os.path.realpath(os.path.join(build, "bin/pmrun"))
    pmd = os.path.realpath(os.path.join(build, "bin/pmd"))
    module = os.path.realpath(os.path.join(build, "lib/libpm-pmix.so"))
    seen = {pmrun: set(), pmd: set(), module: set()}
    with tempfile.TemporaryDirectory() as tmp:
        for n, (args, ranks) in enumerate(jobs(build)):
            skip = ",".join(ranks + ["*/seq", "*/sleep"])
            cmd = ["valgrind", "--tool=callgrind", "--dump-instr=yes", "--compress-pos=no",
                   "--compress-strings=yes", "--trace-children=yes",
                   f"--trace-children-skip={skip}", f"--callgrind-out-file={tmp}/{n}.%p",
                   pmrun, "--allow-run-as-root"] + args
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for name in os.listdir(tmp):
            for binary in seen:
                seen[binary] |= executed(os.path.join(tmp, name), binary)
    for binary, addrs in seen.items():
        if not addrs:
            # The PMIx module runs in pmd-helper, which ends with _Exit beside PMIx's threads:
            # callgrind writes nothing for it then. Its list stays as it was.
            print(f"code_order: nothing of {binary} ran: its list is kept", file=sys.stderr)
            continue
        names = order(binary, addrs)
        target = os.path.join(HERE, os.path.basename(binary) + ".order")
        with open(target, "w") as f:
            f.write("\n".join(names) + "\n")
        print(f"{target}: {len(names)} symbols")


if __name__ == "__main__":
    main()
