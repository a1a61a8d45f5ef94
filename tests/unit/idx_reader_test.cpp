#include "data/idx_reader.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>

#include "core/error.h"

namespace bigbatch {
namespace {

std::vector<uint8_t> idx_bytes(std::vector<uint32_t> dims, size_t data_bytes, uint8_t type = 0x08) {
  std::vector<uint8_t> bytes = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift : {24, 16, 8, 0})
      bytes.push_back(static_cast<uint8_t>(d >> shift));
  }
  for (size_t i = 0; i < data_bytes; ++i)
    bytes.push_back(static_cast<uint8_t>(i % 251));
  return bytes;
}

std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    parse_idx(bytes.data(), bytes.size(), "test.idx");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Data);
    return e.what();
  }
  ADD_FAILURE() << "expected a data error";
  return {};
}

TEST(IdxReader, ParsesImages) {
  const auto bytes = idx_bytes({3, 2, 2}, 12);
  const IdxArray array = parse_idx(bytes.data(), bytes.size(), "x");
  EXPECT_EQ(array.dims, (std::vector<int64_t>{3, 2, 2}));
  EXPECT_EQ(array.count(), 3);
  ASSERT_EQ(array.data.size(), 12u);
  EXPECT_EQ(array.data[11], 11);
}

TEST(IdxReader, RejectsCorruptHeadersAndSizes) {
  EXPECT_NE(error_of({0, 0}).find("truncated"), std::string::npos);
  EXPECT_NE(error_of({1, 0, 8, 1, 0, 0, 0, 0}).find("bad magic"), std::string::npos);
  EXPECT_NE(error_of(idx_bytes({2}, 2, 0x0D)).find("element type 0x0D"), std::string::npos);
  EXPECT_NE(error_of(idx_bytes({}, 0)).find("dimensions"), std::string::npos);
  EXPECT_NE(error_of(idx_bytes({3, 2, 2}, 11)).find("truncated: header declares 12 bytes"),
            std::string::npos);
  EXPECT_NE(error_of(idx_bytes({3, 2, 2}, 13)).find("1 bytes after"), std::string::npos);
  auto header_cut = idx_bytes({3, 2, 2}, 0);
  header_cut.resize(9);
  EXPECT_NE(error_of(header_cut).find("inside its header"), std::string::npos);
  // A header that claims 2^32-1 x 2^32-1 x 2^32-1 must fail without allocating for it.
  EXPECT_NE(error_of(idx_bytes({0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, 4)).find("absurd"),
            std::string::npos);
}

class IdxFileTest : public ::testing::Test {
 protected:
  std::string dir_ = [] {
    auto d =
        std::filesystem::temp_directory_path() /
        ("bigbatch_idx_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(d);
    return d.string();
  }();
  void TearDown() override { std::filesystem::remove_all(dir_); }
};

TEST_F(IdxFileTest, ReadsGzipAndPlainFiles) {
  const auto bytes = idx_bytes({4}, 4);
  const std::string gz_path = dir_ + "/labels.gz";
  gzFile gz = gzopen(gz_path.c_str(), "wb");
  ASSERT_NE(gz, nullptr);
  gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(gz);
  EXPECT_EQ(read_idx_file(gz_path).data.size(), 4u);

  const std::string plain_path = dir_ + "/labels";
  std::FILE* f = std::fopen(plain_path.c_str(), "wb");
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  EXPECT_EQ(read_idx_file(plain_path).dims, (std::vector<int64_t>{4}));
}

TEST_F(IdxFileTest, CorruptGzipAndMissingFilesAreDataErrors) {
  const std::string path = dir_ + "/broken.gz";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  const unsigned char garbage[] = {0x1f, 0x8b, 0x08, 0x00, 0,    0, 0, 0, 0,
                                   3,    0xde, 0xad, 0xbe, 0xef, 1, 2, 3};
  std::fwrite(garbage, 1, sizeof garbage, f);
  std::fclose(f);
  EXPECT_THROW(read_idx_file(path), Error);
  EXPECT_THROW(read_idx_file(dir_ + "/missing.gz"), Error);
}

}  // namespace
}  // namespace bigbatch
