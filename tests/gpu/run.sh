#!/usr/bin/env bash
# On a GPU machine (the device tool): the device tests, the examples and the GPU benchmarks that tests/gpu/build.sh
# built into build-gpu/, their output written under $OUT (./gpu-out when unset): summary.txt, and results.tar.gz
# with nvidia-smi.txt, device_tests_<file>.txt, the examples' logs and gpu_bench.txt. Uses the machine's CUDA driver, NVRTC
# cuBLAS and cuDNN (libnvrtc.so.13, libcublas.so.13, libcudnn.so.9: /usr/local/cuda/lib64, else those of the machine's
# Python packages, nvidia-cublas and nvidia-cudnn).
# Sized for the device tool's budget (about 15 minutes a session, machine start included): phases of at most 4,
# 3 and 2 minutes (about 1 minute in all on an H200).
#   1. side by side (the machine has 16 cores; timings here mean nothing): the seven device test files, each its own
#      process; fashion_mnist and tiny_gpt on the GPU for 3 epochs of 300 batches and 200 steps
#      (tests/gpu/cpu_reference.sh runs the same commands on the CPU, on the development machine), then tiny_gpt's
#      200 steps again under bfloat16 autocast (its attention on tensor cores); the kernel cache across two processes;
#   2. alone: fashion_mnist --distributed over NCCL (one rank), gpu_bench, host_step (the CNN's training step with and
#      without cuDNN), then the two examples profiled (KILN_PROFILE, cuda/profile.hpp) for a few steps.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-gpu-out}"
mkdir -p "$out"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ ! -e /usr/local/cuda/lib64/libcublas.so.13 ] && [ ! -e /usr/local/cuda/lib64/libcublas.so.12 ]; then
  wheel=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null)
  [ -n "$wheel" ] && export LD_LIBRARY_PATH="$wheel:$LD_LIBRARY_PATH"
fi
# cuDNN likewise (conv2d and batch norm; without it they run on kiln's own kernels, and the cuDNN lines of gpu_bench
# say so).
if [ ! -e /usr/local/cuda/lib64/libcudnn.so.9 ] && [ ! -e /usr/local/cuda/lib64/libcudnn.so.8 ]; then
  wheel=$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null)
  [ -n "$wheel" ] && export LD_LIBRARY_PATH="$wheel:$LD_LIBRARY_PATH"
fi
# NCCL (218 MB: not carried) from the machine's toolkit or Python packages; without it the NCCL cases skip.
if [ ! -e /usr/local/cuda/lib64/libnccl.so.2 ]; then
  wheel=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
  [ -n "$wheel" ] && export LD_LIBRARY_PATH="$wheel:$LD_LIBRARY_PATH"
fi
{
  date -u
  nvidia-smi || true
  ls /usr/local/cuda/lib64 2>&1 | grep -E "nvrtc|cublas|cudnn|nccl" || true
} > "$out/nvidia-smi.txt" 2>&1
# The tests and examples share one disk cache, so a kernel one of them compiled is loaded by the others.
export KILN_CACHE_DIR=/tmp/kiln-gpu-cache
summary="$out/summary.txt"
: > "$summary"
pids=()
for file in device autograd indexing matmul nn attention nccl; do
  (timeout 240 build-gpu/device_tests --source-file="*test_emulated_$file.cpp" --duration=true \
     > "$out/device_tests_$file.txt" 2>&1
   echo "device_tests $file: exit $?; $(grep -E '^\[doctest\] (test cases|assertions)' "$out/device_tests_$file.txt" | tr '\n' ' ')" \
     >> "$summary") & pids+=($!)
done
data=build-gpu/data
(timeout 240 build-gpu/fashion_mnist --device cuda --data "$data/fashion-mnist" --epochs 3 --quiet \
   --out "$out/fashion_mnist_cuda" > "$out/fashion_mnist_cuda.txt" 2>&1
 echo "fashion_mnist --device cuda: exit $?; $(tail -n 2 "$out/fashion_mnist_cuda.txt" | tr '\n' ' ')" >> "$summary") &
