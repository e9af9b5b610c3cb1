#!/bin/bash
# Usage: scripts/compile_fail.sh CASE.cpp -- COMPILER [FLAGS...]
# A compile-fail case must compile without -DKILN_SHOULD_FAIL and must fail with it, printing the line of
# its "// expect: kiln: ..." comment. The flags get pkg-config's cflags for libhwy and eigen3 appended.
set -u
case_file=$1
shift
[[ ${1:-} == -- ]] && shift
[[ $# -ge 1 ]] || { echo "usage: $0 CASE.cpp -- COMPILER [FLAGS...]" >&2; exit 2; }
cmd=("$@")
read -r -a dep_flags <<<"$(pkg-config --cflags libhwy eigen3)"
name=$(basename "$case_file" .cpp)
expect=$(sed -n 's|^// expect: ||p' "$case_file" | head -n 1)
if [[ -z $expect ]]; then
  echo "FAIL $name: no '// expect: kiln: ...' line in $case_file"
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 1. Without KILN_SHOULD_FAIL: the valid form compiles (and assembles).
if ! "${cmd[@]}" "${dep_flags[@]}" -O0 -c "$case_file" -o "$tmp/ok.o" >"$tmp/ok.log" 2>&1; then
  echo "FAIL $name: does not compile without KILN_SHOULD_FAIL:"
  head -n 30 "$tmp/ok.log"
  exit 1
fi
# 2. With it: the compiler must reject the code, saying the expected line. Template instantiation (and so
# every static_assert) happens under -fsyntax-only too.
if "${cmd[@]}" "${dep_flags[@]}" -DKILN_SHOULD_FAIL -fsyntax-only "$case_file" >"$tmp/fail.log" 2>&1; then
  echo "FAIL $name: compiles with KILN_SHOULD_FAIL, expected an error: $expect"
  exit 1
fi
if ! grep -qF -- "$expect" "$tmp/fail.log"; then
  echo "FAIL $name: the error does not say: $expect"
  echo "--- compiler output (first errors):"
  grep -m 10 'error' "$tmp/fail.log"
  exit 1
fi
# One readable error, not a cascade: the check that fails stops the expression from being built.
errors=$(grep -c 'error:' "$tmp/fail.log")
if [[ $errors -ne 1 ]]; then
  echo "FAIL $name: says \"$expect\" but prints $errors error lines, expected 1:"
  grep -m 10 'error:' "$tmp/fail.log"
  exit 1
fi
echo "PASS $name: compiles without KILN_SHOULD_FAIL; with it fails with \"$expect\" and nothing else"
exit 0
