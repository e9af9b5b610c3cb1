#!/usr/bin/env bash
# Builds, on this (GPU-less) machine, what tests/gpu/run.sh runs on a GPU machine, into build-gpu/:
#   device_tests  tests/cuda_null/test_emulated_device.cpp and test_emulated_matmul.cpp, which run on any CUDA driver
#                 (in CI on the emulated one): memory, the caching allocator, launches through the kernel cache, CUDA
#                 tensors, flex_attention's kernels against the CPU, matmul through cuBLAS;
#   gpu_bench     bench/gpu_bench.cpp (docs/performance.md's GPU figures);
# with the shared libraries they link beside them in build-gpu/lib (found through an $ORIGIN rpath), because the GPU
# machine has no network to install Debian's packages. cuBLAS is not bundled (libcublasLt alone is 540 MB, past the
# carry's 64 MiB): run.sh finds the GPU machine's own. Hand the folder over with the device tool's carry:
#   bash tests/gpu/build.sh   then   run(command="bash tests/gpu/run.sh", carry=["build-gpu"])
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/ensure_packages.sh g++ libhwy-dev libeigen3-dev doctest-dev >/dev/null
out=build-gpu
rm -rf "$out"
mkdir -p "$out/lib"
flags=(-std=c++20 -O2 -march=x86-64-v2 -DHWY_COMPILE_ONLY_STATIC=1 -fopenmp -Iinclude -Itests -I/usr/include/eigen3
       -Wl,-rpath,'$ORIGIN/lib')
g++ "${flags[@]}" -DKILN_WITH_CUDA tests/main.cpp tests/cuda_null/test_emulated_device.cpp \
  tests/cuda_null/test_emulated_matmul.cpp -o "$out/device_tests" -ldl -lhwy &
g++ "${flags[@]}" -DKILN_WITH_CUDA bench/gpu_bench.cpp -o "$out/gpu_bench" -ldl -lhwy &
wait %1 && wait %2
for bin in "$out/device_tests" "$out/gpu_bench"; do
  ldd "$bin" | awk '/=> \// && $1 ~ /^lib(hwy|gomp|stdc\+\+|gcc_s)/ {print $3}'
done | sort -u | xargs -I{} cp -L {} "$out/lib/"
du -sh "$out"
