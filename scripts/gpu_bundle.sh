#!/usr/bin/env bash
# Prepares, on this Debian machine, what bench/gpu_check.sh needs on a GPU machine that has no
# package registries (issue 19): the Debian packages of the libraries bigbatch builds with
# besides libtorch (unpacked, not installed: CLI11, toml++, nlohmann-json, zlib, minizip,
# SentencePiece, GoogleTest, and Gloo's headers, which a PyTorch wheel's libtorch needs for data
# parallelism and does not ship: docs/dependencies.md) and the data its checks train on
# (Fashion-MNIST, fortunes).
# Writes .gpu-bundle/ (about 40 MB, git-ignored); the device tool carries it with the tree.
set -euo pipefail
cd "$(dirname "$0")/.."

bundle=.gpu-bundle
rm -rf "$bundle"
mkdir -p "$bundle/debs" "$bundle/root" "$bundle/data"
packages=(
  libcli11-dev libtomlplusplus-dev libtomlplusplus3 nlohmann-json3-dev
  zlib1g-dev zlib1g libminizip-dev libminizip1 libsentencepiece-dev libsentencepiece0
  libgtest-dev libgloo-dev
)
(cd "$bundle/debs" && apt-get download -q "${packages[@]}")
for deb in "$bundle"/debs/*.deb; do
  dpkg-deb -x "$deb" "$bundle/root"
done
rm -rf "$bundle/debs"
# zlib's runtime sits under /lib in Debian's package: one library directory for the linker.
if [ -d "$bundle/root/lib/x86_64-linux-gnu" ]; then
  cp -a "$bundle/root/lib/x86_64-linux-gnu/." "$bundle/root/usr/lib/x86_64-linux-gnu/"
fi
# Absolute symbolic links (Debian's libz.so -> /lib/...) would point outside the bundle.
find "$bundle/root" -type l -lname '/*' | while read -r link; do
  ln -sf "$(basename "$(readlink "$link")")" "$link"
done

cp -a /usr/share/datasets/fashion-mnist "$bundle/data/fashion-mnist"
cp -a /usr/share/games/fortunes "$bundle/data/fortunes"
du -sh "$bundle"
