#!/usr/bin/env bash
# Sets bigbatch up on a fresh Debian 12 machine: installs the Debian packages it needs (only
# those missing) and builds it in Release into build/. Safe to run again: it then only
# rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

# Why each package is here: docs/dependencies.md.
packages=(
  build-essential cmake ninja-build ccache clang libclang-rt-14-dev
  libtorch-dev libgloo-dev libopenblas0-openmp libblas-dev
  libcli11-dev libtomlplusplus-dev nlohmann-json3-dev zlib1g-dev libminizip-dev
  libsentencepiece-dev sentencepiece
  libgtest-dev
  dataset-fashion-mnist fortunes
  python3-torch python3-numpy
  chromium python3-pil
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! $sudo apt-get install -y -q "${missing[@]}"; then
    $sudo apt-get update -q
    $sudo apt-get install -y -q "${missing[@]}"
  fi
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build
echo "setup: built build/bigbatch"
