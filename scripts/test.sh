#!/bin/bash
# kiln's test command (README.md, .ci/run): on a fresh Debian 12 machine as root it installs what is
# missing with apt-get, then runs every build of docs/ci.md:
#   (a) default build: release, -O2, simd_target=native, with examples (and the benchmarks, built, not run, when
#       KILN_CI_BENCH=1); the doctest suite (meson test: suite unit and any other test but compile_fail/compile_time)
#   (b) AddressSanitizer + UndefinedBehaviorSanitizer at -O1 (the test files at -O0 but tests/cpu/test_gemm.cpp;
#       UBSan without its alignment, null and pointer-overflow checks: docs/ci.md); the same suite
#   (c) a second SIMD target per KILN_SECOND_TARGETS (default ssse3: 4 lanes, no FMA, emulated masks; the
#       native build has 16): the op, expression, tensor and cpu tests (kiln_simd_tests, --suite simd)
#   (d) compile-fail cases and the compile-time budget (in the default build)
#   (e) meson install + the Meson, CMake and pkg-config consumers (scripts/test_consumers.sh)
# Each step prints a header line and its minutes. The last line is "N passed, N failed": doctest test
# cases of every run plus the script checks. Exits non-zero when anything failed.
#
# Environment: KILN_CI_DIR (build directories, default build-ci), KILN_SECOND_TARGETS (any of ssse3,
# avx2, avx3, scalar, space-separated; empty to skip), KILN_CI_STEPS (letters of the steps, default abcde),
# KILN_CI_BENCH=1 (also build the benchmarks in (a): about 4 more CPU minutes).
set -u -o pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
ci_dir=${KILN_CI_DIR:-build-ci}
second_targets=${KILN_SECOND_TARGETS-ssse3}
steps=${KILN_CI_STEPS:-abcde}
bench=$([[ ${KILN_CI_BENCH:-0} == 1 ]] && echo enabled || echo disabled)
t_start=$(date +%s)
total_passed=0
total_failed=0
summary=()

minutes() { awk -v s="$1" 'BEGIN { printf "%.1f", s / 60 }'; }
# cpu_now: CPU seconds (user + sys) used so far by the processes this script waited for
# (times must run in this shell, not in a pipeline's subshell.)
times_file=$(mktemp /tmp/kiln-ci-times.XXXXXX)
trap 'rm -f "$times_file"' EXIT
cpu_now=0
update_cpu() {
  times >"$times_file"
  cpu_now=$(tail -n 1 "$times_file" | awk '{ t = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] } printf "%d", t }')
}

# ---- packages ------------------------------------------------------------------------------------
packages=(meson ninja-build g++ make pkg-config cmake python3 libhwy-dev libeigen3-dev doctest-dev
          libbenchmark-dev zlib1g-dev python3-numpy libcpp-httplib-dev libpng-dev libopenmpi-dev openmpi-bin)
if ! bash scripts/ensure_packages.sh "${packages[@]}"; then
  echo "0 passed, 1 failed"
  exit 1
fi
echo "==> $(g++ --version | head -n 1); meson $(meson --version); $(nproc) cores; $(grep -m 1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
mkdir -p "$ci_dir"

# ---- helpers -------------------------------------------------------------------------------------
step_t0=0
step_cpu0=0
step_name=""
step_passed=0
step_failed=0
begin_step() {
  step_name=$1
  step_t0=$(date +%s)
  update_cpu
  step_cpu0=$cpu_now
  step_passed=0
  step_failed=0
  echo
  echo "==> [$step_name] $2"
}
end_step() {
  update_cpu
  local secs=$(($(date +%s) - step_t0)) cpu=$((cpu_now - step_cpu0))
  total_passed=$((total_passed + step_passed))
  total_failed=$((total_failed + step_failed))
  summary+=("$(printf '  [%s] %-42s %5s min (%5s CPU min) %5d passed, %d failed' "$step_name" "$1" \
    "$(minutes "$secs")" "$(minutes "$cpu")" "$step_passed" "$step_failed")")
  echo "<== [$step_name] $(minutes "$secs") min ($(minutes "$cpu") CPU min): $step_passed passed, $step_failed failed"
}
# add_counts PASSED FAILED (a missing count means the counting itself failed: one failure).
add_counts() { step_passed=$((step_passed + ${1:-0})); step_failed=$((step_failed + ${2:-1})); }

# configure DIR OPTIONS...: meson setup (or reconfigure an existing directory with the same options).
configure() {
  local dir=$1
  shift
  local log=$dir.setup.log
  if [[ -f $dir/build.ninja ]]; then
    meson setup --reconfigure "$dir" "$@" >"$log" 2>&1
  else
    rm -rf "$dir"
    meson setup "$dir" "$@" >"$log" 2>&1
  fi || { echo "  meson setup failed:"; tail -n 40 "$log"; return 1; }
  echo "  configured $dir: $*"
}
# build DIR [TARGETS...]: ninja, with the compiler's output in DIR.build.log (warnings counted).
build() {
  local dir=$1
  shift
  local log=$dir.build.log t0
  t0=$(date +%s)
  if ninja -C "$dir" "$@" >"$log" 2>&1; then
    echo "  built $dir${*:+ ($*)} in $(minutes $(($(date +%s) - t0))) min, $(grep -c 'warning:' "$log") compiler warnings ($log)"
  else
    echo "  build of $dir failed ($log):"
    grep -m 20 -A 6 'error' "$log" | head -n 80
    return 1
  fi
}
# run_tests DIR EXPECTED_TARGET MESON_TEST_ARGS...: meson test, then the counts of scripts/ci_count.py.
run_tests() {
  local dir=$1 target=$2
  shift 2
  local log=$dir.test.log
  rm -f "$dir/meson-logs/testlog.json"
  meson test -C "$dir" --no-rebuild --print-errorlogs "$@" >"$log" 2>&1
  grep -E '^ *[0-9]+/[0-9]+ ' "$log" | awk '!seen[$0]++' | sed 's/^/  /'
  if grep -q -E '^ *[0-9]+/[0-9]+ .*(FAIL|TIMEOUT|ERROR)' "$log"; then
    echo "  --- output of the failed tests ($log):"
    grep -v -E '^ *[0-9]+/[0-9]+ ' "$log" | head -n 200
  fi
  local counts
  counts=$(python3 scripts/ci_count.py "$dir/meson-logs/testlog.json" "$target")
  echo "$counts" | sed '$d'
  add_counts $(echo "$counts" | tail -n 1)
}

