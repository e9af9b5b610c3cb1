#!/bin/bash
# Runs one lost-rank scenario of kiln_dist_tests (--scenario=NAME, main.cpp) under mpirun --enable-recovery and passes when
# exactly EXPECTED ranks print PASS and none prints FAIL (mpirun --enable-recovery exits 0 whatever the ranks do).
# With MAX_SECONDS, mpirun must also have returned within that many seconds.
# Usage: run_failure.sh MPIRUN EXECUTABLE NP SCENARIO EXPECTED [MAX_SECONDS]
set -u
mpirun=$1 exe=$2 np=$3 scenario=$4 expected=$5 max_seconds=${6:-0}
t0=$(date +%s)
out=$("$mpirun" --allow-run-as-root --oversubscribe --enable-recovery -np "$np" "$exe" "--scenario=$scenario" 2>&1)
seconds=$(($(date +%s) - t0))
echo "$out"
passed=$(grep -c "^PASS $scenario " <<<"$out")
failed=$(grep -c "^FAIL " <<<"$out")
echo "run_failure.sh: $scenario on $np ranks: $passed ranks passed (expected $expected), $failed failed, $seconds s"
[[ $passed -eq $expected && $failed -eq 0 ]] && [[ $max_seconds -eq 0 || $seconds -le $max_seconds ]]
