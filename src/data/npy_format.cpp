#include "data/npy_format.h"

#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/files.h"

namespace bigbatch {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;

[[noreturn]] void bad_npy(const std::string& name, const std::string& problem,
                          const std::string& hint = "write it with numpy.save(path, array)") {
  throw Error(ErrorKind::Data, "numpy file '" + name + "' " + problem, hint);
}

// The header dict, read by a small recursive-descent parser over exactly what numpy writes:
// quoted strings, True/False and tuples of non-negative integers.
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& name) : text_(text), name_(name) {}

  void parse(std::string& descr, bool& fortran_order, std::vector<int64_t>& shape) {
    bool seen_descr = false, seen_order = false, seen_shape = false;
    expect('{');
    while (!peek('}')) {
      const std::string key = quoted();
      expect(':');
      if (key == "descr") {
        descr = quoted();
        seen_descr = true;
      } else if (key == "fortran_order") {
        fortran_order = boolean();
        seen_order = true;
      } else if (key == "shape") {
        shape = tuple();
        seen_shape = true;
      } else {
        bad_npy(name_, "has an unknown header key '" + key + "'");
      }
      if (!peek('}'))
        expect(',');
    }
    expect('}');
    if (!seen_descr || !seen_order || !seen_shape)
      bad_npy(name_, "has a header without 'descr', 'fortran_order' and 'shape'");
  }

 private:
  void skip_space() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\n' || text_[at_] == '\t'))
      ++at_;
  }
  bool peek(char c) {
    skip_space();
    return at_ < text_.size() && text_[at_] == c;
  }
  void expect(char c) {
    if (!peek(c))
      bad_npy(name_, "has a malformed header (expected '" + std::string(1, c) + "')");
    ++at_;
  }
  std::string quoted() {
    skip_space();
    if (at_ >= text_.size() || (text_[at_] != '\'' && text_[at_] != '"'))
      bad_npy(name_, "has a malformed header (expected a quoted name)");
    const char quote = text_[at_++];
    const size_t end = text_.find(quote, at_);
    if (end == std::string::npos)
      bad_npy(name_, "has a malformed header (an unterminated string)");
    std::string value = text_.substr(at_, end - at_);
    at_ = end + 1;
    return value;
  }
  bool boolean() {
    skip_space();
    for (const auto& [word, value] :
         {std::pair<const char*, bool>{"True", true}, {"False", false}}) {
      const size_t n = std::strlen(word);
      if (text_.compare(at_, n, word) == 0) {
        at_ += n;
        return value;
      }
    }
    bad_npy(name_, "has a malformed header (fortran_order is not True or False)");
  }
  std::vector<int64_t> tuple() {
    std::vector<int64_t> dims;
    expect('(');
    while (!peek(')')) {
      skip_space();
      int64_t value = 0;
      size_t digits = 0;
      while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') {
        if (value > (std::numeric_limits<int64_t>::max() - 9) / 10)
          bad_npy(name_, "has a dimension too large to be real");
        value = value * 10 + (text_[at_++] - '0');
        ++digits;
      }
      if (digits == 0)
        bad_npy(name_, "has a malformed shape (expected a non-negative integer)");
      dims.push_back(value);
      if (!peek(')'))
        expect(',');
    }
    expect(')');
    return dims;
  }

  const std::string& text_;
  const std::string& name_;
  size_t at_ = 0;
};

NpyType type_of(const std::string& descr, const std::string& name) {
  if (descr == "<f4")
    return NpyType::F32;
  if (descr == "<f8")
    return NpyType::F64;
  if (descr == "|u1" || descr == "<u1")
    return NpyType::U8;
  if (descr == "<i4")
    return NpyType::I32;
  if (descr == "<i8")
    return NpyType::I64;
  if (!descr.empty() && descr[0] == '>') {
    bad_npy(name, "is big-endian (dtype '" + descr + "')",
            "convert it with array.astype(array.dtype.newbyteorder('<')) before numpy.save");
  }
  if (descr.find('O') != std::string::npos) {
    bad_npy(name, "holds Python objects (dtype 'O'), not numbers",
            "save a numeric array, e.g. numpy.stack(list_of_arrays).astype('float32')");
  }
  bad_npy(name, "has dtype '" + descr + "'; bigbatch reads float32, float64, uint8, int32, int64",
          "convert it with array.astype('float32') (inputs) or array.astype('int64') (labels)");
}

}  // namespace

const char* to_string(NpyType type) {
  switch (type) {
    case NpyType::F32:
      return "float32";
    case NpyType::F64:
      return "float64";
    case NpyType::U8:
      return "uint8";
    case NpyType::I32:
      return "int32";
    case NpyType::I64:
      return "int64";
  }
  return "unknown";
}

