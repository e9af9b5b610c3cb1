#!/usr/bin/env python3
"""Counts the results of one `meson test` run for scripts/test.sh.

Usage: scripts/ci_count.py BUILDDIR/meson-logs/testlog.json [EXPECTED_SIMD_TARGET]

A test whose output has doctest's summary line counts its test cases (passed, failed); a test that failed
after its summary (a sanitizer report at exit) adds one failure. Any other test counts as one check.
With EXPECTED_SIMD_TARGET, each doctest run must say "kiln tests: SIMD target <it>" (tests/main.cpp),
or it adds one failure. Prints one line per doctest run and, last, "<passed> <failed>".
"""
import json
import re
import sys

SUMMARY = re.compile(r"\[doctest\] test cases:\s*(\d+)\s*\|\s*(\d+) passed\s*\|\s*(\d+) failed")
TARGET = re.compile(r"kiln tests: SIMD target (\S+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def main():
    path = sys.argv[1]
    want_target = sys.argv[2] if len(sys.argv) > 2 else None
    passed = failed = 0
    try:
        lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    except OSError:
        lines = []
    if not lines:
        print(f"  no test results in {path}")
        print("0 1")
        return
    for line in lines:
        t = json.loads(line)
        out = ANSI.sub("", (t.get("stdout") or "") + (t.get("stderr") or ""))
        ok = t.get("result") == "OK"
        m = SUMMARY.findall(out)
        if m:
            p, f = int(m[-1][1]), int(m[-1][2])
            extra = 0 if ok or f > 0 else 1
            note = ""
            if want_target:
                tm = TARGET.search(out)
                if not tm or tm.group(1) != want_target:
                    extra += 1
                    note = f"; SIMD target {tm.group(1) if tm else '?'} but expected {want_target}"
                else:
                    note = f"; SIMD target {tm.group(1)}"
            passed += p
            failed += f + extra
            print(f"  {t['name']}: {p} test cases passed, {f} failed ({t.get('result')}{note})")
        else:
            passed += ok
            failed += not ok
    print(f"{passed} {failed}")


if __name__ == "__main__":
    main()
