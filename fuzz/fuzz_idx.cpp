// libFuzzer target: the IDX reader must turn any bytes into an array or a bigbatch::Error.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "data/idx_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    bigbatch::parse_idx(data, size, "fuzz");
  } catch (const bigbatch::Error&) {
  }
  return 0;
}
