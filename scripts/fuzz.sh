#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan, no torch), replays the corpus in
# fuzz/corpus/ (seeds and every crasher found so far), then fuzzes each target for SECONDS
# (default 20). A crash fails the script and leaves the input in build-fuzz/crashes/: add it to
# fuzz/corpus/<target>/ once fixed, so it stays a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"

CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBIGBATCH_FUZZ=ON \
  -DCMAKE_CXX_COMPILER_LAUNCHER= > /dev/null
cmake --build build-fuzz
mkdir -p build-fuzz/crashes
for target in idx safetensors config units text npy npz tokens; do
  binary="build-fuzz/fuzz/fuzz_${target}"
  echo "fuzz: ${target}: replaying fuzz/corpus/${target}"
  "$binary" -runs=0 "fuzz/corpus/${target}" > "build-fuzz/${target}-replay.log" 2>&1 ||
    { tail -40 "build-fuzz/${target}-replay.log"; exit 1; }
  # New inputs go to a scratch corpus, never into the repository.
  scratch="build-fuzz/corpus-${target}"
  mkdir -p "$scratch"
  echo "fuzz: ${target}: ${seconds} s"
  "$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="build-fuzz/crashes/${target}-" "$scratch" "fuzz/corpus/${target}" \
    > "build-fuzz/${target}.log" 2>&1 || { tail -60 "build-fuzz/${target}.log"; exit 1; }
  grep -E "stat::number_of_executed_units" "build-fuzz/${target}.log" | sed "s/^/fuzz: ${target}: /"
done
echo "fuzz: no crash"
