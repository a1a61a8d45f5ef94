#pragma once
// numpy's .npy format. The reader (numpy.save), versions 1 to 3: the magic, a header that is a
// Python dict literal ({'descr': '<f4', 'fortran_order': False, 'shape': (60000, 28, 28), }),
// then the array's bytes in C order. Every header field is checked against the bytes really
// present: a truncated, lying or unsupported file (big-endian, Fortran order, object arrays)
// is a bigbatch::Error (Data) naming the file, what is wrong and the numpy call that fixes it —
// never a crash or an allocation sized by the header alone. The writer makes what numpy.load
// reads (bigbatch predict's output).
//
//   NpyArray x = read_npy_file(dir + "/x_train.npy");
//   // x.type == NpyType::F32; x.shape == {60000, 28, 28}; x.data holds 60000 * 784 floats
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace bigbatch {

// The little-endian dtypes bigbatch reads ('<f4', '<f8', '|u1', '<i4', '<i8').
enum class NpyType { F32, F64, U8, I32, I64 };
const char* to_string(NpyType type);  // "float32", ...
size_t item_size(NpyType type);
bool is_floating(NpyType type);

struct NpyArray {
  NpyType type = NpyType::F32;
  std::vector<int64_t> shape;  // empty for a 0-d array
  std::string data;            // the elements' little-endian bytes, C order
  int64_t count() const { return shape.empty() ? 0 : shape[0]; }
  int64_t elements() const;
};

// Parses a whole .npy file held in memory; `name` appears in error messages.
NpyArray parse_npy(const uint8_t* bytes, size_t size, const std::string& name);

NpyArray read_npy_file(const std::string& path);

// The file numpy.load reads back as `array` (version 1, or 2 for a header over 64 KiB).
std::string encode_npy(const NpyArray& array);

}  // namespace bigbatch
