#!/usr/bin/env bash
# Runs the whole test suite: every ctest test of the Release build against Debian's libtorch
# 1.13 (unit, equivalence, PyTorch oracle, end-to-end CLI), the torch-free core's unit tests
# under ASan and UBSan, libFuzzer on every parser of untrusted input, and then the torch,
# oracle and end-to-end suites again against PyTorch 2.x's libtorch (CUDA-enabled; its GPU tests
# skip without a GPU), with PyTorch 2.x in Python as the oracle.
# Expects scripts/setup.sh to have run (the README's test command runs both); sets up the
# PyTorch 2.x build itself (scripts/setup.sh --pytorch; the wheel is cached outside the checkout).
#
#   BIGBATCH_TEST_PYTORCH   the PyTorch of the second build: a version pip offers or a Python
#                           that imports torch (default 2.15.0); "none" skips it
#   BIGBATCH_FUZZ_SECONDS   seconds of fuzzing per target (default 15)
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

# The same engine on today's PyTorch. The torch-free core, the sanitizers and the fuzzers do
# not depend on libtorch and ran above; here everything that does.
pytorch=${BIGBATCH_TEST_PYTORCH:-2.15.0}
if [ "$pytorch" != "none" ]; then
  setup_log=$(mktemp)
  scripts/setup.sh --pytorch "$pytorch" | tee "$setup_log"
  second=$(sed -n 's/^setup: built \(.*\)\/bigbatch against .*/\1/p' "$setup_log")
  rm -f "$setup_log"
  (cd "$second" && ctest --output-on-failure -j 2 -E '^(core|scripts)\.')
fi
