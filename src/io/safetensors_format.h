#pragma once
// The safetensors container (https://github.com/huggingface/safetensors), torch-free so that
// it can be fuzzed: 8 bytes little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [512, 784], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value"}}
// then the raw little-endian tensor bytes. Offsets are relative to the end of the header.
// The parser trusts nothing: lengths, offsets, shapes and dtypes are checked against each
// other and against the file size, and any lie is a bigbatch::Error (Format).
//
//   SafetensorsHeader h = parse_safetensors_header(bytes.data(), bytes.size(), path);
//   for (const TensorEntry& t : h.tensors) use(bytes.data() + h.data_offset + t.begin, ...);
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace bigbatch {

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, Bool };

const char* to_string(DType dtype);
size_t dtype_size(DType dtype);

struct TensorEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<TensorEntry> tensors;  // in data order
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // where the data section starts in the file
};

SafetensorsHeader parse_safetensors_header(const uint8_t* bytes, size_t size,
                                           const std::string& name);

// Serialises a header for tensors laid out back to back in the given order (offsets are
// computed here), padded with spaces to a multiple of 8 bytes as the format recommends.
// Returns the 8-byte length prefix followed by the JSON.
std::string build_safetensors_header(std::vector<TensorEntry>& tensors,
                                     const std::map<std::string, std::string>& metadata);

}  // namespace bigbatch
