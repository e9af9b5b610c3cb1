#!/usr/bin/env bash
# On a GPU machine (the device tool): the device tests and the GPU benchmarks that tests/gpu/build.sh built into
# build-gpu/, their output written under $OUT (./gpu-out when unset): nvidia-smi.txt, device_tests.txt,
# gpu_bench.txt, the examples' logs and summary.txt. Uses the machine's CUDA driver, NVRTC and cuBLAS
# (libnvrtc.so.13, libcublas.so.13: /usr/local/cuda/lib64, else the cuBLAS of the machine's Python packages,
# nvidia-cublas).
# Sized to finish within about 5 minutes on one H200 (each step has its own timeout; the CPU runs of the examples
# use the machine's 16 cores).
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-gpu-out}"
mkdir -p "$out"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ ! -e /usr/local/cuda/lib64/libcublas.so.13 ] && [ ! -e /usr/local/cuda/lib64/libcublas.so.12 ]; then
  wheel=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null)
  [ -n "$wheel" ] && export LD_LIBRARY_PATH="$wheel:$LD_LIBRARY_PATH"
fi
{
  date -u
  nvidia-smi || true
} > "$out/nvidia-smi.txt" 2>&1
timeout 180 build-gpu/device_tests --duration=true > "$out/device_tests.txt" 2>&1
echo "device_tests: exit $?" > "$out/summary.txt"
timeout 180 build-gpu/gpu_bench > "$out/gpu_bench.txt" 2>&1
echo "gpu_bench: exit $?" >> "$out/summary.txt"
# The examples: the same 300 Fashion-MNIST batches and 200 tiny_gpt steps on the GPU and on the CPU (the test
# accuracy and losses should agree to about a percent: the GPU's sums run in another order).
data=build-gpu/data
for device in cuda cpu; do
  timeout 120 build-gpu/fashion_mnist --device "$device" --data "$data/fashion-mnist" --epochs 1 --limit-batches 300 \
    --schedule constant --quiet --out "$out/fashion_mnist_$device" > "$out/fashion_mnist_$device.txt" 2>&1
  echo "fashion_mnist --device $device: exit $?; $(tail -n 2 "$out/fashion_mnist_$device.txt" | tr '\n' ' ')" >> "$out/summary.txt"
  timeout 120 build-gpu/tiny_gpt --device "$device" --data "$data/fortunes" --steps 200 --eval-every 100 --quiet \
    --sample-chars 200 --out "$out/tiny_gpt_$device" > "$out/tiny_gpt_$device.txt" 2>&1
  echo "tiny_gpt --device $device: exit $?; $(grep 'validation loss' "$out/tiny_gpt_$device.txt" | tr '\n' ' ')" >> "$out/summary.txt"
done
# The kernel cache across processes: a first tiny_gpt run compiles its kernels into an empty disk cache, a second
# run of the same command compiles none (KILN_DEBUG prints "kiln: compiling" per compile, "kernel cache hit" per load).
cache_run() {
  KILN_CACHE_DIR="$out/kernel-cache" KILN_DEBUG=1 timeout 120 build-gpu/tiny_gpt --device cuda --data build-gpu/data/fortunes \
    --steps 3 --eval-every 3 --eval-batches 1 --sample-chars 10 --quiet --out "$out/tiny_gpt_cache" 2>&1 >/dev/null |
    grep -E "^kiln: (compiling|kernel cache hit)" > "$out/cache_run_$1.txt"
  echo "$(grep -c '^kiln: compiling' "$out/cache_run_$1.txt") compiled, $(grep -c 'kernel cache hit' "$out/cache_run_$1.txt") from the disk cache"
}
rm -rf "$out/kernel-cache"
echo "kernel cache: first run $(cache_run 1); second run $(cache_run 2)" >> "$out/summary.txt"
tail -n 3 "$out/device_tests.txt" >> "$out/summary.txt"
cat "$out/gpu_bench.txt" >> "$out/summary.txt"
cat "$out/summary.txt"
