#!/usr/bin/env python3
"""Compile-time growth check: compiles one translation unit at three depths (-DKILN_CHAIN_DEPTH=d) at -O0 and
checks that what it asks of the compiler grows at most linearly with the depth: the number of functions it
instantiates and the bytes of code they emit (read from the object with nm). Then it checks that the build at
BUDGET_DEPTH at -O2 stays under the limit recorded for the file in docs/performance.md ("Compile-time budget").

Usage: scripts/compile_growth.py LIMITS.md TU.cpp D1,D2,D3 BUDGET_DEPTH -- COMPILER [FLAGS...]
       scripts/compile_growth.py --expect-superlinear TU.cpp D1,D2,D3 -- COMPILER [FLAGS...]

Linear: the D2-to-D3 step is at most 1.1 times what the D1-to-D2 step predicts. Over depths 10, 70 and 130 a
tree whose level k instantiates k functions makes it 2.5 times; the second form compiles such a control
(tests/compile_time/quadratic_control.cpp) and passes only when this check calls it superlinear. What the counts
cannot see is a derivation that stays linear in functions but calls them quadratically often (recomputing
subtrees, as DESIGN.md's placeholder binding did): that shows in run time and in -O2 code, where the calls are
inlined, and the -O2 budget at BUDGET_DEPTH is what bounds it here.

Why counts, not seconds: the compiler's time also carries a term no expression-template design removes. A
depth-d node's type spells its whole subtree, so each function's mangled name grows with d and the names'
bytes with d^2 (backward_chain.cpp: 0.5 / 4.1 / 12.0 / 24.1 MB of symbol names at depths 10 / 70 / 130 / 190 while
functions and code grow by equal steps). How much time that costs depends on the machine: the -O0 times were
linear to depth 130 on one machine and their second step twice the first on CI's (5.74 / 8.74 / 14.99 s).
The times are printed, and the -O2 budget holds the build's time.
"""
import os
import shlex
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compile_time import (compile_once, defined_functions, dependency_flags, describe_scale,  # noqa: E402
                          fastest_compile, machine_scale, read_limit)


def object_profile(obj):
    """(functions, code bytes, mangled-name bytes) of the functions an object file defines."""
    functions = defined_functions(obj)
    return len(functions), sum(size for size, _ in functions), sum(len(name) for _, name in functions)


def linear_prediction(depths, values):
    """The D2-to-D3 step that linear growth from the D1-to-D2 step predicts."""
    (d1, d2, d3), (v1, v2, _) = depths, values
    return (v2 - v1) * (d3 - d2) / (d2 - d1)


def growth_ratio(depths, values):
    return (values[2] - values[1]) / linear_prediction(depths, values)


def grows_linearly(depths, values):
    return growth_ratio(depths, values) <= 1.1


def measure_growth(tu, depths, compiler, tmp):
    """Compiles tu at -O0 at each depth; returns [(functions, code bytes, name bytes, CPU s)] or None."""
    name, rows = os.path.basename(tu), []
    for depth in depths:
        obj = os.path.join(tmp, f"depth{depth}.o")
        proc, cpu, _, _ = compile_once(compiler + ["-O0", f"-DKILN_CHAIN_DEPTH={depth}", "-c", tu, "-o", obj])
        if proc.returncode != 0:
            print(f"FAIL {name} at depth {depth}: does not compile:\n{proc.stdout[:4000]}")
            return None
        rows.append(object_profile(obj) + (cpu,))
        functions, code, names, _ = rows[-1]
        print(f"  -O0 depth {depth}: {functions} functions, {code} bytes of code, {names / 1e6:.1f} MB of "
              f"mangled names, {cpu:.2f} s CPU")
    return rows


