#include "io/zip_archive.h"

#include <unzip.h>

#include <algorithm>
#include <cstring>

namespace bigbatch {

namespace {

// minizip reads through these callbacks; here they read the archive's bytes in memory.
struct MemoryFile {
  const std::string* bytes = nullptr;
  uint64_t position = 0;
};

voidpf ZCALLBACK open_memory(voidpf opaque, const void* /*filename*/, int mode) {
  if ((mode & ZLIB_FILEFUNC_MODE_READWRITEFILTER) != ZLIB_FILEFUNC_MODE_READ)
    return nullptr;
  static_cast<MemoryFile*>(opaque)->position = 0;
  return opaque;
}

uLong ZCALLBACK read_memory(voidpf /*opaque*/, voidpf stream, void* buffer, uLong size) {
  auto* file = static_cast<MemoryFile*>(stream);
  const uint64_t left =
      file->bytes->size() - std::min<uint64_t>(file->position, file->bytes->size());
  const uLong n = static_cast<uLong>(std::min<uint64_t>(size, left));
  std::memcpy(buffer, file->bytes->data() + file->position, n);
  file->position += n;
  return n;
}

uLong ZCALLBACK write_memory(voidpf, voidpf, const void*, uLong) {
  return 0;  // read only
}

ZPOS64_T ZCALLBACK tell_memory(voidpf /*opaque*/, voidpf stream) {
  return static_cast<MemoryFile*>(stream)->position;
}

long ZCALLBACK seek_memory(voidpf /*opaque*/, voidpf stream, ZPOS64_T offset, int origin) {
  auto* file = static_cast<MemoryFile*>(stream);
  const uint64_t size = file->bytes->size();
  uint64_t base = 0;
  if (origin == ZLIB_FILEFUNC_SEEK_CUR)
    base = file->position;
  else if (origin == ZLIB_FILEFUNC_SEEK_END)
    base = size;
  else if (origin != ZLIB_FILEFUNC_SEEK_SET)
    return -1;
  if (offset > size || base > size - offset)
    return -1;
  file->position = base + offset;
  return 0;
}

int ZCALLBACK close_memory(voidpf, voidpf) {
  return 0;
}

int ZCALLBACK error_memory(voidpf, voidpf) {
  return 0;
}

const char* const kSaveAgain = "the archive is truncated or corrupt; save it again";

}  // namespace

struct ZipReader::State {
  MemoryFile memory;
  unzFile handle = nullptr;
  unz_file_info64 info{};
  ~State() {
    if (handle != nullptr)
      unzClose(handle);
  }
};

ZipReader::ZipReader(const std::string& bytes) : state_(std::make_unique<State>()) {
  state_->memory.bytes = &bytes;
  zlib_filefunc64_def functions{};
  functions.zopen64_file = open_memory;
  functions.zread_file = read_memory;
  functions.zwrite_file = write_memory;
  functions.ztell64_file = tell_memory;
  functions.zseek64_file = seek_memory;
  functions.zclose_file = close_memory;
  functions.zerror_file = error_memory;
  functions.opaque = &state_->memory;
  state_->handle = unzOpen2_64("memory", &functions);
  if (state_->handle == nullptr)
    throw ZipError("is not a zip archive (no readable zip directory)", kSaveAgain);
}

ZipReader::~ZipReader() = default;

bool ZipReader::next() {
  const int status = started_ ? unzGoToNextFile(state_->handle) : unzGoToFirstFile(state_->handle);
  started_ = true;
  if (status == UNZ_END_OF_LIST_OF_FILE)
    return false;
  if (status != UNZ_OK)
    throw ZipError("has a damaged zip directory", kSaveAgain);
  unz_file_info64& info = state_->info;
  char name[512];
  if (unzGetCurrentFileInfo64(state_->handle, &info, name, sizeof name, nullptr, 0, nullptr, 0) !=
      UNZ_OK) {
    throw ZipError("has a damaged zip directory entry", kSaveAgain);
  }
  // minizip ends the name with a NUL only when it fits: take its length from the entry.
  if (info.size_filename >= sizeof name) {
    throw ZipError("has a member name of " + std::to_string(info.size_filename) + " bytes",
                   kSaveAgain);
  }
  member_.assign(name, info.size_filename);
  inflated_size_ = info.uncompressed_size;
  return true;
}

std::string ZipReader::read(uint64_t max_bytes) {
  std::string bytes;
  inflate(max_bytes, &bytes);
  return bytes;
}

void ZipReader::inflate(uint64_t max_bytes, std::string* kept) {
  const unz_file_info64& info = state_->info;
  if ((info.flag & 1u) != 0)
    throw ZipError("has an encrypted member '" + member_ + "'", "save it without encryption");
  if (info.compression_method != 0 && info.compression_method != Z_DEFLATED) {
    throw ZipError("member '" + member_ + "' uses compression method " +
                       std::to_string(info.compression_method) + ", not stored or deflated",
                   "save it stored or deflated");
  }
  if (info.uncompressed_size > max_bytes) {
    throw ZipError("member '" + member_ + "' would inflate to " +
                       std::to_string(info.uncompressed_size) + " bytes, more than the " +
                       std::to_string(max_bytes) + " allowed",
                   "split the data over smaller arrays");
  }
  if (unzOpenCurrentFile(state_->handle) != UNZ_OK)
    throw ZipError("member '" + member_ + "' cannot be opened", kSaveAgain);
  // Grown as bytes really arrive, never sized by the header alone.
  uint64_t count = 0;
  char buffer[1 << 16];
  int n = 0;
  while ((n = unzReadCurrentFile(state_->handle, buffer, sizeof buffer)) > 0) {
    if (count + static_cast<uint64_t>(n) > info.uncompressed_size) {
      unzCloseCurrentFile(state_->handle);
      throw ZipError("member '" + member_ + "' holds more bytes than its header says", kSaveAgain);
    }
    count += static_cast<uint64_t>(n);
    if (kept != nullptr)
      kept->append(buffer, static_cast<size_t>(n));
  }
  const int closed = unzCloseCurrentFile(state_->handle);
  if (n < 0 || closed == UNZ_CRCERROR || count != info.uncompressed_size) {
    throw ZipError("member '" + member_ + "' is damaged (" +
                       (closed == UNZ_CRCERROR ? std::string("its CRC-32 does not match")
                                               : "it ends early or does not inflate") +
                       ")",
                   kSaveAgain);
  }
}

void check_zip_intact(const std::string& bytes) {
  // Far above what deflate reaches on real data, far below what a few bytes that claim to
  // inflate to terabytes would cost to read through.
  const uint64_t limit = 1024 * uint64_t(bytes.size()) + (uint64_t{1} << 20);
  ZipReader zip(bytes);
  while (zip.next())
    zip.inflate(limit, nullptr);
}

}  // namespace bigbatch
