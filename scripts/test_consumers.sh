#!/bin/bash
# Installs kiln into a temporary prefix (meson install) and builds tests/consumers/consumer.cpp three ways:
#   (a) a Meson project with kiln as a subproject (subprojects/kiln -> this tree, dependency('kiln')),
#   (b) a CMake project with find_package(kiln) and kiln::kiln, against the installed prefix after it was
#       moved elsewhere (the CMake package is relocatable),
#   (c) a Makefile with pkg-config --cflags --libs kiln.
# Each program prints its sum (checked against a plain loop) and kiln::simd_target(), which must be what
# the consumer's own flags give with Highway 1.0.3 (README.md): x86-64-v4 -mpclmul -maes -> AVX3,
# x86-64-v3 -mpclmul -maes -> AVX2, no -march -> SCALAR.
# Prints PASS/FAIL per check and ends with "consumers: N passed, N failed"; exits non-zero on a failure.
# Usage: bash scripts/test_consumers.sh [WORKDIR]   (default: a new temporary directory, removed after)
set -u
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ $# -ge 1 ]]; then
  work=$1
  rm -rf "$work" && mkdir -p "$work"
else
  work=$(mktemp -d /tmp/kiln-consumers.XXXXXX)
  trap 'rm -rf "$work"' EXIT
fi
work=$(cd "$work" && pwd)
passed=0
failed=0
pass() { echo "PASS $*"; passed=$((passed + 1)); }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
show_log() { sed -n '1,40p' "$1" | sed 's/^/    /'; }

cpu_has() { grep -qw "$1" /proc/cpuinfo; }
# The flags each consumer uses and the target they must give on this CPU.
if cpu_has avx512f && cpu_has avx512vl && cpu_has avx512dq && cpu_has avx512bw; then
  meson_flags="-march=x86-64-v4 -mpclmul -maes"; meson_target=AVX3
elif cpu_has avx2; then
  meson_flags="-march=x86-64-v3 -mpclmul -maes"; meson_target=AVX2
else
  meson_flags=""; meson_target=SCALAR
fi
if cpu_has avx2 && cpu_has fma && cpu_has bmi2; then
  cmake_flags="-march=x86-64-v3 -mpclmul -maes"; cmake_target=AVX2
else
  cmake_flags="-mssse3"; cmake_target=SSSE3
fi
make_flags=""; make_target=SCALAR

# check NAME LOG TARGET PROGRAM: runs PROGRAM, checks its sum line and its simd_target line.
check_run() {
  local name=$1 log=$2 target=$3 prog=$4
  if ! "$prog" >"$log.run" 2>&1; then
    fail "$name: the program failed:"; show_log "$log.run"; return
  fi
  local got
  got=$(sed -n 's/^simd_target //p' "$log.run")
  if ! grep -q '^kiln .* consumer: sum' "$log.run"; then
    fail "$name: unexpected output:"; show_log "$log.run"
  elif [[ $got != "$target" ]]; then
    fail "$name: simd_target is '$got', expected '$target'"
  else
    pass "$name: $(head -n 1 "$log.run"); simd_target $got"
  fi
}

# ---- install ---------------------------------------------------------------------------------------
prefix=$work/prefix
if meson setup "$work/build-install" "$root" --prefix="$prefix" -Dtests=disabled -Dexamples=disabled \
     -Dbench=disabled >"$work/install.log" 2>&1 && meson install -C "$work/build-install" >>"$work/install.log" 2>&1; then
  pc=$(find "$prefix" -name kiln.pc | head -n 1)
  cfg=$(find "$prefix" -name kilnConfig.cmake | head -n 1)
  ver=$(find "$prefix" -name kilnConfigVersion.cmake | head -n 1)
  if [[ -n $pc && -n $cfg && -n $ver && -f $prefix/include/kiln/kiln.hpp && -f $prefix/include/kiln/core/config.hpp ]]; then
    pass "install: headers (tree preserved), ${pc#"$prefix"/}, ${cfg#"$prefix"/}, ${ver#"$prefix"/}"
  else
    fail "install: missing files under $prefix"; find "$prefix" -maxdepth 5 | head -n 30
  fi
else
  fail "install: meson setup/install failed:"; show_log "$work/install.log"
  pc=""
fi

# ---- (c) pkg-config + Makefile ---------------------------------------------------------------------
if [[ -n ${pc:-} ]]; then
  export PKG_CONFIG_PATH="$(dirname "$pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  flags=$(pkg-config --cflags --libs kiln 2>&1)
  if [[ $flags == *-DHWY_COMPILE_ONLY_STATIC=1* && $flags == *-fopenmp* && $flags == *-lhwy* && $flags == *eigen3* && $flags != *-march* ]]; then
    pass "pkg-config --cflags --libs kiln: $flags"
  else
    fail "pkg-config --cflags --libs kiln gives '$flags' (want -DHWY_COMPILE_ONLY_STATIC=1 -fopenmp -lhwy eigen3, no -march)"
  fi
  mkdir -p "$work/make"
  cp "$root/tests/consumers/make/Makefile" "$root/tests/consumers/consumer.cpp" "$work/make/"
  if make -C "$work/make" SIMD_FLAGS="$make_flags" >"$work/make.log" 2>&1; then
    check_run "Makefile + pkg-config (SIMD flags '${make_flags}')" "$work/make.log" "$make_target" "$work/make/consumer"
  else
    fail "Makefile + pkg-config: build failed:"; show_log "$work/make.log"
  fi
  unset PKG_CONFIG_PATH
fi

# ---- (b) CMake find_package, against the prefix moved elsewhere -------------------------------------
if [[ -n ${pc:-} ]]; then
  moved=$work/moved-prefix
  mv "$prefix" "$moved"
  mkdir -p "$work/cmake"
  cp "$root/tests/consumers/cmake/CMakeLists.txt" "$root/tests/consumers/consumer.cpp" "$work/cmake/"
  if cmake -S "$work/cmake" -B "$work/cmake/build" -DCMAKE_PREFIX_PATH="$moved" -DCMAKE_BUILD_TYPE=Release \
       -DCMAKE_CXX_FLAGS="$cmake_flags" >"$work/cmake.log" 2>&1 &&
     cmake --build "$work/cmake/build" >>"$work/cmake.log" 2>&1; then
    check_run "CMake find_package(kiln) + kiln::kiln (flags '$cmake_flags', relocated prefix)" "$work/cmake.log" \
      "$cmake_target" "$work/cmake/build/consumer"
  else
    fail "CMake find_package(kiln): build failed:"; show_log "$work/cmake.log"
  fi
fi

# ---- (a) Meson subproject ---------------------------------------------------------------------------
mkdir -p "$work/meson/subprojects"
cp "$root/tests/consumers/meson/meson.build" "$root/tests/consumers/consumer.cpp" "$work/meson/"
ln -s "$root" "$work/meson/subprojects/kiln"
if meson setup "$work/meson/build" "$work/meson" --force-fallback-for=kiln -Dcpp_args="$meson_flags" \
     >"$work/meson.log" 2>&1 && ninja -C "$work/meson/build" >>"$work/meson.log" 2>&1; then
  if grep -q 'kiln_tests\|fused_expressions' "$work/meson/build/build.ninja"; then
    fail "Meson subproject: kiln's own tests or examples are built inside the parent project"
  else
    check_run "Meson subproject dependency('kiln') (flags '$meson_flags')" "$work/meson.log" "$meson_target" \
      "$work/meson/build/consumer"
  fi
else
  fail "Meson subproject: build failed:"; show_log "$work/meson.log"
fi

echo "consumers: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