def judge_growth(name, depths, rows, expect_superlinear):
    """Prints one line per measure; returns whether functions and code grow at most linearly, or None when they do
    not grow from D1 to D2 (the TU ignores KILN_CHAIN_DEPTH, and no verdict means anything)."""
    functions, code = ([row[column] for row in rows] for column in (0, 1))
    if linear_prediction(depths, functions) <= 0 or linear_prediction(depths, code) <= 0:
        print(f"FAIL {name}: functions {' / '.join(map(str, functions))} and bytes of code "
              f"{' / '.join(map(str, code))} at depths {', '.join(map(str, depths))} do not grow with the depth "
              f"(does it use KILN_CHAIN_DEPTH?)")
        return None
    linear = True
    for values, label in ((functions, "functions"), (code, "bytes of code")):
        ok = grows_linearly(depths, values)
        linear = linear and ok
        verdict = ("linear" if ok else "superlinear") if expect_superlinear else ("PASS" if ok else "FAIL")
        print(f"{verdict} {name} at -O0: {label} {' / '.join(map(str, values))} at depths "
              f"{', '.join(map(str, depths))}; the {depths[1]}->{depths[2]} step is "
              f"{growth_ratio(depths, values):.2f} times the linear prediction (limit 1.1)")
    times = [row[3] for row in rows]
    print(f"  (not judged) CPU time {' / '.join(f'{t:.2f}' for t in times)} s: the {depths[1]}->{depths[2]} step "
          f"took {times[2] - times[1]:.2f} s, linear growth from the first step predicts "
          f"{linear_prediction(depths, times):.2f} s")
    return linear


def main():
    args = sys.argv[1:]
    expect_superlinear = args[:1] == ["--expect-superlinear"]
    if expect_superlinear:
        if len(args) < 5 or args[3] != "--":
            raise SystemExit(__doc__)
        doc, tu, depths_arg, budget_depth, compiler = None, args[1], args[2], None, args[4:]
    else:
        if len(args) < 6 or args[4] != "--":
            raise SystemExit(__doc__)
        doc, tu, depths_arg, budget_depth, compiler = args[0], args[1], args[2], int(args[3]), args[5:]
    depths = [int(d) for d in depths_arg.split(",")]
    if len(depths) != 3 or not depths[0] < depths[1] < depths[2]:
        raise SystemExit(f"compile_growth.py: expected three increasing depths, got {depths_arg!r}")
    if shutil.which("nm") is None:
        print("FAIL compile_growth.py: nm (binutils) is not installed; it counts the functions of each build")
        return 1
    name = os.path.basename(tu)
    dep_flags = dependency_flags()
    with tempfile.TemporaryDirectory() as tmp:
        rows = measure_growth(tu, depths, compiler + dep_flags, tmp)
        if rows is None:
            return 1
        linear = judge_growth(name, depths, rows, expect_superlinear)
        if linear is None:
            return 1
        if expect_superlinear:
            print(f"{'FAIL' if linear else 'PASS'} the growth check {'missed' if linear else 'caught'} the "
                  f"superlinear control {name}")
            return 1 if linear else 0
        scale, ref_seconds = machine_scale(doc, tu, compiler, dep_flags, tmp)
        table_limit = read_limit(doc, name)
        limit = table_limit * scale
        budget_cmd = compiler + dep_flags + ["-O2", f"-DKILN_CHAIN_DEPTH={budget_depth}", "-c", tu, "-o",
                                             os.path.join(tmp, "budget.o")]
        best = fastest_compile(budget_cmd, limit, name)
        if best is None:
            return 1
    budget, _, _, tries = best
    under_limit = budget <= limit
    print(f"{'PASS' if under_limit else 'FAIL'} {name}: depth {budget_depth} at -O2 took {budget:.2f} s CPU, {tries} "
          f"tries (limit {limit:.2f} s: {table_limit:g} s {describe_scale(scale, ref_seconds)})")
    print(f"  command: {shlex.join(budget_cmd)}")
    print(f"{'PASS' if linear and under_limit else 'FAIL'} {name}: growth {'linear' if linear else 'superlinear'}, "
          f"-O2 budget {'met' if under_limit else 'exceeded'}")
    return 0 if linear and under_limit else 1


if __name__ == "__main__":
    sys.exit(main())