pids+=($!)
# tiny_gpt, then the kernel cache across processes: a short tiny_gpt run compiles its kernels into an empty disk
# cache, the same run again compiles none (KILN_DEBUG prints "kiln: compiling" per compile, "kernel cache hit" per
# load).
cache_run() {
  KILN_CACHE_DIR="$out/kernel-cache" KILN_DEBUG=1 timeout 60 build-gpu/tiny_gpt --device cuda --data "$data/fortunes" \
    --steps 3 --eval-every 3 --eval-batches 1 --sample-chars 10 --quiet --out "$out/tiny_gpt_cache" 2>&1 >/dev/null |
    grep -E "^kiln: (compiling|kernel cache hit)" > "$out/cache_run_$1.txt"
  echo "$(grep -c '^kiln: compiling' "$out/cache_run_$1.txt") compiled, $(grep -c 'kernel cache hit' "$out/cache_run_$1.txt") from the disk cache"
}
(timeout 180 build-gpu/tiny_gpt --device cuda --data "$data/fortunes" --steps 200 --eval-every 100 --quiet \
   --sample-chars 200 --out "$out/tiny_gpt_cuda" > "$out/tiny_gpt_cuda.txt" 2>&1
 echo "tiny_gpt --device cuda: exit $?; $(grep 'validation loss' "$out/tiny_gpt_cuda.txt" | tr '\n' ' ')" >> "$summary"
 # The same 200 steps under bfloat16 autocast: the attention on tensor cores (attention/flex_cuda_mma.hpp).
 timeout 120 build-gpu/tiny_gpt --device cuda --amp bf16 --data "$data/fortunes" --steps 200 --eval-every 100 --quiet \
   --sample-chars 200 --out "$out/tiny_gpt_amp" > "$out/tiny_gpt_amp.txt" 2>&1
 echo "tiny_gpt --device cuda --amp bf16: exit $?; $(grep 'validation loss' "$out/tiny_gpt_amp.txt" | tr '\n' ' ')" >> "$summary"
 rm -rf "$out/kernel-cache"
 first=$(cache_run 1)
 echo "kernel cache: first run $first; second run $(cache_run 2)" >> "$summary"
 rm -rf "$out/kernel-cache" "$out/tiny_gpt_cache") & pids+=($!)
for pid in "${pids[@]}"; do wait "$pid"; done
# The example data-parallel over NCCL as a group of one (a machine with one GPU; the machine's libnccl).
timeout 60 build-gpu/fashion_mnist --distributed --device cuda --data "$data/fashion-mnist" --epochs 1 \
  --limit-batches 50 --quiet --out "$out/fashion_mnist_nccl" > "$out/fashion_mnist_nccl.txt" 2>&1
echo "fashion_mnist --distributed --device cuda (NCCL, one rank): exit $?; $(tail -n 2 "$out/fashion_mnist_nccl.txt" | tr '\n' ' ')" >> "$summary"
timeout 180 build-gpu/gpu_bench > "$out/gpu_bench.txt" 2>&1
echo "gpu_bench: exit $?" >> "$summary"
cat "$out/gpu_bench.txt" >> "$summary"
# The Fashion-MNIST CNN's training step at batch 64 through cuDNN and through kiln's own kernels.
for flag in "" --no-cudnn; do
  timeout 60 build-gpu/host_step $flag >> "$summary" 2>&1 || echo "host_step $flag: exit $?" >> "$summary"
done
# Where the examples' device time goes (KILN_PROFILE: each launch waits for the device), the top of each table.
KILN_PROFILE=1 timeout 60 build-gpu/fashion_mnist --device cuda --data "$data/fashion-mnist" --epochs 1 \
  --limit-batches 100 --quiet --out "$out/fashion_mnist_profile" > "$out/fashion_mnist_profile.txt" 2>&1
KILN_PROFILE=1 timeout 60 build-gpu/tiny_gpt --device cuda --data "$data/fortunes" --steps 60 --eval-every 60 \
  --eval-batches 2 --sample-chars 10 --quiet --out "$out/tiny_gpt_profile" > "$out/tiny_gpt_profile.txt" 2>&1
for example in fashion_mnist tiny_gpt; do
  echo "$example, 100 batches or 60 steps, profiled:" >> "$summary"
  grep -A 12 "^kiln profile" "$out/${example}_profile.txt" >> "$summary"
done
# The device tool brings back only a few files: the logs go in one archive (not the checkpoints), beside the summary.
tar czf /tmp/gpu-results.tar.gz -C "$out" --exclude='*.safetensors' --exclude=summary.txt .
find "$out" -mindepth 1 -not -name summary.txt -delete
mv /tmp/gpu-results.tar.gz "$out/results.tar.gz"
cat "$summary"
