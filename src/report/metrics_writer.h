#pragma once
// metrics.jsonl: one JSON object per line, appended as the run goes (core/append_file.h: whole
// lines, written out at least once a second, at every flush() — the trainer flushes before each
// checkpoint and after each epoch's record — and when the writer closes; a failed write never
// leaves half a line). Every record is stamped with `time`, the Unix time it was written (what
// a resumed run's TensorBoard events take as their wall time). Keys are documented in
// docs/reference.md.
//
//   MetricsWriter metrics(run_dir + "/metrics.jsonl");
//   metrics.write({{"step", 12}, {"loss", 0.41}, {"lr", 0.05}});
//   metrics.flush();  // before a checkpoint
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/append_file.h"
#include "core/clock.h"

namespace bigbatch {

class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path) : file_(path, "metrics file") {}

  // `record` with "time" added (seconds since the Unix epoch) unless it has one. Returns what
  // was written. By value: a caller done with its record moves it in, and nothing is copied.
  nlohmann::json write(nlohmann::json record);
  void flush() { file_.flush(); }
  // The file's length up to the last flush(): where a checkpoint written now stands in it.
  int64_t flushed_bytes() const { return file_.flushed_bytes(); }
  const std::string& path() const { return file_.path(); }

 private:
  AppendFile file_;
};

}  // namespace bigbatch
