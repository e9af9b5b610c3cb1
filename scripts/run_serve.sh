#!/bin/bash
# Serves the model that scripts/run_example.sh trained (fashion_mnist_out/checkpoint.safetensors) over HTTP
# on 127.0.0.1:8080 with examples/serve (docs/serving.md): installs what is missing with apt-get, builds
# examples/serve and examples/fashion_mnist in build-example/, writes the first 10 test images as PNG files
# to fashion_mnist_out/png/ (once) for requests, and runs the server until SIGINT or SIGTERM.
# Usage: bash scripts/run_serve.sh [ARGS for serve...]   (serve --help lists them: --port, --threads, ...)
#   curl --data-binary @fashion_mnist_out/png/0_ankle-boot.png http://127.0.0.1:8080/predictions/fashion_mnist
set -eu -o pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash scripts/ensure_packages.sh meson ninja-build g++ pkg-config libhwy-dev libeigen3-dev zlib1g-dev libpng-dev \
  libcpp-httplib-dev dataset-fashion-mnist
bash scripts/build_examples.sh examples/serve examples/fashion_mnist
dir=${KILN_EXAMPLE_DIR:-build-example}
[[ -d fashion_mnist_out/png ]] || "$dir/examples/fashion_mnist" --export-png fashion_mnist_out/png 10
echo "==> $dir/examples/serve $*"
exec "$dir/examples/serve" "$@"
