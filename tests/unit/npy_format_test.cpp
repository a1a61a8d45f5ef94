// The .npy reader: numpy's format as numpy.save writes it, and every lie or unsupported layout
// a one-line bigbatch::Error naming the file (fuzz/fuzz_npy.cpp throws random bytes at it).
#include "data/npy_format.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "core/error.h"

namespace bigbatch {
namespace {

// A version-1 file: magic, version, header length, the dict padded to 64 bytes, the data.
std::string npy_file(const std::string& dict, const std::string& data, int version = 1) {
  std::string header = dict;
  const size_t prefix = version == 1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64 != 0)
    header += ' ';
  header += '\n';
  std::string file = "\x93NUMPY";
  file += char(version);
  file += char(0);
  const size_t n = header.size();
  file += char(n & 0xff);
  file += char((n >> 8) & 0xff);
  if (version != 1) {
    file += char((n >> 16) & 0xff);
    file += char((n >> 24) & 0xff);
  }
  return file + header + data;
}

NpyArray parse(const std::string& file) {
  return parse_npy(reinterpret_cast<const uint8_t*>(file.data()), file.size(), "x.npy");
}

std::string error_of(const std::string& file) {
  try {
    parse(file);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Data);
    EXPECT_NE(std::string(e.what()).find("'x.npy'"), std::string::npos) << e.what();
    return e.what();
  }
  return "no error";
}

std::string floats(int n) {
  std::string data(size_t(n) * 4, '\0');
  for (int i = 0; i < n; ++i) {
    const float v = float(i);
    std::memcpy(&data[size_t(i) * 4], &v, 4);
  }
  return data;
}

TEST(NpyReader, ReadsWhatNumpySaveWrites) {
  const NpyArray a =
      parse(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", floats(6)));
  EXPECT_EQ(a.type, NpyType::F32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.count(), 2);
  float last = 0;
  std::memcpy(&last, a.data.data() + 20, 4);
  EXPECT_EQ(last, 5.0f);
  const NpyArray labels =
      parse(npy_file("{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", "\x01\x02\x09"));
  EXPECT_EQ(labels.type, NpyType::U8);
  EXPECT_EQ(labels.shape, (std::vector<int64_t>{3}));
  const NpyArray v2 = parse(npy_file("{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }",
                                     std::string(8, '\0'), 2));
  EXPECT_EQ(v2.type, NpyType::I64);
  const NpyArray empty =
      parse(npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (0, 5), }", ""));
  EXPECT_EQ(empty.elements(), 0);
  // Empty whatever the other dimensions (their product alone would overflow: found by fuzzing).
  const NpyArray huge_but_empty = parse(npy_file(
      "{'descr': '|u1', 'fortran_order': False, 'shape': (4294967296, 4294967296, 0), }", ""));
  EXPECT_EQ(huge_but_empty.elements(), 0);
}

TEST(NpyReader, RefusesLayoutsItCannotReadWithTheFix) {
  EXPECT_NE(
      error_of(npy_file("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", floats(1)))
          .find("big-endian"),
      std::string::npos);
  EXPECT_NE(
      error_of(npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", floats(6)))
          .find("numpy.ascontiguousarray"),
      std::string::npos);
  EXPECT_NE(error_of(npy_file("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }",
                              std::string(16, '\0')))
                .find("Python objects"),
            std::string::npos);
  EXPECT_NE(error_of(npy_file("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }",
                              std::string(8, '\0')))
                .find("astype"),
            std::string::npos);
}

TEST(NpyReader, RefusesHeadersThatLieAboutTheData) {
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  EXPECT_NE(error_of(npy_file(dict, floats(5))).find("says shape (2, 3) of float32 but holds 20"),
            std::string::npos);
  EXPECT_NE(error_of(npy_file(dict, floats(7))).find("holds 28 bytes"), std::string::npos);
  // A shape whose product overflows 64 bits must not wrap around to the bytes there are.
  EXPECT_NE(error_of(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': "
                              "(4294967296, 4294967296, 4), }",
                              floats(4)))
                .find("says shape"),
            std::string::npos);
  EXPECT_NE(error_of(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': "
                              "(99999999999999999999999,), }",
                              floats(1)))
                .find("too large"),
            std::string::npos);
  EXPECT_NE(error_of(npy_file("{'descr': '<f4', 'shape': (1,), }", floats(1))).find("without"),
            std::string::npos);
  EXPECT_NE(error_of(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), "
                              "'extra': 1}",
                              floats(1)))
                .find("unknown header key 'extra'"),
            std::string::npos);
  EXPECT_NE(
      error_of(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (a,), }", floats(1)))
          .find("malformed shape"),
      std::string::npos);
  EXPECT_NE(error_of("PK\x03\x04 an npz archive").find("not a .npy file"), std::string::npos);
  std::string truncated = npy_file(dict, floats(6)).substr(0, 30);
  EXPECT_NE(error_of(truncated).find("truncated inside its header"), std::string::npos);
  std::string version9 = npy_file(dict, floats(6));
  version9[6] = 9;
  EXPECT_NE(error_of(version9).find("format version 9"), std::string::npos);
}

TEST(NpyWriter, WritesWhatTheReaderAndNumpyRead) {
  NpyArray array;
  array.type = NpyType::F32;
  array.shape = {2, 3};
  array.data = floats(6);
  const std::string file = encode_npy(array);
  EXPECT_EQ(file.size() % 64, 24u);  // the header padded to 64 bytes, then 24 bytes of data
  EXPECT_NE(file.find("'shape': (2, 3), }"), std::string::npos);
  const NpyArray back = parse(file);
  EXPECT_EQ(back.shape, array.shape);
  EXPECT_EQ(back.data, array.data);
  array.shape = {6};
  EXPECT_NE(encode_npy(array).find("(6,)"), std::string::npos);
  EXPECT_EQ(parse(encode_npy(array)).shape, (std::vector<int64_t>{6}));
}

}  // namespace
}  // namespace bigbatch
