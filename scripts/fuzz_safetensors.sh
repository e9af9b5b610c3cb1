#!/usr/bin/env bash
# Builds the libFuzzer target for kiln's safetensors reader (tests/fuzz/fuzz_safetensors.cpp) with clang under
# AddressSanitizer and UndefinedBehaviorSanitizer, and runs it for SECONDS (default 60).
#   scripts/fuzz_safetensors.sh [SECONDS]
# Inputs it finds go to $FUZZ_DIR/corpus (default build-fuzz/, ignored by git); the seeds in
# tests/fuzz/corpus_safetensors are only read. A crashing input is saved in $FUZZ_DIR as crash-<sha1>, and can
# be replayed with: build-fuzz/fuzz_safetensors build-fuzz/crash-<sha1>
set -euo pipefail

seconds=${1:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
out=${FUZZ_DIR:-$root/build-fuzz}
mkdir -p "$out/corpus"

nice clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -DHWY_COMPILE_ONLY_STATIC=1 -I"$root/include" -I/usr/include/eigen3 \
  "$root/tests/fuzz/fuzz_safetensors.cpp" -lhwy -o "$out/fuzz_safetensors"

nice "$out/fuzz_safetensors" -max_total_time="$seconds" -dict="$root/tests/fuzz/safetensors.dict" \
  -artifact_prefix="$out/" -print_final_stats=1 "$out/corpus" "$root/tests/fuzz/corpus_safetensors"
