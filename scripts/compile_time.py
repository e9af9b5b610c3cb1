#!/usr/bin/env python3
"""Compile-time budget check: compiles one translation unit at -O2 and compares the compiler's CPU time
(user + sys, which machine load from other processes barely changes; on an idle machine it is the wall
time) with the limit recorded for it in docs/performance.md, section "Compile-time budget".

Usage: scripts/compile_time.py LIMITS.md TU.cpp -- COMPILER [FLAGS...]

pkg-config's cflags for libhwy and eigen3 are appended to FLAGS. The limits were set on one machine; CI's may be
slower or faster, so each limit is scaled by the time of a yardstick translation unit that includes nothing of
kiln (reference.cpp beside TU.cpp, the fastest of two compiles; with KILN_REFERENCE_CACHE=FILE, a measurement
saved there in the last 15 minutes with the same compiler and flags is reused) over its time recorded in the
table. When the first try is over the limit (by less than half of it) it tries twice more and keeps the fastest,
so one burst of load does not fail the check; a real regression fails all three.
"""
import json
import os
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time


def read_limit(doc, tu_name):
    """The last number of the table row naming tu_name in the "Compile-time budget" section."""
    in_section = False
    with open(doc, encoding="utf-8") as f:
        for line in f:
            if line.startswith("## "):
                in_section = line.strip().lower().startswith("## compile-time budget")
                continue
            if in_section and line.startswith("|") and tu_name in line:
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                m = re.match(r"([0-9.]+)", cells[-1])
                if m:
                    return float(m.group(1))
    raise SystemExit(f"FAIL {tu_name}: no limit for it in the Compile-time budget table of {doc}")


def dependency_flags():
    """pkg-config's cflags for libhwy and eigen3, appended to every compile command."""
    return shlex.split(subprocess.run(["pkg-config", "--cflags", "libhwy", "eigen3"], check=True,
                                      stdout=subprocess.PIPE, text=True).stdout)


def compile_once(cmd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc, cpu, wall, after.ru_maxrss / 1024.0


# The checks of one `meson test` run share one measurement of reference.cpp (about 9 s of compiles each): meson
# sets KILN_REFERENCE_CACHE to a file in the build directory, and a measurement younger than this is reused.
REFERENCE_CACHE_SECONDS = 900


def machine_scale(doc, tu, compiler, dep_flags, tmp):
    """(scale, seconds): reference.cpp's CPU time here over the time the table records for it."""
    recorded = read_limit(doc, "reference.cpp")
    ref = os.path.join(os.path.dirname(tu), "reference.cpp")
    cmd = compiler + dep_flags + ["-O2", "-c", ref, "-o", os.path.join(tmp, "reference.o")]
    cache = os.environ.get("KILN_REFERENCE_CACHE")
    key = shlex.join(compiler + dep_flags)
    if cache:
        try:
            with open(cache, encoding="utf-8") as f:
                saved = json.load(f)
            if saved["command"] == key and 0 <= time.time() - saved["time"] < REFERENCE_CACHE_SECONDS:
                return saved["seconds"] / recorded, saved["seconds"]
        except (OSError, ValueError, KeyError):
            pass
    best = None
    for _ in range(2):
        proc, cpu, _, _ = compile_once(cmd)
        if proc.returncode != 0:
            raise SystemExit(f"FAIL reference.cpp does not compile:\n{proc.stdout[:4000]}")
        best = cpu if best is None else min(best, cpu)
    if cache:
        with open(cache + ".tmp", "w", encoding="utf-8") as f:
            json.dump({"command": key, "time": time.time(), "seconds": best}, f)
        os.replace(cache + ".tmp", cache)
    return best / recorded, best


def describe_scale(scale, seconds):
    return f"x {scale:.2f}: reference.cpp took {seconds:.2f} s CPU here"


def defined_functions(obj, demangle=False):
    """(size in bytes, name) of each function an object file defines (nm's symbol types T, t, W and w)."""
    cmd = ["nm", "--defined-only", "-S"] + (["-C"] if demangle else []) + [obj]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    found = []
    for line in out.splitlines():
        fields = line.split(" ", 3)  # address, size, type, name (a demangled name has spaces)
        if len(fields) == 4 and fields[2] in "TtWw":
            found.append((int(fields[1], 16), fields[3]))
    return found


def fastest_compile(cmd, limit, name):
    """(CPU s, wall s, peak MB, tries) of cmd's fastest compile: tried again while over limit, three tries at most,
    unless so far over it (1.5 times) that it is no burst of load; None after printing why cmd does not compile."""
    best = None
    for attempt in range(3):
        proc, cpu, wall, rss = compile_once(cmd)
        if proc.returncode != 0:
            print(f"FAIL {name}: does not compile:\n{proc.stdout[:4000]}")
            return None
        if best is None or cpu < best[0]:
            best = (cpu, wall, rss)
        if best[0] <= limit or best[0] > 1.5 * limit:
            break
    return best + (attempt + 1,)


def main():
    args = sys.argv[1:]
    if len(args) < 4 or args[2] != "--":
        raise SystemExit(__doc__)
    doc, tu, compiler = args[0], args[1], args[3:]
    name = os.path.basename(tu)
    with tempfile.TemporaryDirectory() as tmp:
        scale, ref_seconds = machine_scale(doc, tu, compiler, dependency_flags(), tmp)
        table_limit = read_limit(doc, name)
        limit = table_limit * scale
        cmd = compiler + dependency_flags() + ["-O2", "-c", tu, "-o", os.path.join(tmp, "tu.o")]
        best = fastest_compile(cmd, limit, name)
        if best is None:
            return 1
        cpu, wall, rss, tries = best
        verdict = "PASS" if cpu <= limit else "FAIL"
        print(f"{verdict} {name}: {cpu:.2f} s CPU ({wall:.2f} s wall, peak {rss:.0f} MB, "
              f"{tries} tries) against a limit of {limit:.2f} s at -O2 ({table_limit:g} s "
              f"{describe_scale(scale, ref_seconds)})")
        print(f"  command: {shlex.join(cmd)}")
        return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
