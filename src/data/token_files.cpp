#include "data/token_files.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "core/error.h"

namespace bigbatch {

namespace fs = std::filesystem;

namespace {

constexpr char kMegatronMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr size_t kMegatronHeaderBytes = 9 + 8 + 1 + 8 + 8;
constexpr int32_t kLlmcMagicGpt2 = 20240520;    // version 1: uint16 tokens
constexpr int32_t kLlmcMagicLlama3 = 20240801;  // version 7: uint32 tokens
constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);

[[noreturn]] void bad_file(const std::string& name, const std::string& why,
                           const std::string& fix) {
  throw Error(ErrorKind::Data, "token file '" + name + "' " + why, fix);
}

// Little-endian reads at any alignment (the files are written little-endian everywhere).
template <typename T>
T read_le(const uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

// Megatron's DType codes (megatron/core/datasets/indexed_dataset.py): the integer ones.
struct TokenType {
  size_t bytes = 0;
  bool is_signed = false;
  const char* name = "";
};
bool megatron_type(uint8_t code, TokenType& type) {
  switch (code) {
    case 1:
      type = {1, false, "uint8"};
      return true;
    case 2:
      type = {1, true, "int8"};
      return true;
    case 3:
      type = {2, true, "int16"};
      return true;
    case 4:
      type = {4, true, "int32"};
      return true;
    case 5:
      type = {8, true, "int64"};
      return true;
    case 8:
      type = {2, false, "uint16"};
      return true;
    default:
      return false;
  }
}

// Token `i` of `data` as an id, checked: ids are 0 <= id <= INT32_MAX (what a vocabulary can
// hold and an int32 row stores).
int32_t token_at(const uint8_t* data, int64_t i, const TokenType& type, const std::string& name) {
  const uint8_t* p = data + size_t(i) * type.bytes;
  int64_t id = 0;
  switch (type.bytes) {
    case 1:
      id = type.is_signed ? int64_t(read_le<int8_t>(p)) : int64_t(read_le<uint8_t>(p));
      break;
    case 2:
      id = type.is_signed ? int64_t(read_le<int16_t>(p)) : int64_t(read_le<uint16_t>(p));
      break;
    case 4:
      id = type.is_signed ? int64_t(read_le<int32_t>(p)) : int64_t(read_le<uint32_t>(p));
      break;
    default:
      id = read_le<int64_t>(p);
      break;
  }
  if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
    bad_file(name,
             "holds token id " + std::to_string(id) + " at token " + std::to_string(i) +
                 ": ids run from 0 to 2147483647",
             "check that the file was written with the dtype its header names");
  }
  return static_cast<int32_t>(id);
}

// Appends tokens [0, count) of `data` to the documents of `out`, where they lie (kept alive
// by `owner`), after checking every id: rows read them later unchecked.
void append_tokens(const uint8_t* data, int64_t count, const TokenType& type,
                   const std::string& name, TokenFiles& out,
                   const std::shared_ptr<const void>& owner) {
  int64_t largest = out.largest_token;
  for (int64_t i = 0; i < count; ++i)
    largest = std::max<int64_t>(largest, token_at(data, i, type, name));
  out.largest_token = largest;
  out.documents.spans.append(owner, data, count, int(type.bytes), type.is_signed);
}

// A read-only memory map of a whole file (none for an empty one).
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
      throw Error(ErrorKind::Data, "cannot open token file '" + path + "': " + std::strerror(errno),
                  "check the path and its permissions");
    }
    struct stat info {};
    if (::fstat(fd_, &info) != 0 || !S_ISREG(info.st_mode)) {
      ::close(fd_);
      throw Error(ErrorKind::Data, "token file '" + path + "' is not a regular file",
                  "point --dataset tokens:PATH at a .bin file, a Megatron prefix or a directory");
    }
    size_ = size_t(info.st_size);
    if (size_ > 0) {
      void* map = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
      if (map == MAP_FAILED) {
        const int code = errno;
        ::close(fd_);
        throw Error(ErrorKind::Data, "cannot map token file '" + path + "': " + std::strerror(code),
                    "check that the file is readable and the machine has address space for it");
      }
      data_ = static_cast<const uint8_t*>(map);
    }
  }
  ~MappedFile() {
    if (data_)
      ::munmap(const_cast<uint8_t*>(data_), size_);
    if (fd_ >= 0)
      ::close(fd_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  int fd_ = -1;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

void note_format(TokenFiles& out, const std::string& format) {
  if (out.format.empty()) {
    out.format = format;
  } else if (out.format.find(format) == std::string::npos) {
    out.format += ", " + format;
  }
}

// One .bin file: Megatron when PREFIX.idx is beside it, else llm.c or headerless by --token-dtype.
void read_one_file(const fs::path& bin, TokenDtype dtype, TokenFiles& out) {
  fs::path idx = bin;
  idx.replace_extension(".idx");
  std::error_code error;
  if (fs::is_regular_file(idx, error)) {
    if (dtype != TokenDtype::Auto) {
      bad_file(bin.string(), "has a Megatron index beside it, which names its dtype",
               "drop --token-dtype");
    }
    // The index is read whole now; the tokens stay mapped for the rows that read them.
    const MappedFile index(idx.string());
    const auto data = std::make_shared<const MappedFile>(bin.string());
    parse_megatron_tokens(index.data(), index.size(), data->data(), data->size(), bin.string(), out,
                          data);
  } else {
    const auto data = std::make_shared<const MappedFile>(bin.string());
    if (dtype == TokenDtype::Auto) {
      parse_llmc_tokens(data->data(), data->size(), bin.string(), out, data);
    } else {
      parse_raw_tokens(data->data(), data->size(), dtype, bin.string(), out, data);
    }
  }
  ++out.files;
}

}  // namespace

void parse_megatron_tokens(const uint8_t* index, size_t index_size, const uint8_t* data,
                           size_t data_size, const std::string& name, TokenFiles& out,
                           std::shared_ptr<const void> owner) {
  const std::string idx_name = name.size() > 4 && name.compare(name.size() - 4, 4, ".bin") == 0
                                   ? name.substr(0, name.size() - 4) + ".idx"
                                   : name + ".idx";
  auto bad_index = [&](const std::string& why) {
    throw Error(ErrorKind::Data, "Megatron index '" + idx_name + "' " + why,
                "rebuild the .bin/.idx pair with Megatron's preprocess_data.py, or use the .bin "
                "with the .idx it was written with");
  };
  // A truncated index that starts right is said to be cut short, not to be another format.
  const size_t compared = std::min<size_t>(index_size, 9);
  if (compared > 0 && std::memcmp(index, kMegatronMagic, compared) != 0)
    bad_index("does not start with MMIDIDX: it is no Megatron/fairseq indexed-dataset index");
  if (index_size < kMegatronHeaderBytes) {
    bad_index("is cut short: " + std::to_string(index_size) + " bytes, less than its " +
              std::to_string(kMegatronHeaderBytes) + "-byte header");
  }
  const uint64_t version = read_le<uint64_t>(index + 9);
  if (version != 1)
    bad_index("has version " + std::to_string(version) + "; version 1 is the one read here");
  TokenType type;
  const uint8_t code = index[17];
  if (!megatron_type(code, type)) {
    bad_index("has dtype code " + std::to_string(code) +
              ", which is no integer token type (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, "
              "8 uint16)");
  }
  const uint64_t sequences = read_le<uint64_t>(index + 18);
  const uint64_t document_entries = read_le<uint64_t>(index + 26);
  // Each sequence takes 12 bytes of table and each document entry 8: the counts must fit the
  // file before they are multiplied.
  const uint64_t room = index_size - kMegatronHeaderBytes;
  if (sequences > room / 12 || document_entries > room / 8)
    bad_index("counts " + std::to_string(sequences) + " sequences and " +
              std::to_string(document_entries) + " document entries, more than its " +
              std::to_string(index_size) + " bytes hold");
  const uint64_t tables = sequences * 12 + document_entries * 8;
  // Multimodal indexes add one int8 mode per sequence; nothing else may follow.
  if (room != tables && room != tables + sequences) {
    bad_index("has " + std::to_string(index_size) + " bytes, but its counts (" +
              std::to_string(sequences) + " sequences, " + std::to_string(document_entries) +
              " document entries) make " + std::to_string(kMegatronHeaderBytes + tables));
  }
  if (document_entries < 1)
    bad_index("has no document table (the count must be documents + 1)");
  const uint8_t* lengths = index + kMegatronHeaderBytes;
  const uint8_t* pointers = lengths + sequences * 4;
  const uint8_t* doc_starts = pointers + sequences * 8;
  if (data_size % type.bytes != 0) {
    bad_file(name,
             "has " + std::to_string(data_size) + " bytes, not a whole number of " + type.name +
                 " tokens (the dtype its .idx names)",
             "use the .bin with the .idx it was written with");
  }
  // Sequences lie end to end in the .bin, as every Megatron writer lays them out.
  uint64_t expected_offset = 0;
  for (uint64_t s = 0; s < sequences; ++s) {
    const int32_t length = read_le<int32_t>(lengths + s * 4);
    const int64_t offset = read_le<int64_t>(pointers + s * 8);
    if (length < 0)
      bad_index("gives sequence " + std::to_string(s) + " the length " + std::to_string(length));
    if (offset < 0 || uint64_t(offset) != expected_offset) {
      bad_index("puts sequence " + std::to_string(s) + " at byte " + std::to_string(offset) +
                " of the .bin, where the sequences before it end at " +
                std::to_string(expected_offset));
    }
    expected_offset += uint64_t(length) * type.bytes;
    if (expected_offset > data_size) {
      bad_index("has sequences up to byte " + std::to_string(expected_offset) + ", beyond its " +
                ".bin's " + std::to_string(data_size) + " bytes");
    }
  }
  if (expected_offset != data_size) {
    bad_index("covers " + std::to_string(expected_offset) + " bytes of its .bin, which has " +
              std::to_string(data_size));
  }
  // Documents are known only while no file of the set is one stream.
  out.has_documents = out.stream_files == 0;
  // Document d spans sequences [doc_starts[d], doc_starts[d + 1]).
  uint64_t previous = 0;
  for (uint64_t d = 0; d < document_entries; ++d) {
    const int64_t start = read_le<int64_t>(doc_starts + d * 8);
    const bool ok = start >= 0 && uint64_t(start) <= sequences && uint64_t(start) >= previous &&
                    (d > 0 || start == 0) &&
                    (d + 1 < document_entries || uint64_t(start) == sequences);
    if (!ok) {
      bad_index("has document entry " + std::to_string(d) + " = " + std::to_string(start) +
                ": entries rise from 0 to the sequence count " + std::to_string(sequences));
    }
    previous = uint64_t(start);
  }
  // The documents cover the file end to end (checked above): one span, cut at their ends.
  const int64_t base = out.documents.size();
  append_tokens(data, int64_t(data_size / type.bytes), type, name, out, owner);
  int64_t token = base;
  for (uint64_t d = 0; d + 1 < document_entries; ++d) {
    const uint64_t first = read_le<uint64_t>(doc_starts + d * 8);
    const uint64_t end = read_le<uint64_t>(doc_starts + (d + 1) * 8);
    for (uint64_t s = first; s < end; ++s)
      token += read_le<int32_t>(lengths + s * 4);
    out.documents.starts.push_back(token);
  }
  ++out.indexed_files;
  note_format(out, std::string("Megatron indexed dataset (") + type.name + ")");
}

void parse_llmc_tokens(const uint8_t* data, size_t size, const std::string& name, TokenFiles& out,
                       std::shared_ptr<const void> owner) {
  const std::string headerless_fix =
      "a headerless token file (nanoGPT's train.bin) needs --token-dtype uint16 or uint32; a "
      "Megatron .bin needs its .idx beside it";
  if (size < kLlmcHeaderBytes) {
    bad_file(name, "is " + std::to_string(size) + " bytes, shorter than an llm.c header (1024)",
             headerless_fix);
  }
  const int32_t magic = read_le<int32_t>(data);
  const int32_t version = read_le<int32_t>(data + 4);
  const int32_t count = read_le<int32_t>(data + 8);
  TokenType type;
  if (magic == kLlmcMagicGpt2 && version == 1) {
    type = {2, false, "uint16"};
  } else if (magic == kLlmcMagicLlama3 && version == 7) {
    type = {4, false, "uint32"};
  } else if (magic == kLlmcMagicGpt2 || magic == kLlmcMagicLlama3) {
    bad_file(name,
             "is an llm.c shard of version " + std::to_string(version) + " (magic " +
                 std::to_string(magic) + "), which is not known: 20240520 has version 1, " +
                 "20240801 version 7",
             "rewrite it with llm.c's dev/data/data_common.py");
  } else {
    bad_file(name,
             "has header magic " + std::to_string(magic) +
                 ", not an llm.c shard's (20240520 or 20240801)",
             headerless_fix);
  }
  const uint64_t room = size - kLlmcHeaderBytes;
  if (count < 0 || uint64_t(count) * type.bytes != room) {
    bad_file(name,
             "says it holds " + std::to_string(count) + " tokens, but its " + std::to_string(room) +
                 " bytes after the header hold " + std::to_string(room / type.bytes) + " " +
                 type.name + " tokens",
             "the shard is truncated or its header is wrong: rewrite it");
  }
  append_tokens(data + kLlmcHeaderBytes, count, type, name, out, owner);
  ++out.stream_files;
  out.has_documents = false;
  out.documents.close_document();
  note_format(out, std::string("llm.c shard (") + type.name + ")");
}

void parse_raw_tokens(const uint8_t* data, size_t size, TokenDtype dtype, const std::string& name,
                      TokenFiles& out, std::shared_ptr<const void> owner) {
  BB_INTERNAL_ASSERT(dtype != TokenDtype::Auto, "a headerless token file needs its dtype");
  const TokenType type =
      dtype == TokenDtype::Uint16 ? TokenType{2, false, "uint16"} : TokenType{4, false, "uint32"};
  if (size == 0)
    bad_file(name, "is empty", "point --dataset tokens:PATH at a file with tokens in it");
  if (size % type.bytes != 0) {
    bad_file(
        name,
        "has " + std::to_string(size) + " bytes, not a whole number of " + type.name + " tokens",
        std::string("check --token-dtype (") + type.name + " given)");
  }
  if (size >= kLlmcHeaderBytes) {
    const int32_t magic = read_le<int32_t>(data);
    if (magic == kLlmcMagicGpt2 || magic == kLlmcMagicLlama3) {
      bad_file(name,
               "starts with an llm.c header (magic " + std::to_string(magic) +
                   "), which --token-dtype would read as tokens",
               "drop --token-dtype: the header says what the shard holds");
    }
  }
  append_tokens(data, int64_t(size / type.bytes), type, name, out, owner);
  ++out.stream_files;
  out.has_documents = false;
  out.documents.close_document();
  note_format(out, std::string("headerless ") + type.name + " tokens");
}

void cut_streams_at(TokenFiles& files, int64_t eot_id, const std::string& name) {
  if (files.indexed_files > 0) {  // its documents are not the streams' to cut
    throw Error(ErrorKind::Config,
                "token data '" + name + "' (" + files.format +
                    ") records its documents, so --eot-id has no stream to cut",
                "drop --eot-id: --sequences documents takes the documents the index records");
  }
  // Known without reading a token: the files' largest id is recorded as they are checked.
  if (eot_id > files.largest_token) {
    throw Error(ErrorKind::Data,
                "end-of-text id " + std::to_string(eot_id) + " is above every id in token data '" +
                    name + "' (" + files.format + ", largest id " +
                    std::to_string(files.largest_token) + "), so it can never end a document",
                "give the id the tokenizer ends documents with (GPT-2's <|endoftext|> is 50256), "
                "or use --sequences packed");
  }
  TokenDocuments& documents = files.documents;
  std::vector<int64_t> starts{0};
  std::vector<int64_t> chunk(size_t(1) << 16);
  int64_t found = 0;
  for (int64_t d = 0; d < documents.documents(); ++d) {
    const int64_t end = documents.starts[size_t(d) + 1];
    for (int64_t at = documents.starts[size_t(d)]; at < end;) {
      const int64_t count = std::min<int64_t>(end - at, int64_t(chunk.size()));
      documents.read(at, count, chunk.data());
      for (int64_t i = 0; i < count; ++i) {
        if (chunk[size_t(i)] == eot_id) {
          ++found;
          starts.push_back(at + i + 1);
        }
      }
      at += count;
    }
    if (starts.back() != end)
      starts.push_back(end);  // the file's tail after its last end-of-text
  }
  if (found == 0) {
    throw Error(ErrorKind::Data,
                "end-of-text id " + std::to_string(eot_id) + " never occurs in token data '" +
                    name + "' (" + std::to_string(documents.size()) + " tokens, largest id " +
                    std::to_string(files.largest_token) + "), so each file would be one document",
                "give the id the tokenizer ends documents with (GPT-2's <|endoftext|> is 50256), "
                "or use --sequences packed");
  }
  documents.starts = std::move(starts);
  files.has_documents = true;
  files.eot_id = eot_id;
}

TokenFiles read_token_files(const std::string& path, TokenDtype dtype) {
  std::error_code error;
  std::vector<fs::path> files;
  const fs::path given(path);
  const bool pattern = path.find_first_of("*?[") != std::string::npos;
  if (pattern) {
    // A shell pattern over the file names of one directory: data/fineweb_train_*.bin.
    const fs::path directory = given.has_parent_path() ? given.parent_path() : fs::path(".");
    const std::string name_pattern = given.filename().string();
    for (const auto& entry : fs::directory_iterator(directory, error)) {
      if (fnmatch(name_pattern.c_str(), entry.path().filename().c_str(), 0) == 0 &&
          entry.path().extension() != ".idx" && fs::is_regular_file(entry.path(), error))
        files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) {
      throw Error(ErrorKind::Data, "no token file matches '" + path + "'",
                  "check the directory and the pattern, e.g. tokens:data/fineweb_train_*.bin");
    }
  } else if (fs::is_directory(given, error)) {
    bool train = false, validation = false;
    for (const auto& entry : fs::directory_iterator(given, error)) {
      if (entry.path().extension() == ".bin" && fs::is_regular_file(entry.path(), error)) {
        files.push_back(entry.path());
        const std::string name = entry.path().filename().string();
        train = train || name.find("train") != std::string::npos;
        validation = validation || name.find("val") != std::string::npos;
      }
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) {
      throw Error(ErrorKind::Data, "directory '" + path + "' holds no .bin token files",
                  "point --dataset tokens:PATH at a directory of .bin shards, one .bin, or a "
                  "Megatron prefix");
    }
    // llm.c writes both splits side by side: training on the whole directory would train on
    // the validation shards too.
    if (train && validation) {
      throw Error(ErrorKind::Data,
                  "directory '" + path +
                      "' holds training and validation shards (names with "
                      "'train' and with 'val')",
                  "name the training shards with a pattern, e.g. --dataset 'tokens:" + path +
                      "/*train*.bin'");
    }
  } else if (given.extension() == ".idx" && fs::is_regular_file(given, error)) {
    fs::path bin = given;
    files.push_back(bin.replace_extension(".bin"));
  } else if (fs::is_regular_file(given, error)) {
    files.push_back(given);
  } else if (fs::is_regular_file(path + ".bin", error) &&
             fs::is_regular_file(path + ".idx", error)) {
    files.push_back(path + ".bin");  // a Megatron prefix, as Megatron's --data-path takes it
  } else {
    // Something is there but is no file to read (a device such as /dev/zero, a FIFO, a socket):
    // said as what it is, not as missing.
    const bool there = fs::exists(given, error);
    throw Error(
        ErrorKind::Data,
        "token file '" + path + "' " +
            (there ? "is not a regular file (a device, a FIFO or a socket)" : "does not exist"),
        "point --dataset tokens:PATH at a .bin file, a Megatron prefix (PREFIX.bin and "
        "PREFIX.idx) or a directory of .bin shards");
  }
  TokenFiles out;
  for (const auto& file : files)
    read_one_file(file, dtype, out);
  if (out.documents.size() == 0) {
    throw Error(ErrorKind::Data, "token data '" + path + "' holds no tokens",
                "point --dataset tokens:PATH at files with tokens in them");
  }
  return out;
}

}  // namespace bigbatch
