#!/usr/bin/env bash
# Runs the whole test suite: every ctest test of the Release build (unit, equivalence, PyTorch
# oracle, end-to-end CLI), then the torch-free core's unit tests under ASan and UBSan.
# Expects scripts/setup.sh to have run (the README's test command runs both).
set -euo pipefail
cd "$(dirname "$0")/.."

cmake --build build
(cd build && ctest --output-on-failure -j 2)

# The sanitizer build leaves libtorch out: its prebuilt library is not instrumented, and the
# code that parses untrusted input (IDX, safetensors, TOML, flags, plans) is all torch-free.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DBIGBATCH_WITH_TORCH=OFF -DBIGBATCH_SANITIZE=ON
cmake --build build-asan
(cd build-asan && ctest --output-on-failure -j 2)

# Every parser of untrusted input under libFuzzer: the corpus (seeds and past crashers) is
# replayed, then each target is fuzzed for a bounded time.
scripts/fuzz.sh "${BIGBATCH_FUZZ_SECONDS:-15}"
