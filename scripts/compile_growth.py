#!/usr/bin/env python3
"""Compile-time growth check: compiles one translation unit at several depths (-DKILN_CHAIN_DEPTH=d) and
checks that the compiler's CPU time grows at most linearly with the depth, and that the build at depth
BUDGET_DEPTH at -O2 stays under the limit recorded for the file in docs/performance.md ("Compile-time budget").

Usage: scripts/compile_growth.py LIMITS.md TU.cpp D1,D2,D3 BUDGET_DEPTH -- COMPILER [FLAGS...]

Linear: at -O0, the time added from D2 to D3 is at most 1.5 times what linear growth from the D1-to-D2 step
predicts, plus 0.5 s. A quadratic derivation (DESIGN.md's 12.3 s at depth 20) adds 2.5 times over equal steps
from depth 10 (10, 70, 130). The growth is judged at -O0 because it measures what kiln asks of the compiler
(the instantiations and the code they emit): at -O2, GCC's inliner has size thresholds that move with -march,
and on one CI machine the 40-to-70 step took 1.7 to 2.1 times the 10-to-40 step in each of three rounds while
this machine's steps were equal and -O0 grew linearly on both. The budget (the BUDGET_DEPTH build at -O2 under
its limit) holds the optimized build.

Each measurement is retried while it fails (three rounds at most) and each build's fastest try counts, so
bursts of load on a shared machine do not fail it. The limit is scaled to the machine as in compile_time.py
(reference.cpp).
"""
import os
import shlex
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compile_time import compile_once, dependency_flags, describe_scale, machine_scale, read_limit  # noqa: E402

ROUNDS = 3


def linear_prediction(depths, times):
    """The time linear growth from the first step predicts for the second."""
    (d1, d2, d3), (t1, t2, _) = depths, times
    return (t2 - t1) * (d3 - d2) / (d2 - d1)


def grows_linearly(depths, times):
    return times[2] - times[1] <= 1.5 * linear_prediction(depths, times) + 0.5  # 0.5 s: noise of small steps


def fastest_times(builds, passes, name):
    """Compiles every (label, command) of builds once per round, until passes(times) or ROUNDS rounds; returns
    each build's fastest CPU time, or None after printing why a build does not compile."""
    times = [None] * len(builds)
    for attempt in range(ROUNDS):
        for i, (label, cmd) in enumerate(builds):
            proc, cpu, _, _ = compile_once(cmd)
            if proc.returncode != 0:
                print(f"FAIL {name} {label}: does not compile:\n{proc.stdout[:4000]}")
                return None
            times[i] = cpu if times[i] is None else min(times[i], cpu)
            print(f"  {label}: {cpu:.2f} s CPU (try {attempt + 1})")
        if passes(times):
            break
    return times


def main():
    args = sys.argv[1:]
    if len(args) < 6 or args[4] != "--":
        raise SystemExit(__doc__)
    doc, tu, compiler = args[0], args[1], args[5:]
    depths, budget_depth = [int(d) for d in args[2].split(",")], int(args[3])
    if len(depths) != 3:
        raise SystemExit(f"compile_growth.py: expected three depths, got {args[2]!r}")
    name = os.path.basename(tu)
    dep_flags = dependency_flags()
    with tempfile.TemporaryDirectory() as tmp:
        def build(opt, depth):
            return (f"-{opt} depth {depth}",
                    compiler + dep_flags + [f"-{opt}", f"-DKILN_CHAIN_DEPTH={depth}", "-c", tu, "-o",
                                            os.path.join(tmp, "tu.o")])

        scale, ref_seconds = machine_scale(doc, tu, compiler, dep_flags, tmp)
        table_limit = read_limit(doc, name)
        limit = table_limit * scale
        growth = fastest_times([build("O0", d) for d in depths], lambda t: grows_linearly(depths, t), name)
        if growth is None:
            return 1
        budget_build = build("O2", budget_depth)
        budget = fastest_times([budget_build], lambda t: t[0] <= limit, name)
        if budget is None:
            return 1
    linear, under_limit = grows_linearly(depths, growth), budget[0] <= limit
    print(f"{'PASS' if linear else 'FAIL'} {name} growth at -O0: {' / '.join(f'{t:.2f}' for t in growth)} s CPU at "
          f"depths {', '.join(map(str, depths))}; {depths[1]}->{depths[2]} added {growth[2] - growth[1]:.2f} s where "
          f"linear growth predicts {linear_prediction(depths, growth):.2f} s")
    print(f"{'PASS' if under_limit else 'FAIL'} {name}: depth {budget_depth} at -O2 took {budget[0]:.2f} s CPU (limit "
          f"{limit:.2f} s: {table_limit:g} s {describe_scale(scale, ref_seconds)})")
    print(f"  command: {shlex.join(budget_build[1])}")
    return 0 if linear and under_limit else 1


if __name__ == "__main__":
    sys.exit(main())
