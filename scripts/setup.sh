#!/usr/bin/env bash
# Sets bigbatch up on a fresh Debian 12 machine: installs the Debian packages it needs (only
# those missing) and builds it in Release. Safe to run again: it then only rebuilds what changed.
#
#   scripts/setup.sh                    Debian's libtorch 1.13 (CPU), into build/, and the Python
#                                       package for Debian's python3-torch in a virtual
#                                       environment that sees it (~/.cache/bigbatch/python-debian)
#   scripts/setup.sh --pytorch PYTHON   the libtorch inside the PyTorch 2.x that PYTHON imports
#                                       (CUDA where that PyTorch has it), into build-pytorch-VERSION/
#   scripts/setup.sh --pytorch 2.15.0   that PyTorch from pip, in a virtual environment cached
#                                       outside the checkout (~/.cache/bigbatch/pytorch-2.15.0),
#                                       into build-pytorch-2.15.0/
# Either way the Python package (python/, docs/python.md) is built on the same engine libraries
# and installed into that PyTorch's environment.
#
# Why each package and which libtorch is the default: docs/dependencies.md.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: scripts/setup.sh [--pytorch PYTHON|VERSION]" >&2
  exit 2
}
pytorch=""
while [ $# -gt 0 ]; do
  case "$1" in
    --pytorch)
      [ $# -ge 2 ] && [ -n "$2" ] || usage
      pytorch=$2
      shift 2
      ;;
    *) usage ;;
  esac
done

# The libraries bigbatch builds with whichever libtorch it uses, its data and its test tools.
packages=(
  build-essential cmake ninja-build ccache clang libclang-rt-14-dev
  libgloo-dev libopenblas0-openmp libblas-dev
  libcli11-dev libtomlplusplus-dev nlohmann-json3-dev zlib1g-dev libminizip-dev
  libsentencepiece-dev sentencepiece
  libgtest-dev
  dataset-fashion-mnist fortunes
  python3-numpy
  chromium python3-pil
  python3-dev pybind11-dev python3-venv
)
if [ -z "$pytorch" ]; then
  packages+=(libtorch-dev python3-torch)  # Debian's libtorch, and its Python twin for the oracles
fi

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

# The Python package into the environment of `python`, built on the engine of build tree
# `build` (its extension module only: the engine's libraries are built already).
install_python_package() {  # python build
  BIGBATCH_ENGINE_BUILD=$2 "$1" -m pip install -q --no-build-isolation --no-index --no-deps \
    --force-reinstall ./python
  echo "setup: installed the Python package bigbatch for $1"
}

if [ -z "$pytorch" ]; then
  # Debian's Python is externally managed: the package goes into a virtual environment that
  # sees Debian's python3-torch (docs/python.md), made once outside the checkout.
  venv=${XDG_CACHE_HOME:-$HOME/.cache}/bigbatch/python-debian
  [ -x "$venv/bin/pip" ] || /usr/bin/python3 -m venv --system-site-packages "$venv"
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBIGBATCH_PYTHON="$venv/bin/python"
  cmake --build build
  echo "setup: built build/bigbatch"
  install_python_package "$venv/bin/python" build
  # The recipes call `bigbatch`: say how to reach it (a script cannot change its caller's PATH).
  command -v bigbatch >/dev/null ||
    echo "setup: the README's recipes call bigbatch: export PATH=\"$PWD/build:\$PATH\" (or call build/bigbatch)"
  exit 0
fi

# A PyTorch version: pip installs it (with numpy, which the tests use) into a virtual
# environment of its own, outside the checkout, made once and reused.
python=$pytorch
if [[ "$pytorch" =~ ^[0-9]+(\.[0-9]+)+$ ]]; then
  venv=${XDG_CACHE_HOME:-$HOME/.cache}/bigbatch/pytorch-$pytorch
  # Beside PyTorch, what the tests read with: numpy, pillow (the report's screenshots) and
  # TensorBoard (its reader checks the event files). .complete, written last, lists them: an
  # interrupted install is made again, never half-used, and a list that grew is installed.
  packages="torch==$pytorch numpy pillow tensorboard"
  if [ ! -f "$venv/.complete" ]; then
    echo "setup: installing PyTorch $pytorch with pip into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
  fi
  if [ "$(cat "$venv/.complete" 2>/dev/null)" != "$packages" ]; then
    # shellcheck disable=SC2086  # the list is words
    if "$venv/bin/pip" install -q $packages; then
      echo "$packages" >"$venv/.complete"
    elif [ -f "$venv/.complete" ]; then
      # A complete older environment (offline now?): its PyTorch still serves.
      echo "setup: warning: pip could not add to $venv ($packages); keeping it as it is (the tests that read TensorBoard's files skip)" >&2
    else
      echo "setup: error: pip could not install $packages into $venv" >&2
      exit 1
    fi
  fi
  python=$venv/bin/python
fi
if ! command -v "$python" >/dev/null; then
  echo "setup: error: --pytorch $pytorch is neither a PyTorch version (like 2.15.0) nor a Python interpreter" >&2
  exit 2
fi
python=$(command -v "$python")
if ! facts=$("$python" -c 'import torch; print(torch.__version__.split("+")[0]); print(torch.utils.cmake_prefix_path)' 2>/dev/null); then
  echo "setup: error: $python cannot import torch; install PyTorch for it (pip install torch) or pass --pytorch VERSION" >&2
  exit 2
fi
version=$(sed -n 1p <<<"$facts")
prefix=$(sed -n 2p <<<"$facts")
build=build-pytorch-$version
# The tests' Python is this one, whose PyTorch matches the libtorch linked (tests/CMakeLists.txt).
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DBIGBATCH_TEST_PYTHON="$python" -DBIGBATCH_PYTHON="$python"
cmake --build "$build"
install_python_package "$python" "$build"
echo "setup: built $build/bigbatch against PyTorch $version ($python)"
