#!/bin/bash
# kiln's main job (README.md): builds examples/fashion_mnist with the best SIMD target of this machine and
# runs it: a CNN trained on Fashion-MNIST with Adam (docs/tutorial.md), with a live progress bar, a test
# evaluation and a checkpoint each epoch. On a fresh Debian 12 machine as root it first installs what is
# missing with apt-get, the dataset (dataset-fashion-mnist) included.
# Usage: bash scripts/run_example.sh [ARGS for fashion_mnist...]   (build directory: build-example)
#        default: --epochs 3; fashion_mnist --help lists the options.
set -eu -o pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash scripts/ensure_packages.sh meson ninja-build g++ pkg-config libhwy-dev libeigen3-dev zlib1g-dev libpng-dev \
  dataset-fashion-mnist
bash scripts/build_examples.sh examples/fashion_mnist
dir=${KILN_EXAMPLE_DIR:-build-example}
args=("$@")
[[ ${#args[@]} -gt 0 ]] || args=(--epochs 3)
echo "==> $dir/examples/fashion_mnist ${args[*]}"
"$dir/examples/fashion_mnist" "${args[@]}"
