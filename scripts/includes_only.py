#!/usr/bin/env python3
"""Checks that including kiln's headers compiles no function of kiln (docs/design.md, "Headers compile only what a
program uses"): a translation unit that includes every public header and uses nothing must define no function whose
name mentions kiln, header-only and with KILN_SEPARATE_COMPILATION. A kernel compiled there would be compiled again
in every file of every program that includes the header (an inline function that runs a kernel, or a module whose
vtable is emitted in every file because its key function is a member declared without `inline`).

Usage: scripts/includes_only.py TU.cpp -- COMPILER [FLAGS...]

pkg-config's cflags for libhwy and eigen3 are appended to FLAGS; the TU is compiled at -O0 (what is emitted there
is what every build compiles) and its defined functions read with nm.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compile_time import compile_once, defined_functions, dependency_flags  # noqa: E402

SHOWN = 15


def kiln_functions(obj):
    """(size, demangled name) of the functions obj defines whose names mention kiln, the largest first."""
    return sorted(((size, name) for size, name in defined_functions(obj, demangle=True) if "kiln" in name),
                  reverse=True)


def main():
    args = sys.argv[1:]
    if len(args) < 3 or args[1] != "--":
        raise SystemExit(__doc__)
    tu, compiler = args[0], args[2:]
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for mode, defines in (("header-only", []), ("KILN_SEPARATE_COMPILATION", ["-DKILN_SEPARATE_COMPILATION"])):
            obj = os.path.join(tmp, "tu.o")
            cmd = compiler + dependency_flags() + defines + ["-O0", "-c", tu, "-o", obj]
            proc = compile_once(cmd)[0]
            if proc.returncode != 0:
                print(f"FAIL {os.path.basename(tu)} ({mode}): does not compile:\n{proc.stdout[:4000]}")
                failed += 1
                continue
            names = kiln_functions(obj)
            if names:
                failed += 1
                print(f"FAIL {os.path.basename(tu)} ({mode}): {len(names)} functions of kiln compiled by including "
                      f"the headers; the largest:")
                for size, name in names[:SHOWN]:
                    print(f"    {size:7d} bytes  {name[:300]}")
            else:
                print(f"PASS {os.path.basename(tu)} ({mode}): including every public header compiles no function "
                      f"of kiln")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
