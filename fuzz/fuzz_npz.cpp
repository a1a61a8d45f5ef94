// libFuzzer target: the .npz reader (zip container, then .npy members) must turn any bytes into
// arrays or a bigbatch::Error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "data/npz_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    // A small inflation limit: the fuzzer's memory, not the format, bounds what it may try.
    const bigbatch::NpzArchive archive = bigbatch::parse_npz(
        std::string(reinterpret_cast<const char*>(data), size), "fuzz", uint64_t{1} << 20);
    for (const auto& [name, array] : archive.arrays) {
      if (array.data.size() != size_t(array.elements()) * bigbatch::item_size(array.type))
        __builtin_trap();
    }
  } catch (const bigbatch::Error&) {
  }
  return 0;
}