# ---- (a) default build -----------------------------------------------------------------------------
if [[ $steps == *a* ]]; then
  begin_step a "default build (release, -O2, simd_target=native) + doctest suite"
  d=$ci_dir/default
  # Builds everything: the suite, the examples and, with KILN_CI_BENCH=1, the benchmarks (compiled, not run).
  if configure "$d" -Dbuildtype=release -Doptimization=2 -Dsimd_target=native -Dtests=enabled \
       -Dexamples=enabled -Dbench="$bench" && build "$d"; then
    run_tests "$d" "" --no-suite compile_fail --no-suite compile_time
  else
    add_counts 0 1
  fi
  end_step "default build (-O2 native), doctest suite"
fi

# ---- (b) sanitizers ----------------------------------------------------------------------------------
if [[ $steps == *b* ]]; then
  begin_step b "AddressSanitizer + UndefinedBehaviorSanitizer build at -O1 + doctest suite"
  d=$ci_dir/asan
  if configure "$d" -Doptimization=1 -Ddebug=false -Db_ndebug=false \
       -Db_sanitize=address,undefined -Db_lundef=false \
       "-Dcpp_args=['-g1','-fno-omit-frame-pointer','-fno-sanitize-recover=all','-fno-sanitize=alignment,null,pointer-overflow']" \
       -Dsimd_target=native -Dtests=enabled -Dexamples=disabled -Dbench=disabled &&
     build "$d"; then
    # meson test sets ASAN_OPTIONS/UBSAN_OPTIONS (halt and abort on error) unless they are set.
    run_tests "$d" "" --no-suite compile_fail --no-suite compile_time --timeout-multiplier 4
  else
    add_counts 0 1
  fi
  end_step "ASan+UBSan build (-O1), doctest suite"
fi

# ---- (c) second SIMD targets ----------------------------------------------------------------------
if [[ $steps == *c* ]]; then
  for t in $second_targets; do
    case $t in
      avx3) want=AVX3 ;;
      avx2) want=AVX2 ;;
      ssse3) want=SSSE3 ;;
      scalar) want=SCALAR ;;
      *) echo "unknown second target $t"; want=? ;;
    esac
    begin_step c "second SIMD target $t ($want): op, expression, tensor and cpu tests (kiln_simd_tests)"
    d=$ci_dir/$t
    if configure "$d" -Dbuildtype=release -Doptimization=2 -Dsimd_target="$t" -Dtests=enabled \
         -Dexamples=disabled -Dbench=disabled && build "$d" tests/kiln_simd_tests; then
      run_tests "$d" "$want" --suite simd
    else
      add_counts 0 1
    fi
    end_step "simd_target=$t, kiln_simd_tests"
  done
fi

# ---- (d) compile-fail cases and compile-time budget ---------------------------------------------------
if [[ $steps == *d* ]]; then
  begin_step d "compile-fail cases and compile-time budget (default build's flags)"
  d=$ci_dir/default
  if [[ -f $d/build.ninja ]] || configure "$d" -Dbuildtype=release -Doptimization=2 -Dsimd_target=native; then
    run_tests "$d" "" --suite compile_fail --suite compile_time
    grep -E '^(PASS|FAIL) ' "$d/meson-logs/testlog.txt" | sed 's/^/    /'
  else
    add_counts 0 1
  fi
  end_step "compile-fail cases, compile-time budget"
fi

# ---- (e) install and consumers ---------------------------------------------------------------------------
if [[ $steps == *e* ]]; then
  begin_step e "meson install + consumers (Meson subproject, CMake find_package, pkg-config Makefile)"
  log=$ci_dir/consumers.log
  bash scripts/test_consumers.sh "$ci_dir/consumers" >"$log" 2>&1
  sed '$d' "$log" | sed 's/^/  /'
  last=$(tail -n 1 "$log")
  if [[ $last =~ ^consumers:\ ([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
    add_counts "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
  else
    echo "  $last"
    add_counts 0 1
  fi
  end_step "meson install, 3 consumers"
fi

echo
update_cpu
echo "==> summary ($(minutes $(($(date +%s) - t_start))) min in all, $(minutes "$cpu_now") CPU min; load average now $(cut -d' ' -f1-3 /proc/loadavg))"
printf '%s\n' "${summary[@]}"
echo "$total_passed passed, $total_failed failed"
[[ $total_failed -eq 0 ]]
