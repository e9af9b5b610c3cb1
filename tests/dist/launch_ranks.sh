#!/bin/bash
# Starts N ranks of a program torchrun-style, without mpirun: each with RANK, WORLD_SIZE, LOCAL_RANK and one
# KILN_STORE_PATH (the NCCL backend's file store), and KILN_EMULATED_NCCL_DIR for the emulated NCCL's files, all in
# a temporary directory removed afterwards. Prints each rank's output, rank 0 first. With EXPECTED "-", passes when
# every rank exits 0; with a number, when exactly that many ranks print "PASS ..." and none "FAIL" (a lost-rank
# scenario, where the lost rank's status says nothing).
# Usage: launch_ranks.sh N EXPECTED COMMAND ARGS...
set -u
n=$1 expected=$2
shift 2
dir=$(mktemp -d "${TMPDIR:-/tmp}/kiln-ranks.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
pids=()
for ((r = 0; r < n; r++)); do
  RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r KILN_STORE_PATH=$dir/store KILN_EMULATED_NCCL_DIR=$dir "$@" >"$dir/out.$r" 2>&1 &
  pids+=($!)
done
status=0
for ((r = 0; r < n; r++)); do
  wait "${pids[r]}" || status=1
done
for ((r = 0; r < n; r++)); do
  echo "---- rank $r"
  cat "$dir/out.$r"
done
if [[ $expected != - ]]; then
  passed=$(cat "$dir"/out.* | grep -c "^PASS ")
  failed=$(cat "$dir"/out.* | grep -c "^FAIL ")
  echo "launch_ranks.sh: $passed ranks passed (expected $expected), $failed failed"
  [[ $passed -eq $expected && $failed -eq 0 ]]
  exit
fi
exit $status
