#include "report/metrics_writer.h"

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace bigbatch {

MetricsWriter::MetricsWriter(const std::string& path)
    : path_(path), file_(std::fopen(path.c_str(), "a")) {
  if (!file_) {
    throw Error(ErrorKind::Io, "cannot open metrics file '" + path + "': " + std::strerror(errno),
                "check that the run directory is writable");
  }
}

MetricsWriter::~MetricsWriter() {
  std::fclose(file_);
}

void MetricsWriter::write(const nlohmann::json& record) {
  const std::string line = record.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    throw Error(ErrorKind::Io,
                "cannot append to metrics file '" + path_ + "': " + std::strerror(errno),
                "check the free disk space");
  }
}

}  // namespace bigbatch
