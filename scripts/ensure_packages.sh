#!/bin/bash
# Usage: bash scripts/ensure_packages.sh PACKAGE...
# Installs the Debian packages among PACKAGE... that are not installed (apt-get; as root, or through sudo).
set -u
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
echo "==> installing missing Debian packages: ${missing[*]}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "not root and no sudo: install ${missing[*]} first" >&2; exit 1; }
  sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q && $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
