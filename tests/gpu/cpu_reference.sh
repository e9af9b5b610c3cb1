#!/usr/bin/env bash
# The CPU half of tests/gpu/run.sh's example comparison, run on the development machine with build-gpu's binaries:
# the same 3 epochs of 300 Fashion-MNIST batches (one-cycle schedule) and 200 tiny_gpt steps on the CPU, logs under
# $1 (default gpu-out-cpu). The test accuracy and losses should agree with the GPU's to about a percent (the GPU's
# sums run in another order).
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${1:-gpu-out-cpu}"
mkdir -p "$out"
data=build-gpu/data
build-gpu/fashion_mnist --device cpu --data "$data/fashion-mnist" --epochs 3 --quiet --out "$out/fashion_mnist_cpu" \
  > "$out/fashion_mnist_cpu.txt" 2>&1
echo "fashion_mnist --device cpu: exit $?; $(tail -n 2 "$out/fashion_mnist_cpu.txt" | tr '\n' ' ')"
build-gpu/tiny_gpt --device cpu --data "$data/fortunes" --steps 200 --eval-every 100 --quiet --sample-chars 200 \
  --out "$out/tiny_gpt_cpu" > "$out/tiny_gpt_cpu.txt" 2>&1
echo "tiny_gpt --device cpu: exit $?; $(grep 'validation loss' "$out/tiny_gpt_cpu.txt" | tr '\n' ' ')"
