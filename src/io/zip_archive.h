#pragma once
// Zip archives read from their bytes in memory with zlib's minizip: numpy's .npz files and
// PyTorch's TorchScript files are both zips. Each member is inflated as its bytes really
// arrive (never sized by a header alone), bounded, and checked against its CRC-32. Damage is a
// ZipError whose text completes "<the archive> ..." ("has a damaged zip directory"); callers
// name the archive and choose the error kind.
//
//   ZipReader zip(bytes);                   // ZipError when there is no zip directory
//   while (zip.next())
//     use(zip.member(), zip.read(limit));   // ZipError: damaged, encrypted, too large
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace bigbatch {

struct ZipError : std::runtime_error {
  ZipError(const std::string& what, std::string fix)
      : std::runtime_error(what), hint(std::move(fix)) {}
  std::string hint;
};

class ZipReader {
 public:
  // `bytes` must outlive the reader.
  explicit ZipReader(const std::string& bytes);
  ~ZipReader();
  ZipReader(const ZipReader&) = delete;
  ZipReader& operator=(const ZipReader&) = delete;

  // Moves to the first member, then to each next one; false after the last.
  bool next();
  const std::string& member() const { return member_; }
  uint64_t inflated_size() const { return inflated_size_; }  // as the directory says
  // The member's bytes; more than `max_bytes` is refused before it is read.
  std::string read(uint64_t max_bytes);
  // The same checks, the bytes kept in `kept` when it is not null.
  void inflate(uint64_t max_bytes, std::string* kept);

 private:
  struct State;
  std::unique_ptr<State> state_;
  bool started_ = false;
  std::string member_;
  uint64_t inflated_size_ = 0;
};

// Reads every member of the zip archive in `bytes` through its CRC-32, keeping none: a file
// damaged on disk or in transfer is named here, before a loader that does not check reads it.
void check_zip_intact(const std::string& bytes);

}  // namespace bigbatch