size_t item_size(NpyType type) {
  switch (type) {
    case NpyType::F32:
    case NpyType::I32:
      return 4;
    case NpyType::F64:
    case NpyType::I64:
      return 8;
    case NpyType::U8:
      return 1;
  }
  return 1;
}

bool is_floating(NpyType type) {
  return type == NpyType::F32 || type == NpyType::F64;
}

int64_t NpyArray::elements() const {
  // A zero anywhere makes the array empty, however large the other dimensions (the fuzzer
  // found the product overflowing before it reached the zero); otherwise parse_npy checked
  // that the product fits the bytes there are.
  for (int64_t d : shape) {
    if (d == 0)
      return 0;
  }
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

NpyArray parse_npy(const uint8_t* bytes, size_t size, const std::string& name) {
  if (size < kMagicSize + 4 || std::memcmp(bytes, kMagic, kMagicSize) != 0) {
    bad_npy(name, "is not a .npy file (no \\x93NUMPY magic)",
            "write it with numpy.save (an .npz archive is given whole: --dataset npy:FILE.npz)");
  }
  const uint8_t major = bytes[6];
  size_t header_size = 0;
  size_t header_begin = 0;
  if (major == 1) {
    header_size = size_t(bytes[8]) | (size_t(bytes[9]) << 8);
    header_begin = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12)
      bad_npy(name, "is truncated inside its header");
    header_size = size_t(bytes[8]) | (size_t(bytes[9]) << 8) | (size_t(bytes[10]) << 16) |
                  (size_t(bytes[11]) << 24);
    header_begin = 12;
  } else {
    bad_npy(name, "has format version " + std::to_string(major) + "; bigbatch reads 1 to 3");
  }
  if (header_size > size - header_begin)
    bad_npy(name, "is truncated inside its header");
  const std::string header(reinterpret_cast<const char*>(bytes + header_begin), header_size);
  std::string descr;
  bool fortran_order = false;
  NpyArray array;
  HeaderParser(header, name).parse(descr, fortran_order, array.shape);
  array.type = type_of(descr, name);
  if (fortran_order) {
    bad_npy(name, "is in Fortran order",
            "save numpy.ascontiguousarray(array) instead, which is in C order");
  }
  const size_t data_begin = header_begin + header_size;
  const size_t available = size - data_begin;
  // The element count, checked against the bytes there are before anything is multiplied past
  // them (a lying shape must not overflow into a small product).
  size_t elements = 1;
  bool empty = false;
  for (int64_t d : array.shape)
    empty = empty || d == 0;
  for (int64_t d : empty ? std::vector<int64_t>{0} : array.shape) {
    if (d != 0 && elements > available / size_t(d))
      elements = std::numeric_limits<size_t>::max();
    else
      elements *= size_t(d);
  }
  const size_t width = item_size(array.type);
  if (elements == std::numeric_limits<size_t>::max() || elements > available / width ||
      elements * width != available) {
    std::string shape = "(";
    for (size_t i = 0; i < array.shape.size(); ++i)
      shape += (i ? ", " : "") + std::to_string(array.shape[i]);
    bad_npy(name,
            "says shape " + shape + ") of " + to_string(array.type) + " but holds " +
                std::to_string(available) + " bytes of data",
            "the file is truncated or was not written by numpy.save; write it again");
  }
  array.data.assign(reinterpret_cast<const char*>(bytes + data_begin), available);
  return array;
}

std::string encode_npy(const NpyArray& array) {
  const char* descr[] = {"<f4", "<f8", "|u1", "<i4", "<i8"};
  std::string shape = "(";  // as Python prints tuples: "()", "(3,)", "(2, 3)"
  for (size_t i = 0; i < array.shape.size(); ++i)
    shape += (i ? ", " : "") + std::to_string(array.shape[i]);
  shape += array.shape.size() == 1 ? ",)" : ")";
  std::string header = std::string("{'descr': '") + descr[static_cast<int>(array.type)] +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  const bool wide = header.size() + 12 >= 65535;
  const size_t prefix = wide ? 12 : 10;
  // numpy pads the header with spaces to a multiple of 64 bytes, ending in a newline.
  while ((prefix + header.size() + 1) % 64 != 0)
    header += ' ';
  header += '\n';
  std::string file(kMagic, kMagicSize);
  file += char(wide ? 2 : 1);
  file += char(0);
  const size_t n = header.size();
  for (size_t byte = 0; byte < (wide ? 4u : 2u); ++byte)
    file += char((n >> (8 * byte)) & 0xff);
  return file + header + array.data;
}

NpyArray read_npy_file(const std::string& path) {
  if (!path_exists(path))
    throw Error(ErrorKind::Data, "numpy file '" + path + "' not found",
                "write it with numpy.save(path, array)");
  const std::string bytes = read_text_file(path);
  return parse_npy(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
}

}  // namespace bigbatch
