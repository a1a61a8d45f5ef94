// libFuzzer target: the .npy reader must turn any bytes into an array or a bigbatch::Error.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "data/npy_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const bigbatch::NpyArray array = bigbatch::parse_npy(data, size, "fuzz");
    // What the loader relies on: the bytes are exactly the shape's elements.
    if (array.data.size() != size_t(array.elements()) * bigbatch::item_size(array.type))
      __builtin_trap();
  } catch (const bigbatch::Error&) {
  }
  return 0;
}
