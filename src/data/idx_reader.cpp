#include "data/idx_reader.h"

#include <zlib.h>

#include <cstdio>
#include <memory>

#include "core/error.h"

namespace bigbatch {

namespace {
constexpr uint8_t kUnsignedByteType = 0x08;
// Far above any real IDX file, far below what would exhaust memory while inflating a bomb.
constexpr size_t kMaxInflatedBytes = size_t{4} << 30;

[[noreturn]] void corrupt(const std::string& name, const std::string& what) {
  throw Error(
      ErrorKind::Data, "IDX file '" + name + "' " + what,
      "re-install the dataset package or point --dataset idx:DIR at intact MNIST-format files");
}

uint32_t read_big_endian_u32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}
}  // namespace

IdxArray parse_idx(const uint8_t* bytes, size_t size, const std::string& name) {
  if (size < 4)
    corrupt(name, "is truncated: " + std::to_string(size) + " bytes, no header");
  if (bytes[0] != 0 || bytes[1] != 0)
    corrupt(name, "has a bad magic number (not an IDX file)");
  if (bytes[2] != kUnsignedByteType) {
    char type[8];
    std::snprintf(type, sizeof type, "0x%02X", unsigned(bytes[2]));
    corrupt(name, "holds element type " + std::string(type) +
                      "; only unsigned bytes (0x08) are supported");
  }
  const size_t ndim = bytes[3];
  if (ndim == 0 || ndim > 4)
    corrupt(name, "declares " + std::to_string(ndim) + " dimensions (1 to 4 expected)");
  const size_t header = 4 + 4 * ndim;
  if (size < header)
    corrupt(name, "is truncated inside its header");
  IdxArray array;
  uint64_t elements = 1;
  for (size_t d = 0; d < ndim; ++d) {
    const uint32_t extent = read_big_endian_u32(bytes + 4 + 4 * d);
    array.dims.push_back(int64_t{extent});
    // Checked before multiplying, so a lying header cannot overflow the element count.
    if (extent != 0 && elements > (uint64_t{1} << 40) / extent)
      corrupt(name, "declares an absurd size");
    elements *= extent;
  }
  const uint64_t available = size - header;
  if (available < elements) {
    corrupt(name, "is truncated: header declares " + std::to_string(elements) +
                      " bytes of data, file has " + std::to_string(available));
  }
  if (available > elements) {
    corrupt(name, "has " + std::to_string(available - elements) + " bytes after the declared data");
  }
  array.data.assign(bytes + header, bytes + header + elements);
  return array;
}

IdxArray read_idx_file(const std::string& path) {
  std::unique_ptr<gzFile_s, int (*)(gzFile)> file(gzopen(path.c_str(), "rb"), gzclose);
  if (!file) {
    throw Error(ErrorKind::Data, "cannot open dataset file '" + path + "'",
                "check that it exists and is readable (Fashion-MNIST: apt-get install "
                "dataset-fashion-mnist)");
  }
  std::vector<uint8_t> bytes;
  std::vector<uint8_t> chunk(size_t{1} << 20);
  while (true) {
    const int got = gzread(file.get(), chunk.data(), static_cast<unsigned>(chunk.size()));
    if (got < 0) {
      int code = 0;
      const char* message = gzerror(file.get(), &code);
      corrupt(path, std::string("cannot be decompressed (") + message + ")");
    }
    if (got == 0)
      break;
    bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + got);
    if (bytes.size() > kMaxInflatedBytes)
      corrupt(path, "inflates to more than 4 GiB");
  }
  return parse_idx(bytes.data(), bytes.size(), path);
}

}  // namespace bigbatch
