#pragma once
// File-system helpers with the guarantees the run directory needs: a file is either the old
// version or the complete new one, never half-written (write to a temporary name, fsync,
// rename, fsync the directory). Failures are bigbatch::Error (Io) naming the path and cause.
//
//   atomic_write_file(run_dir + "/config.toml", text);
#include <string>

namespace bigbatch {

void atomic_write_file(const std::string& path, const std::string& content);
void ensure_directory(const std::string& path);
bool path_exists(const std::string& path);
std::string read_text_file(const std::string& path);
// "crc32:1a2b3c4d/12345": zlib's CRC-32 of the file's bytes and their count. It tells one input
// file from another (a resume under a different model file); it is no cryptographic hash.
std::string file_digest(const std::string& path);
// The directory part of a path ("runs/a/weights.st" -> "runs/a"; "w.st" -> ".").
std::string parent_directory(const std::string& path);

}  // namespace bigbatch
