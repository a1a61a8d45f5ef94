// libFuzzer target: the safetensors header parser must accept a consistent file or throw a
// bigbatch::Error, and what it accepts must lie inside the input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "core/error.h"
#include "io/safetensors_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto header = bigbatch::parse_safetensors_header(data, size, "fuzz");
    for (const auto& t : header.tensors) {
      if (header.data_offset + t.end > size || t.begin > t.end)
        std::abort();
    }
  } catch (const bigbatch::Error&) {
  }
  return 0;
}
