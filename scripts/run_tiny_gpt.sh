#!/bin/bash
# Builds examples/tiny_gpt with the best SIMD target of this machine and runs it: a character-level GPT
# trained on Debian's fortunes package (docs/attention.md). On a fresh Debian 12 machine as root it first
# installs what is missing with apt-get, the corpus (fortunes) included.
# Usage: bash scripts/run_tiny_gpt.sh [ARGS for tiny_gpt...]   (build directory: build-example)
#        default: --steps 2000; tiny_gpt --help lists the options.
set -eu -o pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash scripts/ensure_packages.sh meson ninja-build g++ pkg-config libhwy-dev libeigen3-dev zlib1g-dev libpng-dev fortunes
bash scripts/build_examples.sh examples/tiny_gpt
dir=${KILN_EXAMPLE_DIR:-build-example}
args=("$@")
[[ ${#args[@]} -gt 0 ]] || args=(--steps 2000)
echo "==> $dir/examples/tiny_gpt ${args[*]}"
"$dir/examples/tiny_gpt" "${args[@]}"
