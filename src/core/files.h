#pragma once
// File-system helpers with the guarantees the run directory needs: a file is either the old
// version or the complete new one, never half-written (write to a temporary name, fsync,
// rename, fsync the directory); a device, pipe or socket is never replaced. Failures are
// bigbatch::Error (Io) naming the path and cause.
//
//   atomic_write_file(run_dir + "/config.toml", text, Links::Replace);
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace bigbatch {

// What a write does with a symbolic link at its path. Follow: the file the user named may be a
// link they made (--save-weights onto a link): its target is replaced, the link stays. Replace:
// a file a command owns inside its output directory (a run's config.toml, report.html, weights)
// replaces a link found there, so a link planted in a run directory cannot redirect the run's
// writes to a file outside it.
enum class Links { Follow, Replace };
void atomic_write_file(const std::string& path, const std::string& content,
                       Links links = Links::Follow);
void ensure_directory(const std::string& path);
bool path_exists(const std::string& path);
// The whole file; it must be a regular file, of at most `max_bytes` when that is positive.
std::string read_text_file(const std::string& path, int64_t max_bytes = 0);
// Caps of read_text_file for files bigbatch writes itself and reads back whole.
inline constexpr int64_t kMaxConfigFileBytes = int64_t{16} << 20;  // config.toml, state.json
inline constexpr int64_t kMaxMetricsFileBytes = int64_t{4} << 30;  // metrics.jsonl
// "crc32:1a2b3c4d/12345": zlib's CRC-32 of the file's bytes and their count. It tells one input
// file from another (a resume under a different model file); it is no cryptographic hash.
std::string file_digest(const std::string& path);
// The same for bytes in memory.
std::string data_digest(const void* data, size_t size);
// The same over bytes that come in parts: add() each, then value() is data_digest of them all.
class DataDigest {
 public:
  void add(const void* data, size_t size);
  std::string value() const;

 private:
  unsigned long crc_ = 0;
  size_t size_ = 0;
};
// An exclusive lock on a run directory (a POSIX record lock on DIR/.lock), held while this
// process writes it. Another process that tries is refused with Error(Io) naming the holder's
// pid. The kernel drops the lock when its process ends, kill -9 included, so a stale lock
// never needs cleaning; the file itself stays empty (taking the lock writes nothing).
class DirectoryLock {
 public:
  explicit DirectoryLock(const std::string& dir);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

  // The same refusal when another process holds `dir`'s lock, without taking it or creating
  // the lock file (a check before the work that would take it).
  static void refuse_if_held(const std::string& dir);

 private:
  [[noreturn]] static void throw_in_use(const std::string& dir, std::optional<int64_t> pid);
  int fd_ = -1;
};

// `path` from the current directory's point of view, so that it names the same file from any
// other ("data/x" -> "/home/u/data/x"); lexically normal, links kept; empty stays empty.
std::string absolute_path(const std::string& path);
// The directory part of a path ("runs/a/weights.st" -> "runs/a"; "w.st" -> ".").
std::string parent_directory(const std::string& path);
// Where writing `path` lands: the file a symbolic link names (its chain followed; the link is
// kept), else the path itself. atomic_write_file writes there.
std::string write_target(const std::string& path);
// Refuses, before any work is done for it, an output file that could not or must not be
// written: its directory missing, not a directory or not writable; the path a directory, a
// device, a pipe or a socket (a rename would replace it); or the same file as one of `inputs`.
// `what` names it in the error ("--save-weights"); a directory given for it is answered with
// `example_name` inside it ("DIR/weights.safetensors").
void check_output_file(const std::string& path, const std::string& what,
                       const std::vector<std::string>& inputs = {},
                       const std::string& example_name = "weights.safetensors");

}  // namespace bigbatch
