#!/bin/bash
# kiln's main job for now (README.md): builds examples/fused_expressions with the best SIMD target of this
# machine and runs it. It shows fused expressions, checks them against plain loops, and prints what it
# computed, kiln::simd_target() and kiln::memory_stats(). On a fresh Debian 12 machine as root it first
# installs what is missing with apt-get.
# Usage: bash scripts/run_example.sh [ARGS for the example...]   (build directory: build-example)
set -eu -o pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash scripts/ensure_packages.sh meson ninja-build g++ pkg-config libhwy-dev libeigen3-dev
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
echo "==> building examples/fused_expressions ($dir)"
ninja -C "$dir" examples/fused_expressions >"$log" 2>&1 || { tail -n 60 "$log"; exit 1; }
echo "==> $dir/examples/fused_expressions $*"
"$dir/examples/fused_expressions" "$@"
