#!/bin/bash
# Builds examples (ninja targets such as examples/fashion_mnist, examples/serve) in build-example/
# (KILN_EXAMPLE_DIR): release, the best SIMD target of this machine, tests and benchmarks off. Used by
# scripts/run_example.sh and scripts/run_serve.sh, which first install the packages.
# Usage: bash scripts/build_examples.sh TARGET...
set -eu -o pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
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
echo "==> building $* ($dir)"
ninja -C "$dir" "$@" >"$log" 2>&1 || { tail -n 60 "$log"; exit 1; }
