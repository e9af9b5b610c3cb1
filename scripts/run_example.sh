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
dir=${KILN_EXAMPLE_DIR:-build-example}
log=$(mktemp /tmp/kiln-example.XXXXXX.log)
trap 'rm -f "$log"' EXIT
if [[ -f $dir/build.ninja ]]; then
  meson setup --reconfigure "$dir" -Dtests=disabled -Dexamples=enabled -Dbench=disabled >"$log" 2>&1 ||
    { cat "$log"; exit 1; }
else
  rm -rf "$dir"
  meson setup "$dir" -Dbuildtype=release -Dsimd_target=native -Dtests=disabled -Dexamples=enabled \
    -Dbench=disabled >"$log" 2>&1 || { cat "$log"; exit 1; }
fi
echo "==> building examples/fashion_mnist ($dir)"
ninja -C "$dir" examples/fashion_mnist >"$log" 2>&1 || { tail -n 60 "$log"; exit 1; }
args=("$@")
[[ ${#args[@]} -gt 0 ]] || args=(--epochs 3)
echo "==> $dir/examples/fashion_mnist ${args[*]}"
"$dir/examples/fashion_mnist" "${args[@]}"
