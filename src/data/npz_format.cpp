#include "data/npz_format.h"

#include <unzip.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/files.h"

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

[[noreturn]] void bad_archive(const std::string& name, const std::string& what,
                              const std::string& hint) {
  throw Error(ErrorKind::Data, ".npz archive '" + name + "' " + what, hint);
}

// Closes the archive on every path out.
struct OpenArchive {
  unzFile handle = nullptr;
  ~OpenArchive() {
    if (handle != nullptr)
      unzClose(handle);
  }
};

// The current member's bytes, inflated; `member` names it in errors.
std::string read_member(unzFile archive, const unz_file_info64& info, const std::string& name,
                        const std::string& member, uint64_t max_bytes) {
  if ((info.flag & 1u) != 0)
    bad_archive(name, "has an encrypted member '" + member + "'", "save it with numpy.savez");
  if (info.compression_method != 0 && info.compression_method != Z_DEFLATED) {
    bad_archive(name,
                "member '" + member + "' uses compression method " +
                    std::to_string(info.compression_method) + "; numpy writes stored or deflated",
                "save it with numpy.savez or numpy.savez_compressed");
  }
  if (info.uncompressed_size > max_bytes) {
    bad_archive(name,
                "member '" + member + "' would inflate to " +
                    std::to_string(info.uncompressed_size) + " bytes, more than the " +
                    std::to_string(max_bytes) + " allowed",
                "split the data over smaller arrays");
  }
  if (unzOpenCurrentFile(archive) != UNZ_OK)
    bad_archive(name, "member '" + member + "' cannot be opened", "save the archive again");
  // Grown as bytes really arrive, never sized by the header alone.
  std::string bytes;
  char buffer[1 << 16];
  int n = 0;
  while ((n = unzReadCurrentFile(archive, buffer, sizeof buffer)) > 0) {
    if (bytes.size() + static_cast<size_t>(n) > info.uncompressed_size) {
      unzCloseCurrentFile(archive);
      bad_archive(name, "member '" + member + "' holds more bytes than its header says",
                  "the archive is damaged; save it again");
    }
    bytes.append(buffer, static_cast<size_t>(n));
  }
  const int closed = unzCloseCurrentFile(archive);
  if (n < 0 || closed == UNZ_CRCERROR || bytes.size() != info.uncompressed_size) {
    bad_archive(name,
                "member '" + member + "' is damaged (" +
                    (closed == UNZ_CRCERROR ? std::string("its CRC-32 does not match")
                                            : "it ends early or does not inflate") +
                    ")",
                "the archive is truncated or corrupt; save it again");
  }
  return bytes;
}

}  // namespace

const NpyArray* NpzArchive::find(const std::string& name) const {
  for (const auto& [key, array] : arrays) {
    if (key == name)
      return &array;
  }
  return nullptr;
}

NpzArchive parse_npz(const std::string& bytes, const std::string& name, uint64_t max_member_bytes) {
  MemoryFile memory{&bytes, 0};
  zlib_filefunc64_def functions{};
  functions.zopen64_file = open_memory;
  functions.zread_file = read_memory;
  functions.zwrite_file = write_memory;
  functions.ztell64_file = tell_memory;
  functions.zseek64_file = seek_memory;
  functions.zclose_file = close_memory;
  functions.zerror_file = error_memory;
  functions.opaque = &memory;
  OpenArchive archive;
  archive.handle = unzOpen2_64(name.c_str(), &functions);
  if (archive.handle == nullptr) {
    bad_archive(name, "is not a zip archive (no readable zip directory)",
                "save it with numpy.savez(PATH, x_train=x, y_train=y)");
  }
  NpzArchive out;
  uint64_t inflated = 0;
  for (int status = unzGoToFirstFile(archive.handle); status != UNZ_END_OF_LIST_OF_FILE;
       status = unzGoToNextFile(archive.handle)) {
    if (status != UNZ_OK)
      bad_archive(name, "has a damaged zip directory", "save the archive again");
    unz_file_info64 info{};
    char member_name[512];
    if (unzGetCurrentFileInfo64(archive.handle, &info, member_name, sizeof member_name, nullptr, 0,
                                nullptr, 0) != UNZ_OK) {
      bad_archive(name, "has a damaged zip directory entry", "save the archive again");
    }
    // minizip ends the name with a NUL only when it fits: take its length from the entry.
    if (info.size_filename >= sizeof member_name)
      bad_archive(name, "has a member name of " + std::to_string(info.size_filename) + " bytes",
                  "name the arrays x_train, y_train, ...");
    const std::string member(member_name, info.size_filename);
    const std::string suffix = ".npy";
    if (member.size() <= suffix.size() ||
        member.compare(member.size() - suffix.size(), suffix.size(), suffix) != 0) {
      bad_archive(name, "holds '" + member + "', which is not an .npy array",
                  "an .npz holds numpy arrays only: numpy.savez(PATH, x_train=x, ...)");
    }
    const std::string key = member.substr(0, member.size() - suffix.size());
    if (out.find(key) != nullptr)
      bad_archive(name, "holds '" + member + "' twice", "save the archive again");
    // The whole archive's inflated bytes are bounded too: members may share one deflate
    // stream (a zip bomb needs no recursion).
    if (info.uncompressed_size > max_member_bytes - std::min(inflated, max_member_bytes)) {
      bad_archive(
          name, "would inflate to more than " + std::to_string(max_member_bytes) + " bytes in all",
          "split the data over smaller archives");
    }
    const std::string data = read_member(archive.handle, info, name, member, max_member_bytes);
    inflated += data.size();
    out.arrays.emplace_back(key, parse_npy(reinterpret_cast<const uint8_t*>(data.data()),
                                           data.size(), name + ":" + member));
  }
  return out;
}

NpzArchive read_npz_file(const std::string& path) {
  if (!path_exists(path)) {
    throw Error(ErrorKind::Data, ".npz archive '" + path + "' does not exist",
                "check the path given to --dataset npy:FILE.npz");
  }
  return parse_npz(read_text_file(path), path);
}

}  // namespace bigbatch
