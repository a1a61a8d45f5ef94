#pragma once
// Reader for the IDX format of MNIST and Fashion-MNIST (unsigned-byte arrays), gzipped or
// not. Every header field is checked against the bytes really present: a truncated, corrupt
// or lying file is a bigbatch::Error (Data) naming the file and what is wrong, never a crash
// or an allocation sized by the header.
//
//   IdxArray images = read_idx_file(dir + "/train-images-idx3-ubyte.gz");
//   // images.dims == {60000, 28, 28}; images.data.size() == 60000 * 28 * 28
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace bigbatch {

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
  int64_t count() const { return dims.empty() ? 0 : dims[0]; }
};

// Parses an uncompressed IDX image in memory; `name` appears in error messages.
IdxArray parse_idx(const uint8_t* bytes, size_t size, const std::string& name);

// Reads a file (gzip is detected and inflated) and parses it.
IdxArray read_idx_file(const std::string& path);

}  // namespace bigbatch
