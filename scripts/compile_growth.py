#!/usr/bin/env python3
"""Compile-time growth check: compiles one translation unit at several depths (-DKILN_CHAIN_DEPTH=d, at
-O2) and checks that the compiler's CPU time grows at most linearly with the depth, and that the deepest
build stays under the limit recorded for the file in docs/performance.md ("Compile-time budget").

Usage: scripts/compile_growth.py LIMITS.md TU.cpp D1,D2,D3 -- COMPILER [FLAGS...]

Linear: the time added from D2 to D3 is at most 1.5 times what linear growth from the D1-to-D2 step
predicts, plus 0.5 s. Equal steps (10, 40, 70) keep the prediction as noisy as one step: with 10, 20, 40 the
10-to-20 step (0.4 to 1.1 s measured) was doubled together with its noise, and one CI run failed on a build
that grows linearly. A quadratic derivation (DESIGN.md's 12.3 s at depth 20) would add 2.2 times over equal
steps from depth 10. Each depth is compiled once; while the check fails, every depth is compiled again (three
rounds at most) and each depth's fastest try counts, so bursts of load on a shared machine do not fail it.
The limit is scaled to the machine as in compile_time.py (reference.cpp).
"""
import os
import shlex
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compile_time import compile_once, dependency_flags, describe_scale, machine_scale, read_limit  # noqa: E402


def check(depths, times, limit):
    """(passed, the time linear growth predicts from the middle to the deepest build)."""
    (d1, d2, d3), (t1, t2, t3) = depths, times
    predicted = (t2 - t1) * (d3 - d2) / (d2 - d1)
    linear = t3 - t2 <= 1.5 * predicted + 0.5  # 0.5 s: noise when the steps are small
    return linear and t3 <= limit, predicted


def main():
    args = sys.argv[1:]
    if len(args) < 5 or args[3] != "--":
        raise SystemExit(__doc__)
    doc, tu, depths, compiler = args[0], args[1], [int(d) for d in args[2].split(",")], args[4:]
    name = os.path.basename(tu)
    dep_flags = dependency_flags()
    with tempfile.TemporaryDirectory() as tmp:
        scale, ref_seconds = machine_scale(doc, tu, compiler, dep_flags, tmp)
        table_limit = read_limit(doc, name)
        limit = table_limit * scale
        times = [None] * len(depths)
        for attempt in range(3):
            for i, d in enumerate(depths):
                cmd = compiler + dep_flags + ["-O2", f"-DKILN_CHAIN_DEPTH={d}", "-c", tu, "-o", os.path.join(tmp, "tu.o")]
                proc, cpu, wall, rss = compile_once(cmd)
                if proc.returncode != 0:
                    print(f"FAIL {name} at depth {d}: does not compile:\n{proc.stdout[:4000]}")
                    return 1
                times[i] = cpu if times[i] is None else min(times[i], cpu)
                print(f"  depth {d}: {cpu:.2f} s CPU (try {attempt + 1})")
            if check(depths, times, limit)[0]:
                break
    ok, predicted = check(depths, times, limit)
    (d1, d2, d3), (t1, t2, t3) = depths, times
    print(f"{'PASS' if ok else 'FAIL'} {name}: depth {d3} took {t3:.2f} s CPU (limit {limit:.2f} s: {table_limit:g} s "
          f"{describe_scale(scale, ref_seconds)}); {d2}->{d3} added {t3 - t2:.2f} s where linear growth predicts "
          f"{predicted:.2f} s")
    print(f"  command: {shlex.join(cmd)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
