#!/usr/bin/env bash
# Builds, on this (GPU-less) machine, what tests/gpu/run.sh runs on a GPU machine, into build-gpu/:
#   device_tests   tests/cuda_null/test_emulated_*.cpp, which run on any CUDA driver (in CI on the emulated one):
#                  memory, the caching allocator, launches through the kernel cache, CUDA tensors, every op and
#                  gradient of the CUDA path against the CPU (expressions, reductions, indexing, matmul through
#                  cuBLAS, convolution, pooling, normalization, flex_attention, sdpa, MultiheadAttention), and the
#                  NCCL backend's single-rank path (with the GPU machine's libnccl, skipped without one);
#   gpu_bench      bench/gpu_bench.cpp (docs/performance.md's GPU figures);
#   host_step      bench/host_step.cpp (the Fashion-MNIST CNN's training step, with and without cuDNN);
#   fashion_mnist, tiny_gpt   the examples, for a few hundred training steps on the GPU against the same steps on
#                  the CPU; with their data in build-gpu/data (the first 19200 Fashion-MNIST training images, 300
#                  batches, and the whole test set; Debian's fortunes);
# with the shared libraries they link beside them in build-gpu/lib (found through an $ORIGIN rpath), because the GPU
# machine has no network to install Debian's packages. cuBLAS is not bundled (libcublasLt alone is 540 MB, past the
# carry's 64 MiB): run.sh finds the GPU machine's own. Hand the folder over with the device tool's carry:
#   bash tests/gpu/build.sh   then   run(command="bash tests/gpu/run.sh", carry=["build-gpu"])
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/ensure_packages.sh g++ libhwy-dev libeigen3-dev doctest-dev zlib1g-dev libpng-dev fortunes \
  dataset-fashion-mnist >/dev/null
out=build-gpu
rm -rf "$out"
mkdir -p "$out/lib" "$out/obj" "$out/data/fashion-mnist"
flags=(-std=c++20 -O2 -march=x86-64-v2 -DHWY_COMPILE_ONLY_STATIC=1 -DKILN_WITH_CUDA -fopenmp -Iinclude -Itests
       -I/usr/include/eigen3 -Wl,-rpath,'$ORIGIN/lib')
# Each translation unit is its own job (they build side by side on every core).
pids=()
for src in tests/main.cpp tests/cuda_null/test_emulated_{device,autograd,indexing,matmul,nn,attention,nccl,linalg}.cpp; do
  g++ "${flags[@]}" -c "$src" -o "$out/obj/$(basename "$src" .cpp).o" & pids+=($!)
done
g++ "${flags[@]}" bench/gpu_bench.cpp -o "$out/gpu_bench" -ldl -lhwy & pids+=($!)
g++ "${flags[@]}" bench/host_step.cpp -o "$out/host_step" -ldl -lhwy & pids+=($!)
g++ "${flags[@]}" examples/fashion_mnist/main.cpp -o "$out/fashion_mnist" -ldl -lhwy -lz -lpng & pids+=($!)
g++ "${flags[@]}" examples/tiny_gpt/main.cpp -o "$out/tiny_gpt" -ldl -lhwy -lz & pids+=($!)
for pid in "${pids[@]}"; do wait "$pid"; done
g++ "${flags[@]}" "$out"/obj/*.o -o "$out/device_tests" -ldl -lhwy
rm -rf "$out/obj"
for bin in "$out/device_tests" "$out/gpu_bench" "$out/host_step" "$out/fashion_mnist" "$out/tiny_gpt"; do
  ldd "$bin" | awk '/=> \// && $1 ~ /^lib(hwy|gomp|stdc\+\+|gcc_s|z|png16)\./ {print $3}'
done | sort -u | xargs -I{} cp -L {} "$out/lib/"
# The data: Fashion-MNIST's training set cut to its first 19200 images and labels (IDX: a 16- or 8-byte header whose
# second word is the count), so that the folder fits the carry; the test set whole.
python3 - "$out/data/fashion-mnist" <<'PY'
import gzip, struct, sys
src, dst, n = "/usr/share/datasets/fashion-mnist", sys.argv[1], 19200
for name, header, item in (("train-images-idx3-ubyte", 16, 784), ("train-labels-idx1-ubyte", 8, 1)):
    data = gzip.open(f"{src}/{name}.gz").read()
    cut = data[:4] + struct.pack(">I", n) + data[8:header] + data[header:header + n * item]
    with gzip.open(f"{dst}/{name}.gz", "wb") as f:
        f.write(cut)
PY
cp /usr/share/datasets/fashion-mnist/t10k-* "$out/data/fashion-mnist/"
mkdir -p "$out/data/fortunes"  # (the text files only: tiny_gpt skips the .dat indexes and .u8 links)
find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.*' -exec cp {} "$out/data/fortunes/" \;
du -sh "$out"
