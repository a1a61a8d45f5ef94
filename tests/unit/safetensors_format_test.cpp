#include "io/safetensors_format.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace bigbatch {
namespace {

std::string file_with(const std::string& json, size_t data_bytes) {
  std::string out(8, '\0');
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + json + std::string(data_bytes, '\x01');
}

std::string error_of(const std::string& bytes) {
  try {
    parse_safetensors_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                             "w.safetensors");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Format);
    return e.what();
  }
  ADD_FAILURE() << "expected a format error";
  return {};
}

TEST(SafetensorsFormat, BuildsAndParsesBackToBack) {
  std::vector<TensorEntry> entries(2);
  entries[0].name = "0.weight";
  entries[0].shape = {2, 3};
  entries[1].name = "0.bias";
  entries[1].dtype = DType::I64;
  entries[1].shape = {2};
  const std::string header = build_safetensors_header(entries, {{"model", "mlp"}});
  EXPECT_EQ((header.size() - 8) % 8, 0u);
  EXPECT_EQ(entries[1].begin, 24u);
  const std::string file = header + std::string(24 + 16, '\0');
  const auto parsed =
      parse_safetensors_header(reinterpret_cast<const uint8_t*>(file.data()), file.size(), "x");
  ASSERT_EQ(parsed.tensors.size(), 2u);
  EXPECT_EQ(parsed.tensors[0].name, "0.weight");
  EXPECT_EQ(parsed.tensors[1].dtype, DType::I64);
  EXPECT_EQ(parsed.tensors[1].shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(parsed.metadata.at("model"), "mlp");
  EXPECT_EQ(parsed.data_offset, header.size());
}

TEST(SafetensorsFormat, RejectsEveryKindOfLie) {
  const std::string good = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_NO_THROW(parse_safetensors_header(
      reinterpret_cast<const uint8_t*>(file_with(good, 8).data()), file_with(good, 8).size(), "x"));
  EXPECT_NE(error_of("abc").find("truncated"), std::string::npos);
  std::string long_header = file_with(good, 8);
  long_header[0] = '\x7f';
  long_header[5] = '\x01';
  EXPECT_NE(error_of(long_header).find("header"), std::string::npos);
  EXPECT_NE(error_of(file_with("[1,2]", 0)).find("not a JSON object"), std::string::npos);
  EXPECT_NE(error_of(file_with("{not json", 0)).find("not a JSON object"), std::string::npos);
  EXPECT_NE(error_of(file_with(good, 4)).find("outside"), std::string::npos);  // truncated data
  EXPECT_NE(error_of(file_with(good, 12)).find("after the last tensor"), std::string::npos);
  EXPECT_NE(error_of(file_with(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8))
                .find("need 12"),
            std::string::npos);
  EXPECT_NE(error_of(file_with(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", 8))
                .find("unknown dtype"),
            std::string::npos);
  EXPECT_NE(error_of(file_with(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8))
                .find("negative"),
            std::string::npos);
  EXPECT_NE(error_of(file_with(R"({"a":{"dtype":"F32","shape":[2]}})", 8)).find("without"),
            std::string::npos);
  EXPECT_NE(error_of(file_with(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                               12))
                .find("overlapping"),
            std::string::npos);
  EXPECT_NE(error_of(file_with(R"({"__metadata__":{"k":1}})", 0)).find("non-string"),
            std::string::npos);
  EXPECT_NE(
      error_of(
          file_with(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                    8))
          .find("absurd"),
      std::string::npos);
}

}  // namespace
}  // namespace bigbatch
