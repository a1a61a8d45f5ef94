#include "io/safetensors_format.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace bigbatch {

namespace {
struct DTypeName {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeName kDTypes[] = {
    {DType::F64, "F64", 8},   {DType::F32, "F32", 4}, {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2}, {DType::I64, "I64", 8}, {DType::I32, "I32", 4},
    {DType::I16, "I16", 2},   {DType::I8, "I8", 1},   {DType::U8, "U8", 1},
    {DType::Bool, "BOOL", 1},
};
// Real headers are kilobytes; the cap stops a lying length from driving a huge parse.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

[[noreturn]] void bad_file(const std::string& name, const std::string& what) {
  throw Error(ErrorKind::Format, "safetensors file '" + name + "' " + what,
              "pass a file written by bigbatch --save-weights or by safetensors.torch.save_file");
}
}  // namespace

const char* to_string(DType dtype) {
  for (const auto& d : kDTypes) {
    if (d.dtype == dtype)
      return d.name;
  }
  return "?";
}

size_t dtype_size(DType dtype) {
  for (const auto& d : kDTypes) {
    if (d.dtype == dtype)
      return d.size;
  }
  return 0;
}

SafetensorsHeader parse_safetensors_header(const uint8_t* bytes, size_t size,
                                           const std::string& name) {
  if (size < 8)
    bad_file(name, "is truncated: " + std::to_string(size) + " bytes, no header");
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i)
    header_length = (header_length << 8) | bytes[i];
  if (header_length > kMaxHeaderBytes || header_length > size - 8) {
    bad_file(name, "declares a " + std::to_string(header_length) + "-byte header but holds " +
                       std::to_string(size - 8) + " bytes after the length");
  }
  nlohmann::json json = nlohmann::json::parse(bytes + 8, bytes + 8 + header_length, nullptr,
                                              /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object())
    bad_file(name, "has a header that is not a JSON object");

  SafetensorsHeader header;
  header.data_offset = 8 + header_length;
  const uint64_t data_size = size - header.data_offset;
  for (const auto& [key, value] : json.items()) {
    if (key == "__metadata__") {
      if (!value.is_object())
        bad_file(name, "has __metadata__ that is not an object");
      for (const auto& [meta_key, meta_value] : value.items()) {
        if (!meta_value.is_string())
          bad_file(name, "has a non-string value for metadata '" + meta_key + "'");
        header.metadata[meta_key] = meta_value.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + key + "'";
    if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") ||
        !value.contains("data_offsets")) {
      bad_file(name, "describes " + where + " without dtype, shape and data_offsets");
    }
    TensorEntry entry;
    entry.name = key;
    const auto& dtype = value["dtype"];
    const auto* known =
        dtype.is_string()
            ? std::find_if(std::begin(kDTypes), std::end(kDTypes),
                           [&](const DTypeName& d) { return dtype.get<std::string>() == d.name; })
            : std::end(kDTypes);
    if (known == std::end(kDTypes))
      bad_file(name, "gives " + where + " an unknown dtype " + dtype.dump());
    entry.dtype = known->dtype;
    const auto& shape = value["shape"];
    if (!shape.is_array())
      bad_file(name, "gives " + where + " a shape that is not a list");
    uint64_t elements = 1;
    for (const auto& extent : shape) {
      if (!extent.is_number_unsigned())
        bad_file(name, "gives " + where + " a negative or non-integer extent");
      const auto e = extent.get<uint64_t>();
      if (e != 0 && elements > (uint64_t{1} << 50) / e)
        bad_file(name, "gives " + where + " an absurd shape");
      elements *= e;
      entry.shape.push_back(static_cast<int64_t>(e));
    }
    const auto& offsets = value["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
      bad_file(name, "gives " + where + " data_offsets that are not two non-negative integers");
    }
    entry.begin = offsets[0].get<uint64_t>();
    entry.end = offsets[1].get<uint64_t>();
    if (entry.begin > entry.end || entry.end > data_size) {
      bad_file(name, "gives " + where + " offsets [" + std::to_string(entry.begin) + ", " +
                         std::to_string(entry.end) + "] outside the " + std::to_string(data_size) +
                         "-byte data section (truncated file?)");
    }
    if (entry.end - entry.begin != elements * dtype_size(entry.dtype)) {
      bad_file(name, "gives " + where + " " + std::to_string(entry.end - entry.begin) +
                         " bytes, but its shape and dtype need " +
                         std::to_string(elements * dtype_size(entry.dtype)));
    }
    header.tensors.push_back(std::move(entry));
  }
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const TensorEntry& a, const TensorEntry& b) { return a.begin < b.begin; });
  uint64_t expected_begin = 0;
  for (const auto& t : header.tensors) {
    if (t.begin != expected_begin) {
      bad_file(name, "has overlapping or gapped tensor data at tensor '" + t.name + "'");
    }
    expected_begin = t.end;
  }
  if (expected_begin != data_size) {
    bad_file(name,
             "has " + std::to_string(data_size - expected_begin) + " bytes after the last tensor");
  }
  return header;
}

std::string build_safetensors_header(std::vector<TensorEntry>& tensors,
                                     const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  if (!metadata.empty())
    json["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (auto& t : tensors) {
    uint64_t elements = 1;
    for (int64_t extent : t.shape)
      elements *= static_cast<uint64_t>(extent);
    t.begin = offset;
    t.end = offset + elements * dtype_size(t.dtype);
    offset = t.end;
    json[t.name] = {
        {"dtype", to_string(t.dtype)}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
  }
  std::string text = json.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t length = text.size();
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>((length >> (8 * i)) & 0xFF);
  return out + text;
}

}  // namespace bigbatch
