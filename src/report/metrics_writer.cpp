#include "report/metrics_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace bigbatch {

MetricsWriter::MetricsWriter(const std::string& path)
    : path_(path),
      file_(std::fopen(path.c_str(), "a")),
      last_flush_(std::chrono::steady_clock::now()) {
  if (!file_) {
    throw Error(ErrorKind::Io, "cannot open metrics file '" + path + "': " + std::strerror(errno),
                "check that the run directory is writable");
  }
  // Appending continues a resumed run's file: its length so far counts.
  if (std::fseek(file_, 0, SEEK_END) == 0)
    flushed_bytes_ = std::max<int64_t>(0, std::ftell(file_));
}

MetricsWriter::~MetricsWriter() {
  try {
    flush();
  } catch (const Error& error) {
    std::fprintf(stderr, "bigbatch: error[%s]: %s\n", to_string(error.kind()), error.what());
  }
  std::fclose(file_);
}

void MetricsWriter::write(const nlohmann::json& record) {
  pending_ += record.dump();
  pending_ += '\n';
  if (std::chrono::steady_clock::now() - last_flush_ >= kFlushInterval)
    flush();
}

void MetricsWriter::flush() {
  last_flush_ = std::chrono::steady_clock::now();
  if (pending_.empty())
    return;
  // One call for the whole batch: the stream passes a block this size straight to the file.
  const bool written = std::fwrite(pending_.data(), 1, pending_.size(), file_) == pending_.size() &&
                       std::fflush(file_) == 0;
  if (written)
    flushed_bytes_ += static_cast<int64_t>(pending_.size());
  pending_.clear();
  if (!written) {
    throw Error(ErrorKind::Io,
                "cannot append to metrics file '" + path_ + "': " + std::strerror(errno),
                "check the free disk space");
  }
}

}  // namespace bigbatch
